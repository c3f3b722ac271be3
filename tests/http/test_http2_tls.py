"""HTTP/2 (h2c with prior knowledge, h2 over TLS by ALPN), ``--http auto|1|2`` and TLS
(``--ssl-certfile``, ``--ssl-keyfile``, ``--ssl-keyfile-password``, ``--ssl-ca-certs``,
``--ssl-cert-reqs``), against ``http2_app``.

The certificates are made at test time (``tests/support/certs.py``, the ``certs`` fixture).
httpx speaks HTTP/2 through ``h2``: ``http1=False, http2=True`` on ``http://`` is h2c with prior
knowledge (the client starts with the connection preface); on ``https://`` it offers
``h2, http/1.1`` by ALPN. Every client call has a timeout, and every client talks to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.certs import KEY_PASSWORD, Certs
from support.h1raw import request_bytes
from support.serverutil import ServerProcess, ferrule_command, run_to_exit, running_server

APP = "http2_app:app"
#: Bound for one exchange in this module (a 1 MB body over h2 included).
TIMEOUT = 10.0
#: The HTTP/2 connection preface a prior-knowledge client starts with (RFC 9113, 3.4).
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
#: An empty SETTINGS frame: length 0, type 0x4, flags 0, stream 0.
EMPTY_SETTINGS = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def tls_args(certs: Certs) -> list[str]:
    return ["--ssl-certfile", str(certs.server_cert), "--ssl-keyfile", str(certs.server_key)]


def client_context(certs: Certs, *, cert: tuple[Path, Path] | None = None) -> ssl.SSLContext:
    """A client context trusting the test CA, with a client certificate when given (httpx
    sets the ALPN list on it for each connection)."""
    context = ssl.create_default_context(cafile=str(certs.ca))
    if cert is not None:
        context.load_cert_chain(str(cert[0]), str(cert[1]))
    return context


# -- clients -----------------------------------------------------------------------------------


def h2c_client(server: ServerProcess, **options: Any) -> httpx.Client:
    """HTTP/2 with prior knowledge on plain TCP (no HTTP/1.1 upgrade, no ALPN)."""
    return server.client(timeout=TIMEOUT, http1=False, http2=True, **options)


def https_client(
    server: ServerProcess, certs: Certs, *, http2: bool = False, **options: Any
) -> httpx.Client:
    """A TLS client for ``https://127.0.0.1:PORT``; ``http2`` adds h2 to the ALPN offer."""
    assert server.scheme == "https", server.describe()
    options.setdefault("verify", client_context(certs))
    return server.client(timeout=TIMEOUT, http2=http2, **options)


def request_fails(client: httpx.Client, path: str = "/scope") -> str:
    """Make one request that must not succeed; return a description of how it failed (an
    httpx transport/protocol error, or a non-2xx answer). Fails the test on a 2xx answer."""
    try:
        with client:
            response = client.get(path)
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"
    assert response.status_code >= 300, (
        f"expected a refusal, got {response.status_code} over {response.http_version}: "
        f"{response.text[:300]}"
    )
    return f"status {response.status_code}"


# -- h2c (plain TCP) ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    """``http2_app`` with the default ``--http auto``, plain TCP."""
    with running_server(APP) as srv:
        yield srv


def test_h2c_prior_knowledge(server: ServerProcess) -> None:
    """Rule: with the default --http auto, a client that opens with the HTTP/2 preface (h2c,
    prior knowledge) is served over HTTP/2: 200, and the app's scope has http_version "2" and
    scheme "http". Broken: the preface is parsed as an HTTP/1.1 request line ("PRI * HTTP/2.0":
    400/505 or a closed connection, a RemoteProtocolError here), or the scope still says
    "1.1"."""
    with h2c_client(server) as client:
        response = client.get("/scope")
    assert response.status_code == 200, response.text
    assert response.http_version == "HTTP/2"
    scope = response.json()
    assert scope["http_version"] == "2", scope
    assert scope["scheme"] == "http", scope


def test_http1_still_served_with_http_auto(server: ServerProcess) -> None:
    """Rule: --http auto keeps serving HTTP/1.1 on the same port (http_version "1.1"), also
    from a client that would accept HTTP/2 but does not start with the preface. Broken: an
    HTTP/1.1 request is refused or answered with an HTTP/2 frame, or the scope says "2"."""
    with server.client(timeout=TIMEOUT, http2=True) as client:
        response = client.get("/scope")
    assert response.status_code == 200, response.text
    assert response.http_version == "HTTP/1.1"
    assert response.json()["http_version"] == "1.1"


