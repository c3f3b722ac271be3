"""python-socketio's ASGI app served as its users serve it (``apps/compat_socketio.py``), under
both loop kinds, driven by the python-socketio client (``socketio.Client``: requests for
long-polling, websocket-client for WebSockets) over each transport: auth on connect, an event
answered by an acknowledgement, rooms and a broadcast, events pushed by a server background
task, the disconnect handler, a refused connection, the plain HTTP routes behind it; then a
clean stop after clients connected and disconnected."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import socketio
from compatutil import STOP_CASES, framework_server, logged_events, stop_cleanly
from support.loopkinds import LOOP_KINDS
from support.serverutil import ServerProcess, poll

APP = "compat_socketio:app"
TRANSPORTS = ["websocket", "polling"]


@pytest.fixture(scope="module", params=LOOP_KINDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    events = tmp_path_factory.mktemp("socketio") / "events.log"
    with framework_server(APP, request.param, events) as srv:
        yield srv


class Received:
    """Events the client got, by name, with a bounded wait for them."""

    def __init__(self, client: socketio.Client, names: tuple[str, ...]) -> None:
        self.events: list[tuple[str, Any]] = []
        self.cond = threading.Condition()
        for name in names:
            client.on(name, self._handler(name))

    def _handler(self, name: str) -> Any:
        def handler(data: Any = None) -> None:
            with self.cond:
                self.events.append((name, data))
                self.cond.notify_all()

        return handler

    def wait_for(self, name: str, count: int = 1, timeout: float = 5.0) -> list[Any]:
        deadline = time.monotonic() + timeout
        with self.cond:
            while len(got := [d for n, d in self.events if n == name]) < count:
                left = deadline - time.monotonic()
                assert left > 0, f"only {got!r} of {count} {name!r} events after {timeout}s"
                self.cond.wait(left)
        return got


def new_client() -> socketio.Client:
    """A client that leaves SIGINT alone and ignores proxy settings from the environment."""
    session = requests.Session()
    session.trust_env = False
    return socketio.Client(reconnection=False, handle_sigint=False, http_session=session)


def connect(client: socketio.Client, server: ServerProcess, transport: str, **auth: str) -> None:
    client.connect(
        server.base_url,
        auth={"token": "good", **auth},
        transports=[transport],
        wait_timeout=5,
    )


def disconnect(client: socketio.Client, transport: str) -> None:
    """Disconnect; over polling on a thread, because the client then waits for its pending
    long-poll, which the server answers only at its next ping (1 s + 2 s in this app)."""
    if transport == "polling":
        threading.Thread(target=client.disconnect, daemon=True).start()
    else:
        client.disconnect()


def server_state(server: ServerProcess) -> dict[str, Any]:
    return server.get("/state").json()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_connect_ack_rooms_and_pushes(server: ServerProcess, transport: str) -> None:
    """Rule: over each transport the client connects with auth (welcome event), gets an ack for
    an event (with the session the server saved), joins a room and gets the room's broadcast,
    receives events a server background task pushes, and its disconnect reaches the server's
    handler. Broken: the connect times out, acks or events never arrive, or the server never
    sees the disconnect."""
    client = new_client()
    received = Received(client, ("welcome", "shouted", "tick"))
    connect(client, server, transport, user="ada")
    try:
        assert client.transport() == transport
        sid = received.wait_for("welcome")[0]["sid"]
        assert client.call("echo", {"x": [1, 2]}, timeout=5) == {
            "echo": {"x": [1, 2]},
            "user": "ada",
        }
        assert client.call("join", "room-1", timeout=5) == "room-1"
        client.emit("shout", {"room": "room-1", "text": "hello room"})
        assert received.wait_for("shouted") == [{"from": sid, "text": "hello room"}]
        client.emit("ticks", 5)
        assert received.wait_for("tick", 5) == [0, 1, 2, 3, 4]
    finally:
        disconnect(client, transport)
    poll(
        lambda: sid in server_state(server)["disconnected"],
        timeout=5,
        what="the server's disconnect handler",
    )


def test_two_clients_share_a_room(server: ServerProcess) -> None:
    """Rule: a broadcast to a room reaches every member, across transports (one client on
    WebSocket, one on long-polling). Broken: a member misses the broadcast."""
    ws_client, poll_client = new_client(), new_client()
    ws_got = Received(ws_client, ("shouted",))
    poll_got = Received(poll_client, ("shouted",))
    connect(ws_client, server, "websocket")
    connect(poll_client, server, "polling")
    try:
        for client in (ws_client, poll_client):
            assert client.call("join", "shared", timeout=5) == "shared"
        ws_client.emit("shout", {"room": "shared", "text": "to all"})
        assert ws_got.wait_for("shouted")[0]["text"] == "to all"
        assert poll_got.wait_for("shouted")[0]["text"] == "to all"
    finally:
        disconnect(ws_client, "websocket")
        disconnect(poll_client, "polling")


def test_refused_connection_and_http_routes(server: ServerProcess) -> None:
    """Rule: a connect handler that returns False refuses the client (ConnectionError on the
    client, counted by the server), and the Starlette app behind ``other_asgi_app`` serves
    plain HTTP. Broken: the refused client is let in, or the HTTP routes fail."""
    before = server_state(server)["refused"]
    client = new_client()
    with pytest.raises(socketio.exceptions.ConnectionError):
        connect(client, server, "websocket", token="bad")
    client.disconnect()
    assert server_state(server)["refused"] == before + 1
    assert server.get("/health").json() == {"ok": True}


@pytest.mark.parametrize(("loop", "sig"), STOP_CASES)
def test_clean_stop_after_clients_came_and_went(tmp_path: Path, loop: str, sig: int) -> None:
    """Rule: after a WebSocket client and a long-polling client connected, exchanged events and
    disconnected, SIGINT or SIGTERM stops the server within 5 s with a clean exit, the
    ``on_shutdown`` hook runs, and stderr holds no "Task was destroyed but it is pending!",
    Traceback, ERROR or Exception. Broken (ferrule before the fix): python-socketio's
    background tasks (engine.io's service task, a socket's ping task, a pending wait) were left
    pending when the loop closed, and Python printed "Task was destroyed but it is pending!"
    once for each (three to four times)."""
    with framework_server(APP, loop, tmp_path / "events.log") as srv:
        for transport in TRANSPORTS:
            client = new_client()
            received = Received(client, ("tick",))
            connect(client, srv, transport)
            assert client.call("echo", transport, timeout=5)["echo"] == transport
            client.emit("ticks", 2)
            received.wait_for("tick", 2)
            client.disconnect()  # waits for the pending long-poll: at most 3 s here
        poll(lambda: len(server_state(srv)["disconnected"]) == 2)
        stop_cleanly(srv, sig)
    assert logged_events(srv) == ["socketio startup", "socketio shutdown"]
