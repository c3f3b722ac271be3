"""HTTP/2 abuse (RFC 9113) against the real server: h2c with prior knowledge on the plain port
(the default ``--http auto``), frames crafted by hand on raw sockets (``hostile_app``).

A hostile HTTP/2 client must be refused (RST_STREAM or GOAWAY, with the error code RFC 9113
names) or disconnected, never served a malformed request, and never cost a hang, a dead worker,
unbounded memory or service to other clients. After each attack the server must still answer
HTTP/1.1 and HTTP/2 promptly. Field blocks are encoded by hand (HPACK literals without
indexing, RFC 7541 6.2.2) so that what is on the wire is exactly what the test means; answers
are decoded with ``hpack``.

Strict xfails record what ferrule (through hyper and the h2 crate) gets wrong today.
"""

from __future__ import annotations

import json
import select
import signal
import socket
import struct
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import h2.config
import h2.connection
import h2.events
import hpack
import pytest
from serverutil import ServerProcess, fetch_record, is_clean_exit, rss_bytes, running_server

APP = "hostile_app:app"
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


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with running_server(APP) as srv:
        yield srv


def marker() -> str:
    return uuid.uuid4().hex[:12]


def app_saw(server: ServerProcess, text: str) -> list[str]:
    """The paths the app was called with that contain ``text``."""
    return [path for path in server.get("/_seen").json() if text in path]


def check_still_serving(server: ServerProcess) -> None:
    """The server is alive and answers HTTP/1.1 and HTTP/2 (prior knowledge) within a second."""
    assert server.returncode is None, f"the server died\n{server.describe()}"
    assert server.get("/ok", timeout=1.0).status_code == 200
    with server.client(timeout=1.0, http1=False, http2=True) as client:
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


# -- floods ------------------------------------------------------------------------------------


def test_rapid_reset_gets_goaway(server: ServerProcess) -> None:
    """Rule (CVE-2023-44487, "rapid reset"): a client that opens streams and resets them at once
    (1000 HEADERS + RST_STREAM pairs in one write) is cut off with GOAWAY ENHANCE_YOUR_CALM
    (h2's ``max_pending_accept_reset_streams``), and only a handful of the requests ever reach
    the app. Broken: the server keeps accepting (the app is called for most streams, which is
    the amplification), never closes, or stops serving others."""
    tag = marker()
    pairs = [
        get(2 * i + 1, f"/rr-{tag}?i={i}") + frame(RST_STREAM, 0, 2 * i + 1, struct.pack(">I", 8))
        for i in range(1000)
    ]
    with H2Raw(server) as conn:
        conn.read(0.3, until_close=False)  # the server's SETTINGS and ACK
        conn.send_until_answered(pairs)
        got = conn.read()
    assert got.closed and got.goaway() == ENHANCE_YOUR_CALM, got.describe()
    assert len(app_saw(server, tag)) < 100
    check_still_serving(server)


@pytest.mark.parametrize(
    "payload",
    [pytest.param(b"", id="empty"), pytest.param(b"\x00" * 4096, id="4k")],
)
def test_continuation_flood_gets_goaway(server: ServerProcess, payload: bytes) -> None:
    """Rule (CVE-2024-27316 family): HEADERS without END_HEADERS followed by endless
    CONTINUATION frames is a connection the server ends (GOAWAY, close) after a few frames,
    buffering at most about the header list limit. Broken: the server keeps reading (and
    buffering) the block, hangs, or dies."""
    with H2Raw(server) as conn:
        conn.read(0.3, until_close=False)  # the server's SETTINGS and ACK
        conn.send(frame(HEADERS, 0, 1, block(request_fields("/cont"))))
        conn.send_until_answered([frame(CONTINUATION, 0, 1, payload)] * 1000)
        got = conn.read()
    assert got.closed and got.goaway() is not None, got.describe()
    check_still_serving(server)


