"""HTTP/3 (QUIC, ``--http3``) attack families with memory bounds: abandoned QUIC connections
(handshakes completed, then silence), Initial floods (handshakes never completed), abandoned
uploads (bodies declared, sent as far as flow control allows, never finished), streams opened
and reset at once, unfinished header frames (HTTP/3's slow head) and a QPACK bomb made of
static-table references. Each test checks that the server limits the attack (the idle
timeout, flow control, the field section limit) or at least survives it, that its resident
memory (``/proc/PID/status``) stays under a stated bound, and that a new HTTP/3 client is
served promptly afterwards (``memory_app``, aioquic's QUIC classes, ``h3client``).

HTTP/3 has no CONTINUATION, SETTINGS or PING floods of HTTP/2's kind (a second SETTINGS is a
connection error, and QUIC's PING is answered by an ACK the server would send anyway), and
ferrule serves no WebSockets over it (RFC 9220).
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import pytest
from aioquic.asyncio.client import connect
from aioquic.buffer import encode_uint_var
from aioquic.h3.connection import FrameType, H3Connection, encode_frame
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import HandshakeCompleted
from support.certs import Certs
from support.h3client import (
    H3Client,
    Response,
    StreamError,
    configuration,
    h3_connection,
    open_and_reset,
)
from support.memutil import MiB, RssGrowth
from support.serverutil import ServerProcess, running_server

APP = "memory_app:app"
T = TypeVar("T")


def tls_args(certs: Certs) -> tuple[str, ...]:
    """HTTP/3 on, and at most 0.5 s of graceful shutdown for what a test leaves in flight."""
    return (
        "--timeout-graceful-shutdown",
        "0.5",
        "--http3",
        "--ssl-certfile",
        str(certs.server_cert),
        "--ssl-keyfile",
        str(certs.server_key),
    )


@pytest.fixture
def server(certs: Certs) -> Iterator[ServerProcess]:
    """A server for each test: app calls a test leaves running (held uploads) would move the
    next one's baseline."""
    with running_server(APP, *tls_args(certs)) as srv:
        yield srv


def h3(
    server: ServerProcess,
    certs: Certs,
    work: Callable[[H3Client], Awaitable[T]],
    *,
    datagram_size: int | None = None,
) -> T:
    """Runs ``work`` on one new HTTP/3 connection; returns what it returns. ``datagram_size``
    makes the client send larger datagrams than QUIC's 1200 bytes (fine on loopback): aioquic
    moves about 10 times as much data a second with 16000."""

    async def main() -> T:
        assert server.port is not None
        if datagram_size is None:
            async with h3_connection(server.port, certs.ca, timeout=5.0) as client:
                return await work(client)
        config = configuration(certs.ca)
        config.max_datagram_size = datagram_size
        async with asyncio.timeout(15.0):
            async with connect(
                "127.0.0.1", server.port, configuration=config, create_protocol=H3Client
            ) as client:
                assert isinstance(client, H3Client)
                return await work(client)

    return asyncio.run(main())


#: How long a new HTTP/3 client may wait for ``/ok``, handshake included: what is caught is a
#: server held by the attack; a bound of a second (aioquic's handshake is Python) failed once
#: with the whole suite run twice at once on two cores.
PROMPT = 5.0


def check_serves_promptly(server: ServerProcess, certs: Certs) -> None:
    """Alive, and a new HTTP/3 connection gets ``/ok`` within :data:`PROMPT`."""
    assert server.returncode is None, f"the server died\n{server.describe()}"
    started = time.monotonic()
    response = h3(server, certs, lambda client: client.request("GET", "/ok", timeout=PROMPT))
    waited = time.monotonic() - started
    assert (response.status, bytes(response.body)) == (200, b"ok")
    assert waited < PROMPT, f"a new HTTP/3 client waited {waited:.2f} s"


def report(what: str, grown: int, bound: int) -> None:
    print(f"[rss] h3 {what}: {grown / MiB:.1f} MiB (bound {bound / MiB:.0f} MiB)")
    assert grown < bound, f"{what}: RSS grew by {grown / MiB:.1f} MiB"


# -- QUIC connections by hand ------------------------------------------------------------------


