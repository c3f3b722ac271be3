"""WebSockets over HTTP/1.1 (RFC 6455, ASGI websocket spec 2.4), against ``ws_app``: the
opening handshake, the scope, messages and close codes, app errors, TLS and load. Control frames,
fragments, limits, ``--ws none`` and the other ``--ws-*`` options are in
``test_frames``.

The clients are :mod:`support.wsutil`'s: the ``websockets`` library for what a real client does,
a raw socket for what a real client would never send; every call of theirs is bounded in time and
goes to 127.0.0.1. The app records what it saw under ``?key=K``; the test reads it back with
``GET /_record``.
"""

from __future__ import annotations

import ast
import asyncio
import os
import ssl
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from support.certs import Certs
from support.serverutil import WAIT_TIMEOUT, ServerProcess, fetch_record, running_server
from support.wsutil import (
    OP_CLOSE,
    OP_TEXT,
    accept_for,
    close_code,
    close_payload,
    closed_by_server,
    raw_handshake,
    recv,
    refused_status,
    run,
    still_serving,
    token,
    upgraded,
    ws_connect,
)
from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed, InvalidStatus

APP = "ws_app:app"


# -- servers -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    """``ws_app`` with the defaults (``--ws auto``, 16 MiB messages)."""
    with running_server(APP) as srv:
        yield srv


# -- handshake ---------------------------------------------------------------------------------


def test_handshake_answers_101_with_accept(server: ServerProcess) -> None:
    """Rule: a GET with Upgrade: websocket, Connection: Upgrade, a Sec-WebSocket-Key and
    Sec-WebSocket-Version: 13 gets 101 with Upgrade: websocket, Connection: Upgrade and
    Sec-WebSocket-Accept = base64(sha1(key + GUID)); no Sec-WebSocket-Protocol or
    -Extensions header when the client offered none; then a masked text frame is echoed in an
    unmasked text frame. Broken: the request is served as plain HTTP (200), a wrong accept
    value (every browser refuses it), headers the client did not negotiate, or frames that
    do not flow after the 101."""
    ws = upgraded(server)
    try:
        response = ws.response
        assert (response.header("upgrade") or "").lower() == "websocket", response.raw_head
        assert "upgrade" in (response.header("connection") or "").lower(), response.raw_head
        assert response.header("sec-websocket-accept") == accept_for(ws.key), response.raw_head
        assert response.header("sec-websocket-protocol") is None, response.raw_head
        assert response.header("sec-websocket-extensions") is None, response.raw_head
        ws.send_frame(OP_TEXT, "hi ✓".encode())
        frame = ws.read_frame()
        assert (frame.opcode, frame.fin, frame.rsv, frame.masked) == (OP_TEXT, True, 0, False)
        assert frame.payload.decode() == "hi ✓"
    finally:
        ws.close()


def test_close_handshake_answered_and_tcp_closed(server: ServerProcess) -> None:
    """Rule: the server runs the close handshake itself: a client close frame (1000, "done")
    is answered with a close frame (echoing 1000) and then the server closes the TCP
    connection. Broken: no close frame back (the client waits for its close timeout), a
    different code, or the TCP connection left open."""
    ws = upgraded(server)
    try:
        ws.send_frame(OP_CLOSE, close_payload(1000, "done"))
        frame = ws.read_close()
        assert frame.code == 1000, frame
        assert ws.conn.wait_closed(5.0), "the server kept the TCP connection open"
    finally:
        ws.close()


@pytest.mark.parametrize(
    "case",
    [
        pytest.param({"omit": ("Sec-WebSocket-Key",)}, id="no-key"),
        pytest.param({"version": "8"}, id="version-8"),
    ],
)
def test_bad_handshake_not_upgraded(server: ServerProcess, case: dict[str, Any]) -> None:
    """Rule: an upgrade request without Sec-WebSocket-Key, or with a Sec-WebSocket-Version
    other than 13, is not upgraded: any complete non-101 answer (400, 426, or the request
    served as plain HTTP), and the server keeps serving. Broken: a 101 (the server would then
    speak a protocol the client did not ask for), no answer (hang), or a crash."""
    ws = raw_handshake(server, **case)
    try:
        assert ws.response.status != 101, ws.response.raw_head
    finally:
        ws.close()
    still_serving(server)


