"""``--proxy-protocol``: HAProxy's PROXY header read before TLS and any HTTP byte.

The working paths go through HAProxy itself (Debian's ``haproxy``, the protocol's reference
client) in TCP mode with ``send-proxy`` (v1) or ``send-proxy-v2``; a few headers are made by
hand. The hostile starts are in ``tests/hostile/test_proxy_protocol_hostile.py``. The scope app
answers ``repr`` of the scope, so each test reads the ``client`` and ``server`` the app saw.
"""

from __future__ import annotations

import ast
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from support.certs import Certs
from support.proxyproto import REQUEST, V2_LOCAL, scope_of, v2_header
from support.serverutil import ferrule_command, free_port, run_to_exit, running_server
from websockets.sync.client import connect

APP = "scope_app:app"
TIMEOUT = 5.0


def exchange(port: int, data: bytes, *, tls: ssl.SSLContext | None = None) -> tuple[bytes, int]:
    """Send ``data`` on a new connection, read to the close; also the socket's local port."""
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as raw:
        local_port = raw.getsockname()[1]
        sock = tls.wrap_socket(raw, server_hostname="localhost") if tls else raw
        sock.sendall(data)
        received = b""
        try:
            while chunk := sock.recv(65536):
                received += chunk
        except (ConnectionResetError, ssl.SSLError):
            pass
        return received, local_port