class RawQuic:
    """One QUIC connection driven by hand over its own UDP socket (no event loop), so that a
    test can stop answering at any point: abandoning it sends nothing (no CONNECTION_CLOSE)."""

    def __init__(self, port: int, certs: Certs) -> None:
        self.addr = ("127.0.0.1", port)
        self.quic = QuicConnection(configuration=configuration(certs.ca, max_idle=60.0))
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.settimeout(0.05)
        self.quic.connect(self.addr, now=time.time())
        self.http: H3Connection | None = None

    def transmit(self) -> None:
        for data, _ in self.quic.datagrams_to_send(now=time.time()):
            self.sock.sendto(data, self.addr)

    def exchange(self, until: Callable[[], bool], timeout: float = 15.0) -> None:
        """Send and receive until ``until()`` (checked between datagrams) or ``timeout``."""
        deadline = time.monotonic() + timeout
        while not until():
            assert time.monotonic() < deadline, "the QUIC exchange timed out"
            self.transmit()
            try:
                data, _ = self.sock.recvfrom(65536)
            except TimeoutError:
                timer = self.quic.get_timer()
                if timer is not None and timer <= time.time():
                    self.quic.handle_timer(now=time.time())
                continue
            self.quic.receive_datagram(data, self.addr, now=time.time())
        self.transmit()

    def handshake(self) -> None:
        done = []

        def completed() -> bool:
            while (event := self.quic.next_event()) is not None:
                done.append(isinstance(event, HandshakeCompleted))
            return any(done)

        self.exchange(completed)
        self.http = H3Connection(self.quic)
        self.transmit()

    def abandon(self) -> None:
        self.sock.close()


def open_abandoned(port: int, certs: Certs, count: int, path: str | None) -> list[RawQuic]:
    """``count`` QUIC connections with the handshake done (and a GET of ``path`` each, if
    given), then left: their sockets closed without a word."""
    conns = []
    for _ in range(count):
        conn = RawQuic(port, certs)
        conn.handshake()
        if path is not None:
            assert conn.http is not None
            stream = conn.quic.get_next_available_stream_id()
            head = [
                (b":method", b"GET"),
                (b":scheme", b"https"),
                (b":authority", b"127.0.0.1"),
                (b":path", path.encode()),
            ]
            conn.http.send_headers(stream, head, end_stream=True)
            conn.transmit()
        conns.append(conn)
    for conn in conns:
        conn.abandon()
    return conns


# -- abandoned connections ---------------------------------------------------------------------


def test_abandoned_quic_connections_hold_under_32_mib(server: ServerProcess, certs: Certs) -> None:
    """Rule: 100 QUIC connections that complete the handshake, start a request each (an app
    call held 5 s) and then go silent without a CONNECTION_CLOSE make the server hold under
    32 MiB more until its idle timeout (--timeout-keep-alive) drops them, and a new client is
    served promptly meanwhile. Broken: a connection's state far above its buffers
    (quinn's, h3's, the app call's), or the server stuck on the dead peers. Measured:
    8.0-8.2 MiB (about 80 KiB a connection)."""
    assert server.port is not None
    growth = RssGrowth(server.pid)
    open_abandoned(server.port, certs, 100, "/hold?secs=5")
    held = growth.held(timeout=2.0)
    check_serves_promptly(server, certs)
    report("100 abandoned QUIC connections", held, 32 * MiB)


def test_abandoned_quic_connections_are_dropped_at_the_idle_timeout(certs: Certs) -> None:
    """Rule: with ``--timeout-keep-alive 1 --max-connections 20``, 20 QUIC connections left
    silent after their handshake fill the server's QUIC slots only until the idle timeout:
    a new client is served again (within 3 s on an idle machine; the bound is 20 s, for a
    loaded one). Broken: dead peers keep their slots (and state) for ever, and
    --max-connections of them lock QUIC clients out."""
    args = (*tls_args(certs), "--timeout-keep-alive", "1", "--max-connections", "20")
    with running_server(APP, *args) as srv:
        assert srv.port is not None
        open_abandoned(srv.port, certs, 20, None)
        started = time.monotonic()
        deadline = started + 20.0
        while True:
            try:
                response = h3(srv, certs, lambda c: c.request("GET", "/ok", timeout=PROMPT))
                if response.status == 200:
                    break
            except (StreamError, ConnectionError, TimeoutError):
                pass
            assert time.monotonic() < deadline, "no new QUIC client served within 20 s"
            time.sleep(0.2)
        print(f"[h3] served again {time.monotonic() - started:.1f} s after 20 abandoned")


