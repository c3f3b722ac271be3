"""HTTP/3 over QUIC (``--http3``): requests through aioquic's client classes (``h3client``)
against ``h3_app`` on 127.0.0.1, the Alt-Svc the TCP side advertises, graceful shutdown, the
limits HTTP/1.1 and HTTP/2 have, workers sharing the UDP port, and hostile clients.

The certificates are made at test time (``tests/support/certs.py``, the ``certs`` fixture).
Every client call has a timeout.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import ssl
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from aioquic.quic.connection import QuicConnection
from support.certs import Certs
from support.h3client import (
    GOAWAY,
    H3Client,
    StreamError,
    configuration,
    h3_connection,
    open_and_reset,
)
from support.serverutil import (
    WAIT_TIMEOUT,
    ServerProcess,
    ferrule_command,
    run_to_exit,
    running_server,
)

APP = "h3_app:app"
T = TypeVar("T")


def tls_args(certs: Certs) -> list[str]:
    return ["--ssl-certfile", str(certs.server_cert), "--ssl-keyfile", str(certs.server_key)]


def h3(server: ServerProcess, certs: Certs, work: Callable[[H3Client], Awaitable[T]]) -> T:
    """Runs ``work`` on one new HTTP/3 connection to ``server``; returns what it returns."""

    async def main() -> T:
        assert server.port is not None
        async with h3_connection(server.port, certs.ca) as client:
            return await work(client)

    return asyncio.run(main())


async def wait_in_app(client: H3Client, count: int = 1, timeout: float = 5.0) -> None:
    """Wait until ``count`` requests are inside the app's ``/sleep`` or ``/echo`` (its
    ``/gauge``); fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        now = json.loads(bytes((await client.request("GET", "/gauge")).body))["now"]
        if now >= count:
            return
        assert time.monotonic() < deadline, f"{now} of {count} requests in the app"
        await asyncio.sleep(0.02)


@pytest.fixture(scope="module")
def server(certs: Certs) -> Iterator[ServerProcess]:
    with running_server(APP, "--http3", *tls_args(certs)) as running:
        yield running


# -- requests ----------------------------------------------------------------------------------


def test_get_scope_over_http3(server: ServerProcess, certs: Certs) -> None:
    """Rule: a GET over HTTP/3 reaches the app with ``http_version`` "3", scheme https, the
    client's UDP address and the server's, and a ``host`` header made from ``:authority`` as
    over HTTP/2; the response carries content-length, server and date as hyper adds them over
    TCP. Passed when written (the scope was taught HTTP/3 with the server); without --http3
    the QUIC handshake times out."""
    response = h3(server, certs, lambda c: c.request("GET", "/scope?x=1"))
    assert response.status == 200, response
    scope = json.loads(bytes(response.body))
    assert scope["http_version"] == "3", scope
    assert scope["scheme"] == "https", scope
    assert scope["client"][0] == "127.0.0.1", scope
    assert scope["server"] == ["127.0.0.1", server.port], scope
    assert ["host", "127.0.0.1"] in scope["headers"], scope
    assert response.header(b"content-length") == str(len(response.body)).encode()
    assert response.header(b"server") == b"ferrule"
    assert response.header(b"date") is not None


@pytest.mark.parametrize(
    "field",
    [
        pytest.param((b"x-a", b" v"), id="value-leading-space"),
        pytest.param((b"x-a", b"v\t"), id="value-trailing-tab"),
        pytest.param((b"host", b"elsewhere"), id="host-not-authority"),
    ],
)
def test_malformed_request_resets_its_stream(
    server: ServerProcess, certs: Certs, field: tuple[bytes, bytes]
) -> None:
    """Rule (RFC 9114 4.1.2): a malformed request is a stream error H3_MESSAGE_ERROR (0x10e),
    and the connection serves on: a field value starting or ending with SP or HTAB ("invalid
    characters in field ... values"; RFC 9113 8.2.1 says the same for HTTP/2), a Host that
    contradicts :authority (4.3.1). Broken: served (seen failing for the whitespace, which the
    h3 crate passes; the Host case passed when written, the h3 crate refuses it)."""

    async def work(client: H3Client) -> tuple[str, int]:
        try:
            await client.request("GET", "/scope", headers=[field], timeout=5)
        except StreamError as exc:
            refused = str(exc)
        else:
            refused = "served"
        return refused, (await client.request("GET", "/gauge")).status

    refused, after = h3(server, certs, work)
    assert refused == "stream reset, code 0x10e", refused
    assert after == 200


