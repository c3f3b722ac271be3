"""A raw HTTP/2 client for attacks: frames and HPACK field blocks made by hand (literals
without indexing, RFC 7541 6.2.2) so that what is on the wire is exactly what a test means, sent
on a plain socket with prior knowledge; and the checks that a server survived them."""

from __future__ import annotations

import select
import socket
import struct
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import hpack

from support.serverutil import ServerProcess

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#: Bound for reading one exchange.
TIMEOUT = 2.0

# Frame types (RFC 9113, 6).
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS = 0x0, 0x1, 0x2, 0x3, 0x4
PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 0x5, 0x6, 0x7, 0x8, 0x9
# Flags.
END_STREAM, ACK, END_HEADERS, PADDED, PRIORITY_FLAG = 0x1, 0x1, 0x4, 0x8, 0x20
# Error codes (RFC 9113, 7).
PROTOCOL_ERROR, FLOW_CONTROL_ERROR, STREAM_CLOSED = 0x1, 0x3, 0x5
FRAME_SIZE_ERROR, REFUSED_STREAM, COMPRESSION_ERROR, ENHANCE_YOUR_CALM = 0x6, 0x7, 0x9, 0xB
# SETTINGS identifiers.
SETTINGS_MAX_CONCURRENT_STREAMS, SETTINGS_INITIAL_WINDOW_SIZE = 0x3, 0x4


# -- frames and field blocks -------------------------------------------------------------------


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return (
        len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload
    )


def setting(ident: int, value: int) -> bytes:
    return struct.pack(">HI", ident, value)


def hpack_int(value: int, prefix: int, first: int = 0) -> bytes:
    """An HPACK integer (RFC 7541 5.1) with a ``prefix``-bit prefix ORed into ``first``."""
    top = (1 << prefix) - 1
    if value < top:
        return bytes([first | value])
    out = [first | top]
    value -= top
    while value >= 128:
        out.append((value & 127) | 128)
        value >>= 7
    out.append(value)
    return bytes(out)


def literal(name: bytes, value: bytes, *, indexed: bool = False) -> bytes:
    """A literal field line with a literal name, added to the dynamic table when ``indexed``."""
    kind = 0x40 if indexed else 0x00
    return bytes([kind]) + hpack_int(len(name), 7) + name + hpack_int(len(value), 7) + value


def block(fields: Sequence[tuple[str, str]]) -> bytes:
    return b"".join(literal(n.encode("latin-1"), v.encode("latin-1")) for n, v in fields)


def request_fields(
    path: str, method: str = "GET", *extra: tuple[str, str]
) -> list[tuple[str, str]]:
    return [(":method", method), (":scheme", "http"), (":authority", "x"), (":path", path), *extra]


def get(stream: int, path: str, *extra: tuple[str, str]) -> bytes:
    """A whole GET: one HEADERS frame with END_HEADERS and END_STREAM."""
    return frame(
        HEADERS, END_HEADERS | END_STREAM, stream, block(request_fields(path, "GET", *extra))
    )


@dataclass
class Frame:
    kind: int
    flags: int
    stream: int
    payload: bytes