def test_h2_concurrent_streams_share_one_connection(server: ServerProcess) -> None:
    """Rule: HTTP/2 multiplexes: 50 requests in flight at once on one h2c connection to a route
    that sleeps 2 s all get 200, run concurrently (the app saw at least 40 inside the route at
    once; the batch takes far less than 50 x 2 s: 20 s at most, for a loaded machine) and came
    over one TCP connection (the same client port in every scope). Broken: streams are served
    one after another (about 100 s; the app's peak in-flight count stays 1), the server
    refuses streams beyond a small limit, or the client had to open more connections (several
    client ports). The sleep is 2 s, not less, so that a loaded machine gets all 50 in before
    the first ones end."""
    count, secs = 50, 2.0

    async def run() -> tuple[list[httpx.Response], float]:
        async with httpx.AsyncClient(
            base_url=server.base_url,
            http1=False,
            http2=True,
            timeout=TIMEOUT,
            trust_env=False,
        ) as client:
            # One request first, so the connection exists before the burst.
            assert (await client.get("/scope")).status_code == 200
            started = time.monotonic()
            requests = [
                client.get("/sleep", params={"secs": str(secs), "id": str(i)}) for i in range(count)
            ]
            responses = await asyncio.wait_for(asyncio.gather(*requests), 60.0)
            return responses, time.monotonic() - started

    responses, elapsed = asyncio.run(run())
    assert [r.status_code for r in responses] == [200] * count, [r.text for r in responses]
    assert {r.http_version for r in responses} == {"HTTP/2"}
    bodies = [r.json() for r in responses]
    assert sorted(int(b["id"]) for b in bodies) == list(range(count))
    assert {b["http_version"] for b in bodies} == {"2"}
    ports = {b["client"][1] for b in bodies}
    assert len(ports) == 1, f"the requests came over {len(ports)} connections: {sorted(ports)}"
    peak = max(b["peak"] for b in bodies)
    assert peak >= 40, f"at most {peak} requests were in the app at once"
    assert elapsed < 20.0, f"{count} requests of {secs}s took {elapsed:.2f}s on one connection"


def test_h2_large_request_body_echoed(server: ServerProcess) -> None:
    """Rule: a 1 MB POST body over HTTP/2 (many DATA frames, beyond the 64 KB initial flow
    control window, so the server must send WINDOW_UPDATEs) reaches the app whole and the 1 MB
    echo comes back whole. Broken: the upload stalls at 64 KB (timeout), the body is truncated
    or reordered, or the connection is reset."""
    body = os.urandom(1024 * 1024)
    with h2c_client(server) as client:
        response = client.post("/echo", content=body)
    assert response.status_code == 200, response.text[:300]
    assert response.http_version == "HTTP/2"
    assert len(response.content) == len(body)
    assert response.content == body, "the echoed body differs from the one sent"


def test_h2_streamed_response_arrives_whole_and_incrementally(server: ServerProcess) -> None:
    """Rule: a response sent in several http.response.body messages (no Content-Length) arrives
    over HTTP/2 whole, in order, ended by END_STREAM after the final empty message; the first
    chunk arrives while the app is still sleeping before the next ones. Broken: missing or
    reordered chunks, a stream that never ends (timeout), or the whole response buffered until
    the app finished (first byte only at the end)."""
    chunks, size, delay = 5, 20000, 0.25
    expected = b"".join(bytes([i]) * size for i in range(chunks))
    params = {"chunks": str(chunks), "size": str(size), "delay": str(delay)}
    received = bytearray()
    first_at: float | None = None
    with h2c_client(server) as client:
        started = time.monotonic()
        with client.stream("GET", "/stream", params=params) as response:
            assert response.status_code == 200
            assert response.http_version == "HTTP/2"
            for data in response.iter_bytes():
                if data and first_at is None:
                    first_at = time.monotonic() - started
                received += data
        total = time.monotonic() - started
    assert bytes(received) == expected, f"received {len(received)} of {len(expected)} bytes"
    assert first_at is not None
    assert first_at < total - 2 * delay, (
        f"first bytes after {first_at:.2f}s, the response ended after {total:.2f}s"
    )