def test_header_list_over_64k_gets_431(server: ServerProcess) -> None:
    """Rule: ferrule's head limit (64 KiB) is advertised as SETTINGS_MAX_HEADER_LIST_SIZE and a
    request whose field section is larger (70 KiB in HEADERS + CONTINUATION) gets 431 (RFC 9113
    10.5.1 allows it) and never reaches the app. Broken: served, or no answer."""
    tag = marker()
    fields = request_fields(
        f"/big-{tag}", "GET", *((f"x-big-{i:03}", "v" * 1000) for i in range(70))
    )
    whole = block(fields)
    pieces = [whole[i : i + 16384] for i in range(0, len(whole), 16384)]
    data = b"".join(
        frame(
            HEADERS if i == 0 else CONTINUATION,
            (END_STREAM if i == 0 else 0) | (END_HEADERS if i == len(pieces) - 1 else 0),
            1,
            piece,
        )
        for i, piece in enumerate(pieces)
    )
    with H2Raw(server) as conn:
        conn.send(data)
        got = conn.read(until_close=False)
    assert got.settings().get(0x6) == 64 * 1024, got.describe()
    assert got.statuses.get(1) == "431", got.describe()
    assert not app_saw(server, tag)
    check_still_serving(server)


@pytest.mark.parametrize(
    "references", [pytest.param(30, id="120KB"), pytest.param(12000, id="48MB")]
)
def test_hpack_bomb_is_refused(server: ServerProcess, references: int) -> None:
    """Rule: the header list limit counts decoded bytes, so an HPACK bomb (a 4 KB field put in the
    dynamic table once, then referenced by 1-byte indexes) is refused (431, or GOAWAY for an
    absurd one) without decoding it into memory, and never reaches the app. Broken: served,
    memory growth, or a hang."""
    tag = marker()
    before = rss_bytes(server.pid)
    seed = block(request_fields(f"/seed-{tag}")) + literal(b"x-bomb", b"b" * 4000, indexed=True)
    bomb = block(request_fields(f"/bomb-{tag}")) + bytes([0x80 | 62]) * references
    with H2Raw(server) as conn:
        conn.send(
            frame(HEADERS, END_HEADERS | END_STREAM, 1, seed)
            + frame(HEADERS, END_HEADERS | END_STREAM, 3, bomb)
        )
        got = conn.read(until_close=False)
    assert got.statuses.get(3) == "431" or got.goaway() is not None, got.describe()
    assert not app_saw(server, f"bomb-{tag}")
    assert rss_bytes(server.pid) - before < 16 * 2**20
    check_still_serving(server)


@pytest.mark.parametrize(
    "flood",
    [
        pytest.param(
            frame(SETTINGS, 0, 0, setting(SETTINGS_INITIAL_WINDOW_SIZE, 65535)), id="settings"
        ),
        pytest.param(frame(PING, 0, 0, b"12345678"), id="ping"),
    ],
)
def test_control_frame_flood_without_reading_is_bounded(
    server: ServerProcess, flood: bytes
) -> None:
    """Rule: 20000 SETTINGS (or PING) frames from a client that never reads the ACKs cost the
    server no memory beyond one pending ACK: it stops reading the connection once its writes
    back up (the client's sends stall) and keeps serving everyone else. Broken: the ACKs queue
    in memory (RSS grows), the server dies or stops answering others."""
    before = rss_bytes(server.pid)
    with H2Raw(server) as conn:
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        conn.sock.settimeout(1.0)
        for _ in range(200):
            if not conn.send(flood * 100):
                break
        check_still_serving(server)
        assert rss_bytes(server.pid) - before < 8 * 2**20
    check_still_serving(server)


def test_streams_beyond_max_concurrent_are_refused(server: ServerProcess) -> None:
    """Rule (RFC 9113 5.1.2): the server advertises SETTINGS_MAX_CONCURRENT_STREAMS (hyper: 200)
    and answers a stream beyond it with RST_STREAM REFUSED_STREAM (or PROTOCOL_ERROR), never
    starting it in the app; the streams within the limit are served. Broken: no limit (every
    stream reaches the app), or the whole connection is dropped."""
    tag = marker()
    with H2Raw(server) as conn:
        limit = conn.read(0.5, until_close=False).settings().get(SETTINGS_MAX_CONCURRENT_STREAMS)
        assert limit is not None and limit <= 1000, f"advertised limit {limit}"
        conn.send(
            b"".join(get(2 * i + 1, f"/sleep?secs=0.5&cc-{tag}={i}") for i in range(limit + 10))
        )
        got = conn.read(1.5)
    refused = [c for c in got.resets().values() if c in (REFUSED_STREAM, PROTOCOL_ERROR)]
    assert len(refused) >= 10, got.describe()
    assert len(app_saw(server, f"cc-{tag}")) <= limit
    assert list(got.statuses.values()).count("200") == limit, got.describe()
    check_still_serving(server)