def test_scope_server_is_the_address_reached_on_a_wildcard_bind(certs: Certs) -> None:
    """Rule: bound to 0.0.0.0, the scope's ``server`` over HTTP/3 is the address the client
    reached (127.0.0.1), as over TCP, not the wildcard. Failed with ["0.0.0.0", PORT] while
    it was the UDP socket's own address."""
    with running_server(APP, "--http3", "--host", "0.0.0.0", *tls_args(certs)) as wildcard:
        response = h3(wildcard, certs, lambda c: c.request("GET", "/scope"))
        assert json.loads(bytes(response.body))["server"] == ["127.0.0.1", wildcard.port]


def test_post_of_one_megabyte_comes_back_whole(server: ServerProcess, certs: Certs) -> None:
    """Rule: a 1 MB request body reaches the app whole (streamed through ``receive()`` under
    QUIC flow control) and a 1 MB response body reaches the client whole. Passed when written;
    a body pump that dropped the final frame would cut it."""
    body = os.urandom(1_000_000)
    response = h3(server, certs, lambda c: c.request("POST", "/echo", body=body, timeout=30))
    assert response.status == 200
    assert bytes(response.body) == body
    assert response.header(b"content-length") == b"1000000"


def test_one_hundred_concurrent_streams_on_one_connection(
    server: ServerProcess, certs: Certs
) -> None:
    """Rule: 100 requests opened at once on one connection run at once (the app sees most of
    them inside a 3 s sleep together) and all answer 200, well within the time 100 in a row
    would take (40 s against 300 s: the Python QUIC client is slow on a loaded machine).
    Passed when written; the stream limit (100) is what it guards."""

    async def work(client: H3Client) -> tuple[list[Any], float]:
        started = time.monotonic()
        requests = [client.request("GET", "/sleep?secs=3", timeout=60) for _ in range(100)]
        responses = await asyncio.gather(*requests)
        return responses, time.monotonic() - started

    responses, elapsed = h3(server, certs, work)
    assert [r.status for r in responses] == [200] * 100
    peak = max(json.loads(bytes(r.body))["peak"] for r in responses)
    assert peak >= 50, peak
    assert elapsed < 40, elapsed


def test_trailers_over_http3(server: ServerProcess, certs: Certs) -> None:
    """Rule: ``http.response.trailers`` reach an HTTP/3 client as a HEADERS frame after the
    body's DATA frames. Passed when written; the stream pump forwards the trailers frame of
    the shared ResponseBody."""
    response = h3(server, certs, lambda c: c.request("GET", "/trailers"))
    assert response.status == 200
    assert bytes(response.body) == b"part one, part two"
    assert response.trailers == [(b"x-checksum", b"abc123")], response.trailers


def test_pathsend_over_http3(server: ServerProcess, certs: Certs, tmp_path: Path) -> None:
    """Rule: ``http.response.pathsend`` sends the file's bytes over HTTP/3 as over TCP.
    Passed when written (the body is the shared ResponseBody)."""
    data = os.urandom(300_000)
    path = tmp_path / "file.bin"
    path.write_bytes(data)
    response = h3(server, certs, lambda c: c.request("GET", f"/pathsend?file={path}"))
    assert response.status == 200
    assert bytes(response.body) == data


# -- Alt-Svc and the setting -------------------------------------------------------------------


def test_tls_responses_advertise_http3(server: ServerProcess, certs: Certs) -> None:
    """Rule: with --http3, HTTP/1.1 and HTTP/2 responses over TLS say ``alt-svc:
    h3=":PORT"`` (the port the UDP socket shares with TCP), unless the app set its own.
    Passed when written."""
    verify = ssl.create_default_context(cafile=str(certs.ca))
    for http2 in (False, True):
        with server.client(verify=verify, http2=http2, timeout=10) as client:
            response = client.get("/scope")
            assert response.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
            assert response.headers["alt-svc"] == f'h3=":{server.port}"'
            own = client.get("/alt-svc")
            assert own.headers.get_list("alt-svc") == ['h3=":1"']


def test_no_alt_svc_without_http3(certs: Certs) -> None:
    """Rule: without --http3 nothing advertises HTTP/3. Passed when written."""
    with running_server(APP, *tls_args(certs)) as plain:
        verify = ssl.create_default_context(cafile=str(certs.ca))
        with plain.client(verify=verify, timeout=10) as client:
            assert "alt-svc" not in client.get("/scope").headers


def test_http3_without_tls_is_a_usage_error() -> None:
    """Rule: --http3 without --ssl-certfile/--ssl-keyfile is a usage error (exit 2) naming
    --http3. Fails without the check in Config: the server starts and serves TCP alone
    ("did not exit within 15s")."""
    result = run_to_exit(ferrule_command(APP, "--port", "0", "--http3"))
    assert result.returncode == 2, result.describe()
    assert "--http3" in result.stderr and "ssl_certfile" in result.stderr, result.stderr