# -- scope -------------------------------------------------------------------------------------


@dataclass
class SeenScope:
    scope: dict[str, Any]
    first: dict[str, Any]
    local_port: int


@pytest.fixture(scope="module")
def seen(server: ServerProcess) -> SeenScope:
    """The scope (and first message) ``/scope/caf%C3%A9?x=1&y=%20`` saw, from a client that
    offered subprotocols chat.v1, chat.v2 and sent X-Custom: Value."""

    async def fetch() -> SeenScope:
        options = {
            "subprotocols": ["chat.v1", "chat.v2"],
            "additional_headers": [("X-Custom", "Value")],
        }
        async with ws_connect(server, "/scope/caf%C3%A9?x=1&y=%20", **options) as ws:
            text = await recv(ws)
            local_port = ws.local_address[1]
        assert isinstance(text, str), text
        info = ast.literal_eval(text)
        return SeenScope(info["scope"], info["first"], local_port)

    return run(fetch())


def test_scope_type_and_versions(seen: SeenScope) -> None:
    """Rule: type "websocket", asgi {"version": "3.0", "spec_version": "2.4"}, http_version
    "1.1". Broken: an "http" scope, a missing or older spec_version (apps then assume no
    denial responses, no disconnect reason)."""
    assert seen.scope["type"] == "websocket"
    assert seen.scope["asgi"] == {"version": "3.0", "spec_version": "2.4"}
    assert seen.scope["http_version"] == "1.1"


def test_scope_scheme_is_ws(seen: SeenScope) -> None:
    """Rule: scheme "ws" on plain TCP. Broken: "http" (the http scope's value) or missing."""
    assert seen.scope["scheme"] == "ws"


@pytest.mark.parametrize(("proto", "scheme"), [("https", "wss"), ("http", "ws"), ("wss", "wss")])
def test_scope_scheme_and_client_behind_a_trusted_proxy(
    server: ServerProcess, proto: str, scheme: str
) -> None:
    """Rule: from a trusted proxy (the default trusts 127.0.0.1), ``X-Forwarded-Proto`` sets the
    WebSocket scope's scheme as its ws/wss counterpart and ``X-Forwarded-For`` its client, as
    uvicorn's proxy headers do. Broken: "https" in a websocket scope, or the proxy's own address
    as the client. Seen failing with the mapping to ws/wss removed from ``websocket_scope``:
    scheme "https"."""

    async def fetch() -> dict[str, Any]:
        headers = [("X-Forwarded-Proto", proto), ("X-Forwarded-For", "203.0.113.9")]
        async with ws_connect(server, "/scope", additional_headers=headers) as ws:
            return ast.literal_eval(str(await recv(ws)))["scope"]

    scope = run(fetch())
    assert scope["scheme"] == scheme, scope
    assert scope["client"][0] == "203.0.113.9", scope


def test_scope_path_raw_path_query(seen: SeenScope) -> None:
    """Rule: path is percent-decoded UTF-8 str, raw_path the undecoded bytes without the
    query, query_string the raw bytes after "?", root_path "" by default. Broken: path not
    decoded, raw_path as str or with the query, query decoded, root_path missing."""
    scope = seen.scope
    assert scope["path"] == "/scope/café"
    assert scope["raw_path"] == b"/scope/caf%C3%A9"
    assert scope["query_string"] == b"x=1&y=%20"
    assert scope["root_path"] == ""