# -- flow control ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("frames", "code", "scope"),
    [
        pytest.param(
            frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 0x7FFFFFFF)),
            FLOW_CONTROL_ERROR,
            "connection",
            id="connection-window-over-2^31-1",
        ),
        pytest.param(
            get(1, "/sleep?secs=0.5") + frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", 0x7FFFFFFF)),
            FLOW_CONTROL_ERROR,
            "stream",
            id="stream-window-over-2^31-1",
        ),
        pytest.param(
            frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", 0)),
            PROTOCOL_ERROR,
            "connection",
            id="connection-increment-0",
        ),
        pytest.param(
            get(1, "/sleep?secs=0.5") + frame(WINDOW_UPDATE, 0, 1, struct.pack(">I", 0)),
            PROTOCOL_ERROR,
            "stream-or-connection",
            id="stream-increment-0",
        ),
    ],
)
def test_window_update_errors(server: ServerProcess, frames: bytes, code: int, scope: str) -> None:
    """Rule (RFC 9113 6.9, 6.9.1): a WINDOW_UPDATE that pushes a window past 2^31-1 is a
    FLOW_CONTROL_ERROR (connection error on stream 0, stream error on a stream); an increment
    of 0 is a PROTOCOL_ERROR (a stream error may be escalated to the connection, 5.4.1).
    Broken: the window wraps (silently accepted), another code, no answer."""
    got = exchange(server, frames)
    if scope == "connection":
        assert got.closed and got.goaway() == code, got.describe()
    elif scope == "stream":
        assert got.resets().get(1) == code, got.describe()
    else:
        assert got.resets().get(1) == code or got.goaway() == code, got.describe()
    check_still_serving(server)


def test_zero_window_shutdown_completes_with_graceful_timeout() -> None:
    """Rule: streams whose client never opens its window (SETTINGS_INITIAL_WINDOW_SIZE 0, no
    WINDOW_UPDATE) hold a graceful shutdown no longer than --timeout-graceful-shutdown. (Without
    that option ferrule waits for them, as uvicorn waits for its in-flight requests.)
    Broken: the server hangs on SIGINT, or never exits cleanly."""
    with running_server(APP, "--timeout-graceful-shutdown", "1") as srv:
        with H2Raw(srv, setting(SETTINGS_INITIAL_WINDOW_SIZE, 0)) as conn:
            conn.send(b"".join(get(2 * i + 1, f"/stream?key=zw-{i}") for i in range(3)))
            fetch_record(srv, "zw-0-started")
            started = time.monotonic()
            srv.send_signal(signal.SIGINT)
            code = srv.wait_exit(5.0)
            assert time.monotonic() - started < 4.0, srv.describe()
        assert is_clean_exit(code), srv.describe()


# -- frames where they must not be -------------------------------------------------------------


@pytest.mark.parametrize(
    "frames",
    [
        pytest.param(frame(DATA, 0, 0, b"abc"), id="DATA-on-stream-0"),
        pytest.param(
            frame(HEADERS, END_HEADERS | END_STREAM, 0, block(request_fields("/s0"))),
            id="HEADERS-on-stream-0",
        ),
        pytest.param(frame(RST_STREAM, 0, 0, struct.pack(">I", 8)), id="RST_STREAM-on-stream-0"),
        pytest.param(frame(PRIORITY, 0, 0, struct.pack(">IB", 1, 16)), id="PRIORITY-on-stream-0"),
        pytest.param(frame(CONTINUATION, END_HEADERS, 0), id="CONTINUATION-on-stream-0"),
        pytest.param(frame(SETTINGS, 0, 1), id="SETTINGS-on-stream-1"),
        pytest.param(frame(PING, 0, 1, b"12345678"), id="PING-on-stream-1"),
        pytest.param(frame(GOAWAY, 0, 1, struct.pack(">II", 0, 0)), id="GOAWAY-on-stream-1"),
        pytest.param(frame(DATA, END_STREAM, 5, b"abc"), id="DATA-on-idle-stream"),
        pytest.param(frame(RST_STREAM, 0, 7, struct.pack(">I", 8)), id="RST_STREAM-on-idle-stream"),
        pytest.param(
            frame(WINDOW_UPDATE, 0, 9, struct.pack(">I", 10)), id="WINDOW_UPDATE-on-idle-stream"
        ),
        pytest.param(get(2, "/even"), id="HEADERS-on-even-stream"),
        pytest.param(get(5, "/ok") + get(3, "/ok"), id="stream-id-going-down"),
        pytest.param(
            get(1, "/sleep?secs=0.3")
            + frame(
                PUSH_PROMISE, END_HEADERS, 1, struct.pack(">I", 2) + block(request_fields("/pp"))
            ),
            id="PUSH_PROMISE-from-client",
        ),
        pytest.param(
            frame(HEADERS, 0, 1, block(request_fields("/x"))) + frame(PING, 0, 0, b"12345678"),
            id="frame-between-HEADERS-and-CONTINUATION",
        ),
        pytest.param(
            frame(HEADERS, END_HEADERS, 1, block(request_fields("/echo", "POST")))
            + frame(DATA, PADDED | END_STREAM, 1, b"\x10abc"),
            id="padding-longer-than-frame",
        ),
    ],
)
def test_misplaced_frame_is_a_connection_error(server: ServerProcess, frames: bytes) -> None:
    """Rule (RFC 9113 5.1, 6.x, 5.1.1, 6.10, 8.4): DATA/HEADERS/RST_STREAM/PRIORITY/CONTINUATION
    on stream 0, SETTINGS/PING/GOAWAY on a stream, frames other than HEADERS/PRIORITY on an idle
    stream, even or decreasing client stream ids, PUSH_PROMISE from a client, anything between
    HEADERS and its CONTINUATION and padding longer than the frame are connection errors of
    type PROTOCOL_ERROR: GOAWAY and close. Broken: ignored, served, or no close."""
    got = exchange(server, frames)
    assert got.closed and got.goaway() == PROTOCOL_ERROR, got.describe()
    check_still_serving(server)


