"""HTTP/2 abuse (RFC 9113) against the real server: h2c with prior knowledge on the plain port
(the default ``--http auto``), frames crafted by hand on raw sockets (``hostile_app``).

A hostile HTTP/2 client must be refused (RST_STREAM or GOAWAY, with the error code RFC 9113
names) or disconnected, never served a malformed request, and never cost a hang, a dead worker,
unbounded memory or service to other clients. After each attack the server must still answer
HTTP/1.1 and HTTP/2 promptly. Field blocks are encoded by hand (HPACK literals without
indexing, RFC 7541 6.2.2) so that what is on the wire is exactly what the test means; answers
are decoded with ``hpack``.

Where the h2 crate as released answered otherwise, ferrule carries a patch to it (listed in
``vendor/README.md``); each test says what the released crate did.
"""

from __future__ import annotations

import signal
import socket
import struct
import time
from collections.abc import Iterator

import pytest
from support.h2raw import (
    CONTINUATION,
    DATA,
    END_HEADERS,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    FLOW_CONTROL_ERROR,
    GOAWAY,
    HEADERS,
    PADDED,
    PING,
    PRIORITY,
    PRIORITY_FLAG,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    REFUSED_STREAM,
    RST_STREAM,
    SETTINGS,
    SETTINGS_INITIAL_WINDOW_SIZE,
    SETTINGS_MAX_CONCURRENT_STREAMS,
    STREAM_CLOSED,
    WINDOW_UPDATE,
    H2Raw,
    app_saw,
    block,
    check_still_serving,
    exchange,
    frame,
    get,
    literal,
    marker,
    request_fields,
    setting,
)
from support.memutil import rss_bytes
from support.serverutil import ServerProcess, fetch_record, is_clean_exit, running_server

APP = "hostile_app:app"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with running_server(APP) as srv:
        yield srv


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
    Broken: the server hangs on SIGINT (no exit within 20 s; about 1 s on an idle machine),
    or never exits cleanly."""
    with running_server(APP, "--timeout-graceful-shutdown", "1") as srv:
        with H2Raw(srv, setting(SETTINGS_INITIAL_WINDOW_SIZE, 0)) as conn:
            conn.send(b"".join(get(2 * i + 1, f"/stream?key=zw-{i}") for i in range(3)))
            fetch_record(srv, "zw-0-started")
            started = time.monotonic()
            srv.send_signal(signal.SIGINT)
            code = srv.wait_exit(20.0)
            assert time.monotonic() - started < 20.0, srv.describe()
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