def test_http3_on_a_unix_socket_is_a_usage_error(certs: Certs, tmp_path: Path) -> None:
    """Rule: --http3 with --uds is a usage error (exit 2) naming --http3: QUIC needs a UDP
    port. Passed when written (the check came with the setting)."""
    uds = str(tmp_path / "s.sock")
    result = run_to_exit(ferrule_command(APP, "--uds", uds, "--http3", *tls_args(certs)))
    assert result.returncode == 2, result.describe()
    assert "--http3" in result.stderr and "Unix socket" in result.stderr, result.stderr


# -- limits ------------------------------------------------------------------------------------


def test_limits_apply_over_http3(certs: Certs) -> None:
    """Rule: --limit-request-body answers 413 to a declared body over it, a head over
    --h11-max-incomplete-event-size is refused (431, by the h3 crate's field section limit)
    and the connection goes on serving, --limit-concurrency answers 503 past it. Failed at
    first: the refusals' ``connection: close`` went out over HTTP/3, where it makes the
    message malformed, and aioquic closed the connection (H3_MESSAGE_ERROR)."""
    args = ["--limit-request-body", "1000", "--limit-concurrency", "2"]
    args += ["--h11-max-incomplete-event-size", "8192"]
    with running_server(APP, "--http3", *tls_args(certs), *args) as limited:

        async def work(client: H3Client) -> list[int]:
            big = await client.request(
                "POST", "/echo", headers=[(b"content-length", b"5000")], body=b"x" * 5000
            )
            huge_head = await client.request("GET", "/scope", headers=[(b"x-big", b"a" * 20000)])
            after = await client.request("GET", "/scope")
            # Two sleeping requests fill the limit; the third is refused at once.
            sleeping = [client.request("GET", "/sleep?secs=1") for _ in range(2)]
            tasks = [asyncio.ensure_future(s) for s in sleeping]
            await asyncio.sleep(0.3)
            over = await client.request("GET", "/scope")
            await asyncio.gather(*tasks)
            return [big.status, huge_head.status, after.status, over.status]

        assert h3(limited, certs, work) == [413, 431, 200, 503]


# -- shutdown ----------------------------------------------------------------------------------


def test_shutdown_sends_goaway_and_finishes_streams(certs: Certs) -> None:
    """Rule: on SIGINT each HTTP/3 connection gets GOAWAY on the control stream; a request in
    progress still gets its whole response, and the server exits 0 once it has. Failed
    before the drain waited for the last bytes to be acknowledged: closing the connection at
    once dropped the in-progress response (the client saw CONNECTION_CLOSE instead)."""
    with running_server(APP, "--http3", *tls_args(certs)) as stopping:

        async def work(client: H3Client) -> tuple[int, list[int]]:
            await client.request("GET", "/scope")
            _, waiter = client.start_request("GET", "/sleep?secs=1.5")
            await wait_in_app(client)
            stopping.send_signal(signal.SIGINT)
            response = await asyncio.wait_for(waiter, 10)
            deadline = time.monotonic() + WAIT_TIMEOUT
            while not any(kind == GOAWAY for kind, _ in client.control_frames()):
                assert time.monotonic() < deadline, client.control_frames()
                await asyncio.sleep(0.05)
            return response.status, [kind for kind, _ in client.control_frames()]

        status, frames = h3(stopping, certs, work)
        assert status == 200
        assert GOAWAY in frames, frames
        assert stopping.wait_exit() == 0, stopping.describe()


def test_shutdown_cancels_what_outlasts_the_graceful_timeout(certs: Certs) -> None:
    """Rule: a request over HTTP/3 still running when --timeout-graceful-shutdown passes is
    cancelled (logged as over TCP) and the server exits 0 soon after, even with no TCP
    connection open. Failed before the HTTP/3 drain cancelled apps itself (only the TCP side
    did, when it had connections to drain): no "Cancel" line, and the app was cancelled only
    as the process closed its bridge, after lifespan shutdown."""
    args = ["--timeout-graceful-shutdown", "1"]
    with running_server(APP, "--http3", *tls_args(certs), *args) as stopping:

        async def work(client: H3Client) -> None:
            client.start_request("GET", "/sleep?secs=30")
            await wait_in_app(client)
            stopping.send_signal(signal.SIGINT)
            started = time.monotonic()
            while stopping.returncode is None and time.monotonic() - started < 10:
                await asyncio.sleep(0.1)

        h3(stopping, certs, work)
        assert stopping.wait_exit() == 0, stopping.describe()
        assert "Cancel 1 running task(s)" in stopping.stderr, stopping.describe()


# -- workers -----------------------------------------------------------------------------------