def test_data_on_a_closed_stream_is_refused(server: ServerProcess) -> None:
    """Rule (RFC 9113 5.1): DATA on a stream the server has already answered and closed is
    answered with STREAM_CLOSED (as a stream or connection error); the connection's other
    streams go on. Broken: the data is delivered somewhere, or no answer."""
    with H2Raw(server) as conn:
        conn.send(get(1, "/ok"))
        assert conn.read(1.0, until_close=False).statuses.get(1) == "200"
        conn.send(frame(DATA, END_STREAM, 1, b"late"))
        got = conn.read(1.0, until_close=False)
    assert got.resets().get(1) == STREAM_CLOSED or got.goaway() == STREAM_CLOSED, got.describe()
    check_still_serving(server)


@pytest.mark.parametrize(
    "first",
    [
        pytest.param(frame(PRIORITY, 0, 3, struct.pack(">IB", 3, 16)), id="PRIORITY-frame"),
        pytest.param(
            frame(
                HEADERS,
                END_HEADERS | END_STREAM | PRIORITY_FLAG,
                3,
                struct.pack(">IB", 3, 16) + block(request_fields("/selfdep")),
            ),
            id="HEADERS-priority",
        ),
    ],
)
def test_priority_on_itself_is_a_stream_error(server: ServerProcess, first: bytes) -> None:
    """Rule (RFC 9113 5.3.1): a stream that depends on itself is a stream error of type
    PROTOCOL_ERROR: RST_STREAM on that stream, the request (if any) never served, and the
    connection goes on (a following request on it is answered). Broken: served, ignored, or the
    connection torn down."""
    with H2Raw(server) as conn:
        conn.send(first + get(5, "/ok"))
        got = conn.read(1.5, until_close=False)
    assert got.resets().get(3) == PROTOCOL_ERROR, got.describe()
    assert got.statuses == {5: "200"}, got.describe()
    check_still_serving(server)


def test_unknown_frame_type_is_ignored(server: ServerProcess) -> None:
    """Control (RFC 9113 5.5): a frame of an unknown type is ignored, not an error, so the
    errors above are about the frames, not about surprises in general."""
    got_frames = frame(0xFA, 0, 0, b"xyz") + get(1, "/ok")
    with H2Raw(server) as conn:
        conn.send(got_frames)
        got = conn.read(1.0, until_close=False)
    assert got.statuses == {1: "200"} and got.goaway() is None, got.describe()


# -- malformed requests ------------------------------------------------------------------------

B = [(":scheme", "http"), (":authority", "x")]

