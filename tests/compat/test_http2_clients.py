"""The compatibility apps over HTTP/2 (h2c with prior knowledge, httpx's ``http2=True``
client): what users of each framework do works the same as over HTTP/1.1, HEAD has no body,
and a stop is not held up by a client's idle pooled HTTP/2 connection.

ferrule-only: uvicorn has no HTTP/2, so under ``FERRULE_TEST_SERVER_MODULE=uvicorn`` the module
is skipped."""

from __future__ import annotations

import hashlib
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from compatutil import framework_server, logged_events, parse_sse, stop_cleanly
from support.loopkinds import LOOP_KINDS
from support.serverutil import SERVER_MODULE, ServerProcess

pytestmark = pytest.mark.skipif(
    SERVER_MODULE != "ferrule", reason="HTTP/2 (h2c) is ferrule's; uvicorn has none"
)


def h2_client(server: ServerProcess) -> httpx.Client:
    """An httpx client that speaks HTTP/2 only (prior knowledge over cleartext)."""
    return httpx.Client(
        base_url=server.base_url, http1=False, http2=True, timeout=5.0, trust_env=False
    )


@pytest.fixture(scope="module", params=LOOP_KINDS)
def django_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    events = tmp_path_factory.mktemp("django-h2") / "events.log"
    with framework_server("compat_django:app", request.param, events) as srv:
        yield srv


def test_django_over_http2(django_server: ServerProcess) -> None:
    """Rule: over HTTP/2, Django's views get JSON, a 1 MB multipart upload whole, both cookies,
    a streamed response, and a 500 leaves the connection usable. Broken: a protocol error, a
    truncated upload, or the connection lost after the 500."""
    large = bytes(range(256)) * 4096
    with h2_client(django_server) as client:
        item = client.get("/items/3", params={"q": "a"})
        form = client.post("/form", data={"name": "n"}, files={"large": ("l.bin", large)})
        client.get("/cookies")
        cookies = client.get("/cookies")
        with client.stream("GET", "/stream", params={"n": 5}) as r:
            lines = list(r.iter_lines())
        boom = client.get("/boom")
        after = client.get("/")
    assert item.http_version == "HTTP/2"
    assert item.json() == {"item_id": 3, "q": "a", "method": "GET"}
    assert form.json()["files"]["large"]["sha256"] == hashlib.sha256(large).hexdigest()
    assert cookies.json() == {"seen": {"first": "1", "second": "2"}}
    assert lines == [f"part {i}" for i in range(5)]
    assert boom.status_code == 500 and after.status_code == 200


def test_head_over_http2_has_no_body(django_server: ServerProcess) -> None:
    """Rule: the response to HEAD carries GET's headers and no content, over HTTP/2 as over
    HTTP/1.1 (RFC 9110 9.3.2; RFC 9113 8.1.1: DATA after a HEAD response is malformed). The
    app sends its body as for GET (Django does); the server must drop it. Broken (ferrule
    today): the server sends the body in DATA frames, and httpx's h2 fails the request with
    ``LocalProtocolError: InvalidBodyLengthError: Expected 0 bytes, received 12``."""
    with h2_client(django_server) as client:
        head = client.head("/")
        after = client.get("/")
    assert head.status_code == 200
    assert head.content == b""
    assert head.headers["content-length"] == str(len("hello django"))
    assert after.text == "hello django"


def test_fastapi_and_litestar_over_http2(tmp_path: Path) -> None:
    """Rule: over HTTP/2, FastAPI's FileResponse honours a range, its BackgroundTasks run, and
    Litestar's ServerSentEvent stream and multipart upload arrive whole. Broken: a protocol
    error, a wrong range, a lost task, or events or bytes lost."""
    with framework_server("compat_fastapi:app", "asyncio", tmp_path / "f.log") as srv:
        with h2_client(srv) as client:
            part = client.get("/file", headers={"Range": "bytes=0-9"})
            scheduled = client.post("/background/h2")
            deadline = time.monotonic() + 5
            while client.get("/results/h2").status_code != 200:
                assert time.monotonic() < deadline, "the background task never ran"
                time.sleep(0.05)
    assert part.status_code == 206 and len(part.content) == 10
    assert scheduled.status_code == 202
    content = b"a" * 300_000
    with framework_server("compat_litestar:app", "asyncio", tmp_path / "l.log") as srv:
        with h2_client(srv) as client:
            sse = client.get("/sse", params={"n": 3})
            upload = client.post("/upload", files={"file": ("f", content)}, data={"note": "x"})
    data = [e["data"] for e in parse_sse(sse.text) if "data" in e]
    assert data == ["tick 0", "tick 1", "tick 2"]
    assert upload.json()["sha256"] == hashlib.sha256(content).hexdigest()


def test_stop_with_an_idle_pooled_http2_connection_is_prompt(tmp_path: Path) -> None:
    """Rule: a client that keeps its HTTP/2 connection in its pool between requests (httpx,
    and any client that reads only while it has a request out) does not hold up a stop: with
    no stream in progress, SIGTERM ends the server within 5 s, cleanly, as an idle HTTP/1.1
    keep-alive connection does. Broken (ferrule today): the server sends GOAWAY and a PING and
    waits for the PING's answer, which an idle client never reads; the connection is dropped
    only by the keep-alive PING timeout, about 10 s later."""
    with framework_server("compat_django:app", "asyncio", tmp_path / "events.log") as srv:
        with h2_client(srv) as client:
            assert client.get("/").status_code == 200
            stop_cleanly(srv, signal.SIGTERM)
    assert logged_events(srv) == []  # Django has no lifespan
