"""WebSockets over HTTP/2 (RFC 8441): the server announces ``SETTINGS_ENABLE_CONNECT_PROTOCOL``,
takes an extended CONNECT with ``:protocol websocket`` on a stream, answers 200 (or the app's
denial), and runs the same ASGI websocket session over that stream, against ``ws_app``.

The client is the ``h2`` library on a plain socket (h2c) or a TLS socket with ALPN ``h2``;
WebSocket frames are built and parsed by hand on the stream's DATA (client frames masked, as
RFC 6455 asks of a client). Every read is bounded by a socket timeout. Each test here failed
before the server took extended CONNECT (seen: no ENABLE_CONNECT_PROTOCOL, and 501 for the
CONNECT)."""

from __future__ import annotations

import ast
import os
import signal
import socket
import ssl
from collections.abc import Iterator

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import h2.settings
import pytest
from support.certs import Certs
from support.h2ws import TIMEOUT, H2Client, plain_client
from support.serverutil import ServerProcess, fetch_record, running_server, start_server
from support.wsutil import OP_BINARY, OP_CLOSE, OP_TEXT

APP = "ws_app:app"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with running_server(APP, "--http2") as srv:
        yield srv


def test_the_server_announces_extended_connect(server: ServerProcess) -> None:
    """Rule: with WebSockets on, the server's SETTINGS carry ENABLE_CONNECT_PROTOCOL = 1
    (RFC 8441 3). Broken: the setting absent, so browsers open a second, HTTP/1.1 connection
    for the WebSocket (seen before)."""
    client = plain_client(server)
    try:
        setting = h2.settings.SettingCodes.ENABLE_CONNECT_PROTOCOL
        assert client.conn.remote_settings.get(setting) == 1
    finally:
        client.sock.close()


def test_echo_over_an_http2_stream_with_an_http2_scope(server: ServerProcess) -> None:
    """Rule: an extended CONNECT is answered 200 when the app accepts, and text and binary
    messages echo over the stream; the app's scope says ``http_version`` "2", scheme ws, the
    path and subprotocols of the request. Broken: 501 for the CONNECT (seen before: CONNECT
    was refused as a tunnel request)."""
    client = plain_client(server)
    try:
        stream = client.connect_ws("/scope/h2?x=1", ("sec-websocket-protocol", "chat, v2"))
        assert client.response(stream) == 200
        [(opcode, text)] = client.next_frames(stream)
        assert opcode == OP_TEXT
        seen = ast.literal_eval(text.decode())
        scope = seen["scope"]
        assert (scope["type"], scope["http_version"], scope["scheme"]) == ("websocket", "2", "ws")
        assert (scope["path"], scope["query_string"]) == ("/scope/h2", b"x=1")
        assert scope["subprotocols"] == ["chat", "v2"]
        client.send_ws(stream, OP_TEXT, b"hello over h2")
        assert client.next_frames(stream) == [(OP_TEXT, b"hello over h2")]
        client.send_ws(stream, OP_BINARY, bytes(range(200)))
        assert client.next_frames(stream) == [(OP_BINARY, bytes(range(200)))]
    finally:
        client.sock.close()


def test_close_codes_reach_the_app_and_the_client(server: ServerProcess) -> None:
    """Rule: the client's close frame reaches the app as its ``websocket.disconnect`` code and
    is answered; the app's ``websocket.close`` reaches the client with its code and reason.
    Broken: the session not ended by a close on the stream."""
    client = plain_client(server)
    try:
        key = os.urandom(6).hex()
        stream = client.connect_ws(f"/echo?key={key}")
        assert client.response(stream) == 200
        client.send_ws(stream, OP_CLOSE, (4001).to_bytes(2, "big") + b"bye")
        [(opcode, payload)] = client.next_frames(stream)
        assert (opcode, payload[:2]) == (OP_CLOSE, (4001).to_bytes(2, "big"))
        assert fetch_record(server, key)["code"] == 4001
        closing = client.connect_ws("/close-with")
        assert client.response(closing) == 200
        [(opcode, payload)] = client.next_frames(closing)
        assert (opcode, payload) == (OP_CLOSE, (4001).to_bytes(2, "big") + b"bye")
    finally:
        client.sock.close()


