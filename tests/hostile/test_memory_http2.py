"""HTTP/2 attack families with memory bounds, over h2c (prior knowledge on the plain port) and
over TLS (ALPN ``h2``): CONTINUATION floods and unfinished header blocks (HTTP/2's slow head),
MadeYouReset (resets the client makes the server send), the HPACK bomb, SETTINGS and PING
floods from a client that never reads, rapid reset, and abandoned uploads. Each test checks
that the server refuses or limits the attack as RFC 9113 says (or at least survives it), that
its resident memory (``/proc/PID/status``) stays under a stated bound, and that it still
serves a normal client within a second afterwards.

Frames are written by hand with ``test_http2_attacks``'s helpers (``H2Raw``), or with the
``h2`` library where flow control must be followed (abandoned uploads). The zero-window stall
and MadeYouReset's concurrency are in ``test_memory_bounds``.
"""

from __future__ import annotations

import select
import socket
import ssl
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import httpx
import pytest
from hostileutil import PROMPT, provoke_resets
from support.certs import Certs
from support.h2raw import (
    ACK,
    CONTINUATION,
    END_HEADERS,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    HEADERS,
    PING,
    PREFACE,
    RST_STREAM,
    SETTINGS,
    SETTINGS_INITIAL_WINDOW_SIZE,
    TIMEOUT,
    H2Raw,
    block,
    frame,
    get,
    literal,
    request_fields,
    setting,
)
from support.memutil import MiB, RssGrowth, fd_count
from support.serverutil import ServerProcess, running_server

APP = "memory_app:app"


class H2RawTLS(H2Raw):
    """:class:`H2Raw` over TLS, ``h2`` agreed by ALPN."""

    def __init__(self, server: ServerProcess, ca: Path, settings: bytes = b"") -> None:
        context = ssl.create_default_context(cafile=str(ca))
        context.set_alpn_protocols(["h2"])
        raw = socket.create_connection(("127.0.0.1", server.port), TIMEOUT)
        self.sock = context.wrap_socket(raw, server_hostname="localhost")
        assert self.sock.selected_alpn_protocol() == "h2"
        self.send_error = None
        self.send(PREFACE + frame(SETTINGS, 0, 0, settings) + frame(SETTINGS, ACK, 0))


@dataclass
class Target:
    """A server and how to reach it: ``h2c`` or ``h2-tls``."""

    name: str
    server: ServerProcess
    ca: Path | None

    def connect(self, settings: bytes = b"") -> H2Raw:
        if self.ca is None:
            return H2Raw(self.server, settings)
        return H2RawTLS(self.server, self.ca, settings)

    def socket(self) -> socket.socket:
        """A connected socket (TLS with ALPN h2 for ``h2-tls``), nothing sent yet."""
        raw = socket.create_connection(("127.0.0.1", self.server.port), TIMEOUT)
        if self.ca is None:
            return raw
        context = ssl.create_default_context(cafile=str(self.ca))
        context.set_alpn_protocols(["h2"])
        return context.wrap_socket(raw, server_hostname="localhost")

    def client(self, *, http2: bool = False, timeout: float = 1.0) -> httpx.Client:
        """An httpx client for this server (the CA trusted over TLS)."""
        return httpx.Client(
            base_url=self.server.base_url.replace("127.0.0.1", "localhost"),
            timeout=timeout,
            trust_env=False,
            verify=ssl.create_default_context(cafile=str(self.ca)) if self.ca else False,
            http1=not http2,
            http2=http2,
        )

    def gauge(self, name: str, *, reset: bool = False) -> dict[str, int]:
        """The app's count of calls of one route in flight (``memory_app``'s ``/_gauge``)."""
        with self.client(timeout=2.0) as client:
            return client.get("/_gauge", params={"reset": "1"} if reset else {}).json()[name]

    def check_serves_promptly(self) -> None:
        """Alive, and a new connection gets ``/ok`` over HTTP/1.1 and HTTP/2, each within
        ``hostileutil.PROMPT`` (what is caught is a server held for as long as the attack
        lasts, not a slow answer on a loaded machine)."""
        assert self.server.returncode is None, f"the server died\n{self.server.describe()}"
        for http2, version in ((False, "HTTP/1.1"), (True, "HTTP/2")):
            with self.client(http2=http2, timeout=PROMPT) as client:
                response = client.get("/ok")
            assert (response.text, response.http_version) == ("ok", version)


