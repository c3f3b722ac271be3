"""Helpers for the black-box WebSocket tests (``tests/ws/``; also the WebSocket attacks of
``tests/hostile/`` and the frameworks' WebSockets of ``tests/compat/``): two clients for a server
from :mod:`support.serverutil`.

- :func:`ws_connect` opens a client of the ``websockets`` library (asyncio client: handshake
  checks, fragmented sends, pings, close codes) for what a real client does; bounded handshake
  and close, no keepalive pings, no client proxy from the environment, messages up to 4 MiB.
- :func:`raw_handshake` and :func:`upgraded` give a :class:`RawWebSocket` over a
  :class:`~support.h1raw.RawConnection` (the opening handshake by hand, masked frames built byte by
  byte with :func:`build_frame`, server frames parsed into :class:`Frame`) for what a real client
  would never send: invalid UTF-8, unmasked frames, reserved bits, bad control frames.
- :func:`run` bounds an asyncio scenario with ``asyncio.wait_for`` (:data:`TIMEOUT`), so a broken
  server fails a test instead of hanging; :func:`still_serving` checks that plain HTTP and a new
  websocket both still work.

Imported by the test modules as ``from support.wsutil import ...`` (``tests/`` is on ``sys.path``).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import time
import uuid
from collections.abc import Awaitable
from dataclasses import dataclass
from typing import Any, TypeVar

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from support.h1raw import RawConnection, RawResponse, request_bytes
from support.serverutil import ServerProcess

#: Default bound for one scenario run by :func:`run` (a 1 MiB message included).
TIMEOUT = 10.0
#: The GUID of RFC 6455, 1.3 (``Sec-WebSocket-Accept`` = base64(sha1(key + GUID))).
WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

OP_CONT, OP_TEXT, OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA

T = TypeVar("T")


# -- helpers -----------------------------------------------------------------------------------


def run(coro: Awaitable[T], timeout: float = TIMEOUT) -> T:
    """Run one asyncio scenario to its end, failing (never hanging) after ``timeout``."""

    async def bounded() -> T:
        return await asyncio.wait_for(coro, timeout)

    return asyncio.run(bounded())


def token() -> str:
    return uuid.uuid4().hex


def ws_url(server: ServerProcess, path: str) -> str:
    assert server.port is not None
    scheme = "wss" if server.scheme == "https" else "ws"
    return f"{scheme}://127.0.0.1:{server.port}{path}"


def ws_connect(server: ServerProcess, path: str, **options: Any) -> connect:
    """A ``websockets`` client for ``path`` (bounded handshake and close, no keepalive pings,
    no proxy, messages up to 4 MiB)."""
    options.setdefault("open_timeout", 5.0)
    options.setdefault("close_timeout", 5.0)
    options.setdefault("ping_interval", None)
    options.setdefault("max_size", 4 * 1024 * 1024)
    options.setdefault("proxy", None)
    return connect(ws_url(server, path), **options)


async def refused_status(server: ServerProcess, path: str, **options: Any) -> int:
    """The HTTP status with which the server refuses a WebSocket handshake on ``path``; fails
    the test if the handshake succeeds."""
    try:
        async with ws_connect(server, path, **options):
            pass
    except InvalidStatus as exc:
        return exc.response.status_code
    raise AssertionError(f"the handshake on {path} succeeded")


async def recv(ws: ClientConnection, timeout: float = 5.0) -> str | bytes:
    return await asyncio.wait_for(ws.recv(), timeout)


async def closed_by_server(ws: ClientConnection, timeout: float = 5.0) -> ConnectionClosed:
    """Wait for the server to close ``ws`` (any message before that fails the test); return
    the ``ConnectionClosed`` the client raised."""
    try:
        message = await asyncio.wait_for(ws.recv(), timeout)
    except ConnectionClosed as exc:
        return exc
    raise AssertionError(f"expected the server to close, got a message: {message!r:.200}")


def close_code(exc: ConnectionClosed) -> int | None:
    """The code of the close frame the server sent (None: no close frame, e.g. a bare TCP
    close, which the client reports as 1006)."""
    return exc.rcvd.code if exc.rcvd is not None else None


def still_serving(server: ServerProcess) -> None:
    """Plain HTTP and a new websocket both still work."""
    assert server.returncode is None, server.describe()
    assert server.get("/ok").text == "ok", "the server stopped serving HTTP"

    async def echo_once() -> str | bytes:
        async with ws_connect(server, "/echo") as ws:
            await ws.send("still here")
            return await recv(ws)

    assert run(echo_once()) == "still here", "the server stopped serving websockets"


# -- raw frames --------------------------------------------------------------------------------


def mask_payload(payload: bytes, key: bytes) -> bytes:
    """XOR ``payload`` with the 4-byte masking ``key`` (RFC 6455, 5.3)."""
    repeated = (key * (len(payload) // 4 + 1))[: len(payload)]
    return (int.from_bytes(payload, "big") ^ int.from_bytes(repeated, "big")).to_bytes(
        len(payload), "big"
    )


def build_frame(
    opcode: int, payload: bytes = b"", *, fin: bool = True, rsv: int = 0, mask: bool = True
) -> bytes:
    """One client frame: ``rsv`` is the 3 reserved bits (4 = RSV1, 2 = RSV2, 1 = RSV3);
    masked with a random key unless ``mask`` is false."""
    first = (0x80 if fin else 0) | (rsv << 4) | opcode
    mask_bit = 0x80 if mask else 0
    length = len(payload)
    if length < 126:
        header = bytes([first, mask_bit | length])
    elif length < 1 << 16:
        header = bytes([first, mask_bit | 126]) + length.to_bytes(2, "big")
    else:
        header = bytes([first, mask_bit | 127]) + length.to_bytes(8, "big")
    if not mask:
        return header + payload
    key = os.urandom(4)
    return header + key + mask_payload(payload, key)


def close_payload(code: int, reason: str = "") -> bytes:
    return code.to_bytes(2, "big") + reason.encode()


@dataclass
class Frame:
    """A frame as the server sent it."""

    fin: bool
    rsv: int
    opcode: int
    masked: bool
    payload: bytes

    @property
    def code(self) -> int:
        """The close code (1005 when the close frame has no payload)."""
        assert self.opcode == OP_CLOSE, self
        return int.from_bytes(self.payload[:2], "big") if self.payload else 1005

    @property
    def reason(self) -> str:
        return self.payload[2:].decode("utf-8")


class RawWebSocket:
    """A websocket spoken by hand over :class:`RawConnection`, after a raw handshake."""

    def __init__(self, conn: RawConnection, response: RawResponse, key: str) -> None:
        self.conn = conn
        self.response = response
        self.key = key

    def send(self, data: bytes) -> None:
        self.conn.send(data)

    def send_frame(self, opcode: int, payload: bytes = b"", **options: Any) -> None:
        self.conn.send(build_frame(opcode, payload, **options))

    def read_frame(self, timeout: float = 5.0) -> Frame:
        deadline = time.monotonic() + timeout

        def left() -> float:
            return max(deadline - time.monotonic(), 0.001)

        first, second = self.conn.read_exactly(2, left())
        length = second & 0x7F
        if length == 126:
            length = int.from_bytes(self.conn.read_exactly(2, left()), "big")
        elif length == 127:
            length = int.from_bytes(self.conn.read_exactly(8, left()), "big")
        key = self.conn.read_exactly(4, left()) if second & 0x80 else None
        payload = self.conn.read_exactly(length, left())
        if key is not None:
            payload = mask_payload(payload, key)
        return Frame(
            fin=bool(first & 0x80),
            rsv=(first >> 4) & 0x7,
            opcode=first & 0x0F,
            masked=key is not None,
            payload=payload,
        )

    def read_close(self, timeout: float = 5.0) -> Frame:
        """The server's close frame; any data frame before it fails the test (control frames
        other than close are skipped)."""
        deadline = time.monotonic() + timeout
        while True:
            frame = self.read_frame(max(deadline - time.monotonic(), 0.001))
            assert not frame.masked, f"the server masked a frame: {frame}"
            if frame.opcode == OP_CLOSE:
                return frame
            assert frame.opcode in (OP_PING, OP_PONG), f"a frame before the close: {frame}"

    def close(self) -> None:
        self.conn.close()


def accept_for(key: str) -> str:
    return base64.b64encode(hashlib.sha1((key + WS_GUID).encode()).digest()).decode()


def handshake_request(
    server: ServerProcess,
    path: str,
    *,
    key: str,
    version: str = "13",
    extra: list[tuple[str, str]] | None = None,
    omit: tuple[str, ...] = (),
) -> bytes:
    headers = [
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Key", key),
        ("Sec-WebSocket-Version", version),
        *(extra or []),
    ]
    headers = [(name, value) for name, value in headers if name not in omit]
    return request_bytes("GET", path, headers=headers, host=f"127.0.0.1:{server.port}")


def raw_handshake(
    server: ServerProcess, path: str = "/echo", *, timeout: float = 5.0, **options: Any
) -> RawWebSocket:
    """Open a connection, send the opening handshake, read the response head (a 101 leaves any
    frame that came with it in the buffer; another status is read with its body)."""
    key = base64.b64encode(os.urandom(16)).decode()
    conn = server.raw(timeout=timeout)
    try:
        conn.send(handshake_request(server, path, key=key, **options))
        response = conn.read_response(timeout=timeout)
    except BaseException:
        conn.close()
        raise
    return RawWebSocket(conn, response, key)


def upgraded(server: ServerProcess, path: str = "/echo") -> RawWebSocket:
    """A raw websocket after a successful handshake (101 checked)."""
    ws = raw_handshake(server, path)
    assert ws.response.status == 101, (ws.response.raw_head, ws.conn.received[:300])
    return ws