def test_denials_answer_the_stream_as_on_http11(server: ServerProcess) -> None:
    """Rule: an app that closes before accepting gets the stream a 403; the denial-response
    extension's own response (401 with its body) is sent as it is on HTTP/1.1; a CONNECT
    without Sec-WebSocket-Version is a 400. Broken: a reset stream or a 200."""
    client = plain_client(server)
    try:
        assert client.response(client.connect_ws("/reject")) == 403
        denied = client.connect_ws("/deny")
        assert client.response(denied) == 401
        client.wait(lambda: denied in client.ended or denied in client.reset)
        assert client.data[denied] == b"no entry"
        stream = client.conn.get_next_available_stream_id()
        client.conn.send_headers(
            stream,
            [
                (":method", "CONNECT"),
                (":protocol", "websocket"),
                (":scheme", "http"),
                (":path", "/echo"),
                (":authority", client.authority),
            ],
        )
        client.flush()
        assert client.response(stream) == 400
    finally:
        client.sock.close()


def test_many_websockets_and_requests_share_one_connection(server: ServerProcess) -> None:
    """Rule: several WebSockets and plain requests multiplexed on one HTTP/2 connection are
    each served on their own stream, their messages kept apart. Broken: a WebSocket taking
    the connection over, or messages crossing streams."""
    client = plain_client(server)
    try:
        sockets = [client.connect_ws("/echo") for _ in range(8)]
        gets = [client.get("/ok") for _ in range(4)]
        assert [client.response(s) for s in sockets] == [200] * 8
        for i, stream in enumerate(sockets):
            client.send_ws(stream, OP_TEXT, f"message {i}".encode())
        for i, stream in enumerate(sockets):
            assert client.next_frames(stream) == [(OP_TEXT, f"message {i}".encode())]
        assert [client.response(s) for s in gets] == [200] * 4
        client.wait(lambda: all(s in client.ended for s in gets))
        assert {client.data[s] for s in gets} == {b"ok"}
    finally:
        client.sock.close()


def test_websocket_over_tls_with_alpn_h2(certs: Certs) -> None:
    """Rule: over TLS, a client that negotiated ``h2`` by ALPN opens its WebSocket on the same
    connection, and the scope's scheme is wss. Broken: only HTTP/1.1 upgrades over TLS."""
    with running_server(
        APP,
        "--ssl-certfile",
        str(certs.server_cert),
        "--ssl-keyfile",
        str(certs.server_key),
    ) as srv:
        context = ssl.create_default_context(cafile=str(certs.ca))
        context.set_alpn_protocols(["h2"])
        raw = socket.create_connection(("127.0.0.1", srv.port), timeout=TIMEOUT)
        sock = context.wrap_socket(raw, server_hostname="localhost")
        assert sock.selected_alpn_protocol() == "h2"
        client = H2Client(sock, f"localhost:{srv.port}", scheme="https")
        try:
            stream = client.connect_ws("/scope/tls")
            assert client.response(stream) == 200
            [(opcode, text)] = client.next_frames(stream)
            scope = ast.literal_eval(text.decode())["scope"]
            assert (scope["http_version"], scope["scheme"]) == ("2", "wss")
        finally:
            sock.close()


def test_shutdown_closes_http2_websockets_with_1012() -> None:
    """Rule: SIGINT closes a WebSocket on an HTTP/2 stream with 1012, as on HTTP/1.1, and the
    server exits 0. Broken: the stream left open until the graceful timeout."""
    srv = start_server(APP, "--http2", "--timeout-graceful-shutdown", "5")
    try:
        client = plain_client(srv)
        stream = client.connect_ws("/echo")
        assert client.response(stream) == 200
        srv.send_signal(signal.SIGINT)
        [(opcode, payload)] = client.next_frames(stream)
        assert (opcode, payload[:2]) == (OP_CLOSE, (1012).to_bytes(2, "big"))
        client.sock.close()  # h2 sends nothing after the server's GOAWAY: no close reply
        assert srv.wait_exit(15) == 0, srv.describe()
    finally:
        srv.close()