@pytest.fixture(scope="module", params=["h2c", "h2-tls"])
def target(request: pytest.FixtureRequest, certs: Certs) -> Iterator[Target]:
    if request.param == "h2c":
        with running_server(APP) as srv:
            yield Target("h2c", srv, None)
    else:
        tls = ("--ssl-certfile", str(certs.server_cert), "--ssl-keyfile", str(certs.server_key))
        with running_server(APP, *tls) as srv:
            yield Target("h2-tls", srv, certs.ca)


def report(target: Target, what: str, grown: int, bound: int) -> None:
    print(f"[rss] {target.name} {what}: {grown / MiB:.1f} MiB (bound {bound / MiB:.0f} MiB)")
    assert grown < bound, f"{what} grew RSS by {grown / MiB:.1f} MiB"


# -- CONTINUATION ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload", [pytest.param(b"", id="empty"), pytest.param(b"\x00" * 4096, id="4k")]
)
def test_continuation_flood_is_cut_off_under_4_mib(target: Target, payload: bytes) -> None:
    """Rule (CVE-2024-27316 family): HEADERS without END_HEADERS then up to 10,000 CONTINUATION
    frames (empty, or 4 KiB of zeros each: 40 MiB in all), sent until the server says
    anything, gets GOAWAY and a close after a few frames, the server buffering at most about
    its header list limit (64 KiB): its RSS peaks under 4 MiB more. Broken: the block is
    buffered (tens of MiB), or no GOAWAY. Measured: 0.0-0.4 MiB."""
    growth = RssGrowth(target.server.pid)
    with target.connect() as conn:
        conn.read(0.3, until_close=False)  # the server's SETTINGS and ACK
        conn.send(frame(HEADERS, 0, 1, block(request_fields("/cont"))))
        conn.send_until_answered([frame(CONTINUATION, 0, 1, payload)] * 10_000)
        got = conn.read()
    assert got.closed and got.goaway() is not None, got.describe()
    report(target, f"CONTINUATION flood ({len(payload)} B frames)", growth.peak(), 4 * MiB)
    target.check_serves_promptly()


def test_unfinished_header_blocks_on_50_connections_hold_under_24_mib(target: Target) -> None:
    """Rule (HTTP/2's slow head): 50 connections each with a header block left unfinished at
    about 60 KiB (HEADERS and CONTINUATIONs of 16 KiB, no END_HEADERS: just under the 64 KiB
    header list limit) make the server hold under 24 MiB more while they are open (a block is
    buffered once, with the connection's own buffers: about 150-200 KiB a connection), and a
    normal client is served within a second meanwhile.
    (With no stream open such a connection counts as idle: GOAWAY after --timeout-keep-alive,
    seen at 5 s, and closed after its PING goes unanswered.) Broken: a block costs a multiple
    of its size, or the server stops serving others. Measured: h2c 7.6 MiB, TLS 10.0 MiB."""
    fields = request_fields("/slow", "GET", *((f"x-pad-{i:02}", "v" * 980) for i in range(60)))
    whole = block(fields)
    pieces = [whole[at : at + 16384] for at in range(0, len(whole), 16384)]
    unfinished = b"".join(
        frame(HEADERS if i == 0 else CONTINUATION, 0, 1, piece) for i, piece in enumerate(pieces)
    )
    growth = RssGrowth(target.server.pid)
    fds = fd_count(target.server.pid)
    conns = [target.connect() for _ in range(50)]
    try:
        for conn in conns:
            conn.send(unfinished)
        held = growth.held(timeout=2.0)
        opened = fd_count(target.server.pid) - fds
        target.check_serves_promptly()
    finally:
        for conn in conns:
            conn.sock.close()
    assert opened >= 50, f"only {opened} more descriptors: connections closed before measured"
    report(target, f"50 unfinished {len(unfinished) // 1024} KiB header blocks", held, 24 * MiB)


# -- resets ------------------------------------------------------------------------------------


