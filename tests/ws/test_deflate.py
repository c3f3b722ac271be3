"""permessage-deflate (RFC 7692) and ``--ws-per-message-deflate``, against ``ws_app``'s echo.

Two clients, as in ``test_websocket``: the ``websockets`` library (which compresses and
inflates on its own, so a message echoed intact proves both directions), and a raw socket whose
compressed frames are made with :mod:`zlib` here, for what the library would never send (RSV1
on a ping or a continuation, a decompression bomb, data that is no deflate stream) and to look
at the server's frames themselves (RSV1 set, window and context as agreed).
"""

from __future__ import annotations

import os
import zlib
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.h2ws import plain_client
from support.serverutil import ServerProcess, running_server
from support.wsutil import (
    OP_BINARY,
    OP_CONT,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    RawWebSocket,
    build_frame,
    close_code,
    closed_by_server,
    raw_handshake,
    recv,
    run,
    still_serving,
    ws_connect,
)
from websockets.extensions.permessage_deflate import ClientPerMessageDeflateFactory

APP = "ws_app:app"
RSV1 = 4
#: What a sync flush ends with, dropped by the sender and put back by the receiver (7.2.1).
TAIL = b"\x00\x00\xff\xff"
#: A JSON-like message that compresses well.
JSON_LIKE = '{"id": 12, "name": "ferrule", "tags": ["asgi", "rust", "python"], "ok": true}' * 13


def deflate(data: bytes, compressor: Any = None) -> bytes:
    """``data`` compressed as a permessage-deflate payload."""
    compressor = compressor or zlib.compressobj(wbits=-15)
    out = compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)
    assert out.endswith(TAIL)
    return out[: -len(TAIL)]


#: The answer to a bare offer: the server's window capped at 12 bits.
DEFAULT_ANSWER = "permessage-deflate; server_max_window_bits=12"


def inflate(payload: bytes, wbits: int = 15) -> bytes:
    return zlib.decompressobj(wbits=-wbits).decompress(payload + TAIL)


def negotiated(ws: RawWebSocket) -> str | None:
    assert ws.response.status == 101, ws.response.raw_head
    return ws.response.header("sec-websocket-extensions")


def offering(server: ServerProcess, *offers: str) -> RawWebSocket:
    """A raw websocket whose handshake offered ``offers`` (one header each)."""
    extra = [("Sec-WebSocket-Extensions", offer) for offer in offers]
    return raw_handshake(server, extra=extra)