def test_initial_flood_holds_under_8_mib(server: ServerProcess, certs: Certs) -> None:
    """Rule: 500 Initial packets from 50 source ports, each a new client that never completes
    its handshake, make the server hold under 8 MiB more (past 32 handshakes in progress it
    answers with a stateless Retry), and a real client is served promptly. Broken: a
    connection's state kept per Initial. Measured: 2.1-2.4 MiB."""
    assert server.port is not None
    growth = RssGrowth(server.pid)
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(50)]
    try:
        for index in range(500):
            conn = QuicConnection(configuration=configuration(certs.ca))
            conn.connect(("127.0.0.1", server.port), now=time.time())
            for data, _ in conn.datagrams_to_send(now=time.time()):
                sockets[index % 50].sendto(data, ("127.0.0.1", server.port))
        held = growth.held(timeout=2.0)
        check_serves_promptly(server, certs)
    finally:
        for sock in sockets:
            sock.close()
    report("500 Initials never followed up", held, 8 * MiB)


# -- uploads and streams -------------------------------------------------------------------------


def upload_streams(client: H3Client, path: str, streams: int, each: int) -> list[int]:
    """``streams`` POSTs of ``path`` declaring 1 GiB, each given ``each`` bytes of body to send
    (aioquic sends them as the server's flow control allows), never finished."""
    head = [
        (b":method", b"POST"),
        (b":scheme", b"https"),
        (b":authority", b"127.0.0.1"),
        (b":path", path.encode()),
        (b"content-length", str(2**30).encode()),
    ]
    body = b"u" * each
    ids = []
    for _ in range(streams):
        stream = client._quic.get_next_available_stream_id()
        client.http.send_headers(stream, head)
        client.http.send_data(stream, body, end_stream=False)
        ids.append(stream)
    client.transmit()
    return ids


@pytest.mark.parametrize(
    "path",
    [pytest.param("/upload", id="app-reads"), pytest.param("/hold?secs=8", id="app-never-reads")],
)
def test_abandoned_uploads_on_100_streams_hold_under_32_mib(
    server: ServerProcess, certs: Certs, path: str
) -> None:
    """Rule: one connection whose 100 request streams (its whole allowance) each declare a
    1 GiB body and send what flow control lets them (1.3 MB each at most) until 100 MiB are
    sent, nothing moves for 0.5 s, or 4 s have passed, then stop, makes the server's RSS peak
    under 32 MiB more: with an app that reads, what it read is let go; with one that never
    reads, the server holds only what its flow-control windows let in, which must be bounded
    per connection (HTTP/2: 1 MiB), not only per stream. Broken: every stream's window filled
    and kept. Seen failing (app-never-reads, on this build and on the release build of commit
    01186ea): RSS peaked 113-126 MiB higher once the client had sent 106-119 MiB: the server
    announces initial_max_data 2^62-1 (no connection window) and 1.25 MB a stream (quinn's
    defaults), so one connection parks 125 MB, and --max-connections of them as many times
    that. Measured: app-reads 1.3-4.9 MiB."""
    growth = RssGrowth(server.pid)

    async def work(client: H3Client) -> float:
        ids = upload_streams(client, path, 100, 1_300_000)
        offsets = dict.fromkeys(ids, 0)
        sent, moved, deadline = 0, time.monotonic(), time.monotonic() + 4.0
        while sent < 100 * MiB and time.monotonic() < min(deadline, moved + 0.5):
            await asyncio.sleep(0.1)
            for stream_id in ids:  # aioquic forgets a stream the server stopped
                if (stream := client._quic._streams.get(stream_id)) is not None:
                    offsets[stream_id] = stream.sender._buffer_start
            now = sum(offsets.values())
            sent, moved = now, (time.monotonic() if now > sent else moved)
        return sent / MiB

    sent = h3(server, certs, work, datagram_size=16000)
    peak = growth.peak()
    check_serves_promptly(server, certs)
    report(f"100 abandoned uploads to {path} ({sent:.0f} MiB sent)", peak, 32 * MiB)