def test_scope_headers_lowercased_bytes(seen: SeenScope) -> None:
    """Rule: headers is an iterable of [name, value] bytes pairs, names lowercased, with the
    handshake headers the client sent. Broken: str names or values, original case, or the
    Sec-WebSocket-* headers stripped."""
    headers = seen.scope["headers"]
    for name, value in headers:
        assert isinstance(name, bytes) and isinstance(value, bytes), (name, value)
        assert name == name.lower(), name
    names = [name for name, _ in headers]
    assert (b"x-custom", b"Value") in headers, headers
    assert b"sec-websocket-key" in names, headers
    assert b"sec-websocket-version" in names, headers
    assert b"host" in names, headers
    assert dict(headers).get(b"upgrade", b"").lower() == b"websocket", headers


def test_scope_client_and_server(seen: SeenScope, server: ServerProcess) -> None:
    """Rule: client is (peer host str, peer port int), server is the listen address. Broken:
    None, swapped, or a port of the wrong type."""
    assert seen.scope["client"] == ("127.0.0.1", seen.local_port)
    assert seen.scope["server"] == ("127.0.0.1", server.port)


def test_scope_subprotocols(seen: SeenScope) -> None:
    """Rule: subprotocols lists the offered Sec-WebSocket-Protocol values as str, in order.
    Broken: missing, a single comma-joined string, bytes."""
    assert seen.scope["subprotocols"] == ["chat.v1", "chat.v2"]


def test_scope_state_and_extensions(seen: SeenScope) -> None:
    """Rule: state carries what lifespan startup stored; extensions has
    "websocket.http.response" (the denial response extension). Broken: state missing or
    empty, extensions missing (apps then cannot send a denial response)."""
    assert seen.scope["state"] == {"token": "from-lifespan"}, seen.scope["state"]
    assert isinstance(seen.scope["extensions"], list), seen.scope["extensions"]
    assert "websocket.http.response" in seen.scope["extensions"]


def test_first_receive_is_connect(seen: SeenScope) -> None:
    """Rule: the app's first receive() is {"type": "websocket.connect"}. Broken: a receive
    message first, or the connect message missing (the app blocks)."""
    assert seen.first == {"type": "websocket.connect"}


# -- messages ----------------------------------------------------------------------------------


def test_echo_text_and_bytes(server: ServerProcess) -> None:
    """Rule: after accept, text frames reach the app as {"text": str} and binary frames as
    {"bytes": bytes}; websocket.send with text/bytes sends the same type back: ASCII,
    multi-byte UTF-8 (2, 3 and 4-byte sequences), empty text and bytes, all 256 byte values,
    a 1 MiB binary and a 270 KB multi-byte text message, in order. Broken: types swapped
    (bytes as text or the reverse), UTF-8 mangled, empty messages dropped, large messages
    truncated or stalled."""
    messages: list[str | bytes] = [
        "hello",
        "héllo wörld ✓ 😀",
        "",
        b"",
        bytes(range(256)),
        os.urandom(1024 * 1024),
        "ü€😀" * 30000,
        "last",
    ]

    async def scenario() -> list[str | bytes]:
        async with ws_connect(server, "/echo") as ws:
            replies = []
            for message in messages:
                await ws.send(message)
                replies.append(await recv(ws))
            return replies

    replies = run(scenario())
    for sent, got in zip(messages, replies, strict=True):
        assert type(got) is type(sent), (type(sent), type(got), got[:50])
        assert got == sent, (
            f"echo differs: sent {sent[:40]!r} (len {len(sent)}), got len {len(got)}"
        )


def test_subprotocol_and_accept_headers(server: ServerProcess) -> None:
    """Rule: websocket.accept's subprotocol is sent as Sec-WebSocket-Protocol (the client
    offered chat.v2, chat.v1; the app picks the first) and its headers are added to the 101
    (x-ws: yes). Broken: the subprotocol dropped (the client sees None), a header the client
    did not offer, or the extra headers missing."""

    async def scenario() -> tuple[str | None, str | None, str | None, str | bytes]:
        async with ws_connect(server, "/subprotocol", subprotocols=["chat.v2", "chat.v1"]) as ws:
            headers = ws.response.headers
            await ws.send("after accept")
            reply = await recv(ws)
            return ws.subprotocol, headers.get("sec-websocket-protocol"), headers.get("x-ws"), reply

    subprotocol, header, extra, reply = run(scenario())
    assert subprotocol == "chat.v2"
    assert header == "chat.v2"
    assert extra == "yes"
    assert reply == "after accept"