def peak_rss(pid: int) -> int:
    """The most memory ``pid`` has had resident, in bytes (``VmHWM``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for pid {pid}")


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    """``ws_app`` with the defaults: permessage-deflate on."""
    with running_server(APP) as srv:
        yield srv


# -- negotiation -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("offers", "answer"),
    [
        (["permessage-deflate"], "permessage-deflate; server_max_window_bits=12"),
        (
            ["permessage-deflate; client_max_window_bits"],
            "permessage-deflate; server_max_window_bits=12; client_max_window_bits=12",
        ),
        (
            ["permessage-deflate; server_max_window_bits=15; client_max_window_bits=8"],
            "permessage-deflate; server_max_window_bits=12; client_max_window_bits=8",
        ),
        (
            ["permessage-deflate; client_max_window_bits=10; server_max_window_bits=12"],
            "permessage-deflate; server_max_window_bits=12; client_max_window_bits=10",
        ),
        (
            ["permessage-deflate; server_no_context_takeover; client_no_context_takeover"],
            "permessage-deflate; server_no_context_takeover; client_no_context_takeover;"
            " server_max_window_bits=12",
        ),
        (
            ['permessage-deflate; server_max_window_bits="9"'],
            "permessage-deflate; server_max_window_bits=9",
        ),
        # Several offers: the first the server can honour (a window of 8 bits it cannot).
        (
            [
                "x-webkit-deflate-frame, permessage-deflate; server_max_window_bits=8, "
                "permessage-deflate; client_no_context_takeover",
                "permessage-deflate",
            ],
            "permessage-deflate; client_no_context_takeover; server_max_window_bits=12",
        ),
        (
            ["foo", "permessage-deflate; bar=1", "permessage-deflate"],
            "permessage-deflate; server_max_window_bits=12",
        ),
        # Offers it cannot honour: declined, and the handshake still succeeds.
        (["permessage-deflate; server_max_window_bits=8"], None),
        (["permessage-deflate; server_max_window_bits"], None),
        (["permessage-deflate; client_max_window_bits=16"], None),
        (["permessage-deflate; unknown_param"], None),
        (["permessage-deflate; server_no_context_takeover; server_no_context_takeover"], None),
        (['permessage-deflate; client_max_window_bits="10'], None),
        (["x-webkit-deflate-frame"], None),
    ],
    ids=lambda value: "+".join(value) if isinstance(value, list) else None,
)
def test_negotiation_answers_the_first_acceptable_offer(
    server: ServerProcess, offers: list[str], answer: str | None
) -> None:
    """Rule: the 101 names permessage-deflate with the parameters of the first offer the
    server can honour (the context-takeover flags; server_max_window_bits always, the offered
    value or 12 if less; client_max_window_bits if offered, its value or 12 if less); an offer
    it cannot honour (a server window of 8 bits, a missing or bad value, an unknown or
    repeated parameter) is declined by leaving it out, never by failing the handshake, and
    the socket works. Fails without negotiation: no
    Sec-WebSocket-Extensions in any 101."""
    ws = offering(server, *offers)
    try:
        assert negotiated(ws) == answer
        ws.send_frame(OP_TEXT, b"plain")
        frame = ws.read_frame()
        assert (frame.opcode, frame.rsv) == (OP_TEXT, RSV1 if answer else 0), frame
        got = inflate(frame.payload) if answer else frame.payload
        assert got == b"plain"
    finally:
        ws.close()


def test_websockets_client_compresses_both_ways(server: ServerProcess) -> None:
    """Rule: with the websockets client's default offer, permessage-deflate is agreed and
    text, binary, empty, large (1 MiB random and 2 MiB compressible) messages echo intact in
    both directions, several in a row (context takeover both ways). Fails without inflating
    client frames: the server closes with 1002 (RSV1 set) at the first message."""

    messages: list[str | bytes] = [
        JSON_LIKE,
        JSON_LIKE,
        b"\x00\x01" * 500,
        "",
        b"",
        "héllo wörld ✓ 😀",
        os.urandom(1024 * 1024),
        "ab" * (1024 * 1024),
        "last",
    ]

    async def scenario() -> tuple[list[str], list[str | bytes]]:
        async with ws_connect(server, "/echo") as ws:
            extensions = [ext.name for ext in ws.protocol.extensions]
            replies = []
            for message in messages:
                await ws.send(message)
                replies.append(await recv(ws))
            return extensions, replies

    extensions, replies = run(scenario())
    assert extensions == ["permessage-deflate"]
    for sent, got in zip(messages, replies, strict=True):
        assert type(got) is type(sent)
        assert got == sent, f"echo differs: sent len {len(sent)}, got len {len(got)}"


@pytest.mark.parametrize(
    "factory",
    [
        ClientPerMessageDeflateFactory(client_no_context_takeover=True),
        ClientPerMessageDeflateFactory(server_no_context_takeover=True),
        ClientPerMessageDeflateFactory(server_max_window_bits=9, client_max_window_bits=9),
    ],
    ids=["client-no-context", "server-no-context", "windows-9-bits"],
)
def test_websockets_client_with_parameters(server: ServerProcess, factory: Any) -> None:
    """Rule: the parameters the websockets client asks for are agreed and kept to: messages
    echo intact however each side's context and window were limited. Fails if the server
    compresses with a wider window than agreed (the client's inflater fails: 1002) or keeps
    a context it agreed to drop."""

    async def scenario() -> list[str | bytes]:
        async with ws_connect(server, "/echo", extensions=[factory], compression=None) as ws:
            assert [ext.name for ext in ws.protocol.extensions] == ["permessage-deflate"]
            replies = []
            for message in (JSON_LIKE, os.urandom(3000) * 3, JSON_LIKE):
                await ws.send(message)
                replies.append(await recv(ws))
            return replies

    first, second, third = run(scenario())
    assert first == third == JSON_LIKE
    assert isinstance(second, bytes) and len(second) == 9000


def test_client_without_compression_still_served(server: ServerProcess) -> None:
    """Rule: a client that offers no extension gets none, and plain frames work. Fails if the
    server answers with an extension nobody offered (the websockets client refuses the
    handshake)."""

    async def scenario() -> tuple[list[Any], str | bytes]:
        async with ws_connect(server, "/echo", compression=None) as ws:
            await ws.send(JSON_LIKE)
            return ws.protocol.extensions, await recv(ws)

    assert run(scenario()) == ([], JSON_LIKE)


def test_option_false_declines_and_rsv1_is_then_a_protocol_error() -> None:
    """Rule: with --ws-per-message-deflate false the offer is declined (no
    Sec-WebSocket-Extensions, the websockets client falls back to plain frames) and a frame
    with RSV1 set is a protocol error (1002). Fails if the option is ignored: the extension is
    agreed anyway."""
    with running_server(APP, "--ws-per-message-deflate", "false") as srv:

        async def scenario() -> tuple[list[Any], str | bytes]:
            async with ws_connect(srv, "/echo") as ws:
                await ws.send(JSON_LIKE)
                return ws.protocol.extensions, await recv(ws)

        assert run(scenario()) == ([], JSON_LIKE)
        ws = offering(srv, "permessage-deflate")
        try:
            assert negotiated(ws) is None
            ws.send_frame(OP_TEXT, deflate(b"hello"), rsv=RSV1)
            assert ws.read_close().code == 1002
        finally:
            ws.close()


# -- the server's frames -----------------------------------------------------------------------


def test_server_frames_are_compressed_with_context_takeover(server: ServerProcess) -> None:
    """Rule: each message the server sends is one frame with RSV1 set whose payload inflates
    to the message, and (context takeover, the default) a repeated message compresses to less
    than the first did. Fails if the server sends plain frames after agreeing (RSV1 clear) or
    resets its context after each message."""
    ws = offering(server, "permessage-deflate")
    try:
        assert negotiated(ws) == DEFAULT_ANSWER
        inflater = zlib.decompressobj(wbits=-15)
        sizes = []
        for _ in range(2):
            ws.send_frame(OP_TEXT, JSON_LIKE.encode())
            frame = ws.read_frame()
            assert (frame.fin, frame.rsv, frame.opcode) == (True, RSV1, OP_TEXT), frame
            assert inflater.decompress(frame.payload + TAIL) == JSON_LIKE.encode()
            sizes.append(len(frame.payload))
        assert sizes[0] < len(JSON_LIKE) // 4, sizes
        assert sizes[1] < sizes[0], sizes
    finally:
        ws.close()


def test_server_no_context_takeover_and_window_bits_are_kept(server: ServerProcess) -> None:
    """Rule: with server_no_context_takeover each message inflates on its own (a fresh
    inflater each time), and with server_max_window_bits=9 no match reaches back more than
    512 bytes (an inflater with a 9-bit window takes every frame). Fails if the server keeps
    its context (the second frame needs the first) or uses a 15-bit window (zlib: invalid
    distance too far back)."""
    # 700 random bytes twice: the second copy is 700 bytes back, past a 9-bit window.
    message = os.urandom(700) * 2
    ws = offering(
        server, "permessage-deflate; server_no_context_takeover; server_max_window_bits=9"
    )
    try:
        assert negotiated(ws) == (
            "permessage-deflate; server_no_context_takeover; server_max_window_bits=9"
        )
        for _ in range(2):
            ws.send_frame(OP_BINARY, message)
            frame = ws.read_frame()
            assert frame.rsv == RSV1, frame
            assert inflate(frame.payload, wbits=9) == message
    finally:
        ws.close()


def test_windows_are_twelve_bits_by_default(server: ServerProcess) -> None:
    """Rule: without a smaller window asked for, the server compresses with a 12-bit window
    (an inflater with a 4 KiB window takes every frame, though the message repeats itself
    5000 bytes back) and caps the client's at 12 bits when the client offers
    client_max_window_bits, then inflates what the client compresses with that window. Fails
    with the 15-bit default: zlib's "invalid distance too far back" on the 12-bit inflater."""
    message = os.urandom(5000) * 2
    ws = offering(server, "permessage-deflate; client_max_window_bits")
    try:
        assert negotiated(ws) == (
            "permessage-deflate; server_max_window_bits=12; client_max_window_bits=12"
        )
        compressor = zlib.compressobj(wbits=-12)
        inflater = zlib.decompressobj(wbits=-12)
        for _ in range(2):
            payload = compressor.compress(message) + compressor.flush(zlib.Z_SYNC_FLUSH)
            ws.send_frame(OP_BINARY, payload[: -len(TAIL)], rsv=RSV1)
            frame = ws.read_frame()
            assert frame.rsv == RSV1, frame
            assert inflater.decompress(frame.payload + TAIL) == message
    finally:
        ws.close()


# -- the client's frames -----------------------------------------------------------------------


def test_fragmented_compressed_message_with_ping_between_fragments(server: ServerProcess) -> None:
    """Rule: a compressed message sent in fragments (RSV1 on the first only) with a ping
    between them is answered with a pong at once and echoed whole, and a plain message and
    a compressed one sharing the client's context follow. Fails if fragments are inflated
    one by one as messages, the ping waits for the message to end, or RSV1 is demanded on
    continuations."""
    compressor = zlib.compressobj(wbits=-15)
    payload = deflate(JSON_LIKE.encode(), compressor)
    thirds = [payload[: len(payload) // 3], payload[len(payload) // 3 : -5], payload[-5:]]
    ws = offering(server, "permessage-deflate")
    try:
        assert negotiated(ws) == DEFAULT_ANSWER
        inflater = zlib.decompressobj(wbits=-15)
        ws.send_frame(OP_TEXT, thirds[0], fin=False, rsv=RSV1)
        ws.send_frame(OP_PING, b"mid")
        pong = ws.read_frame()
        assert (pong.opcode, pong.payload) == (OP_PONG, b"mid"), pong
        ws.send_frame(OP_CONT, thirds[1], fin=False)
        ws.send_frame(OP_CONT, b"", fin=False)
        ws.send_frame(OP_CONT, thirds[2], fin=True)
        frame = ws.read_frame()
        assert (frame.opcode, frame.fin) == (OP_TEXT, True), frame
        assert inflater.decompress(frame.payload + TAIL) == JSON_LIKE.encode()
        ws.send_frame(OP_BINARY, b"plain, uncompressed")
        frame = ws.read_frame()
        assert inflater.decompress(frame.payload + TAIL) == b"plain, uncompressed"
        # Compressed with the client's context: refers back to the first message.
        ws.send_frame(OP_TEXT, deflate(JSON_LIKE.encode(), compressor), rsv=RSV1)
        frame = ws.read_frame()
        assert inflater.decompress(frame.payload + TAIL) == JSON_LIKE.encode()
    finally:
        ws.close()


@pytest.mark.parametrize(
    "frames",
    [
        pytest.param([build_frame(OP_PING, b"p", rsv=RSV1)], id="rsv1-on-ping"),
        pytest.param(
            [
                build_frame(OP_TEXT, deflate(b"hello")[:2], fin=False, rsv=RSV1),
                build_frame(OP_CONT, deflate(b"hello")[2:], rsv=RSV1),
            ],
            id="rsv1-on-continuation",
        ),
        pytest.param([build_frame(OP_TEXT, b"hello", rsv=2)], id="rsv2"),
        pytest.param([build_frame(OP_TEXT, b"\xff\xff\xff\xff", rsv=RSV1)], id="not-deflate"),
        pytest.param(
            [build_frame(OP_TEXT, b"x", fin=False, rsv=RSV1), build_frame(OP_TEXT, b"y")],
            id="new-message-inside-compressed",
        ),
        pytest.param(
            [build_frame(OP_TEXT, deflate(b"hello"), rsv=RSV1, mask=False)], id="unmasked"
        ),
        pytest.param([build_frame(0x3, b"x", rsv=RSV1)], id="opcode-3"),
        pytest.param([build_frame(OP_CONT, deflate(b"hello"))], id="continuation-without-start"),
    ],
)
def test_protocol_errors_with_deflate_close_1002(
    server: ServerProcess, frames: list[bytes]
) -> None:
    """Rule: with permessage-deflate agreed, RSV1 on a control frame or on a continuation,
    another reserved bit, a payload that is no deflate data, a new message inside a
    compressed one, and an unmasked compressed frame each fail the connection with 1002; the
    server keeps serving. Fails if the layer that inflates lets them through (the ping is
    answered, the bytes reach the app) or drops the connection without a close frame; the
    last two (an unknown opcode, a continuation with no message) check that frames the layer
    does not inflate still reach tungstenite's checks."""
    ws = offering(server, "permessage-deflate")
    try:
        assert negotiated(ws) == DEFAULT_ANSWER
        for data in frames:
            ws.send(data)
        assert ws.read_close().code == 1002
        assert ws.conn.wait_closed(5.0), "the TCP connection stayed open after 1002"
    finally:
        ws.close()
    still_serving(server)


def test_invalid_utf8_after_inflation_closes_1007(server: ServerProcess) -> None:
    """Rule: a compressed text message that inflates to invalid UTF-8 closes with 1007, as a
    plain one does. Fails if the inflated text skips tungstenite's UTF-8 check."""
    ws = offering(server, "permessage-deflate")
    try:
        assert negotiated(ws) == DEFAULT_ANSWER
        ws.send_frame(OP_TEXT, deflate(b"ok \xff\xfe"), rsv=RSV1)
        assert ws.read_close().code == 1007
    finally:
        ws.close()


# -- --ws-max-size after inflation -------------------------------------------------------------

MAX_SIZE = 1024 * 1024


def test_max_size_applies_after_inflation() -> None:
    """Rule: with --ws-max-size 1048576 a compressed message inflating to exactly 1 MiB is
    echoed, and one inflating to 1 MiB + 1 byte (a few KiB on the wire), also sent in
    fragments, closes with 1009. Fails if the limit is checked on the compressed size (the
    message over it is echoed, as seen with the size checks removed)."""

    async def fragments(data: bytes) -> AsyncIterator[bytes]:
        for at in range(0, len(data), 300_000):
            yield data[at : at + 300_000]

    async def scenario(srv: ServerProcess) -> list[Any]:
        outcomes: list[Any] = []
        async with ws_connect(srv, "/echo") as ws:
            await ws.send(b"\x00" * MAX_SIZE)
            outcomes.append(len(await recv(ws)))
        for message in (b"\x00" * (MAX_SIZE + 1), fragments(b"\x00" * (MAX_SIZE + 1))):
            async with ws_connect(srv, "/echo") as ws:
                await ws.send(message)
                outcomes.append(close_code(await closed_by_server(ws)))
        return outcomes

    with running_server(APP, "--ws-max-size", str(MAX_SIZE)) as srv:
        assert run(scenario(srv)) == [MAX_SIZE, 1009, 1009]
        still_serving(srv)


def test_decompression_bomb_closes_1009_with_bounded_memory() -> None:
    """Rule: a compressed frame of about 256 KiB on the wire that would inflate to 256 MiB of
    zeros, with --ws-max-size 1048576, closes with 1009 and the server's peak RSS grows by
    far less than the bomb (under 64 MiB; 8 MiB measured); the same bomb cut into 64 KiB
    fragments too. Fails if a message is inflated whole before its size is checked: with both
    size checks (the inflating layer's and tungstenite's) removed, no 1009 comes (the server
    inflates the 256 MiB, read_close times out)."""
    # 256 MiB of zeros, compressed a piece at a time: zlib's ratio is at most about 1000:1.
    compressor = zlib.compressobj(level=9, wbits=-15)
    piece = b"\x00" * (16 * 1024 * 1024)
    bomb = b"".join(compressor.compress(piece) for _ in range(16))
    bomb += compressor.flush(zlib.Z_SYNC_FLUSH)[: -len(TAIL)]
    assert len(bomb) < MAX_SIZE, len(bomb)
    with running_server(APP, "--ws-max-size", str(MAX_SIZE)) as srv:
        still_serving(srv)
        before = peak_rss(srv.pid)
        for frames in (
            [build_frame(OP_BINARY, bomb, rsv=RSV1)],
            [
                build_frame(
                    OP_BINARY if at == 0 else OP_CONT,
                    bomb[at : at + 65536],
                    fin=at + 65536 >= len(bomb),
                    rsv=RSV1 if at == 0 else 0,
                )
                for at in range(0, len(bomb), 65536)
            ],
        ):
            ws = offering(srv, "permessage-deflate")
            try:
                assert negotiated(ws) == DEFAULT_ANSWER
                try:
                    for data in frames:
                        ws.send(data)
                except OSError:
                    pass  # the server closed before reading the rest
                assert ws.read_close(timeout=20.0).code == 1009
            finally:
                ws.close()
        grown = peak_rss(srv.pid) - before
        assert grown < 64 * 2**20, f"peak RSS grew by {grown / 2**20:.0f} MiB"
        still_serving(srv)


def test_compressed_frame_over_max_size_closes_1009() -> None:
    """Rule: a compressed frame whose payload on the wire is over --ws-max-size closes with
    1009 from its header alone, whatever it would inflate to, as a plain frame does. Fails if
    the layer only counts inflated bytes (seen with its frame check removed): the 2 MiB frame,
    of which 4 KiB is sent, waits for the rest of its payload and no close comes."""
    payload = deflate(os.urandom(2 * MAX_SIZE))
    assert len(payload) > MAX_SIZE
    with running_server(APP, "--ws-max-size", str(MAX_SIZE)) as srv:
        ws = offering(srv, "permessage-deflate")
        try:
            assert negotiated(ws) == DEFAULT_ANSWER
            frame = build_frame(OP_BINARY, payload, rsv=RSV1)
            # The header and a little of the payload: the server decides on the header.
            ws.send(frame[:4096])
            assert ws.read_close().code == 1009
        finally:
            ws.close()
        still_serving(srv)


def test_deflate_over_an_http2_stream() -> None:
    """Rule: on an RFC 8441 stream (HTTP/2 extended CONNECT) permessage-deflate is offered and
    agreed as on HTTP/1.1: a compressed text frame is echoed compressed, and inflates to the
    message. Fails if HTTP/2 skips the negotiation (seen with --ws-per-message-deflate false:
    the RSV1 frame is answered with a 1002 close)."""
    with running_server(APP, "--http2") as srv:
        client = plain_client(srv)
        try:
            offer = ("sec-websocket-extensions", "permessage-deflate")
            stream = client.connect_ws("/echo", offer)
            assert client.response(stream) == 200
            client.conn.send_data(
                stream, build_frame(OP_TEXT, deflate(JSON_LIKE.encode()), rsv=RSV1)
            )
            client.flush()
            [(opcode, payload)] = client.next_frames(stream)
            assert opcode == OP_TEXT, (opcode, payload)
            assert inflate(payload) == JSON_LIKE.encode()
        finally:
            client.sock.close()