MALFORMED = {
    "path-missing": [(":method", "GET"), *B],
    "path-empty": [(":method", "GET"), *B, (":path", "")],
    "path-not-origin-form": [(":method", "GET"), *B, (":path", "TAG")],
    "method-missing": [*B, (":path", "/TAG")],
    "scheme-missing": [(":method", "GET"), (":authority", "x"), (":path", "/TAG")],
    "pseudo-after-regular": [
        (":method", "GET"),
        (":scheme", "http"),
        ("x-a", "1"),
        (":authority", "x"),
        (":path", "/TAG"),
    ],
    "unknown-pseudo": [(":method", "GET"), *B, (":path", "/TAG"), (":foo", "1")],
    "response-pseudo": [(":method", "GET"), *B, (":path", "/TAG"), (":status", "200")],
    "duplicate-pseudo": [(":method", "GET"), (":method", "GET"), *B, (":path", "/TAG")],
    "uppercase-name": [(":method", "GET"), *B, (":path", "/TAG"), ("X-Upper", "1")],
    "connection": [(":method", "GET"), *B, (":path", "/TAG"), ("connection", "keep-alive")],
    "transfer-encoding": [
        (":method", "GET"),
        *B,
        (":path", "/TAG"),
        ("transfer-encoding", "chunked"),
    ],
    "keep-alive": [(":method", "GET"), *B, (":path", "/TAG"), ("keep-alive", "timeout=5")],
    "proxy-connection": [(":method", "GET"), *B, (":path", "/TAG"), ("proxy-connection", "x")],
    "upgrade": [(":method", "GET"), *B, (":path", "/TAG"), ("upgrade", "websocket")],
    "te-not-trailers": [(":method", "GET"), *B, (":path", "/TAG"), ("te", "gzip")],
    "value-with-crlf": [(":method", "GET"), *B, (":path", "/TAG"), ("x-a", "a\r\nx-b: b")],
    "value-with-nul": [(":method", "GET"), *B, (":path", "/TAG"), ("x-a", "a\x00b")],
    "name-with-space": [(":method", "GET"), *B, (":path", "/TAG"), ("x a", "1")],
    "path-with-space": [(":method", "GET"), *B, (":path", "/TAG x")],
    "content-length-twice": [
        (":method", "POST"),
        *B,
        (":path", "/TAG"),
        ("content-length", "5"),
        ("content-length", "6"),
    ],
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_malformed_request_is_reset_and_never_served(server: ServerProcess, case: str) -> None:
    """Rule (RFC 9113 8.1.1, 8.2, 8.2.1, 8.2.2, 8.3.1): a malformed request (pseudo-headers
    missing, empty, duplicated, unknown, after regular fields; uppercase or invalid field names;
    CR/LF/NUL in values; connection-specific fields such as Connection, Transfer-Encoding,
    Keep-Alive, Upgrade, TE other than "trailers") is a stream error PROTOCOL_ERROR (or a
    connection error) and never reaches the app. Broken: the app is called, or a 2xx."""
    tag = f"mal-{marker()}"
    fields = [(n, v.replace("TAG", tag)) for n, v in MALFORMED[case]]
    got = exchange(
        server, frame(HEADERS, END_HEADERS | END_STREAM, 1, block(fields)), until_close=False
    )
    refused = got.resets().get(1) == PROTOCOL_ERROR or got.goaway() == PROTOCOL_ERROR
    assert refused or got.statuses.get(1, "").startswith("4"), got.describe()
    assert not app_saw(server, tag)
    check_still_serving(server)


def test_te_trailers_is_allowed(server: ServerProcess) -> None:
    """Control (RFC 9113 8.2.2): ``te: trailers`` is the one connection-ish field allowed, so the
    refusals above are about the fields, not the test's encoding."""
    got = exchange(server, get(1, "/ok", ("te", "trailers")), until_close=False)
    assert got.statuses == {1: "200"}, got.describe()


@pytest.mark.parametrize(
    ("declared", "chunks"),
    [
        pytest.param(10, [b"hello"], id="body-shorter"),
        pytest.param(3, [b"hello"], id="body-longer"),
        pytest.param(3, [b"he", b"llo"], id="body-longer-in-two-frames"),
    ],
)
def test_content_length_mismatch_is_reset_and_app_never_gets_a_whole_body(
    server: ServerProcess, declared: int, chunks: list[bytes]
) -> None:
    """Rule (RFC 9113 8.1.1): a request whose DATA adds up to other than its content-length is
    malformed: stream error PROTOCOL_ERROR, and the app, if already called, never receives the
    body as complete (it sees ``http.disconnect``). Broken: the app gets a final
    ``http.request`` (a truncated or overlong body taken as whole), or a 2xx answer."""
    key = marker()
    fields = request_fields(f"/echo?key={key}", "POST", ("content-length", str(declared)))
    data = frame(HEADERS, END_HEADERS, 1, block(fields)) + b"".join(
        frame(DATA, END_STREAM if i == len(chunks) - 1 else 0, 1, chunk)
        for i, chunk in enumerate(chunks)
    )
    got = exchange(server, data, until_close=False)
    assert got.resets().get(1) == PROTOCOL_ERROR or got.goaway() == PROTOCOL_ERROR, got.describe()
    assert 1 not in got.statuses, got.describe()
    messages = fetch_record(server, key)
    complete = [m for m in messages if m["type"] == "http.request" and not m["more_body"]]
    assert not complete, json.dumps(messages)
    check_still_serving(server)


# -- what ferrule gets wrong today -------------------------------------------------------------


def test_silent_http2_peer_is_pinged_then_closed() -> None:
    """Rule: an HTTP/2 peer silent for --timeout-keep-alive is PINGed and, when it does not
    answer within as long again, its connection is closed (GOAWAY NO_ERROR, then close): a
    client gone without a FIN (a NAT that forgot it, a machine switched off) must not keep
    its connection slot for ever. Seen failing before the PINGs: the connection stayed open.
    (A live client that answers the PINGs is closed by the idle timeout: the next tests.)"""
    with running_server(APP, "--timeout-keep-alive", "1") as srv:
        with H2Raw(srv) as conn:
            conn.send(get(1, "/ok"))
            got = conn.read(2.5)
        assert got.statuses.get(1) == "200", got.describe()
        assert got.closed and got.goaway() == 0, got.describe()


def live_idle_client(srv: ServerProcess, path: str, seconds: float) -> list[tuple[float, object]]:
    """One GET on h2c with the ``h2`` library, which answers the server's PINGs as a live
    client does, then nothing else for ``seconds``: the events that came, each with its time
    since the request, ending in ``"closed"`` if the server closed the connection."""
    assert srv.port is not None
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    fields = [(":method", "GET"), (":scheme", "http"), (":authority", "x"), (":path", path)]
    conn.send_headers(1, fields, end_stream=True)
    events: list[tuple[float, object]] = []
    with socket.create_connection(("127.0.0.1", srv.port), TIMEOUT) as sock:
        sock.sendall(conn.data_to_send())
        start = time.monotonic()
        deadline = start + seconds
        terminated, pending = False, b""
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            try:
                data = sock.recv(65536)
            except TimeoutError:
                break
            except OSError:
                data = b""
            now = time.monotonic() - start
            if not data:
                events.append((now, "closed"))
                break
            pending += data
            # Frame by frame: after the first GOAWAY the h2 library refuses the PING of a
            # graceful shutdown, which is then answered by hand, as a client would.
            while len(pending) >= 9 and len(pending) >= 9 + int.from_bytes(pending[:3], "big"):
                size = 9 + int.from_bytes(pending[:3], "big")
                raw, pending = pending[:size], pending[size:]
                if terminated:
                    if raw[3] == PING and not raw[4] & ACK:
                        sock.sendall(frame(PING, ACK, 0, raw[9:]))
                    continue
                for event in conn.receive_data(raw):
                    events.append((now, event))
                    if isinstance(event, h2.events.DataReceived):
                        length = event.flow_controlled_length
                        conn.acknowledge_received_data(length, event.stream_id)
                    terminated |= isinstance(event, h2.events.ConnectionTerminated)
                sock.sendall(conn.data_to_send())  # PING ACKs and window updates
    return events


def when(events: list[tuple[float, object]], kind: type | str) -> float | None:
    """The time of the first event of ``kind`` (a class, or ``"closed"``), or None."""
    for at, event in events:
        if event == kind if isinstance(kind, str) else isinstance(event, kind):
            return at
    return None


def test_live_idle_http2_client_is_sent_goaway_then_closed() -> None:
    """Rule: an HTTP/2 client that answers PINGs but opens no stream for --timeout-keep-alive
    (1 s) is sent GOAWAY (NO_ERROR) and its connection closed, as an idle HTTP/1.1 connection
    is: live idle clients must not hold connection slots for ever. Seen failing
    before the idle timeout: no GOAWAY within 6 s, the PINGs answered and the connection open
    (hyper's HTTP/2 server has no idle timeout)."""
    with running_server(APP, "--timeout-keep-alive", "1") as srv:
        events = live_idle_client(srv, "/ok", 6.0)
    described = "\n".join(f"{at:.2f} {event}" for at, event in events)
    answered = when(events, h2.events.StreamEnded)
    goaway = when(events, h2.events.ConnectionTerminated)
    assert answered is not None and answered < 1, described
    assert goaway is not None and 0.9 < goaway < 3, described
    terminated = next(e for _, e in events if isinstance(e, h2.events.ConnectionTerminated))
    assert terminated.error_code == 0, described
    assert when(events, "closed") is not None, described


@pytest.mark.parametrize(
    "path",
    ["/sleep?secs=2.5", "/stream?chunks=4&every=0.8"],
    ids=["waiting-for-the-app", "streaming-the-body"],
)
def test_http2_stream_in_progress_is_not_idle(path: str) -> None:
    """Rule: a stream in progress keeps its HTTP/2 connection from the idle timeout (1 s), both
    while the app has not answered (2.5 s) and while it streams the body (four chunks 0.8 s
    apart): no GOAWAY before the stream ends, then one about 1 s after. Seen failing with the
    stream's count dropped once the response head was out: GOAWAY 2 s into the streamed body
    (harmless to that stream, which still ends, but a client must open a new connection)."""
    with running_server(APP, "--timeout-keep-alive", "1") as srv:
        events = live_idle_client(srv, path, 8.0)
    described = "\n".join(f"{at:.2f} {event}" for at, event in events)
    ended = when(events, h2.events.StreamEnded)
    goaway = when(events, h2.events.ConnectionTerminated)
    assert ended is not None and ended > 2.3, described
    assert goaway is not None and ended < goaway < ended + 3, described


def test_silent_http2_peers_cannot_exhaust_max_connections() -> None:
    """Rule: with --max-connections 2, two HTTP/2 clients that send the preface and go quiet
    (answering no PING) hold their slots only until the PING times out, about twice
    --timeout-keep-alive (1 s); then a new client is served. (Two idle HTTP/1.1 clients are
    closed after 1 s.) Seen failing before the PINGs: the new client waited for ever, a
    handful of silent h2c clients stopping the server answering."""
    with running_server(APP, "--max-connections", "2", "--timeout-keep-alive", "1") as srv:
        with H2Raw(srv), H2Raw(srv):
            time.sleep(1.5)
            assert srv.get("/ok", timeout=4.0).status_code == 200


def test_zero_window_streams_cost_bounded_memory(server: ServerProcess) -> None:
    """Rule: a client that never opens its flow-control window (SETTINGS_INITIAL_WINDOW_SIZE 0)
    costs the server a bounded amount of memory per stream, about hyper's own send buffer
    (``max_send_buf_size``, 400 KiB) at most: the app's ``send()`` must wait instead.
    Broken: each stream buffers what the app produces. Seen failing before the byte bound
    (``BODY_QUEUE_BYTES``): ten streams of 16 KiB chunks grew RSS by 40 MiB, 256 chunks each;
    200 streams per connection would make it 800 MiB."""
    streams = 10
    before = rss_bytes(server.pid)
    tag = marker()
    with H2Raw(server, setting(SETTINGS_INITIAL_WINDOW_SIZE, 0)) as conn:
        conn.send(b"".join(get(2 * i + 1, f"/stream?key={tag}-{i}") for i in range(streams)))
        fetch_record(server, f"{tag}-0-started")
        time.sleep(2.0)
        grown = rss_bytes(server.pid) - before
    check_still_serving(server)
    assert grown < streams * 2**20, f"RSS grew by {grown / 2**20:.1f} MiB"


def _bad(code: int, frames: bytes, settings: bytes = b"") -> tuple[int, bytes, bytes]:
    return code, frames, settings


@pytest.mark.xfail(
    strict=True,
    reason="the h2 crate reports these connection errors as PROTOCOL_ERROR (the connection is "
    "still closed: a conformance nit, not an abuse risk)",
)
@pytest.mark.parametrize(
    ("code", "frames", "settings"),
    [
        pytest.param(
            *_bad(FRAME_SIZE_ERROR, frame(SETTINGS, 0, 0, b"\x00\x04\x00")),
            id="SETTINGS-length-not-6n",
        ),
        pytest.param(
            *_bad(FRAME_SIZE_ERROR, frame(SETTINGS, ACK, 0, setting(4, 1))),
            id="SETTINGS-ACK-with-payload",
        ),
        pytest.param(*_bad(FRAME_SIZE_ERROR, frame(PING, 0, 0, b"1234")), id="PING-length-4"),
        pytest.param(
            *_bad(FRAME_SIZE_ERROR, frame(WINDOW_UPDATE, 0, 0, b"\x00\x00\x01")),
            id="WINDOW_UPDATE-length-3",
        ),
        pytest.param(
            *_bad(FLOW_CONTROL_ERROR, b"", setting(SETTINGS_INITIAL_WINDOW_SIZE, 2**31)),
            id="INITIAL_WINDOW_SIZE-2^31",
        ),
        pytest.param(
            *_bad(
                COMPRESSION_ERROR,
                frame(
                    HEADERS,
                    END_HEADERS | END_STREAM,
                    1,
                    hpack_int(2**20, 5, 0x20) + block(request_fields("/tsu")),
                ),
            ),
            id="HPACK-table-size-update-over-SETTINGS",
        ),
    ],
)
def test_connection_error_has_the_rfc_code(
    server: ServerProcess, code: int, frames: bytes, settings: bytes
) -> None:
    """Rule (RFC 9113 6.5, 6.7, 6.9, 6.5.2, 4.3): a SETTINGS frame whose length is not a multiple
    of 6 or an ACK with a payload, a PING of other than 8 bytes and a WINDOW_UPDATE of other than
    4 are FRAME_SIZE_ERROR; SETTINGS_INITIAL_WINDOW_SIZE above 2^31-1 is FLOW_CONTROL_ERROR; an
    HPACK dynamic table size update above the advertised size is a decoding error, hence
    COMPRESSION_ERROR. Broken: another code (the close itself is checked elsewhere)."""
    got = exchange(server, frames, settings)
    assert got.closed and got.goaway() == code, got.describe()


@pytest.mark.xfail(
    strict=True,
    reason="the h2 crate accepts field values with leading or trailing whitespace",
)
@pytest.mark.parametrize(
    "value", [pytest.param(" v", id="leading"), pytest.param("v\t", id="trailing")]
)
def test_field_value_with_surrounding_whitespace_is_malformed(
    server: ServerProcess, value: str
) -> None:
    """Rule (RFC 9113 8.2.1): "A field value MUST NOT start or end with an ASCII whitespace
    character"; a request with one is malformed (stream error PROTOCOL_ERROR) and never reaches
    the app (an HTTP/1.1 parser would have stripped it; forwarded as is it can differ between
    hops). Broken: served."""
    tag = f"ws-{marker()}"
    got = exchange(server, get(1, f"/{tag}", ("x-a", value)), until_close=False)
    assert not app_saw(server, tag), got.describe()
    assert got.resets().get(1) == PROTOCOL_ERROR or got.goaway() == PROTOCOL_ERROR, got.describe()


@pytest.mark.xfail(strict=True, reason="the h2 crate does not check that SETTINGS comes first")
def test_preface_must_be_followed_by_settings(server: ServerProcess) -> None:
    """Rule (RFC 9113 3.4): the client preface is the magic string followed by a SETTINGS frame;
    anything else is an invalid preface, a connection error PROTOCOL_ERROR. Broken: a HEADERS
    frame straight after the magic is served."""
    tag = f"nosettings-{marker()}"
    with H2Raw(server, preface=False) as conn:
        conn.send(PREFACE + get(1, f"/{tag}"))
        got = conn.read()
    assert got.goaway() == PROTOCOL_ERROR and 1 not in got.statuses, got.describe()


def test_max_concurrent_streams_is_the_setting() -> None:
    """Rule: ``--http2-max-concurrent-streams N`` is what the server announces in its SETTINGS
    frame, and the (N+1)th stream in flight is refused. Broken: hyper's default (200)
    announced whatever the option says."""
    with running_server(APP, "--http2-max-concurrent-streams", "3") as srv:
        tag = marker()
        with H2Raw(srv) as conn:
            settings = conn.read(0.5, until_close=False).settings()
            assert settings.get(SETTINGS_MAX_CONCURRENT_STREAMS) == 3, settings
            conn.send(b"".join(get(2 * i + 1, f"/sleep?secs=0.5&m-{tag}={i}") for i in range(5)))
            got = conn.read(1.5)
        assert list(got.statuses.values()).count("200") == 3, got.describe()
        assert len(app_saw(srv, f"m-{tag}")) == 3