# -- --http 1 / --http 2 -----------------------------------------------------------------------


@pytest.mark.parametrize("http", ["1", "h11", "httptools"])
def test_http_1_refuses_h2c_and_serves_http11(http: str) -> None:
    """Rule: with --http 1 the server speaks HTTP/1.1 only: a client opening with the HTTP/2
    preface gets no HTTP/2 answer (an error or a closed connection, no 200), and on a raw socket
    the preface is answered by a close within 5 s (not a hang); HTTP/1.1 requests are served
    with http_version "1.1". uvicorn's implementation names, h11 and httptools, mean the same.
    Broken: the option is refused at the command line (no running line), h2c is served anyway
    (200 over HTTP/2), or the preface leaves the connection hanging. Seen failing: h11 and
    httptools before they were accepted (exit 2, "invalid choice"); with them mapped to auto
    instead of 1 (the h2c client got its 200 over HTTP/2)."""
    with running_server(APP, "--http", http) as srv:
        how = request_fails(h2c_client(srv))
        with srv.raw(timeout=5.0) as conn:
            conn.send(H2_PREFACE + EMPTY_SETTINGS)
            closed = conn.wait_closed(5.0)
            received = conn.received
        assert closed, f"the connection stayed open after an h2c preface: {received[:200]!r}"
        assert b" 200 " not in received.split(b"\r\n", 1)[0], received[:200]
        with srv.client(timeout=TIMEOUT) as client:
            response = client.get("/scope")
        assert srv.returncode is None, srv.describe()
    assert response.status_code == 200, how
    assert response.json()["http_version"] == "1.1"


def test_http_2_refuses_http11_and_serves_h2c() -> None:
    """Rule: with --http 2 the server speaks HTTP/2 only: an HTTP/1.1 request on a raw socket is
    not answered with a 200 and the connection is closed within 5 s (an HTTP/2 GOAWAY before
    the close is fine); an h2c prior-knowledge client is served over HTTP/2 (scope "2").
    Broken: the option is refused, HTTP/1.1 is still served, the connection hangs on the bad
    preface, or h2c does not work in this mode."""
    with running_server(APP, "--http", "2") as srv:
        with srv.raw(timeout=5.0) as conn:
            conn.send(request_bytes("GET", "/scope"))
            closed = conn.wait_closed(5.0)
            received = conn.received
        assert closed, f"the connection stayed open after an HTTP/1.1 request: {received[:200]!r}"
        assert b"HTTP/1.1 200" not in received, received[:300]
        with h2c_client(srv) as client:
            response = client.get("/scope")
        assert srv.returncode is None, srv.describe()
    assert response.status_code == 200, response.text
    assert response.http_version == "HTTP/2"
    assert response.json()["http_version"] == "2"


# -- TLS ---------------------------------------------------------------------------------------


def test_tls_http11_scope_is_https(certs: Certs) -> None:
    """Rule: with --ssl-certfile/--ssl-keyfile the server speaks TLS with that certificate (a
    client trusting only the test CA, checking the name 127.0.0.1, connects), logs "ferrule
    running on https://127.0.0.1:PORT", and an HTTP/1.1-only client gets 200 with scope scheme
    "https" and http_version "1.1". Broken: the options are refused, the server still speaks
    plain HTTP (SSL error "wrong version number"), another certificate is served (verify
    failure), the running line says http://, or the scope says scheme "http"."""
    with running_server(APP, *tls_args(certs)) as srv:
        assert srv.scheme == "https", srv.describe()
        assert re.search(r"ferrule running on https://127\.0\.0\.1:\d+", srv.stderr), srv.stderr
        with https_client(srv, certs) as client:
            response = client.get("/scope")
    assert response.status_code == 200, response.text
    assert response.http_version == "HTTP/1.1"
    scope = response.json()
    assert scope["scheme"] == "https", scope
    assert scope["http_version"] == "1.1", scope