def test_close_before_accept_is_403(server: ServerProcess) -> None:
    """Rule: websocket.close before websocket.accept answers the handshake with HTTP 403 (no
    Sec-WebSocket-Accept), and a websockets client reports status 403. Broken: a 101 followed
    by a close frame, a 500, or no answer."""
    ws = raw_handshake(server, "/reject")
    try:
        assert ws.response.status == 403, (ws.response.raw_head, ws.response.body[:200])
        assert ws.response.header("sec-websocket-accept") is None, ws.response.raw_head
    finally:
        ws.close()

    assert run(refused_status(server, "/reject")) == 403


def test_handshakes_and_closes_are_logged_as_uvicorn_logs_them(server: ServerProcess) -> None:
    """Rule: as uvicorn does, each WebSocket logs at INFO ``CLIENT - "WebSocket PATH?QUERY"
    [accepted]`` (or the refusal's status, 403 for a close before accept), an access line on
    stdout, then "connection open" and, once the socket is gone, "connection closed" on stderr.
    Broken (seen before the change): a WebSocket left no line at all, so a server's log showed
    none of its WebSocket traffic. Its close line is checked in ``test_access_log.py``."""
    tag = uuid.uuid4().hex
    opened = server.stderr.count("connection open")
    closed = server.stderr.count("connection closed")

    async def scenario() -> None:
        async with ws_connect(server, f"/echo?tag={tag}") as ws:
            await ws.send("hi")
            await recv(ws)
        try:
            async with ws_connect(server, f"/reject?tag={tag}"):
                pass
        except InvalidStatus:
            pass

    run(scenario())
    client = r"127\.0\.0\.1:\d+"
    server.wait_for_output(
        rf'{client} - "WebSocket /echo\?tag={tag}" \[accepted\]', stream="stdout"
    )
    server.wait_for_output(rf'{client} - "WebSocket /reject\?tag={tag}" 403', stream="stdout")
    # One session was accepted: one more of each stderr line (the refused one has neither).
    deadline = time.monotonic() + WAIT_TIMEOUT
    while (
        server.stderr.count("connection open") <= opened
        or server.stderr.count("connection closed") <= closed
    ):
        assert time.monotonic() < deadline, server.describe()
        time.sleep(0.05)


def test_denial_response_extension(server: ServerProcess) -> None:
    """Rule: websocket.http.response.start (401, headers) then websocket.http.response.body
    messages (b"no " with more_body, then b"entry") before accept send that HTTP response
    instead of the 101: status 401, the app's headers, body b"no entry". Broken: a 403 or 500
    instead (the extension ignored or refused), the body cut after the first message, or the
    app's headers dropped."""
    ws = raw_handshake(server, "/deny")
    try:
        response = ws.response
        assert response.status == 401, (response.raw_head, response.body[:200])
        assert response.body == b"no entry", response.body[:200]
        assert response.header("x-denied") == "yes", response.raw_head
        assert (response.header("content-type") or "").startswith("text/plain"), response.raw_head
        assert response.header("sec-websocket-accept") is None, response.raw_head
    finally:
        ws.close()


def test_server_close_code_and_reason(server: ServerProcess) -> None:
    """Rule: websocket.close with code 4001 and reason "bye" after accept sends a close frame
    with that code and reason. Broken: 1000 or 1005 instead, the reason dropped, or a TCP
    close without a close frame (the client sees 1006)."""

    async def scenario() -> ConnectionClosed:
        async with ws_connect(server, "/close-with") as ws:
            return await closed_by_server(ws)

    exc = run(scenario())
    assert exc.rcvd is not None, f"no close frame from the server: {exc!r}"
    assert (exc.rcvd.code, exc.rcvd.reason) == (4001, "bye")