@pytest.fixture
def haproxy(tmp_path: Path) -> Iterator[Callable[[int, str], int]]:
    """Starts HAProxy in front of a ferrule port: ``haproxy(backend_port, "send-proxy")`` returns
    its frontend port. Every HAProxy started is killed at the end."""
    if shutil.which("haproxy") is None:
        pytest.skip("haproxy is not installed (apt-get install haproxy)")
    procs: list[subprocess.Popen] = []

    def start(backend: int, send: str) -> int:
        front = free_port()
        config = tmp_path / f"haproxy-{front}.cfg"
        config.write_text(
            "global\n  maxconn 100\n"
            "defaults\n  mode tcp\n  timeout connect 2s\n  timeout client 10s\n"
            "  timeout server 10s\n"
            f"frontend front\n  bind 127.0.0.1:{front}\n  default_backend ferrule\n"
            f"backend ferrule\n  server app 127.0.0.1:{backend} {send}\n"
        )
        proc = subprocess.Popen(
            ["haproxy", "-db", "-f", str(config)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        procs.append(proc)
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read().decode()
            try:
                socket.create_connection(("127.0.0.1", front), timeout=0.2).close()
                return front
            except OSError:
                time.sleep(0.05)
        raise AssertionError("haproxy did not listen")

    yield start
    for proc in procs:
        proc.kill()
        proc.wait(timeout=TIMEOUT)


@pytest.mark.parametrize(
    ("option", "send"),
    [
        ("v1", "send-proxy"),
        ("v2", "send-proxy-v2"),
        ("auto", "send-proxy"),
        ("auto", "send-proxy-v2"),
    ],
)
def test_the_scope_has_the_client_haproxy_saw(haproxy, option: str, send: str) -> None:
    """Through HAProxy's ``send-proxy``/``send-proxy-v2``, the app's ``client`` is the test's own
    socket (HAProxy's client) and its ``server`` HAProxy's frontend, and the access line names
    that client. Seen failing with the header ignored (the client was HAProxy's outgoing port)."""
    with running_server(APP, "--proxy-protocol", option, "--access-log") as server:
        front = haproxy(server.port, send)
        response, local_port = exchange(front, REQUEST)
        scope = scope_of(response)
        assert scope["client"] == ("127.0.0.1", local_port)
        assert scope["server"] == ("127.0.0.1", front)
        server.wait_for_output(rf"127\.0\.0\.1:{local_port} - \"GET /scope", stream="stdout")


def test_http2_and_tls_carry_it_too(haproxy, certs: Certs) -> None:
    """The header comes before TLS: an HTTPS request through HAProxy (which passes the TLS bytes
    through) and an HTTP/2 connection (h2c) get the client from it. Seen failing with the
    header's addresses not put into the connection."""
    tls_args = ["--ssl-certfile", str(certs.server_cert), "--ssl-keyfile", str(certs.server_key)]
    with running_server(APP, "--proxy-protocol", "v2", *tls_args) as server:
        front = haproxy(server.port, "send-proxy-v2")
        context = ssl.create_default_context(cafile=str(certs.ca))
        response, local_port = exchange(front, REQUEST, tls=context)
        scope = scope_of(response)
        assert (scope["client"], scope["server"]) == (
            ("127.0.0.1", local_port),
            ("127.0.0.1", front),
        )
        assert scope["scheme"] == "https"
    with running_server(APP, "--proxy-protocol", "v1") as server:
        front = haproxy(server.port, "send-proxy")
        # h2c by prior knowledge, through HAProxy's TCP mode.
        with httpx.Client(http1=False, http2=True, trust_env=False, timeout=TIMEOUT) as client:
            response = client.get(f"http://127.0.0.1:{front}/scope")
        assert response.http_version == "HTTP/2"
        assert ast.literal_eval(response.text)["client"][0] == "127.0.0.1"
        assert ast.literal_eval(response.text)["server"] == ("127.0.0.1", front)


def test_a_websocket_carries_it_too(haproxy) -> None:
    """A WebSocket through HAProxy's ``send-proxy-v2`` gets the same client and server in its
    scope as an HTTP request. Seen failing with the header's addresses not put into the
    connection."""
    with running_server("ws_app:app", "--proxy-protocol", "v2") as server:
        front = haproxy(server.port, "send-proxy-v2")
        with connect(f"ws://127.0.0.1:{front}/scope", open_timeout=TIMEOUT) as ws:
            local_port = ws.socket.getsockname()[1]
            ws.send("hello")
            scope = ast.literal_eval(ws.recv(timeout=TIMEOUT))["scope"]
        assert scope["client"] == ("127.0.0.1", local_port)
        assert scope["server"] == ("127.0.0.1", front)


def test_a_header_by_hand_and_a_local_one() -> None:
    """A v1 line's addresses (TCP4 and TCP6) become the scope's; a v2 LOCAL header (a
    balancer's health check) and a v1 UNKNOWN one leave the connection's own; with the option
    off, a request starting with ``PROXY`` is not read as a header. Seen failing with LOCAL
    taking the header's addresses."""
    line = b"PROXY TCP4 203.0.113.7 192.0.2.1 45678 8443\r\n"
    with running_server(APP, "--proxy-protocol", "auto") as server:
        scope = scope_of(exchange(server.port, line + REQUEST)[0])
        assert (scope["client"], scope["server"]) == (("203.0.113.7", 45678), ("192.0.2.1", 8443))
        line6 = b"PROXY TCP6 2001:db8::7 2001:db8::1 45678 443\r\n"
        scope = scope_of(exchange(server.port, line6 + REQUEST)[0])
        assert (scope["client"], scope["server"]) == (("2001:db8::7", 45678), ("2001:db8::1", 443))
        for own in (v2_header(V2_LOCAL), b"PROXY UNKNOWN\r\n"):
            response, local_port = exchange(server.port, own + REQUEST)
            scope = scope_of(response)
            assert scope["client"] == ("127.0.0.1", local_port), own
            assert scope["server"] == ("127.0.0.1", server.port), own
    with running_server(APP) as server:
        response, _ = exchange(server.port, line + REQUEST)
        assert b"203.0.113.7" not in response


def test_a_bad_value_is_a_usage_error() -> None:
    """``--proxy-protocol v3`` is refused before serving, naming the option."""
    result = run_to_exit(ferrule_command(APP, "--proxy-protocol", "v3"))
    assert result.returncode == 2, result.describe()
    assert "--proxy-protocol" in result.stderr