def test_tls_alpn_negotiates_h2(certs: Certs) -> None:
    """Rule: over TLS with --http auto, a client offering ALPN "h2, http/1.1" gets h2 (the
    server prefers h2): 200 over HTTP/2 with scope http_version "2", scheme "https". Broken:
    the server offers no ALPN or prefers http/1.1 (the response comes over HTTP/1.1), or it
    selects h2 but then speaks HTTP/1.1 (protocol error)."""
    with running_server(APP, *tls_args(certs)) as srv:
        with https_client(srv, certs, http2=True) as client:
            first = client.get("/scope")
            second = client.post("/echo", content=b"x" * 100_000)
    assert first.status_code == 200, first.text
    assert first.http_version == "HTTP/2"
    scope = first.json()
    assert scope["http_version"] == "2", scope
    assert scope["scheme"] == "https", scope
    assert second.status_code == 200 and second.content == b"x" * 100_000
    assert second.http_version == "HTTP/2"


def test_tls_http_1_offers_only_http11(certs: Certs) -> None:
    """Rule: with --http 1 over TLS, ALPN selects http/1.1 even for a client that offers h2
    first: the exchange is HTTP/1.1 (scope "1.1"). Broken: h2 is negotiated anyway (the
    response comes over HTTP/2), or the handshake fails."""
    with running_server(APP, "--http", "1", *tls_args(certs)) as srv:
        with https_client(srv, certs, http2=True) as client:
            response = client.get("/scope")
    assert response.status_code == 200, response.text
    assert response.http_version == "HTTP/1.1"
    assert response.json()["http_version"] == "1.1"


def test_tls_http_2_serves_only_h2(certs: Certs) -> None:
    """Rule: with --http 2 over TLS, a client offering h2 gets HTTP/2 (scope "2"), and a client
    offering only http/1.1 gets no 200 (the handshake fails with no_application_protocol, or
    the connection is closed); the server keeps serving. Broken: HTTP/1.1 is served in this
    mode, or h2 does not work."""
    with running_server(APP, "--http", "2", *tls_args(certs)) as srv:
        request_fails(https_client(srv, certs, http2=False))
        with https_client(srv, certs, http2=True) as client:
            response = client.get("/scope")
        assert srv.returncode is None, srv.describe()
    assert response.status_code == 200, response.text
    assert response.http_version == "HTTP/2"
    assert response.json()["http_version"] == "2"


def _tls_version(srv: ServerProcess, certs: Certs, maximum: ssl.TLSVersion | None) -> str:
    """The TLS version a handshake with the server settles on (the client capped at
    ``maximum``), after which an HTTP/1.1 request on it is answered."""
    context = client_context(certs)
    if maximum is not None:
        context.maximum_version = maximum
    assert srv.port is not None
    with socket.create_connection(("127.0.0.1", srv.port), timeout=TIMEOUT) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as conn:
            conn.sendall(request_bytes("GET", "/scope", headers=[("Connection", "close")]))
            answer = b""
            while chunk := conn.recv(65536):
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
            version = conn.version()
    assert version is not None
    return version


@pytest.mark.parametrize(
    "args",
    [["--ssl-version", "17", "--ssl-ciphers", "TLSv1"], ["--ssl-version", "2"]],
    ids=["uvicorn-defaults", "protocol-tls"],
)
def test_tls_uvicorn_default_ssl_version_and_ciphers_are_accepted(
    certs: Certs, args: list[str]
) -> None:
    """Rule: uvicorn's defaults, ``--ssl-version 17`` (ssl.PROTOCOL_TLS_SERVER) and
    ``--ssl-ciphers TLSv1``, and ``--ssl-version 2`` (ssl.PROTOCOL_TLS), are accepted, as they
    ask for what rustls does: the highest version both ends speak, TLS 1.3, or TLS 1.2 with a
    client that stops there. Seen failing before the options existed (exit 2, "unrecognized
    arguments")."""
    with running_server(APP, *tls_args(certs), *args) as srv:
        assert _tls_version(srv, certs, None) == "TLSv1.3"
        assert _tls_version(srv, certs, ssl.TLSVersion.TLSv1_2) == "TLSv1.2"


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--ssl-version", "5", "TLS 1.3 or 1.2"),  # ssl.PROTOCOL_TLSv1_2
        ("--ssl-version", "16", "TLS 1.3 or 1.2"),  # ssl.PROTOCOL_TLS_CLIENT
        ("--ssl-ciphers", "ECDHE+AESGCM", "ChaCha20-Poly1305"),
    ],
)
def test_tls_other_ssl_version_or_ciphers_are_usage_errors(
    certs: Certs, option: str, value: str, says: str
) -> None:
    """Rule: any other ``--ssl-version`` or ``--ssl-ciphers`` is a usage error (exit 2) whose
    message says what ferrule's TLS does instead, never a value taken and ignored. Seen
    failing: before the options (exit 2, but "unrecognized arguments" saying nothing of
    TLS); with the checks left out of ``Config`` (the server started, the value ignored, and
    was killed after 15 s)."""
    result = run_to_exit(ferrule_command(APP, "--port", "0", *tls_args(certs), option, value))
    assert result.returncode == 2, result.describe()
    assert f"argument {option}:" in result.stderr, result.describe()
    assert says in result.stderr and "Traceback" not in result.stderr, result.describe()
    assert "running on" not in result.stderr, result.describe()


