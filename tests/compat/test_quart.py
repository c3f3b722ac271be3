"""Quart served as its users serve it (``apps/compat_quart.py``), under both loop kinds,
through real clients: httpx for HTTP (converters, JSON, forms with files, a streamed response,
``add_background_task``, ``before_serving`` / ``after_serving``, an error handler, a 500 the
server survives; a body over ``MAX_CONTENT_LENGTH`` refused with 413 and an unauthorised POST
refused with 401, each while the client is still sending 10 MB) and the ``websockets`` client
(an echo; a handshake Quart refuses with 401); then a clean stop, also right after a refused
upload."""

from __future__ import annotations

import asyncio
import hashlib
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from compatutil import (
    STOP_CASES,
    background_task_ran,
    framework_server,
    logged_events,
    stop_cleanly,
)
from support.loopkinds import LOOP_KINDS
from support.serverutil import ServerProcess, poll
from support.wsutil import recv, run, ws_connect
from websockets.exceptions import InvalidStatus

APP = "compat_quart:app"
#: What the refused POSTs send: ten times Quart's MAX_CONTENT_LENGTH of the app (1 MiB).
BIG_BODY = b"x" * (10 * 1024 * 1024)
#: How long a refused POST may take to get its answer (uvicorn: well under a second).
REFUSAL_SECONDS = 3.0


