"""Memory an attacker can make the server hold, read from ``/proc/PID/status`` (black box, real
server on port 0, raw sockets, ``memory_app``): the two attacks known to hold memory without
bound (an HTTP/2 client that never opens its flow-control window, a WebSocket ping flood from
peers that never read), and MadeYouReset's concurrency (client-provoked stream resets whose app
calls go on running past SETTINGS_MAX_CONCURRENT_STREAMS).

Each test states its bound: far below what an unbounded queue shows, well above what a bounded
server uses. The other attack families, per protocol, are in ``test_memory_http1``
(HTTP/1.1 and TLS), ``test_memory_http2`` (h2c and TLS), ``test_memory_websocket`` (over
HTTP/1.1 and HTTP/2) and ``test_memory_http3`` (QUIC); ``memory_app`` serves them all,
``memutil`` has the RSS helpers (``RssGrowth``), ``hostileutil`` the never-reading writer
(``Flood``) and what else these modules share.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from hostileutil import (
    PING_FRAME,
    PROVOKE,
    Flood,
    check_serves_promptly,
    flood,
    gauge,
    provoke_resets,
)
from support.h2raw import (
    SETTINGS_INITIAL_WINDOW_SIZE,
    SETTINGS_MAX_CONCURRENT_STREAMS,
    H2Raw,
    get,
    setting,
)
from support.memutil import MiB, RssGrowth
from support.serverutil import ServerProcess, poll, running_server
from support.wsutil import upgraded

APP = "memory_app:app"


# -- HTTP/2: a client that never opens its window ----------------------------------------------


def test_zero_window_streams_of_16_mib_hold_under_8_mib() -> None:
    """Rule: an h2c client that announces SETTINGS_INITIAL_WINDOW_SIZE 0 (and never opens the
    connection window either) and opens as many streams as the server allows (its
    SETTINGS_MAX_CONCURRENT_STREAMS, 200), each asking for a 16 MiB response streamed in 64 KiB
    chunks, makes the server hold under 8 MiB more (read once the RSS stops moving, at most
    6 s): nothing can be sent, so the app's ``send()`` must wait after a small allowance per
    connection, not per stream. The server still answers others within a second.
    Broken: each stream buffers its own allowance (ferrule's 512 KiB body queue, and hyper's
    send buffer). Seen failing (release build of commit 01186ea): RSS grew by 127.7-127.9 MiB
    (about 650 KiB a stream) for one connection, so a hundred such connections hold 12 GiB."""
    with running_server(APP) as srv:
        growth = RssGrowth(srv.pid)
        with H2Raw(srv, setting(SETTINGS_INITIAL_WINDOW_SIZE, 0)) as conn:
            limit = conn.read(0.5, until_close=False).settings()[SETTINGS_MAX_CONCURRENT_STREAMS]
            conn.send(b"".join(get(2 * i + 1, "/big?mb=16") for i in range(limit)))
            poll(
                lambda: gauge(srv, "big")["now"] == limit,
                timeout=5,
                what=f"{limit} app calls streaming",
            )
            held = growth.held(timeout=6.0)
            check_serves_promptly(srv)
        print(f"[rss] h2c zero window, {limit} streams of 16 MiB: {held / MiB:.1f} MiB")
        assert held < 8 * MiB, f"{limit} stalled streams grew RSS by {held / MiB:.1f} MiB"


# -- WebSocket: ping floods from peers that never read -----------------------------------------

#: A batch of :data:`PING_FRAME`.
PING_BATCH = PING_FRAME * 512


class Flooder(Flood):
    """A raw WebSocket on ``/echo`` that writes :data:`PING_BATCH` over and over and never
    reads (its receive buffer made small, so the server's pongs back up at once)."""

    def __init__(self, server: ServerProcess) -> None:
        self.ws = upgraded(server, "/echo")
        self.ws.conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        super().__init__(self.ws.conn.sock, PING_BATCH)

    @property
    def pings(self) -> int:
        return self.sent // len(PING_FRAME)

    def close(self) -> None:
        self.ws.close()


def server_end_open(server_port: int, client_port: int) -> bool:
    """Whether the server's end of the TCP connection from ``client_port`` is still open (its
    socket established, or the client's FIN received but not acted on), read from the
    kernel's table (``/proc/net/tcp``): a server that closed it leaves it in FIN-WAIT or
    gone, whatever the client has not read yet."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, remote, state = line.split()[1:4]
        if int(local.split(":")[1], 16) == server_port and int(remote.split(":")[1], 16) == (
            client_port
        ):
            return state in ("01", "08")  # ESTABLISHED, CLOSE_WAIT
    return False


def test_ping_flood_from_four_peers_that_never_read_holds_under_16_mib() -> None:
    """Rule: four WebSocket clients that send 125-byte pings as fast as they can for 4 s and
    never read make the server hold under 16 MiB more at its peak: a peer that does not take
    its pongs must stop being read (or be closed), since RFC 6455 5.5.3 lets the server answer
    only the latest ping; the server still answers others within a second. Broken: every ping
    queues a pong in the server. Seen failing (release build of commit 01186ea): RSS peaked
    646-660 MiB higher, the server having read 1.1-1.5 million pings from each peer."""
    with running_server(APP) as srv:
        check_serves_promptly(srv, websocket=True)
        growth = RssGrowth(srv.pid)
        flooders = [Flooder(srv) for _ in range(4)]
        try:
            flood(flooders, 4.0)
            peak = growth.peak()
            check_serves_promptly(srv)
        finally:
            for flooder in flooders:
                flooder.close()
        pings = [f.pings for f in flooders]
        print(f"[rss] ws ping flood, 4 peers x 4 s ({pings} pings): peak {peak / MiB:.1f} MiB")
        assert peak < 16 * MiB, f"4 s of pings {pings} grew RSS by {peak / MiB:.1f} MiB"
        check_serves_promptly(srv, websocket=True)


def test_ping_flooder_that_never_reads_is_closed_at_the_ping_timeout() -> None:
    """Rule: with ``--ws-ping-interval 0.5 --ws-ping-timeout 1``, a peer that floods pings and
    never reads (so never answers the server's own ping) is closed within 3 s: its app call
    hears the disconnect and the server closes its end of the socket (the kernel's TCP table
    says so; the flooder itself may not see it, its receive buffer full of unread pongs and
    the server's FIN behind them). It must not
    be read meanwhile past the socket buffers (a few MiB), and other clients are served within
    a second throughout. Broken: the server keeps reading (and answering into memory) a peer
    past its ping timeout, or keeps it open. Seen failing: on the release build of commit
    01186ea in 2 runs of 3, the app call still running 3.5 s in, 84-97 MiB of pings read, RSS
    peak +129 MiB; on a build of the pong fix before commit 2a438c4, the app call ended but
    the server's end of the socket stayed ESTABLISHED (seen 40 s), blocked on its close frame."""
    args = ("--ws-ping-interval", "0.5", "--ws-ping-timeout", "1")
    with running_server(APP, *args) as srv:
        growth = RssGrowth(srv.pid)
        flooder = Flooder(srv)
        client_port = flooder.sock.getsockname()[1]
        try:
            # Checked before the flood: 1 s into it is the ping timeout itself, a race.
            poll(
                lambda: gauge(srv, "ws")["now"] == 1,
                timeout=2,
                what="the flooder's app call to run",
            )
            flood([flooder], 3.0)
            check_serves_promptly(srv)
            ended = gauge(srv, "ws")["now"] == 0
            released = not server_end_open(srv.port or 0, client_port)
            check_serves_promptly(srv, websocket=True)
        finally:
            flooder.close()
        peak = growth.peak()
        taken = flooder.sent / MiB
        print(
            f"[rss] ws ping flood past the ping timeout: app call ended {ended}, socket released "
            f"{released}, {taken:.1f} MiB of pings taken, peak {peak / MiB:.1f} MiB"
        )
        assert ended and released, f"still open 3 s in (app call ended: {ended})"
        assert taken < 16, f"the server read {taken:.0f} MiB of pings"
        assert peak < 16 * MiB, f"RSS peak +{peak / MiB:.1f} MiB"


# -- MadeYouReset: streams the server resets, app calls that go on -----------------------------


@pytest.mark.parametrize("form", list(PROVOKE))
def test_provoked_resets_never_run_more_app_calls_than_max_concurrent_streams(form: str) -> None:
    """Rule (MadeYouReset, CVE-2025-8671): a client that makes the server reset each stream it
    has just accepted (100 HEADERS, 50 ms, then for each a WINDOW_UPDATE overflowing the stream
    window: RST_STREAM FLOW_CONTROL_ERROR; or DATA on the stream it half-closed: STREAM_CLOSED),
    1000 streams on one connection, never has more app calls in flight at once than the
    SETTINGS_MAX_CONCURRENT_STREAMS the server announced (200), plus 10: a stream the server
    reset counts until its app call returns (or the connection is cut off: GOAWAY). The route
    holds each call 1.5 s without reading. Broken: the reset frees the stream's slot at once
    while its app call goes on. Seen failing (window-overflow, release build of commit
    01186ea): 1,000 app calls at once on one connection, 1000 RST_STREAM FLOW_CONTROL_ERROR
    and no GOAWAY (the h2 crate's limit on the resets it sends, 1024, is never reached). The
    data-on-half-closed form passes on both builds: the h2 crate answers the first such DATA
    with GOAWAY PROTOCOL_ERROR (RFC 9113 5.1 says a stream error STREAM_CLOSED; 5.4.1 allows
    the escalation), and only the first batch's 100 calls ran."""
    with running_server(APP) as srv:
        growth = RssGrowth(srv.pid)
        with H2Raw(srv) as conn:
            limit = conn.read(0.5, until_close=False).settings()[SETTINGS_MAX_CONCURRENT_STREAMS]
            srv.get("/_gauge", params={"reset": "1"})
            provoke_resets(conn, form, "/hold?secs=1.5")
            got = conn.read(1.0)
            peak = gauge(srv, "hold")["peak"]
            held = growth.now()
            check_serves_promptly(srv)
        print(
            f"[rss] MadeYouReset {form} x1000: {held / MiB:.1f} MiB, {peak} app calls at "
            f"once, {len(got.resets())} resets, goaway {got.goaway()}"
        )
        assert peak <= limit + 10, (
            f"{peak} app calls at once with SETTINGS_MAX_CONCURRENT_STREAMS {limit} "
            f"({len(got.resets())} streams reset, GOAWAY {got.goaway()})"
        )