def test_workers_share_the_udp_port(certs: Certs) -> None:
    """Rule: with --workers 2 each worker binds the UDP port (SO_REUSEPORT) and every QUIC
    connection, from many source ports, is served whole by one worker. Fails without
    SO_REUSEPORT: the second worker cannot bind, and the clients' handshakes time out. Was
    flaky (idle timeouts) while it began before both workers had bound: the kernel's hash
    then moved connections made with one worker to the other (docs/http3.md says so)."""
    with running_server(APP, "--http3", "--workers", "2", *tls_args(certs)) as workers:
        deadline = time.monotonic() + 20
        while workers.stderr.count("serving HTTP/3 on udp") < 2:
            assert time.monotonic() < deadline, workers.describe()
            time.sleep(0.05)

        async def one() -> int:
            assert workers.port is not None
            async with h3_connection(workers.port, certs.ca) as client:
                statuses = [(await client.request("GET", "/scope")).status for _ in range(3)]
                return sum(status == 200 for status in statuses)

        async def many() -> list[int]:
            return await asyncio.gather(*[one() for _ in range(12)])

        assert asyncio.run(many()) == [3] * 12


# -- hostile clients ---------------------------------------------------------------------------


def initial_packets(port: int, ca: Path, count: int) -> list[bytes]:
    """``count`` first flights of distinct QUIC clients (each an Initial with a fresh
    connection id), which no client will follow up."""
    packets = []
    for _ in range(count):
        conn = QuicConnection(configuration=configuration(ca))
        conn.connect(("127.0.0.1", port), now=time.time())
        packets.extend(data for data, _ in conn.datagrams_to_send(now=time.time()))
    return packets


def test_initial_flood_leaves_the_server_serving(server: ServerProcess, certs: Certs) -> None:
    """Rule: 200 Initial packets from 50 source ports that never complete a handshake leave
    the server answering a real client within a few seconds (past 32 handshakes in progress
    the server asks unproven addresses for a Retry instead of keeping state). Passed when
    written; the bound is what it guards."""
    assert server.port is not None
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(50)]
    try:
        for index, packet in enumerate(initial_packets(server.port, certs.ca, 200)):
            sockets[index % 50].sendto(packet, ("127.0.0.1", server.port))
        started = time.monotonic()
        response = h3(server, certs, lambda c: c.request("GET", "/scope"))
        assert response.status == 200
        assert time.monotonic() - started < 5
    finally:
        for sock in sockets:
            sock.close()


def test_streams_opened_and_reset_at_once(server: ServerProcess, certs: Certs) -> None:
    """Rule: a client that opens 3 rounds of about 100 request streams (all its credit) with
    bodies to come and resets each at once gets the credit back (MAX_STREAMS, which quinn
    sends once an eighth of the limit is free) and leaves the server serving that connection
    and others, with no request left inside the app. Passed when written (once the test
    waited for credit, which aioquic does not: without the wait the server closes the
    connection with STREAM_LIMIT_ERROR, as it should)."""

    async def work(client: H3Client) -> int:
        await open_and_reset(client, 3, "/echo")
        return (await client.request("GET", "/scope")).status

    assert h3(server, certs, work) == 200

    async def gauge(client: H3Client) -> int:
        deadline = time.monotonic() + WAIT_TIMEOUT
        while True:
            now = json.loads(bytes((await client.request("GET", "/gauge")).body))["now"]
            if now == 0 or time.monotonic() > deadline:
                return now
            await asyncio.sleep(0.1)

    assert h3(server, certs, gauge) == 0


def test_oversized_header_block_leaves_the_server_serving(
    server: ServerProcess, certs: Certs
) -> None:
    """Rule: a request whose header block is 1 MB (sixteen times the default head limit) is
    answered 431 or has its stream reset, never reaches the app, and the same connection and a
    new one are served at once after it. Passed when written."""

    async def work(client: H3Client) -> tuple[str, int]:
        headers = [(f"x-big-{i}".encode(), b"b" * 60_000) for i in range(17)]
        try:
            big = await client.request("GET", "/scope", headers=headers)
            outcome = str(big.status)
        except StreamError as exc:
            outcome = f"reset: {exc}"
        return outcome, (await client.request("GET", "/scope")).status

    outcome, after = h3(server, certs, work)
    assert outcome == "431" or outcome.startswith("reset"), outcome
    assert after == 200
    assert h3(server, certs, lambda c: c.request("GET", "/scope")).status == 200


def test_a_reset_during_the_response_does_not_stop_the_server(
    server: ServerProcess, certs: Certs
) -> None:
    """Rule: a client that resets a stream while a large response is being sent (QUIC flow
    control holding it back) gets nothing more on it, and the connection serves the next
    request. Passed when written."""

    async def work(client: H3Client) -> int:
        stream_id, waiter = client.start_request("POST", "/echo", body=b"y" * 3_000_000)
        await asyncio.sleep(0.2)
        client.reset_stream(stream_id)
        waiter.cancel()
        return (await client.request("GET", "/scope")).status

    assert h3(server, certs, work) == 200