def test_client_close_code_reaches_app(server: ServerProcess) -> None:
    """Rule: a client close with 4002 "client bye" reaches the app as {"type":
    "websocket.disconnect", "code": 4002, "reason": "client bye"}, and the server answers the
    close (the client's close completes cleanly with 4002). Broken: the app sees 1000/1005/1006,
    no reason, or never gets the disconnect (it would wait forever)."""
    key = token()

    async def scenario() -> ConnectionClosed | None:
        async with ws_connect(server, f"/echo?key={key}") as ws:
            await ws.send("x")
            assert await recv(ws) == "x"
            await ws.close(4002, "client bye")
            try:
                await recv(ws)
            except ConnectionClosed as exc:
                return exc
        return None

    exc = run(scenario())
    assert exc is not None
    assert exc.rcvd is not None, f"the server did not answer the close: {exc!r}"
    assert exc.rcvd.code == 4002, exc
    disconnect = fetch_record(server, key)
    assert disconnect == {"type": "websocket.disconnect", "code": 4002, "reason": "client bye"}


def test_empty_close_frame_reaches_app_as_1005(server: ServerProcess) -> None:
    """Rule: a client close frame without a payload is answered with a close frame and reaches
    the app as websocket.disconnect with code 1005 (no status received). Broken: 1000 or
    1006, or no close frame back."""
    key = token()
    ws = upgraded(server, f"/echo?key={key}")
    try:
        ws.send_frame(OP_CLOSE)
        frame = ws.read_close()
        assert frame.code in (1000, 1005), frame
    finally:
        ws.close()
    assert fetch_record(server, key)["code"] == 1005


def test_dropped_connection_reaches_app_as_1006_or_1005(server: ServerProcess) -> None:
    """Rule: a client that drops the TCP connection without a close frame reaches the app as
    websocket.disconnect with code 1006 (abnormal closure, RFC 6455 7.1.5) or 1005 (what the
    ASGI spec says when no close code was received; uvicorn's choice). Broken: the app never
    gets a disconnect (stuck in receive forever), or a code that claims a clean close."""
    key = token()
    ws = upgraded(server, f"/echo?key={key}")
    ws.send_frame(OP_TEXT, b"ping")
    assert ws.read_frame().payload == b"ping"
    ws.close()
    assert fetch_record(server, key)["code"] in (1005, 1006)


def test_send_after_disconnect_raises_oserror(server: ServerProcess) -> None:
    """Rule: once the app has received websocket.disconnect, its send() raises an OSError
    subclass (ferrule.ClientDisconnected). Broken: send() succeeds silently (the app cannot
    tell its messages are lost), or raises something that is not an OSError."""
    key = token()

    async def scenario() -> None:
        async with ws_connect(server, f"/send-after-disconnect?key={key}") as ws:
            await ws.close(1000)

    run(scenario())
    outcome = fetch_record(server, key)
    assert outcome["disconnect"]["type"] == "websocket.disconnect", outcome
    assert outcome["raised"], f"send() after disconnect did not raise: {outcome}"
    assert outcome["oserror"], f"send() raised {outcome['exception']}, not an OSError"


# -- app errors --------------------------------------------------------------------------------


def test_exception_before_accept_is_500(server: ServerProcess) -> None:
    """Rule: an exception raised before websocket.accept answers the handshake with HTTP 500
    (not 101), the exception is logged, and the server keeps serving. Broken: a 101, a hang,
    a bare closed connection, or no trace of the exception on stderr."""
    tok = token()
    ws = raw_handshake(server, f"/raise-before?token={tok}")
    try:
        assert ws.response.status == 500, (ws.response.raw_head, ws.response.body[:200])
    finally:
        ws.close()
    server.wait_for_output(rf"ws failure before accept {tok}")
    still_serving(server)