def test_provoked_resets_hold_under_8_mib(target: Target) -> None:
    """Rule (MadeYouReset, CVE-2025-8671): on 2 connections, 1000 streams each that the client
    makes the server reset 50 ms after their HEADERS (a WINDOW_UPDATE overflowing the stream
    window: RST_STREAM FLOW_CONTROL_ERROR), while their app calls (0.2 s each) are still in
    flight, make the server hold under 8 MiB more at its peak: a reset stream's state and its
    app call are let go. Broken: reset streams kept (per stream state or app calls piling up).
    Measured: 0.5-2.5 MiB. (With ``/ok`` the streams are answered before the WINDOW_UPDATE
    arrives and nothing is reset; the concurrency of such calls is checked in
    ``test_memory_bounds``.)"""
    growth = RssGrowth(target.server.pid)
    for _ in range(2):
        with target.connect() as conn:
            conn.read(0.3, until_close=False)
            provoke_resets(conn, "window-overflow", "/hold?secs=0.2")
            got = conn.read(0.5, until_close=False)
        assert len(got.resets()) >= 100 or got.goaway() is not None, got.describe()[:2000]
    report(target, "2 x 1000 provoked resets", growth.peak(), 8 * MiB)
    target.check_serves_promptly()


def test_rapid_reset_is_cut_off_under_4_mib(target: Target) -> None:
    """Rule (CVE-2023-44487): 1000 HEADERS + RST_STREAM pairs in one write get GOAWAY
    ENHANCE_YOUR_CALM, fewer than 100 app calls ever run (``/hold``), and the server's RSS
    peaks under 4 MiB more. Broken: no GOAWAY, the app called for most streams, or memory
    kept per reset stream. Measured: 0.0-0.1 MiB."""
    growth = RssGrowth(target.server.pid)
    target.gauge("hold", reset=True)
    pairs = [
        get(2 * i + 1, "/hold?secs=1") + frame(RST_STREAM, 0, 2 * i + 1, struct.pack(">I", 8))
        for i in range(1000)
    ]
    with target.connect() as conn:
        conn.read(0.3, until_close=False)
        conn.send_until_answered(pairs)
        got = conn.read()
    assert got.closed and got.goaway() == ENHANCE_YOUR_CALM, got.describe()
    calls = target.gauge("hold")["peak"]
    assert calls < 100, f"{calls} app calls ran for reset streams"
    report(target, "rapid reset x1000", growth.peak(), 4 * MiB)
    target.check_serves_promptly()


# -- HPACK, SETTINGS, PING -----------------------------------------------------------------------


def test_hpack_bomb_is_refused_under_4_mib(target: Target) -> None:
    """Rule: an HPACK bomb (a 4 KB field put in the dynamic table by one request, then
    referenced 12000 times by 1-byte indexes in the next: 48 MB decoded from 12 KB) is refused
    (431, or GOAWAY) without being decoded into memory: the server's RSS peaks under 4 MiB
    more. Broken: decoded whole before the header list limit is checked (48 MiB and more).
    Measured: 0.0-0.5 MiB."""
    growth = RssGrowth(target.server.pid)
    seed = block(request_fields("/seed")) + literal(b"x-bomb", b"b" * 4000, indexed=True)
    bomb = block(request_fields("/bomb")) + bytes([0x80 | 62]) * 12000
    with target.connect() as conn:
        conn.send(
            frame(HEADERS, END_HEADERS | END_STREAM, 1, seed)
            + frame(HEADERS, END_HEADERS | END_STREAM, 3, bomb)
        )
        got = conn.read(until_close=False)
    assert got.statuses.get(3) == "431" or got.goaway() is not None, got.describe()
    report(target, "HPACK bomb of 48 MB", growth.peak(), 4 * MiB)
    target.check_serves_promptly()


