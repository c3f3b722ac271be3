"""The ASGI TLS extension (``scope["extensions"]["tls"]``, asgiref's TLS extension 0.2) over
HTTP/1.1, HTTP/2, WebSockets and HTTP/3, with and without a client certificate, against
``extensions_app``; and its absence on a plain connection.

Each test but the last was seen failing first: before the extension was served, every scope's
extensions had no ``tls`` key (the app's ``/tls`` answered ``"tls": null``). The last one,
its absence on a plain connection, guards the spec's rule and passed before as after. The
certificates are made at test time (``tests/support/certs.py``); every client call has a timeout
and talks to 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aioquic.asyncio.client import connect as quic_connect
from cryptography import x509
from support.certs import Certs
from support.h3client import H3Client, configuration
from support.serverutil import ServerProcess, running_server
from support.wsutil import run, ws_connect

APP = "extensions_app:app"
TIMEOUT = 5.0
#: The IANA numbers of the TLS 1.3 suites and the TLS 1.2 ECDHE-ECDSA ones, by the names
#: Python's ``ssl`` gives them.
SUITES = {
    "TLS_AES_128_GCM_SHA256": 0x1301,
    "TLS_AES_256_GCM_SHA384": 0x1302,
    "TLS_CHACHA20_POLY1305_SHA256": 0x1303,
    "ECDHE-ECDSA-AES128-GCM-SHA256": 0xC02B,
    "ECDHE-ECDSA-AES256-GCM-SHA384": 0xC02C,
    "ECDHE-ECDSA-CHACHA20-POLY1305": 0xCCA9,
}
VERSIONS = {"TLSv1.2": 0x0303, "TLSv1.3": 0x0304}


@pytest.fixture(scope="module")
def server(certs: Certs) -> Iterator[ServerProcess]:
    """TLS with client certificates optional (checked against the test CA), and HTTP/3."""
    args = [
        "--ssl-certfile",
        str(certs.server_cert),
        "--ssl-keyfile",
        str(certs.server_key),
        "--ssl-ca-certs",
        str(certs.ca),
        "--ssl-cert-reqs",
        "1",
        "--http3",
    ]
    with running_server(APP, *args) as srv:
        yield srv


def context(certs: Certs, *, client_cert: bool = True, **options: Any) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str(certs.ca))
    if client_cert:
        ctx.load_cert_chain(str(certs.client_cert), str(certs.client_key))
    if "maximum_version" in options:
        ctx.maximum_version = options["maximum_version"]
    return ctx


def pem(path: Path) -> str:
    return path.read_text()


def subject(path: Path) -> str:
    return x509.load_pem_x509_certificate(path.read_bytes()).subject.rfc4514_string()


def assert_client_identified(tls: dict[str, Any], certs: Certs) -> None:
    assert tls["server_cert"] == pem(certs.server_cert), tls["server_cert"]
    # The leaf first; OpenSSL clients send the CA after it (the chain they build from their
    # trust store), aioquic the leaf alone: whatever the client sent, in its order.
    chain = tls["client_cert_chain"]
    assert chain[0] == pem(certs.client_cert), chain
    assert chain[1:] in ([], [pem(certs.ca)]), chain
    assert tls["client_cert_name"] == subject(certs.client_cert), tls["client_cert_name"]
    assert tls["client_cert_error"] is None


def tls_of(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["tls"] is not None, f"no tls extension: {body}"
    assert "tls" in body["extensions"]
    return body["tls"]


def test_http1_client_certificate(server: ServerProcess, certs: Certs) -> None:
    """Rule: over HTTP/1.1 and TLS with a client certificate, the scope's ``tls`` holds the
    server's certificate and the client's as the PEM files hold them, the client's subject as
    ``cryptography`` writes RFC 4514, no error, and the version and cipher suite the client's
    own ``ssl`` negotiated (as numbers). Broken: no ``tls`` key, a value missing or different
    (a DN in another order or escaping, a suite as a name)."""
    ctx = context(certs)
    with httpx.Client(verify=ctx, timeout=TIMEOUT, trust_env=False) as client:
        response = client.get(f"{server.base_url}/tls")
        stream = response.extensions["network_stream"]
        ssl_object = stream.get_extra_info("ssl_object")
    tls = tls_of(response)
    assert response.json()["http_version"] == "1.1"
    assert_client_identified(tls, certs)
    cipher, version, _ = ssl_object.cipher()
    assert tls["tls_version"] == VERSIONS[version], tls
    assert tls["cipher_suite"] == SUITES[cipher], (cipher, tls)


def test_tls12_reports_its_version_and_suite(server: ServerProcess, certs: Certs) -> None:
    """Rule: a TLS 1.2 client sees ``tls_version`` 0x0303 and its ECDHE suite's number.
    Broken: 0x0304 reported whatever was negotiated, or the suite of another version."""
    ctx = context(certs, maximum_version=ssl.TLSVersion.TLSv1_2)
    with httpx.Client(verify=ctx, timeout=TIMEOUT, trust_env=False) as client:
        response = client.get(f"{server.base_url}/tls")
        ssl_object = response.extensions["network_stream"].get_extra_info("ssl_object")
        cipher, version, _ = ssl_object.cipher()
    tls = tls_of(response)
    assert version == "TLSv1.2"
    assert tls["tls_version"] == 0x0303
    assert tls["cipher_suite"] == SUITES[cipher], (cipher, tls)
    assert_client_identified(tls, certs)


def test_http2_one_dict_per_connection(server: ServerProcess, certs: Certs) -> None:
    """Rule: over HTTP/2 the same values come, and two requests on one connection are handed
    the very same dict (it is built once per connection). Broken: no ``tls`` over HTTP/2, or a
    new dict per request (``same_as_before`` false on the second)."""
    with httpx.Client(
        verify=context(certs), http2=True, timeout=TIMEOUT, trust_env=False
    ) as client:
        first = client.get(f"{server.base_url}/tls")
        second = client.get(f"{server.base_url}/tls")
    assert first.http_version == "HTTP/2"
    assert_client_identified(tls_of(first), certs)
    assert tls_of(second) == tls_of(first)
    assert second.json()["same_as_before"] is True, second.json()


def test_without_client_certificate(server: ServerProcess, certs: Certs) -> None:
    """Rule: a client that sends no certificate (allowed by --ssl-cert-reqs 1) gets an empty
    chain and no name, the server's certificate still given. Broken: ``tls`` missing on such a
    connection, or a chain or name made up."""
    ctx = context(certs, client_cert=False)
    with httpx.Client(verify=ctx, timeout=TIMEOUT, trust_env=False) as client:
        tls = tls_of(client.get(f"{server.base_url}/tls"))
    assert tls["client_cert_chain"] == []
    assert tls["client_cert_name"] is None
    assert tls["client_cert_error"] is None
    assert tls["server_cert"] == pem(certs.server_cert)


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
@pytest.mark.parametrize("version", ["--http1.1", "--http2"])
def test_curl_client_certificate(server: ServerProcess, certs: Certs, version: str) -> None:
    """Rule: curl (OpenSSL) with a client certificate, over HTTP/1.1 and over HTTP/2 by ALPN,
    sees the same extension as Python's clients. Broken: as above, for another TLS stack."""
    command = [
        "curl",
        "--silent",
        "--show-error",
        "--max-time",
        str(TIMEOUT),
        version,
        "--cacert",
        str(certs.ca),
        "--cert",
        str(certs.client_cert),
        "--key",
        str(certs.client_key),
        f"{server.base_url}/tls",
    ]
    done = subprocess.run(command, capture_output=True, timeout=TIMEOUT + 2, check=False)
    assert done.returncode == 0, done.stderr.decode()
    body = json.loads(done.stdout)
    assert body["http_version"] == ("2" if version == "--http2" else "1.1")
    assert body["tls"] is not None, body
    assert_client_identified(body["tls"], certs)