def test_exception_after_accept_closes_1011(server: ServerProcess) -> None:
    """Rule: an exception raised after websocket.accept closes the websocket with 1011
    (internal error), the exception is logged, and the server keeps serving. Broken: the
    connection left open (the client waits forever), a bare TCP close (1006), a code that
    claims a normal close (1000), or nothing logged."""
    tok = token()

    async def scenario() -> ConnectionClosed:
        async with ws_connect(server, f"/raise-after?token={tok}") as ws:
            assert await recv(ws) == "accepted"
            return await closed_by_server(ws)

    exc = run(scenario())
    assert close_code(exc) == 1011, f"expected a close frame with 1011: {exc!r}"
    server.wait_for_output(rf"ws failure after accept {tok}")
    still_serving(server)


def test_return_without_accept_refused(server: ServerProcess) -> None:
    """Rule: an app that returns without accepting (nor closing) gets the handshake refused
    with 403 or 500, never 101. Broken: a 101 for an app that is gone, or no answer."""
    ws = raw_handshake(server, "/return-before")
    try:
        assert ws.response.status in (403, 500), ws.response.raw_head
    finally:
        ws.close()
    still_serving(server)


def test_return_after_accept_closes(server: ServerProcess) -> None:
    """Rule: an app that returns after accepting, without websocket.close, has the server
    close the websocket with a close frame (1000 or 1001) after the messages it sent. Broken:
    the connection left open with no app behind it, the last message lost, or a bare TCP
    close (1006)."""

    async def scenario() -> ConnectionClosed:
        async with ws_connect(server, "/return-after") as ws:
            assert await recv(ws) == "accepted"
            return await closed_by_server(ws)

    exc = run(scenario())
    assert close_code(exc) in (1000, 1001), f"expected a normal close frame: {exc!r}"
    still_serving(server)


# -- TLS and load ------------------------------------------------------------------------------


def test_wss_over_tls(certs: Certs) -> None:
    """Rule: over TLS (--ssl-certfile/--ssl-keyfile) the upgrade works the same and the scope's
    scheme is "wss"; messages are echoed. Broken: the upgrade refused over TLS, scheme "ws" or
    "https", or frames not flowing through the TLS stream."""
    cert, key = certs.server_cert, certs.server_key
    context = ssl.create_default_context(cafile=str(certs.ca))
    with running_server(APP, "--ssl-certfile", str(cert), "--ssl-keyfile", str(key)) as srv:
        assert srv.scheme == "https", srv.describe()

        async def scenario() -> tuple[dict[str, Any], str | bytes]:
            async with ws_connect(srv, "/scope", ssl=context) as ws:
                info = ast.literal_eval(str(await recv(ws)))
                await ws.send(b"over tls")
                return info["scope"], await recv(ws)

        scope, echoed = run(scenario())
    assert scope["scheme"] == "wss", scope
    assert echoed == b"over tls"


def test_200_concurrent_connections(server: ServerProcess) -> None:
    """Rule: 200 websockets open at the same time (all connected before any sends) each get
    their own 5 messages echoed, in order, and all close cleanly. Broken: connections refused
    or stalled beyond some small number, messages crossing between connections, or a
    connection's close never answered."""
    count, rounds = 200, 5

    async def one(ws: ClientConnection, index: int) -> list[str | bytes]:
        replies = []
        for round_ in range(rounds):
            await ws.send(f"{index}:{round_}")
            replies.append(await recv(ws, 20.0))
        return replies

    async def scenario() -> list[list[str | bytes]]:
        opened = await asyncio.gather(*(ws_connect(server, "/echo") for _ in range(count)))
        try:
            return await asyncio.gather(*(one(ws, i) for i, ws in enumerate(opened)))
        finally:
            await asyncio.gather(*(ws.close() for ws in opened), return_exceptions=True)

    results = run(scenario(), timeout=40.0)
    for index, replies in enumerate(results):
        assert replies == [f"{index}:{round_}" for round_ in range(rounds)], (index, replies)
    still_serving(server)