@pytest.fixture(scope="module", params=LOOP_KINDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    events = tmp_path_factory.mktemp("quart") / "events.log"
    with framework_server(APP, request.param, events) as srv:
        yield srv


def post_big(server: ServerProcess, path: str, **options: object) -> tuple[httpx.Response, float]:
    """POST :data:`BIG_BODY` on a new connection (httpx writes it all before it reads, so an
    answer can only come in once the server reads the rest or closes); bounded by 5 s."""
    started = time.monotonic()
    with server.client(timeout=5.0) as client:
        response = client.post(path, content=BIG_BODY, **options)  # type: ignore[arg-type]
    return response, time.monotonic() - started


def test_routes_json_and_converters(server: ServerProcess) -> None:
    """Rule: routes with converters, query args, JSON in (``get_json``) and JSON out with a
    chosen status work. Broken: 404 for a matching route, wrong values or statuses."""
    with server.client() as client:
        index = client.get("/")
        item = client.get("/items/5", params={"q": "z"})
        not_int = client.get("/items/five")
        echoed = client.post("/json", json={"b": 1, "a": [1, 2]})
    assert index.text == "hello quart"
    assert item.json() == {"item_id": 5, "q": "z"}
    assert not_int.status_code == 404
    assert echoed.status_code == 201
    assert echoed.json() == {"received": {"b": 1, "a": [1, 2]}, "keys": ["a", "b"]}


def test_form_with_file_and_body_under_limit(server: ServerProcess) -> None:
    """Rule: a multipart form (repeated field, a file) arrives whole, and a raw body just under
    MAX_CONTENT_LENGTH is read whole. Broken: fields or bytes lost (size or digest differ)."""
    content = bytes(range(256)) * 1000
    body = b"y" * (1024 * 1024 - 1)
    with server.client() as client:
        form = client.post(
            "/form",
            data={"name": "ada", "tags": ["x", "y"]},
            files={"file": ("f.bin", content, "application/octet-stream")},
        )
        upload = client.post("/upload", content=body)
    assert form.status_code == 200, form.text
    assert form.json() == {
        "name": "ada",
        "tags": ["x", "y"],
        "filename": "f.bin",
        "size": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
    }
    assert upload.status_code == 200, upload.text
    assert upload.json() == {"size": len(body), "sha256": hashlib.sha256(body).hexdigest()}


def test_streamed_response(server: ServerProcess) -> None:
    """Rule: a response from an async generator arrives chunked and whole. Broken: parts
    missing, or buffered into a Content-Length response."""
    with server.client() as client, client.stream("GET", "/stream", params={"n": 40}) as r:
        assert r.headers.get("transfer-encoding") == "chunked"
        lines = list(r.iter_lines())
    assert lines == [f"part {i}" for i in range(40)]


def test_background_task_error_handler_and_500(server: ServerProcess) -> None:
    """Rule: ``add_background_task`` work runs after the 202, an error handler makes its 418,
    a route that raises gives 500, the server keeps serving, and ``before_serving`` ran once.
    Broken: no result, the wrong statuses, or later requests fail."""
    with server.client() as client:
        result = background_task_ran(client)
        teapot = client.get("/teapot")
        boom = client.get("/boom")
        after = client.get("/")
    assert result == {"done": True}
    assert teapot.status_code == 418 and teapot.json()["error"] == "teapot"
    assert boom.status_code == 500
    assert after.status_code == 200
    assert logged_events(server).count("quart startup") == 1


def test_websocket_echo_and_denied_handshake(server: ServerProcess) -> None:
    """Rule: a Quart websocket route (implicitly accepted on first send) echoes; a route that
    aborts with 401 before accepting gives the client an HTTP 401 (the denial-response
    extension); with the token it accepts. Broken: no echo, or a 403/500 instead of 401."""

    async def scenario() -> tuple[list[str | bytes], int, str | bytes]:
        async with ws_connect(server, "/ws") as ws:
            replies = []
            for word in ("one", "two", "three"):
                await ws.send(word)
                replies.append(await recv(ws))
        try:
            async with ws_connect(server, "/ws-auth"):
                pass
            status = 101
        except InvalidStatus as exc:
            status = exc.response.status_code
        async with ws_connect(server, "/ws-auth?token=good") as ws:
            welcome = await recv(ws)
        return replies, status, welcome

    replies, status, welcome = run(scenario())
    assert replies == ["echo: one", "echo: two", "echo: three"]
    assert status == 401
    assert welcome == "welcome"


def test_websocket_producer_task_ends_when_client_leaves(server: ServerProcess) -> None:
    """Rule: a websocket handler with a producer task beside its receive loop serves both
    (ticks, and answers to what the client sends), and when the client closes, Quart's handler
    is cancelled and its ``finally`` runs within 3 s. Broken: missing messages, or the handler
    lives on (the feed stays "streaming")."""
    key = uuid.uuid4().hex

    async def scenario() -> list[str | bytes]:
        async with ws_connect(server, f"/ws-ticker/{key}") as ws:
            got = [await recv(ws) for _ in range(2)]
            await ws.send("hello")
            while (message := await recv(ws)) != "got hello":
                assert str(message).startswith("tick "), message
            got.append(message)
        return got

    assert run(scenario()) == ["tick 0", "tick 1", "got hello"]
    poll(
        lambda: server.get(f"/feeds/{key}").json()["state"] == "closed",
        timeout=3,
        what="the websocket handler to end after the client left",
    )


def test_body_over_max_content_length_gets_413_promptly(server: ServerProcess) -> None:
    """Rule: Quart refuses a body over MAX_CONTENT_LENGTH with 413 from its Content-Length,
    without reading it; while the client is still sending 10 MB it must get that 413 within
    3 s (uvicorn: well under 1 s), and the server serves on. Broken (ferrule before the fix):
    the server neither read the rest nor closed, so httpx hung writing until its 5 s timeout
    (``WriteTimeout``)."""
    response, elapsed = post_big(server, "/upload")
    assert response.status_code == 413, response.text
    assert elapsed < REFUSAL_SECONDS, f"the 413 took {elapsed:.1f}s"
    assert server.get("/").status_code == 200


def test_unauthorised_post_gets_401_promptly(server: ServerProcess) -> None:
    """Rule: a route that answers 401 without reading the body: the client still sending
    10 MB gets the 401 within 3 s, and a small POST with the right token is read (200).
    Broken (ferrule before the fix): httpx hung writing until its 5 s timeout
    (``WriteTimeout``)."""
    response, elapsed = post_big(server, "/protected")
    assert response.status_code == 401, response.text
    assert response.json() == {"error": "unauthorised"}
    assert elapsed < REFUSAL_SECONDS, f"the 401 took {elapsed:.1f}s"
    with server.client() as client:
        ok = client.post(
            "/protected", content=b"z" * 1000, headers={"Authorization": "Bearer good"}
        )
    assert ok.status_code == 200 and ok.json() == {"size": 1000}


def test_sigterm_after_refused_upload_stops_promptly(tmp_path: Path) -> None:
    """Rule: after a 10 MB POST was refused (413 and 401), SIGTERM stops the server within 5 s,
    cleanly. Broken (ferrule before the fix): the stop waited about 40 s at "Waiting for
    connections to close" for the connection whose body was never read."""
    with framework_server(APP, "asyncio", tmp_path / "events.log") as srv:
        for path in ("/upload", "/protected"):
            try:
                post_big(srv, path)
            except httpx.HTTPError:
                pass  # hanging is the other tests' failure; here only the stop counts
        stop_cleanly(srv, signal.SIGTERM)
    assert logged_events(srv) == ["quart startup", "quart shutdown"]


@pytest.mark.parametrize(("loop", "sig"), STOP_CASES)
def test_clean_stop_after_serving(tmp_path: Path, loop: str, sig: int) -> None:
    """Rule: after JSON, form, streaming, background-task and WebSocket traffic, SIGINT or
    SIGTERM stops the server within 5 s with a clean exit, ``after_serving`` runs, and stderr
    holds no "Task was destroyed but it is pending!", Traceback, ERROR or Exception. Broken: a
    slow or unclean exit, no shutdown event, or such lines on stderr."""
    with framework_server(APP, loop, tmp_path / "events.log") as srv:
        with srv.client() as client:
            assert client.post("/json", json={"a": 1}).status_code == 201
            assert client.post("/form", files={"file": ("f", b"abc")}).status_code == 200
            assert client.get("/stream").status_code == 200
            background_task_ran(client)

        async def echo() -> str | bytes:
            async with ws_connect(srv, "/ws") as ws:
                await ws.send("hi")
                return await asyncio.wait_for(ws.recv(), 5)

        assert run(echo()) == "echo: hi"
        stop_cleanly(srv, sig)
    assert logged_events(srv) == ["quart startup", "quart shutdown"]