def test_tls_encrypted_key_with_password(certs: Certs) -> None:
    """Rule: --ssl-keyfile may be an encrypted PKCS8 PEM ("ENCRYPTED PRIVATE KEY"), decrypted
    with --ssl-keyfile-password: the server starts and serves https. Broken: the option is
    refused, or the encrypted key is not understood (the server exits at startup)."""
    assert b"ENCRYPTED PRIVATE KEY" in certs.server_key_encrypted.read_bytes()
    args = [
        "--ssl-certfile",
        str(certs.server_cert),
        "--ssl-keyfile",
        str(certs.server_key_encrypted),
        "--ssl-keyfile-password",
        KEY_PASSWORD,
    ]
    with running_server(APP, *args) as srv:
        with https_client(srv, certs) as client:
            response = client.get("/scope")
    assert response.status_code == 200, response.text
    assert response.json()["scheme"] == "https"


def _process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it, from ``/proc/PID/task/TID/children``."""
    found, queue = [], [pid]
    while queue:
        current = queue.pop()
        found.append(current)
        for task in Path(f"/proc/{current}/task").glob("*"):
            try:
                queue += [int(c) for c in (task / "children").read_text().split()]
            except OSError:
                pass
    return found


def test_tls_key_password_stays_off_worker_command_lines(certs: Certs) -> None:
    """Rule: with --workers 2 and --ssl-keyfile-password, the workers serve https but the
    password is on no worker's command line (which any user can read with ps); it may also be
    given in FERRULE_SSL_KEYFILE_PASSWORD alone. Broken (seen before the change): each
    worker's /proc/PID/cmdline held the password; and without the variable read, the server
    given only the variable exits at startup, unable to decrypt the key."""
    key_args = ["--ssl-certfile", str(certs.server_cert), "--ssl-keyfile"]
    key_args.append(str(certs.server_key_encrypted))
    args = [*key_args, "--ssl-keyfile-password", KEY_PASSWORD, "--workers", "2"]
    with running_server(APP, *args) as srv:
        with https_client(srv, certs) as client:
            assert client.get("/scope").status_code == 200
        workers = _process_tree(srv.proc.pid)[1:]
        assert len(workers) >= 2, workers
        for pid in workers:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            assert KEY_PASSWORD.encode() not in cmdline, cmdline
    env = {"FERRULE_SSL_KEYFILE_PASSWORD": KEY_PASSWORD}
    with running_server(APP, *key_args, env=env) as srv:
        with https_client(srv, certs) as client:
            response = client.get("/scope")
    assert response.status_code == 200, response.text
    assert response.json()["scheme"] == "https"


def test_tls_wrong_key_password_exits_with_message(certs: Certs) -> None:
    """Rule: a wrong --ssl-keyfile-password makes the server exit at startup with a non-zero
    status (not a signal) and a message on stderr that points at the key (its file name, "key
    file" or "--ssl-keyfile") and says it could not be decrypted ("password" or "decrypt"); it
    never logs "running on". Broken: a hang (killed after 15 s), exit 0, a crash by signal, a
    server running without TLS, or a bare OpenSSL/ASN.1 error that does not say what failed."""
    argv = ferrule_command(
        APP,
        "--port",
        "0",
        "--ssl-certfile",
        str(certs.server_cert),
        "--ssl-keyfile",
        str(certs.server_key_encrypted),
        "--ssl-keyfile-password",
        "not the password",
    )
    result = run_to_exit(argv)
    assert result.returncode > 0, result.describe()
    assert "running on" not in result.stderr, result.describe()
    lowered = result.stderr.lower()
    names_key = (certs.server_key_encrypted.name, "key file", "--ssl-keyfile")
    assert any(name in lowered for name in names_key), result.describe()
    assert "password" in lowered or "decrypt" in lowered, result.describe()


def test_tls_client_certificate_required(certs: Certs) -> None:
    """Rule: with --ssl-ca-certs CA --ssl-cert-reqs 2 (CERT_REQUIRED) a client presenting a
    certificate signed by CA is served; a client without a certificate, or with one signed by
    another CA, fails at the TLS handshake (no response at all); the server keeps serving
    afterwards. Broken: clients without a certificate are served (the option ignored), the
    trusted client is refused, or a refused handshake kills the server or its accept loop."""
    args = [*tls_args(certs), "--ssl-ca-certs", str(certs.ca), "--ssl-cert-reqs", "2"]
    trusted = (certs.client_cert, certs.client_key)
    rogue = (certs.rogue_client_cert, certs.rogue_client_key)
    with running_server(APP, *args) as srv:
        with https_client(srv, certs, verify=client_context(certs, cert=trusted)) as client:
            first = client.get("/scope")
        assert first.status_code == 200, first.text
        assert first.json()["scheme"] == "https"

        request_fails(https_client(srv, certs))
        request_fails(https_client(srv, certs, verify=client_context(certs, cert=rogue)))

        for http2 in (False, True):
            context = client_context(certs, cert=trusted)
            with https_client(srv, certs, http2=http2, verify=context) as client:
                again = client.get("/scope")
            assert again.status_code == 200, again.text
        assert srv.returncode is None, srv.describe()


def test_tls_client_certificate_optional(certs: Certs) -> None:
    """Rule: with --ssl-ca-certs CA --ssl-cert-reqs 1 (CERT_OPTIONAL) a client without a
    certificate is served, and so is one presenting a certificate signed by CA. Broken: the
    certificate is demanded anyway (as with 2), or the option is refused."""
    args = [*tls_args(certs), "--ssl-ca-certs", str(certs.ca), "--ssl-cert-reqs", "1"]
    trusted = (certs.client_cert, certs.client_key)
    with running_server(APP, *args) as srv:
        with https_client(srv, certs) as client:
            anonymous = client.get("/scope")
        with https_client(srv, certs, verify=client_context(certs, cert=trusted)) as client:
            with_cert = client.get("/scope")
    assert anonymous.status_code == 200, anonymous.text
    assert with_cert.status_code == 200, with_cert.text


def test_plain_http_on_tls_port_is_closed(certs: Certs) -> None:
    """Rule: a plain-HTTP request sent to the TLS port gets its connection closed within 5 s
    (at most a TLS alert or a 400 first, never a 200), and the server keeps serving https.
    Broken: the connection hangs (the server waits for a handshake that never comes), the
    request is served in clear text, or the bad handshake stops the server."""
    with running_server(APP, *tls_args(certs)) as srv:
        with srv.raw(timeout=5.0) as conn:
            conn.send(request_bytes("GET", "/scope"))
            closed = conn.wait_closed(5.0)
            received = conn.received
        assert closed, f"the connection stayed open: {received[:200]!r}"
        assert b"HTTP/1.1 200" not in received, received[:300]
        with https_client(srv, certs) as client:
            response = client.get("/scope")
        assert srv.returncode is None, srv.describe()
    assert response.status_code == 200, response.text
    assert response.json()["scheme"] == "https"


@pytest.mark.parametrize("missing", ["certfile", "keyfile"])
def test_tls_missing_file_exits_with_message(certs: Certs, tmp_path: Path, missing: str) -> None:
    """Rule: a --ssl-certfile or --ssl-keyfile that does not exist makes the server exit at
    startup with a non-zero status (not a signal) and a message on stderr naming the missing
    file; it never logs "running on". Broken: a hang, exit 0, a crash by signal, the server
    running without TLS, or an error that does not say which file."""
    absent = tmp_path / f"no-such-{missing}.pem"
    cert = absent if missing == "certfile" else certs.server_cert
    key = absent if missing == "keyfile" else certs.server_key
    argv = ferrule_command(
        APP, "--port", "0", "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)
    )
    result = run_to_exit(argv)
    assert result.returncode > 0, result.describe()
    assert "running on" not in result.stderr, result.describe()
    assert absent.name in result.stderr, result.describe()