def test_websocket_over_tls(server: ServerProcess, certs: Certs) -> None:
    """Rule: a WebSocket over TLS (wss) with a client certificate has the same ``tls`` in its
    scope, beside ``websocket.http.response``. Broken: the websocket scope's extensions have
    no ``tls``."""

    async def scenario() -> dict[str, Any]:
        async with ws_connect(server, "/tls", ssl=context(certs)) as ws:
            return json.loads(await ws.recv())

    body = run(scenario())
    assert "websocket.http.response" in body["extensions"]
    assert body["tls"] is not None, body
    assert_client_identified(body["tls"], certs)
    assert body["tls"]["tls_version"] in (0x0303, 0x0304)


def test_http3_client_certificate(server: ServerProcess, certs: Certs) -> None:
    """Rule: over HTTP/3 (aioquic with a client certificate) the scope's ``tls`` has the
    certificates and name, TLS 1.3, and no cipher suite (quinn does not tell which; the spec
    allows None). Broken: no ``tls`` over HTTP/3, or a made-up suite."""

    async def scenario() -> dict[str, Any]:
        config = configuration(certs.ca)
        config.load_cert_chain(str(certs.client_cert), str(certs.client_key))
        assert server.port is not None
        async with asyncio.timeout(TIMEOUT):
            async with quic_connect(
                "127.0.0.1", server.port, configuration=config, create_protocol=H3Client
            ) as client:
                assert isinstance(client, H3Client)
                response = await client.request("GET", "/tls")
        assert response.status == 200, bytes(response.body)
        return json.loads(bytes(response.body))

    body = asyncio.run(scenario())
    assert body["http_version"] == "3"
    assert body["tls"] is not None, body
    assert_client_identified(body["tls"], certs)
    assert body["tls"]["tls_version"] == 0x0304
    assert body["tls"]["cipher_suite"] is None


def test_absent_on_plain_connections() -> None:
    """Rule: on a connection without TLS the extension is absent, not empty (the spec forbids
    it there), over HTTP/1.1 and h2c. Broken: a ``tls`` key with None values."""
    with running_server(APP) as plain:
        with httpx.Client(timeout=TIMEOUT, trust_env=False) as client:
            body = client.get(f"{plain.base_url}/tls").json()
        with httpx.Client(timeout=TIMEOUT, http1=False, http2=True, trust_env=False) as client:
            h2c = client.get(f"{plain.base_url}/tls").json()
    assert "tls" not in body["extensions"], body
    assert h2c["http_version"] == "2"
    assert "tls" not in h2c["extensions"], h2c