@dataclass
class Received:
    data: bytes
    closed: bool
    frames: list[Frame] = field(default_factory=list)
    statuses: dict[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        at = 0
        decoder = hpack.Decoder()
        decoder.max_allowed_table_size = 65536
        while at + 9 <= len(self.data):
            length = int.from_bytes(self.data[at : at + 3], "big")
            if at + 9 + length > len(self.data):
                break
            kind, flags = self.data[at + 3], self.data[at + 4]
            stream = int.from_bytes(self.data[at + 5 : at + 9], "big") & 0x7FFFFFFF
            payload = self.data[at + 9 : at + 9 + length]
            self.frames.append(Frame(kind, flags, stream, payload))
            if kind == HEADERS:
                fields = dict(decoder.decode(payload))
                if ":status" in fields:
                    self.statuses[stream] = fields[":status"]
            at += 9 + length

    def goaway(self) -> int | None:
        """The error code of the server's GOAWAY, if it sent one."""
        for f in self.frames:
            if f.kind == GOAWAY:
                return int.from_bytes(f.payload[4:8], "big")
        return None

    def resets(self) -> dict[int, int]:
        """Stream id -> error code of every RST_STREAM the server sent."""
        return {
            f.stream: int.from_bytes(f.payload, "big") for f in self.frames if f.kind == RST_STREAM
        }

    def settings(self) -> dict[int, int]:
        """The server's (first, non-ACK) SETTINGS."""
        for f in self.frames:
            if f.kind == SETTINGS and not f.flags & ACK:
                p = f.payload
                return {
                    int.from_bytes(p[i : i + 2], "big"): int.from_bytes(p[i + 2 : i + 6], "big")
                    for i in range(0, len(p), 6)
                }
        return {}

    def describe(self) -> str:
        shown = [(f.kind, f.flags, f.stream, f.payload[:40]) for f in self.frames[:12]]
        return (
            f"closed={self.closed} goaway={self.goaway()} resets={self.resets()} "
            f"statuses={self.statuses} frames={shown}"
        )


class H2Raw:
    """An HTTP/2 connection on a raw socket: the preface and a SETTINGS frame (plus the ACK of
    the server's, sent blind), then whatever bytes the test writes."""

    def __init__(self, server: ServerProcess, settings: bytes = b"", *, preface: bool = True):
        assert server.port is not None
        self.sock = socket.create_connection(("127.0.0.1", server.port), TIMEOUT)
        self.send_error: OSError | None = None
        if preface:
            self.send(PREFACE + frame(SETTINGS, 0, 0, settings) + frame(SETTINGS, ACK, 0))

    def __enter__(self) -> H2Raw:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send(self, data: bytes) -> bool:
        """Send ``data``; False (error kept) if the server has already closed or stopped reading."""
        try:
            self.sock.sendall(data)
        except OSError as exc:
            self.send_error = exc
            return False
        return True

    def send_until_answered(self, chunks: Iterator[bytes] | Sequence[bytes]) -> int:
        """Send ``chunks`` one by one, stopping as soon as the server has said something (so
        its GOAWAY is read before a reset from unread data can discard it); the number sent."""
        sent = 0
        for chunk in chunks:
            readable, _, _ = select.select([self.sock], [], [], 0)
            if readable or not self.send(chunk):
                break
            sent += 1
        return sent

    def read(self, timeout: float = TIMEOUT, *, until_close: bool = True) -> Received:
        """What arrives until the server closes (or ``timeout``); ``until_close=False`` stops at
        the first quiet 0.3 s after some data."""
        deadline = time.monotonic() + timeout
        data, closed = b"", False
        while time.monotonic() < deadline:
            quiet = not until_close and bool(data)
            self.sock.settimeout(0.3 if quiet else max(0.01, deadline - time.monotonic()))
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                if quiet:
                    break
                continue
            except OSError:
                closed = True
                break
            if not chunk:
                closed = True
                break
            data += chunk
        return Received(data, closed)


def marker() -> str:
    return uuid.uuid4().hex[:12]


def app_saw(server: ServerProcess, text: str) -> list[str]:
    """The paths the app was called with that contain ``text``."""
    return [path for path in server.get("/_seen").json() if text in path]


def check_still_serving(server: ServerProcess) -> None:
    """The server is alive and answers HTTP/1.1 and HTTP/2 (prior knowledge), each within 10 s:
    what is caught is a server held by an attack, not a slow answer on a loaded machine."""
    assert server.returncode is None, f"the server died\n{server.describe()}"
    assert server.get("/ok", timeout=10.0).status_code == 200
    with server.client(timeout=10.0, http1=False, http2=True) as client:
        response = client.get("/ok")
    assert (response.status_code, response.http_version) == (200, "HTTP/2")


def exchange(
    server: ServerProcess, data: bytes, settings: bytes = b"", *, until_close: bool = True
) -> Received:
    """Send ``data`` on a new connection; what comes back until close (or the first quiet
    moment when ``until_close`` is false: for stream errors, which leave the connection open)."""
    with H2Raw(server, settings) as conn:
        conn.send(data)
        return conn.read(until_close=until_close)
