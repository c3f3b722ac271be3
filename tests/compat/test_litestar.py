"""Litestar served as its users serve it (``apps/compat_litestar.py``), under both loop kinds,
through real clients: httpx for HTTP (typed parameters, dataclass JSON, url-encoded forms and
multipart uploads, a raw 3 MB body, ``Stream`` and ``ServerSentEvent`` responses, a
``BackgroundTask``, ``on_startup`` / ``on_shutdown``, an exception handler, a 500 the server
survives) and the ``websockets`` client (a ``@websocket`` handler and a
``@websocket_listener``); then a clean stop."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from compatutil import (
    STOP_CASES,
    background_task_ran,
    framework_server,
    logged_events,
    parse_sse,
    stop_cleanly,
)
from support.loopkinds import LOOP_KINDS
from support.serverutil import ServerProcess, poll
from support.wsutil import recv, run, ws_connect

APP = "compat_litestar:app"


@pytest.fixture(scope="module", params=LOOP_KINDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    events = tmp_path_factory.mktemp("litestar") / "events.log"
    with framework_server(APP, request.param, events) as srv:
        yield srv


def test_routes_and_json(server: ServerProcess) -> None:
    """Rule: typed path and query parameters (a non-int segment matches no route: 404), a
    dataclass JSON body (Litestar's default 201 for POST) and validation errors (400) work.
    Broken: wrong values or statuses."""
    with server.client() as client:
        index = client.get("/")
        item = client.get("/items/9", params={"q": "w"})
        bad = client.get("/items/nine")
        created = client.post("/items", json={"name": "pen", "price": 2.5, "tags": ["t"]})
        invalid = client.post("/items", json={"name": "pen"})
    assert index.text == "hello litestar"
    assert item.json() == {"item_id": 9, "q": "w"}
    assert bad.status_code == 404  # no route matches a non-int segment
    assert created.status_code == 201, created.text
    assert created.json() == {"created": {"name": "pen", "price": 2.5, "tags": ["t"]}}
    assert invalid.status_code == 400


def test_form_upload_and_raw_body(server: ServerProcess) -> None:
    """Rule: an url-encoded form, a 500 KB multipart upload with a field, and a raw 3 MB body
    arrive whole. Broken: fields missing, or bytes lost (size or digest differ)."""
    content = bytes(range(256)) * 2000
    raw = bytes(range(251)) * 12000
    with server.client() as client:
        form = client.post("/form", data={"name": "ada", "city": "London"})
        upload = client.post("/upload", files={"file": ("f.bin", content)}, data={"note": "hello"})
        body = client.post("/raw", content=raw)
    assert form.status_code == 201, form.text
    assert form.json() == {"form": {"name": "ada", "city": "London"}}
    assert upload.status_code == 201, upload.text
    assert upload.json() == {
        "filename": "f.bin",
        "size": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
        "note": "hello",
    }
    assert body.json() == {"size": len(raw), "sha256": hashlib.sha256(raw).hexdigest()}


def test_stream_and_server_sent_events(server: ServerProcess) -> None:
    """Rule: a ``Stream`` arrives chunked and whole, and a ``ServerSentEvent`` response is a
    ``text/event-stream`` with every event in order. Broken: parts or events lost, reordered,
    or buffered into a Content-Length response."""
    with server.client() as client:
        with client.stream("GET", "/stream", params={"n": 30}) as r:
            assert r.headers.get("transfer-encoding") == "chunked"
            lines = list(r.iter_lines())
        with client.stream("GET", "/sse", params={"n": 5}) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            text = r.read().decode()
    assert lines == [f"part {i}" for i in range(30)]
    data = [event["data"] for event in parse_sse(text) if "data" in event]
    assert data == [f"tick {i}" for i in range(5)]


def test_background_task_exception_handler_and_500(server: ServerProcess) -> None:
    """Rule: a response's BackgroundTask runs after it, an exception handler makes its 418, a
    handler that raises gives 500 and the server serves on, and ``on_startup`` ran once.
    Broken: no result, wrong statuses, or later requests fail."""
    with server.client() as client:
        result = background_task_ran(client)
        teapot = client.get("/teapot")
        boom = client.get("/boom")
        after = client.get("/")
    assert result == {"done": True}
    assert teapot.status_code == 418 and teapot.json()["detail"] == "short and stout"
    assert boom.status_code == 500
    assert after.status_code == 200
    assert logged_events(server).count("litestar startup") == 1


def test_websocket_handler_and_listener(server: ServerProcess) -> None:
    """Rule: a ``@websocket`` handler echoes JSON and a ``@websocket_listener`` answers each
    message; both end with a normal close when the client closes. Broken: handshake failure,
    lost or reordered messages, or another close code."""

    async def scenario() -> tuple[list[object], list[str | bytes], int | None, int | None]:
        async with ws_connect(server, "/ws") as ws:
            echoes = []
            for i in range(3):
                await ws.send(json.dumps({"i": i}))
                echoes.append(json.loads(await recv(ws)))
        async with ws_connect(server, "/ws-listener") as listener:
            upper = []
            for word in ("abc", "xyz"):
                await listener.send(word)
                upper.append(await recv(listener))
        return echoes, upper, ws.close_code, listener.close_code

    echoes, upper, code, listener_code = run(scenario())
    assert echoes == [{"echo": {"i": i}} for i in range(3)]
    assert upper == ["ABC", "XYZ"]
    assert code == 1000 and listener_code == 1000


def test_websocket_stream_ends_when_client_leaves(server: ServerProcess) -> None:
    """Rule: a ``@websocket_stream`` pushes its generator's items, and when the client closes,
    Litestar learns it (``websocket.disconnect``) and stops the generator within 3 s. Broken:
    no ticks, or the generator runs on (the feed stays "streaming")."""
    key = uuid.uuid4().hex

    async def scenario() -> list[str | bytes]:
        async with ws_connect(server, f"/ws-stream/{key}") as ws:
            return [await recv(ws) for _ in range(3)]

    assert run(scenario()) == ["tick 0", "tick 1", "tick 2"]
    poll(
        lambda: server.get(f"/feeds/{key}").json()["state"] == "closed",
        timeout=3,
        what="the stream's generator to end after the client left",
    )


@pytest.mark.parametrize(("loop", "sig"), STOP_CASES)
def test_clean_stop_after_serving(tmp_path: Path, loop: str, sig: int) -> None:
    """Rule: after JSON, upload, stream, SSE, background-task and WebSocket traffic, SIGINT or
    SIGTERM stops the server within 5 s with a clean exit, ``on_shutdown`` runs, and stderr
    holds no "Task was destroyed but it is pending!", Traceback, ERROR or Exception. Broken: a
    slow or unclean exit, no shutdown event, or such lines on stderr."""
    with framework_server(APP, loop, tmp_path / "events.log") as srv:
        with srv.client() as client:
            assert client.post("/items", json={"name": "a", "price": 1}).status_code == 201
            assert client.post("/upload", files={"file": ("f", b"abc")}).status_code == 201
            assert client.get("/stream").status_code == 200
            assert client.get("/sse").status_code == 200
            background_task_ran(client)

        async def echo() -> object:
            async with ws_connect(srv, "/ws") as ws:
                await ws.send("[2]")
                return json.loads(await recv(ws))

        assert run(echo()) == {"echo": [2]}
        stop_cleanly(srv, sig)
    assert logged_events(srv) == ["litestar startup", "litestar shutdown"]
