"""FastAPI served as its users serve it (``apps/compat_fastapi.py``), under both loop kinds,
through real clients: httpx for HTTP (routing, pydantic JSON, forms and multipart uploads,
StreamingResponse, FileResponse with a range, BackgroundTasks, lifespan, a 500 the server
survives) and the ``websockets`` client (an echo; routes whose required ``Query()`` or
``Header()`` is missing, which FastAPI refuses by closing before accept with a list as the
close reason; an accepted socket FastAPI closes with such a reason); an endless stream the
client leaves; then a stop with a WebSocket open (1012) and a clean stop."""

from __future__ import annotations

import asyncio
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
    stop_cleanly,
)
from support.loopkinds import LOOP_KINDS
from support.serverutil import APPS_DIR, ServerProcess, poll
from support.wsutil import recv, run, ws_connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

APP = "compat_fastapi:app"


@pytest.fixture(scope="module", params=LOOP_KINDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    events = tmp_path_factory.mktemp("fastapi") / "events.log"
    with framework_server(APP, request.param, events) as srv:
        yield srv


def assert_still_serving(server: ServerProcess) -> None:
    """A plain request and a new WebSocket still work."""
    assert server.get("/items/1").status_code == 200, server.describe()

    async def echo() -> object:
        async with ws_connect(server, "/ws") as ws:
            await ws.send(json.dumps({"alive": True}))
            return json.loads(await recv(ws))

    assert run(echo()) == {"echo": {"alive": True}}, server.describe()


def test_routing_and_json(server: ServerProcess) -> None:
    """Rule: path and query parameters are parsed, pydantic validates a JSON body (201 with
    the model's dump, 422 for an invalid one and for a bad path parameter), and the lifespan's
    state reaches the request. Broken: wrong values or statuses, or a 500 for the state."""
    with server.client() as client:
        got = client.get("/items/42", params={"q": "x"})
        bad_path = client.get("/items/forty-two")
        created = client.post("/items", json={"name": "pen", "price": 1.5, "tags": ["a"]})
        invalid = client.post("/items", json={"name": "pen"})
    assert got.status_code == 200, got.text
    assert got.json() == {"item_id": 42, "q": "x", "started": True}
    assert bad_path.status_code == 422
    assert created.status_code == 201, created.text
    assert created.json() == {
        "created": {"name": "pen", "price": 1.5, "tags": ["a"]},
        "total": 3.0,
    }
    assert invalid.status_code == 422
    assert invalid.json()["detail"][0]["loc"] == ["body", "price"]


def test_form_and_multipart_upload(server: ServerProcess) -> None:
    """Rule: an url-encoded form (a repeated field included) and a 600 KB multipart upload with
    a form field arrive whole. Broken: fields lost, or the file truncated (size or digest
    differ)."""
    payload = bytes(range(256)) * 2400
    with server.client() as client:
        form = client.post("/form", data={"name": "ada", "tags": ["x", "y"]})
        upload = client.post(
            "/upload",
            files={"file": ("data.bin", payload, "application/octet-stream")},
            data={"note": "hello"},
        )
    assert form.status_code == 200, form.text
    assert form.json() == {"name": "ada", "tags": ["x", "y"]}
    assert upload.status_code == 200, upload.text
    assert upload.json() == {
        "filename": "data.bin",
        "content_type": "application/octet-stream",
        "size": len(payload),
        "sha256": hashlib.sha256(payload).hexdigest(),
        "note": "hello",
    }


def test_streaming_response(server: ServerProcess) -> None:
    """Rule: a StreamingResponse arrives chunked, every line in order. Broken: lines missing or
    reordered, or a Content-Length (the stream was buffered)."""
    with server.client() as client, client.stream("GET", "/stream", params={"n": 50}) as r:
        assert r.status_code == 200
        assert r.headers.get("transfer-encoding") == "chunked"
        assert "content-length" not in r.headers
        lines = list(r.iter_lines())
    assert lines == [f"line {i}" for i in range(50)]


def test_client_leaving_an_endless_stream_ends_it(server: ServerProcess) -> None:
    """Rule: when the client closes an endless StreamingResponse (a log tail, a token stream),
    the app learns it (``send`` raises under ASGI spec 2.4) and its generator ends within 3 s.
    Broken: the generator runs on for ever (the feed stays "streaming")."""
    key = uuid.uuid4().hex
    with server.client() as client, client.stream("GET", f"/endless/{key}") as r:
        lines = []
        for line in r.iter_lines():
            lines.append(line)
            if len(lines) == 3:
                break
    assert lines == ["line 0", "line 1", "line 2"]
    poll(
        lambda: server.get(f"/feeds/{key}").json()["state"] == "closed",
        timeout=3,
        what="the stream's generator to end after the client left",
    )


def test_file_response_whole_and_range(server: ServerProcess) -> None:
    """Rule: FileResponse sends the file whole (200, its length) and a ``Range`` request gets
    206 with just those bytes. Broken: a truncated or padded body, or the range ignored."""
    expected = (APPS_DIR / "compat_fastapi.py").read_bytes()
    with server.client() as client:
        whole = client.get("/file")
        part = client.get("/file", headers={"Range": "bytes=10-29"})
    assert whole.status_code == 200
    assert whole.content == expected
    assert int(whole.headers["content-length"]) == len(expected)
    assert part.status_code == 206, part.headers
    assert part.content == expected[10:30]
    assert part.headers["content-range"] == f"bytes 10-29/{len(expected)}"


def test_background_task_and_lifespan_startup(server: ServerProcess) -> None:
    """Rule: a BackgroundTask runs after its 202 response, and the lifespan startup hook ran
    once. Broken: the task's result never appears, or no startup event."""
    key = uuid.uuid4().hex
    with server.client() as client:
        response = client.post(f"/background/{key}")
        assert response.status_code == 202
        result = poll(
            lambda: (r := client.get(f"/results/{key}")).status_code == 200 and r.json(),
            timeout=5,
            what="the background task's result",
        )
    assert result == {"done": True}
    assert logged_events(server).count("fastapi startup") == 1


def test_unhandled_exception_is_500_and_server_lives(server: ServerProcess) -> None:
    """Rule: an endpoint that raises gives a 500, and the server goes on serving (HTTP and
    WebSockets). Broken: the connection drops without a response, or later requests fail."""
    response = server.get("/boom")
    again = server.get("/items/7")  # a new connection: uvicorn closes the one the app failed on
    assert response.status_code == 500
    assert again.status_code == 200
    assert_still_serving(server)


def test_websocket_json_echo(server: ServerProcess) -> None:
    """Rule: a FastAPI WebSocket route accepts, echoes JSON messages in order, and ends with
    a normal close when the client closes. Broken: the handshake fails, messages are lost or
    reordered, or the close code is not 1000."""

    async def scenario() -> tuple[list[object], int | None]:
        async with ws_connect(server, "/ws") as ws:
            replies = []
            for i in range(5):
                await ws.send(json.dumps({"i": i}))
                replies.append(json.loads(await recv(ws)))
        return replies, ws.close_code

    replies, code = run(scenario())
    assert replies == [{"echo": {"i": i}} for i in range(5)]
    assert code == 1000


@pytest.mark.parametrize(
    ("path", "headers"),
    [("/ws-query", {}), ("/ws-header", {})],
    ids=["query", "header"],
)
def test_websocket_missing_required_parameter_is_403(
    server: ServerProcess, path: str, headers: dict[str, str]
) -> None:
    """Rule: a WebSocket route with a required ``Query()`` / ``Header()`` that the handshake
    lacks is refused with HTTP 403, as uvicorn does: FastAPI closes before accepting and passes
    the validation errors (a list) as the close ``reason``, which a server must not choke on
    (there is no close frame to put it in); with the parameter the route works.
    Broken (ferrule before the fix): the handshake got 500 and the server logged ``TypeError:
    'list' object is not an instance of 'str'`` from the app's ``send``."""

    async def refused() -> int:
        try:
            async with ws_connect(server, path) as ws:
                await ws.recv()
        except InvalidStatus as exc:
            return exc.response.status_code
        raise AssertionError("the handshake was accepted without the required parameter")

    async def accepted() -> object:
        query = "?token=t1" if path == "/ws-query" else ""
        async with ws_connect(server, path + query, additional_headers={"X-Token": "t1"}) as ws:
            return json.loads(await recv(ws))

    logged_before = len(server.stderr)
    status = run(refused())
    assert status == 403, f"handshake status {status}\n{server.describe()}"
    assert "TypeError" not in server.stderr[logged_before:], server.describe()
    assert run(accepted()) in ({"token": "t1"}, {"x_token": "t1"})
    assert_still_serving(server)


def test_websocket_closed_with_non_str_reason_after_accept(server: ServerProcess) -> None:
    """Rule: when FastAPI closes an accepted WebSocket with a list as the reason (its default
    handler for a validation error raised in the endpoint), the client sees the connection end
    (a close frame or the TCP close) promptly and the server keeps serving. Broken: the client
    hangs until its timeout, or the server stops answering."""

    async def scenario() -> bool:
        async with ws_connect(server, "/ws-validate") as ws:
            await ws.send(json.dumps({"name": "pen", "price": 2}))
            assert json.loads(await recv(ws)) == {"ok": "pen"}
            await ws.send(json.dumps({"name": "pen"}))  # no price: invalid
            try:
                await asyncio.wait_for(ws.recv(), 5)
            except ConnectionClosed:
                return True
        return False

    assert run(scenario()), "the server answered an invalid message instead of closing"
    assert_still_serving(server)


@pytest.mark.parametrize(("loop", "sig"), STOP_CASES)
def test_stop_closes_open_websocket_with_1012(tmp_path: Path, loop: str, sig: int) -> None:
    """Rule: a WebSocket still open when the server is told to stop is closed by the server
    with code 1012 (service restart), as uvicorn does; the endpoint sees the disconnect and
    ends, and the stop is quick and clean. Broken: the client waits for its timeout, sees
    another code, or the stop is slow or noisy."""
    with framework_server(APP, loop, tmp_path / "events.log") as srv:

        async def scenario() -> int | None:
            async with ws_connect(srv, "/ws") as ws:
                await ws.send("{}")
                assert json.loads(await recv(ws)) == {"echo": {}}
                srv.send_signal(sig)
                try:
                    await asyncio.wait_for(ws.recv(), 5)
                except ConnectionClosed:
                    return ws.close_code
            return None

        assert run(scenario()) == 1012, srv.describe()
        stop_cleanly(srv, sig, sent=True)
    assert logged_events(srv) == ["fastapi startup", "fastapi shutdown"]


@pytest.mark.parametrize(("loop", "sig"), STOP_CASES)
def test_clean_stop_after_serving(tmp_path: Path, loop: str, sig: int) -> None:
    """Rule: after JSON, upload, streaming, background-task and WebSocket traffic, SIGINT or
    SIGTERM stops the server within 5 s with a clean exit, the lifespan shutdown runs, and
    stderr holds no "Task was destroyed but it is pending!", Traceback, ERROR or Exception.
    Broken: a slow or unclean exit, no shutdown event, or such lines on stderr."""
    with framework_server(APP, loop, tmp_path / "events.log") as srv:
        with srv.client() as client:
            assert client.post("/items", json={"name": "a", "price": 1}).status_code == 201
            assert client.post("/upload", files={"file": ("a", b"x" * 1000)}).status_code == 200
            assert client.get("/stream", params={"n": 5}).status_code == 200
            background_task_ran(client)

        async def echo() -> object:
            async with ws_connect(srv, "/ws") as ws:
                await ws.send("[1]")
                return json.loads(await recv(ws))

        assert run(echo()) == {"echo": [1]}
        stop_cleanly(srv, sig)
    assert logged_events(srv) == ["fastapi startup", "fastapi shutdown"]
