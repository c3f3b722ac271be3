"""WebSocket frames over HTTP/1.1 (RFC 6455) and the ``--ws*`` options, against ``ws_app``:
pings and pongs, fragmented messages, invalid UTF-8 (1007), ``--ws-max-size`` (1009), protocol
violations (1002), open websockets at shutdown (1012), ``--ws none`` and uvicorn's ``--ws``
implementation names, keepalive pings (``--ws-ping-interval``/``--ws-ping-timeout``),
``--ws-max-queue``, and messages the app sends in a burst arriving whole and in order.

The clients are :mod:`support.wsutil`'s: the ``websockets`` library (fragmented sends, pings,
close codes), and a raw socket for what a real client would never send: invalid UTF-8, unmasked
frames, reserved bits, bad control frames. Every call of theirs is bounded in time and goes to
127.0.0.1. The app records what it saw under ``?key=K``; the test reads it back with
``GET /_record``.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from support.serverutil import (
    ServerProcess,
    ferrule_command,
    fetch_record,
    run_to_exit,
    running_server,
    start_server,
)
from support.wsutil import (
    OP_BINARY,
    OP_CLOSE,
    OP_CONT,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    build_frame,
    close_code,
    close_payload,
    closed_by_server,
    raw_handshake,
    recv,
    refused_status,
    run,
    still_serving,
    token,
    upgraded,
    ws_connect,
)

APP = "ws_app:app"
#: ``--ws-max-size`` of the small-limit server.
SMALL_MAX_SIZE = 65536


# -- servers -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    """``ws_app`` with the defaults (``--ws auto``, 16 MiB messages)."""
    with running_server(APP) as srv:
        yield srv


@pytest.fixture(scope="module")
def small_server() -> Iterator[ServerProcess]:
    """``ws_app`` with ``--ws-max-size 65536``."""
    with running_server(APP, "--ws-max-size", str(SMALL_MAX_SIZE)) as srv:
        yield srv


# -- control frames, fragments, limits ---------------------------------------------------------


def test_ping_answered_with_pong(server: ServerProcess) -> None:
    """Rule: the server answers a ping with a pong carrying the same payload, without the app
    (which only echoes) seeing it; unsolicited pongs are ignored; messages keep flowing.
    Broken: no pong (the client's ping never resolves), a different payload, or the ping
    delivered to the app as a message."""

    async def scenario() -> str | bytes:
        async with ws_connect(server, "/echo") as ws:
            for payload in (b"", b"abc", os.urandom(125)):
                pong = await ws.ping(payload)
                await asyncio.wait_for(pong, 5.0)
            await ws.pong(b"unsolicited")
            await ws.send("after pings")
            return await recv(ws)

    assert run(scenario()) == "after pings"

    ws = upgraded(server)
    try:
        ws.send_frame(OP_PING, b"raw ping")
        frame = ws.read_frame()
        assert (frame.opcode, frame.payload, frame.masked) == (OP_PONG, b"raw ping", False)
    finally:
        ws.close()


def test_fragmented_messages_reassembled(server: ServerProcess) -> None:
    """Rule: a message sent in fragments (a text or binary frame without FIN, continuation
    frames, the last with FIN) reaches the app as one websocket.receive: the echo is the whole
    message, and the next message is the next one sent. Broken: each fragment delivered as
    its own message (the echo is "frag"), continuation frames refused, or data lost."""

    async def fragments(parts: list[Any]) -> AsyncIterator[Any]:
        for part in parts:
            yield part

    async def scenario() -> list[str | bytes]:
        async with ws_connect(server, "/echo") as ws:
            await ws.send(fragments(["frag", "men", "ted ✓"]))
            first = await recv(ws)
            await ws.send(fragments([b"\x00\x01", b"", b"\x02" * 70000]))
            second = await recv(ws)
            await ws.send("next")
            third = await recv(ws)
            return [first, second, third]

    first, second, third = run(scenario())
    assert first == "fragmented ✓"
    assert second == b"\x00\x01" + b"\x02" * 70000
    assert third == "next"


def test_fragments_with_interleaved_ping_and_split_utf8(server: ServerProcess) -> None:
    """Rule: a ping between the fragments of a message is answered at once, and a UTF-8
    character split across two fragments is valid (UTF-8 is checked on the whole message):
    the app gets "Hello, wörld". Broken: the ping refused inside a fragmented message (1002),
    the pong held back until the message ends, or the split character taken as invalid
    (1007)."""
    word = "Hello, wörld".encode()
    split = word.index(b"\xc3") + 1  # between the two bytes of "ö"
    ws = upgraded(server)
    try:
        ws.send_frame(OP_TEXT, word[:3], fin=False)
        ws.send_frame(OP_PING, b"mid")
        pong = ws.read_frame()
        assert (pong.opcode, pong.payload) == (OP_PONG, b"mid"), pong
        ws.send_frame(OP_CONT, word[3:split], fin=False)
        ws.send_frame(OP_CONT, word[split:], fin=True)
        frame = ws.read_frame()
        assert (frame.opcode, frame.fin) == (OP_TEXT, True), frame
        assert frame.payload == word
    finally:
        ws.close()


@pytest.mark.parametrize(
    "frames",
    [
        pytest.param([build_frame(OP_TEXT, b"ok \xff\xfe")], id="invalid-bytes"),
        pytest.param(
            [build_frame(OP_TEXT, b"caf", fin=False), build_frame(OP_CONT, b"\xc3")],
            id="truncated-at-message-end",
        ),
    ],
)
def test_invalid_utf8_text_closes_1007(server: ServerProcess, frames: list[bytes]) -> None:
    """Rule: a text message that is not valid UTF-8 (bad bytes, or a sequence cut off by the
    end of the message) fails the connection with close code 1007, then the TCP connection
    closes; the server keeps serving. Broken: the text delivered to the app (with replacement
    characters or as bytes), another code, or the connection left open."""
    ws = upgraded(server)
    try:
        for data in frames:
            ws.send(data)
        frame = ws.read_close()
        assert frame.code == 1007, frame
        assert ws.conn.wait_closed(5.0), "the TCP connection stayed open after 1007"
    finally:
        ws.close()
    still_serving(server)


def test_message_over_max_size_closes_1009(small_server: ServerProcess) -> None:
    """Rule: with --ws-max-size 65536, a 60000-byte message is echoed, while a 100 KB binary
    message, a 100 KB text message, and a message of 3 fragments of 30000 bytes (each under
    the limit, 90000 in all) each close the connection with 1009; the server keeps serving.
    Broken: the option ignored (the 100 KB message echoed), the limit applied per frame only
    (the fragmented message accepted), another code, or the server buffering without bound."""

    async def fragments() -> AsyncIterator[bytes]:
        # The limit is passed by the last fragment: nothing is left to write once the server
        # closes (writing into a closed socket gets a reset that can swallow the close frame).
        for _ in range(3):
            yield os.urandom(30000)

    async def scenario() -> list[int | None]:
        async with ws_connect(small_server, "/echo") as ws:
            data = os.urandom(60000)
            await ws.send(data)
            assert await recv(ws) == data, "a message under the limit was not echoed"
        codes = []
        for message in (os.urandom(100_000), "x" * 100_000, fragments()):
            # No permessage-deflate: the limit is checked on the bytes as sent.
            async with ws_connect(small_server, "/echo", compression=None) as ws:
                await ws.send(message)
                codes.append(close_code(await closed_by_server(ws)))
        return codes

    assert run(scenario()) == [1009, 1009, 1009]
    still_serving(small_server)


VIOLATIONS = [
    pytest.param([build_frame(OP_TEXT, b"hello", mask=False)], id="unmasked"),
    pytest.param([build_frame(OP_TEXT, b"hello", rsv=4)], id="rsv1-not-negotiated"),
    pytest.param([build_frame(OP_BINARY, b"hello", rsv=1)], id="rsv3"),
    pytest.param([build_frame(OP_PING, b"x" * 126)], id="control-over-125"),
    pytest.param([build_frame(OP_PING, b"p", fin=False)], id="fragmented-ping"),
    pytest.param([build_frame(0x3, b"x")], id="opcode-3"),
    pytest.param([build_frame(0xB, b"x")], id="opcode-0xb"),
    pytest.param([build_frame(OP_CONT, b"x")], id="continuation-without-start"),
    pytest.param(
        [build_frame(OP_TEXT, b"a", fin=False), build_frame(OP_TEXT, b"b")],
        id="new-message-inside-fragmented",
    ),
    pytest.param([build_frame(OP_CLOSE, b"\x03")], id="close-payload-1-byte"),
    pytest.param([build_frame(OP_CLOSE, close_payload(1005))], id="close-code-1005"),
    pytest.param([build_frame(OP_CLOSE, close_payload(999))], id="close-code-999"),
]


@pytest.mark.parametrize("frames", VIOLATIONS)
def test_protocol_violation_closes_1002(server: ServerProcess, frames: list[bytes]) -> None:
    """Rule: a protocol violation (an unmasked client frame, reserved bits without an
    extension, a control frame over 125 bytes or fragmented, an unknown opcode, a
    continuation without a message, a new message inside a fragmented one, a malformed close
    frame) fails the connection: a close frame with 1002, then the TCP connection closes; the
    server keeps serving. Broken: the frame accepted (echoed or delivered), another code, no
    close frame (a bare TCP close), the connection left open, or the server crashing."""
    ws = upgraded(server)
    try:
        for data in frames:
            ws.send(data)
        frame = ws.read_close()
        assert frame.code == 1002, frame
        assert ws.conn.wait_closed(5.0), "the TCP connection stayed open after 1002"
    finally:
        ws.close()
    assert server.get("/ok").text == "ok"


# -- the app's close ---------------------------------------------------------------------------


def test_close_before_accept_denies_403_whatever_its_reason(server: ServerProcess) -> None:
    """Rule: ``websocket.close`` before ``websocket.accept`` denies the handshake with 403, even
    when its ``reason`` is not a string (FastAPI passes its list of validation errors for a
    WebSocket route missing a required query parameter or header), and logs no traceback, as
    uvicorn does. Broken (seen before the change): the reason was converted first, ``send``
    raised ``TypeError: 'list' object is not an instance of 'str'``, the client got 500 and the
    log a traceback."""
    before = server.stderr.count("Traceback")
    assert run(refused_status(server, "/reject-listing")) == 403
    assert server.stderr.count("Traceback") == before, server.describe()


def test_close_with_a_reason_not_a_string_still_closes(server: ServerProcess) -> None:
    """Rule: after the handshake, a ``websocket.close`` whose reason is not a string still
    closes the socket with the app's code (the reason left out, with a warning in the log);
    ``send`` does not raise and the server keeps serving. Broken (seen before the change):
    ``send`` raised TypeError, the app failed and the client saw 1011 instead of the app's
    4002."""
    key = token()

    async def scenario() -> int | None:
        async with ws_connect(server, f"/close-listing?key={key}") as ws:
            return close_code(await closed_by_server(ws))

    assert run(scenario()) == 4002
    assert fetch_record(server, key) == {"raised": None}
    server.wait_for_output("the reason is a list, not a str")
    still_serving(server)


# -- --ws none ---------------------------------------------------------------------------------


def test_shutdown_closes_open_websockets_with_1012() -> None:
    """Rule: SIGINT while websockets are open closes each with 1012 (service restart, as
    uvicorn does), the app hears the disconnect and the server exits 0 within the graceful
    timeout. Broken: the client sees a bare TCP close (1006: the sockets were dropped at exit
    without being told) or nothing until it times out, or the server hangs on the open
    socket."""
    srv = start_server(APP, "--timeout-graceful-shutdown", "5")
    try:

        async def scenario() -> list[int | None]:
            async with ws_connect(srv, "/echo") as a, ws_connect(srv, "/echo") as b:
                await a.send("hi")
                assert await recv(a) == "hi"
                srv.send_signal(signal.SIGINT)
                return [close_code(await closed_by_server(ws, 10)) for ws in (a, b)]

        assert run(scenario()) == [1012, 1012]
        assert srv.wait_exit(15) == 0, srv.describe()
    finally:
        srv.close()


def test_ws_none_serves_upgrade_as_http() -> None:
    """Rule: with --ws none, a websocket upgrade request is an ordinary HTTP request: the app
    gets an "http" scope and its 200 reaches the client (no 101); a websockets client fails
    the handshake. Broken: a 101 (websockets still on), a "websocket" scope, or the request
    refused without reaching the app."""
    with running_server(APP, "--ws", "none") as srv:
        ws = raw_handshake(srv, "/echo")
        try:
            assert ws.response.status == 200, (ws.response.raw_head, ws.response.body[:300])
            info = ws.response.json()
        finally:
            ws.close()
        assert info["type"] == "http", info
        assert info["path"] == "/echo", info
        assert run(refused_status(srv, "/echo")) == 200
        assert srv.returncode is None, srv.describe()


@pytest.mark.parametrize("ws", ["websockets", "websockets-sansio", "wsproto"])
def test_uvicorn_ws_implementation_names_mean_websockets_on(ws: str) -> None:
    """Rule: uvicorn's ``--ws`` implementation names (websockets, websockets-sansio, wsproto)
    are accepted and mean WebSockets on (``auto``): a client's message is echoed. Seen
    failing: before they were accepted (exit 2, "invalid choice"); with them mapped to none
    (the handshake got the app's HTTP 200 instead of a 101)."""
    with running_server(APP, "--ws", ws) as srv:

        async def echo_once() -> str | bytes:
            async with ws_connect(srv, "/echo") as conn:
                await conn.send(f"over {ws}")
                return await recv(conn)

        assert run(echo_once()) == f"over {ws}"


# -- keepalive pings ---------------------------------------------------------------------------


def test_keepalive_ping_unanswered_closes_with_1011() -> None:
    """Rule: with ``--ws-ping-interval 0.2 --ws-ping-timeout 0.3`` the server pings each
    socket; a peer that never answers gets a close frame with 1011 within about half a second
    of the first ping, the TCP connection closes, and the app hears websocket.disconnect with
    1011. Broken: no ping arrives (the options ignored: a dead peer would hold the socket
    forever), or no close after the timeout."""
    with running_server(APP, "--ws-ping-interval", "0.2", "--ws-ping-timeout", "0.3") as srv:
        key = token()
        ws = upgraded(srv, f"/echo?key={key}")
        try:
            first = ws.read_frame(timeout=2.0)
            assert (first.opcode, first.masked) == (OP_PING, False), first
            pinged = time.monotonic()
            frame = ws.read_close(timeout=3.0)
            waited = time.monotonic() - pinged
            assert frame.code == 1011, frame
            assert 0.2 < waited < 2.0, waited
            assert ws.conn.wait_closed(5.0), "the TCP connection stayed open after 1011"
        finally:
            ws.close()
        assert fetch_record(srv, key)["code"] == 1011


def test_keepalive_pings_answered_keep_the_socket_open() -> None:
    """Rule: a client that answers the server's pings (the websockets client does so by
    itself) keeps its socket through many ping intervals, and messages still flow. Broken: the
    socket closed with 1011 although every ping was answered (pongs not seen), or pings
    delivered to the app as messages."""
    with running_server(APP, "--ws-ping-interval", "0.1", "--ws-ping-timeout", "0.3") as srv:

        async def scenario() -> str | bytes:
            async with ws_connect(srv, "/echo", ping_interval=None) as ws:
                await asyncio.sleep(1.5)
                await ws.send("still open")
                return await recv(ws)

        assert run(scenario()) == "still open"


def test_ws_max_queue_bounds_without_losing_messages() -> None:
    """Rule: ``--ws-max-queue 1`` (uvicorn's option: client messages queued for the app before
    the socket stops being read) still delivers every message, in order: 50 echoed back one by
    one after being sent all at once; ``--ws-max-queue 0`` is refused at startup. Broken: the
    option unknown, messages lost or reordered when the queue is full, or a queue of 0 hanging
    every socket."""
    with running_server(APP, "--ws-max-queue", "1") as srv:

        async def scenario() -> list[str | bytes]:
            async with ws_connect(srv, "/echo") as ws:
                for i in range(50):
                    await ws.send(f"m{i}")
                return [await recv(ws) for _ in range(50)]

        assert run(scenario()) == [f"m{i}" for i in range(50)]
    refused = run_to_exit(ferrule_command(APP, "--ws-max-queue", "0"))
    assert refused.returncode != 0, refused.describe()
    assert "--ws-max-queue" in refused.stderr, refused.describe()


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_messages_the_app_queues_at_once_arrive_whole_and_in_order(loop: str) -> None:
    """Rule: messages the app sends in a burst, without yielding, reach the client whole and in
    order (200 texts). That they share writes (a few TCP segments for the 200) is a figure of
    ``benches/write_batching.py``: a segment count depends on when the socket's task runs, which
    a loaded machine changes. Broken: a message lost, split or reordered where queued messages
    are written together; not seen failing since batching, whose first version was checked by
    the segment count (52-102 segments unbatched, 7 batched)."""
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    with running_server(APP, "--loop", loop) as srv:
        ws = raw_handshake(srv, "/burst?n=200")
        try:
            assert ws.response.status == 101, ws.response
            ws.send_frame(OP_TEXT, b"go")
            texts = [ws.read_frame().payload for _ in range(200)]
        finally:
            ws.conn.close()
    assert texts == [str(i).encode() for i in range(200)]