@pytest.mark.parametrize(
    "flood",
    [
        pytest.param(
            frame(SETTINGS, 0, 0, setting(SETTINGS_INITIAL_WINDOW_SIZE, 65535)), id="settings"
        ),
        pytest.param(frame(PING, 0, 0, b"12345678"), id="ping"),
    ],
)
def test_control_frame_flood_never_read_holds_under_4_mib(target: Target, flood: bytes) -> None:
    """Rule: SETTINGS (or PING) frames sent for 1 s on each of 4 connections by a client that
    never reads the ACKs cost the server no more than a pending ACK or so per connection: it
    stops reading a connection once its writes back up (the client's sends stall: a send not
    taken within 0.3 s ends that connection's flood) or cuts it off (GOAWAY ENHANCE_YOUR_CALM),
    and its RSS peaks under 4 MiB more. Broken: the ACKs queue in memory (tens of MiB).
    Measured: -0.3-0.2 MiB (SETTINGS: about 200,000 frames taken per connection a second,
    the server never stalling yet holding nothing; PING: 390,000, then the sends stall)."""
    growth = RssGrowth(target.server.pid)
    conns = [target.connect() for _ in range(4)]
    deadline = time.monotonic() + 1.0
    try:
        for conn in conns:
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            conn.sock.settimeout(0.3)
        while time.monotonic() < deadline:
            live = [conn for conn in conns if conn.send_error is None]
            if not live:
                break
            for conn in live:
                conn.send(flood * 1000)
        target.check_serves_promptly()
    finally:
        for conn in conns:
            conn.sock.close()
    report(target, f"{flood[3]:#x} flood on 4 connections", growth.peak(), 4 * MiB)


# -- abandoned uploads -----------------------------------------------------------------------------


def upload_streams(target: Target, path: str, streams: int, seconds: float) -> int:
    """One connection (the ``h2`` library, which follows flow control): ``streams`` POSTs of
    ``path`` declaring 1 GiB, each sent body as fast as the server's windows allow for
    ``seconds``, never finished. Returns the body bytes the server took."""
    sock = target.socket()
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    sock.sendall(conn.data_to_send())
    fields = [*request_fields(path, "POST"), ("content-length", str(2**30))]
    ids = []
    for _ in range(streams):
        stream = conn.get_next_available_stream_id()
        conn.send_headers(stream, fields)
        ids.append(stream)
    sock.sendall(conn.data_to_send())
    chunk = b"u" * 16384
    sent = 0
    deadline = time.monotonic() + seconds
    sock.setblocking(False)
    try:
        while time.monotonic() < deadline:
            progressed = False
            for stream in ids:
                room = min(conn.local_flow_control_window(stream), len(chunk))
                if room > 0:
                    conn.send_data(stream, chunk[:room])
                    sent += room
                    progressed = True
            out = conn.data_to_send()
            if out:
                sock.setblocking(True)
                sock.settimeout(1.0)
                sock.sendall(out)
                sock.setblocking(False)
            if not progressed:
                select.select([sock], [], [], 0.05)
            try:
                data = sock.recv(65536)
            except (BlockingIOError, ssl.SSLWantReadError):
                continue
            if not data:
                break
            conn.receive_data(data)
            sock.setblocking(True)
            sock.sendall(conn.data_to_send())
            sock.setblocking(False)
    except (h2.exceptions.ProtocolError, OSError):
        pass
    finally:
        sock.close()
    return sent


@pytest.mark.parametrize(
    ("path", "bound"),
    [
        pytest.param("/upload", 16 * MiB, id="app-reads"),
        pytest.param("/hold?secs=3", 8 * MiB, id="app-never-reads"),
    ],
)
def test_abandoned_uploads_on_200_streams_hold_bounded_memory(
    target: Target, path: str, bound: int
) -> None:
    """Rule: one connection whose 200 streams each declare a 1 GiB body and send what the flow
    control windows allow for 1.5 s, then stop (and go away), makes the server's RSS peak under
    16 MiB more with an app that reads (every chunk read is let go), under 8 MiB with one that
    never reads (the server holds at most its connection window, 1 MiB, of body, since it only
    opens the windows as the app reads). Broken: the server buffers bodies past its windows
    (ferrule reading ahead for the app), or keeps the chunks the app read. Measured: app-reads
    2-6 MiB (about 40 MiB of body passed through), app-never-reads 1-3 MiB (1 MiB taken)."""
    growth = RssGrowth(target.server.pid)
    taken = upload_streams(target, path, 200, 1.5)
    peak = growth.peak()
    target.check_serves_promptly()
    report(target, f"200 abandoned uploads to {path} ({taken / MiB:.0f} MiB taken)", peak, bound)