def test_streams_opened_and_reset_at_once_hold_under_8_mib(
    server: ServerProcess, certs: Certs
) -> None:
    """Rule: a client that opens 5 rounds of about 90 request streams with bodies to come and
    resets each at once (waiting for MAX_STREAMS credit between rounds) makes the server hold
    under 8 MiB more at its peak, and the connection, and a new one, are served after.
    Broken: state kept per reset stream. Measured: 0.3-2.3 MiB."""
    growth = RssGrowth(server.pid)

    async def work(client: H3Client) -> int:
        await open_and_reset(client, 5, "/upload")
        return (await client.request("GET", "/ok")).status

    assert h3(server, certs, work) == 200
    report("5 x 90 streams reset at once", growth.peak(), 8 * MiB)
    check_serves_promptly(server, certs)


def field_section(*lines: bytes) -> bytes:
    """A QPACK field section without the dynamic table (RFC 9204 4.5): the prefix (Required
    Insert Count 0, Base 0), GET https://127.0.0.1/ok from static entries, then ``lines``."""
    authority = bytes([0x50, 9]) + b"127.0.0.1"  # literal with name reference, static 0
    path = bytes([0x51, 3]) + b"/ok"  # static 1 is :path /
    return bytes([0, 0, 0xC0 | 17, 0xC0 | 23]) + authority + path + b"".join(lines)


#: Static entry 85: content-security-policy, 76 bytes of name and value (108 as the field
#: section size counts them, RFC 9204 3.2.1) from a 2-byte reference.
CSP_REFERENCE = bytes([0xFF, 85 - 63])


def send_raw_headers(client: H3Client, payload: bytes, *, length: int | None = None) -> int:
    """A request stream carrying one HEADERS frame of ``payload`` (QPACK, made by hand), or
    only its first bytes when ``length`` (the declared length) is larger: a head never
    finished."""
    stream = client._quic.get_next_available_stream_id()
    if length is None:
        data = encode_frame(FrameType.HEADERS, payload)
    else:
        data = encode_uint_var(FrameType.HEADERS) + encode_uint_var(length) + payload
    client._quic.send_stream_data(stream, data, end_stream=length is None)
    client.transmit()
    return stream


def test_qpack_static_bomb_is_refused_under_8_mib(server: ServerProcess, certs: Certs) -> None:
    """Rule: a HEADERS frame of 1 MB made of 2-byte references to QPACK's longest static
    entry (500,000 of them: 38 MB of fields, 54 MB as RFC 9204 counts them) is refused
    (431, or the stream or connection closed) without being decoded into memory past the
    field section limit (64 KiB): the server's RSS peaks under 8 MiB more, and a new
    connection is served. Broken: the section decoded whole before its size is checked.
    Measured: 2.0-2.9 MiB."""
    growth = RssGrowth(server.pid)
    section = field_section(CSP_REFERENCE * 500_000)

    async def work(client: H3Client) -> str:
        stream = send_raw_headers(client, section)
        waiter: asyncio.Future[Response] = asyncio.get_running_loop().create_future()
        client._responses[stream] = (Response(), waiter)
        try:
            response = await asyncio.wait_for(waiter, 5.0)
        except (StreamError, TimeoutError) as exc:
            return f"refused: {exc!r}"
        return str(response.status)

    outcome = h3(server, certs, work)
    assert outcome == "431" or outcome.startswith("refused"), outcome
    report("QPACK bomb (1 MB of static references)", growth.peak(), 8 * MiB)
    check_serves_promptly(server, certs)


def test_unfinished_header_frames_on_100_streams_hold_under_16_mib(
    server: ServerProcess, certs: Certs
) -> None:
    """Rule (HTTP/3's slow head): 100 request streams each carrying the first 30 KB of a
    HEADERS frame that declares 60 KB (under the 64 KiB field section limit), never finished,
    make the server hold under 16 MiB more while they are open, and a new client is served
    promptly. Broken: a partial frame costs a multiple of itself. Measured: 4.7-4.9 MiB."""
    growth = RssGrowth(server.pid)
    section = field_section(CSP_REFERENCE * 15_000)

    async def work(client: H3Client) -> int:
        for _ in range(100):
            send_raw_headers(client, section[:30_000], length=60_000)
        await asyncio.sleep(0.5)
        held = await asyncio.to_thread(growth.held, 2.0)
        await asyncio.to_thread(check_serves_promptly, server, certs)
        return held

    held = h3(server, certs, work)
    report("100 unfinished 60 KB header frames", held, 16 * MiB)
