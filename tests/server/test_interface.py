"""``--interface auto|asgi3|asgi2|wsgi`` (uvicorn's option): ASGI2 and WSGI apps served through
an adapter made when the app is loaded, ASGI3 apps as the very object given
(``interface_apps``). Before the option existed, every server test here failed at startup
("unrecognized arguments: --interface", exit 2)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
from ferrule.config import Config
from ferrule.interface import detect
from support.serverutil import (
    ferrule_command,
    import_app,
    is_clean_exit,
    run_to_exit,
    running_server,
)


@pytest.mark.parametrize(
    "name",
    [
        "interface_apps:asgi3",
        "hello_app:app",
        "sync_raise_app:app",  # a plain function of (scope, receive, send) returning a coroutine
        "starlette_app:app",
        "fastapi_app:app",
    ],
)
def test_auto_keeps_asgi3_apps_as_the_same_object(name: str) -> None:
    """Rule: with ``--interface auto`` (the default) an ASGI3 app, whether an ``async def``, a
    framework's instance with an ``async def __call__`` or a plain function of the three
    arguments, is served as the object itself: no adapter in the request path. Seen failing:
    with ``detect`` reduced to uvicorn's rule for functions (any function that is not a
    coroutine function is ASGI2), ``sync_raise_app:app`` was wrapped (and then called with the
    scope alone); with every app wrapped, in the ASGI2 adapter or in a pass-through ASGI3
    one, every case failed (a new object)."""
    app = import_app(name)
    assert detect(app) == "asgi3"
    config = Config(app=app, app_dir=None)
    assert config.load_app() is app
    assert config.interface == "asgi3"


def test_auto_serves_a_plain_asgi3_app_unwrapped() -> None:
    """Rule: over a real socket, an ``async def app(scope, receive, send)`` served with the
    default interface sees ``asgi.version`` 3.0 and no Python coroutine awaiting its own (the
    server drives it directly). Seen failing with ``adapt`` wrapping ASGI3 apps in a
    pass-through ``async def`` (the caller was ``ferrule.interface.adapt.<locals>.passthrough``),
    on asyncio's loop and uvloop alike."""
    with running_server("interface_apps:asgi3", "--lifespan", "on") as srv:
        seen = srv.get("/plain").json()
    assert seen["asgi_version"] == "3.0" and seen["caller"] == "", seen
    assert seen["started"] is True, seen


@pytest.mark.parametrize("interface", ["auto", "asgi2"])
@pytest.mark.parametrize(
    ("app", "name"),
    [
        ("interface_apps:Asgi2Class", "asgi2-class"),
        ("interface_apps:asgi2_function", "asgi2-function"),
    ],
)
def test_asgi2_apps_are_served_with_lifespan(interface: str, app: str, name: str) -> None:
    """Rule: an ASGI2 app, a class instantiated with the scope or a plain function of the scope
    returning the instance, is served with ``--interface asgi2``, and found by ``auto``: each
    request and the lifespan go through ``app(scope)`` then ``instance(receive, send)``, with
    ``asgi.version`` "2.0" in the scope; lifespan startup runs before the first request and
    shutdown at exit. Seen failing: before the option, exit 2; with ``detect`` always answering
    ASGI3 (what ferrule did), lifespan startup raised ``TypeError: Asgi2Class.__init__() takes
    2 positional arguments but 4 were given`` and the server exited 1."""
    with running_server(app, "--interface", interface, "--lifespan", "on") as srv:
        with srv.client() as client:
            seen = client.post("/two", content=b"payload").json()
        code = srv.stop(signal.SIGTERM)
    assert seen["interface"] == name and seen["asgi_version"] == "2.0", seen
    assert seen["path"] == "/two" and seen["body"] == "payload", seen
    assert seen["started"] is True, seen
    assert seen["caller"].startswith("ferrule.interface."), seen
    assert is_clean_exit(code, signal.SIGTERM), srv.describe()
    assert f"{name}: lifespan shutdown" in srv.stderr, srv.describe()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_wsgi_app_with_a2wsgi(workers: str) -> None:
    """Rule: ``--interface wsgi`` serves a WSGI app through a2wsgi's ``WSGIMiddleware``: the
    method, path, query and a request body (300 kB, several ``receive()`` calls) reach the app
    and its status comes back; ``--lifespan auto`` completes startup and shutdown (a2wsgi
    answers lifespan) with no error; in worker processes too. Seen failing: before the option
    (exit 2); with a2wsgi given ferrule's own ``receive`` (500: "RuntimeError: ferrule: no
    tokio runtime on this thread", a2wsgi calls ``receive()`` from its WSGI thread); with
    ``--interface`` left out of the workers' command line (``workers=2``: 500, the WSGI
    function called as an ASGI3 app)."""
    big = b"x" * 300_000
    with running_server("interface_apps:wsgi", "--interface", "wsgi", "--workers", workers) as srv:
        with srv.client() as client:
            for _ in range(4):  # several connections, so more than one worker answers
                response = client.get("/w/sub", params={"q": "1"})
                assert response.status_code == 201, srv.describe()
                assert response.json() == {
                    "interface": "wsgi",
                    "method": "GET",
                    "path": "/w/sub",
                    "query": "q=1",
                    "body": "",
                }
            posted = client.post("/upload", content=big)
        code = srv.stop()
    assert posted.status_code == 201 and posted.json()["body"] == big.decode(), srv.describe()
    assert is_clean_exit(code), srv.describe()
    assert "Application startup complete." in srv.stderr, srv.describe()
    assert "Application shutdown complete." in srv.stderr, srv.describe()
    assert "Traceback" not in srv.stderr and "ERROR" not in srv.stderr, srv.describe()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_wsgi_without_a2wsgi_exits_with_install_hint(tmp_path: Path, workers: str) -> None:
    """Rule: without a2wsgi, ``--interface wsgi`` exits 3 at once with a message naming
    ``pip install a2wsgi``; with workers, the parent says so before starting any. a2wsgi is
    hidden from every process by a package of that name, first on ``PYTHONPATH``, whose import
    raises ImportError. Seen failing with the parent's check removed: with two workers, each
    worker exited 1 and was replaced, again and again, until the run was killed after 15 s."""
    hidden = tmp_path / "a2wsgi"
    hidden.mkdir()
    (hidden / "__init__.py").write_text("raise ImportError('a2wsgi is hidden by the test')\n")
    path = os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")]))
    result = run_to_exit(
        ferrule_command("interface_apps:wsgi", "--interface", "wsgi", "--workers", workers),
        env={"PYTHONPATH": path},
    )
    assert result.returncode == 3, result.describe()
    assert "pip install a2wsgi" in result.stderr, result.describe()
    assert "Traceback" not in result.stderr and "running on" not in result.stderr
