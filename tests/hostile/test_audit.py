"""An audit of ferrule against uvicorn 0.54 (httptools and h11) and the specs, with raw sockets,
where the other hostile tests had not looked (``audit_app``, ``hostile_app``).

The first tests are bugs the audit found, fixed since: each docstring says what is expected, why
(RFC 9110/9112, RFC 6455, the ASGI spec, or what uvicorn does) and what ferrule did before the
fix. The last ones pin behaviour ferrule already got right (some of it better than uvicorn)
that no test covered before.
"""

from __future__ import annotations

import base64
import os
import time
import uuid
from collections.abc import Iterator

import pytest
from support.h1raw import IncompleteResponse, RawConnection, parse_responses, request_bytes
from support.serverutil import WAIT_TIMEOUT, ServerProcess, fetch_record, running_server

#: Bound for one exchange: a correct server answers in milliseconds.
READ_TIMEOUT = 2.0


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with running_server("audit_app:app") as srv:
        yield srv


@pytest.fixture(scope="module")
def hostile() -> Iterator[ServerProcess]:
    with running_server("hostile_app:app") as srv:
        yield srv


def new_key() -> str:
    return uuid.uuid4().hex


def exchange(server: ServerProcess, data: bytes, timeout: float = READ_TIMEOUT) -> bytes:
    """Send ``data`` on a new connection; everything received until the server closes or
    ``timeout`` passes."""
    with server.raw(timeout) as conn:
        try:
            conn.send(data)
        except OSError:
            pass
        conn.wait_closed(timeout)
        return conn.received


def still_serving(server: ServerProcess) -> None:
    assert server.returncode is None, f"the server died\n{server.describe()}"
    response = server.get("/ok")
    assert response.status_code == 200 and response.text == "ok", response


def split_first(received: bytes) -> tuple[bytes, bytes, bytes]:
    """The first response's head, its body as its own Content-Length frames it (a client's
    reading), and every byte after that body."""
    head, _, rest = received.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    return head, rest[:length], rest[length:]


# -- the app's Content-Length against the body it sends -------------------------------------


@pytest.mark.parametrize(
    ("declared", "body"),
    [
        pytest.param(3, "hdrbody", id="body-longer"),
        pytest.param(0, "hdrbody", id="declared-zero"),
        pytest.param(20, "hdrbody", id="body-shorter"),
    ],
)
def test_one_message_body_not_matching_content_length_never_desyncs(
    server: ServerProcess, declared: int, body: str
) -> None:
    """Rule: an app that sends ``content-length: N`` and then, in one final message, a body of
    another length must not break the framing of the keep-alive connection: a client reading
    N bytes of body must find either the end of the connection or the next response's status
    line right after them (a 500 for the broken app is fine: its head was not sent yet).
    uvicorn raises "Response content longer/shorter than Content-Length" in the app and closes.
    Before (ferrule, release build): the app's header is sent as is but hyper frames the body
    by the bytes it was given (it trusts the body's exact size hint over the header), so the
    extra bytes are read as the start of the next response (longer) or the next response is
    swallowed into this body (shorter): response desync, the raw material of cache poisoning
    behind a proxy. Broken (debug build): hyper's debug assertion "payload claims
    content-length of 7, custom content-length header claims 3" panics in the connection
    task and the client gets no byte."""
    first = request_bytes("GET", f"/length?declared={declared}&body={body}")
    second = request_bytes("GET", "/ok", headers=[("Connection", "close")])
    received = exchange(server, first + second)
    head, framed, after = split_first(received)
    assert head.startswith((b"HTTP/1.1 200", b"HTTP/1.1 500")), received[:300]
    assert b"HTTP/1." not in framed, f"the next response was read as body\n{received!r}"
    assert after == b"" or after.startswith(b"HTTP/1.1 "), f"stray body bytes\n{received!r}"
    assert "panicked" not in server.stderr, server.describe()
    still_serving(server)


def test_invalid_content_length_from_app_never_reaches_the_wire(server: ServerProcess) -> None:
    """Rule: a response head whose ``content-length`` is not a number (``abc``) is the app's
    error: it gets a 500 (or the connection is closed), and the bad header is never written.
    uvicorn (httptools and h11) refuses it and closes. Before (ferrule): ``content-length:
    abc`` is sent with a 200 and the connection stays open, so no client can tell where the
    body ends."""
    data = request_bytes("GET", "/length?declared=abc&body=hdrbody")
    second = request_bytes("GET", "/ok", headers=[("Connection", "close")])
    received = exchange(server, data + second)
    assert b"content-length: abc" not in received.lower(), received[:300]
    if received:
        assert received.startswith(b"HTTP/1.1 500"), received[:300]
    still_serving(server)


def test_streamed_body_ended_short_of_content_length_is_reported(server: ServerProcess) -> None:
    """Rule: an app that declares ``content-length: 20``, streams 7 bytes and ends the body has
    a bug the operator must see: its last ``send()`` raises (uvicorn: RuntimeError "Response
    content shorter than Content-Length", logged with a traceback as an ASGI exception) or the
    server logs an error for the request. Before (ferrule): every ``send()`` returns, the
    access log says 200, nothing else is logged, and the client gets no byte at all (hyper
    aborts the connection before flushing the head)."""
    key = new_key()
    log_before = len(server.stderr)
    exchange(server, request_bytes("GET", f"/length-stream?declared=20&key={key}"))
    record = fetch_record(server, key)

    def logged() -> bool:
        return "content-length" in server.stderr[log_before:].lower()

    deadline = time.monotonic() + WAIT_TIMEOUT  # a logged error may come after the record
    while not (record["raised"] or logged()) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert record["raised"] or logged(), f"{record}\n{server.describe()}"


# -- request targets and Host --------------------------------------------------------------


def test_connect_gets_an_http_answer(server: ServerProcess) -> None:
    """Rule: ``CONNECT example.com:443 HTTP/1.1`` (a server that is no proxy) gets a complete
    HTTP response, whatever its status (uvicorn/httptools: 400; uvicorn/h11: the app's
    answer), and the server keeps serving. An ASGI server has no tunnel to offer, so refusing
    it (400, 405 or 501) before the app is the clean answer. Before (ferrule): the app is
    called with ``path`` ``''`` (the authority is lost), answers 200, and the client gets
    nothing at all: hyper treats a 2xx to CONNECT as the start of a tunnel and the connection
    is dropped without the response head."""
    data = b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"
    received = exchange(server, data)
    responses, _ = parse_responses(received)
    assert responses, f"no HTTP response to CONNECT: {received[:300]!r}"
    still_serving(server)


@pytest.mark.parametrize(
    "target",
    [pytest.param("example.com:80", id="authority-form"), pytest.param("x", id="bare-word")],
)
def test_non_origin_target_is_rejected_not_served_as_empty_path(
    server: ServerProcess, target: str
) -> None:
    """Rule: ``GET example.com:80 HTTP/1.1`` (authority-form, which RFC 9112 3.2.3 allows only
    for CONNECT) or ``GET x HTTP/1.1`` is an invalid request-line: 400 (RFC 9112 3: "SHOULD
    respond with a 400"; what uvicorn/httptools answers), or at the very least the app sees
    the target it was sent (uvicorn/h11 passes ``path`` ``"example.com:80"``). Broken
    (ferrule): the app is called with ``path`` and ``raw_path`` empty, a path no router
    expects and that a path-based access rule may not match."""
    key = new_key()
    data = f"GET {target} HTTP/1.1\r\nHost: t\r\nX-Key: {key}\r\nConnection: close\r\n\r\n"
    received = exchange(server, data.encode())
    responses, _ = parse_responses(received)
    assert responses, received[:300]
    if responses[0].status == 200:
        seen = fetch_record(server, key)
        assert seen["path"] != "" and seen["raw_path"] != "", seen
    else:
        assert 400 <= responses[0].status < 500, received[:300]
    still_serving(server)


def test_two_host_lines_are_refused(server: ServerProcess) -> None:
    """Rule: RFC 9112 3.2: a server MUST answer 400 to a request with more than one Host line
    (uvicorn/h11 does; uvicorn/httptools serves it). Two Host lines are a host-confusion
    vector: a proxy may route on one and the app read the other. Before (ferrule): served
    with 200, the app seeing both Host values."""
    lines = ["GET /ok HTTP/1.1", "Host: a.example", "Host: b.example", "Connection: close"]
    received = exchange(server, ("\r\n".join(lines) + "\r\n\r\n").encode())
    assert received.startswith(b"HTTP/1.1 400"), received[:300]
    still_serving(server)


def test_http11_without_host_is_served_as_uvicorn_serves_it(server: ServerProcess) -> None:
    """Rule: an HTTP/1.1 request without Host is served, as uvicorn's default parser
    (httptools) serves it. RFC 9112 3.2 says to refuse it with 400, and ferrule did for a
    while: a benchmark's own wrk script (formatting its requests before wrk sets the Host)
    then got 400 for 1.3 million requests. Clients that omit it worked under uvicorn, so they
    keep working here; two Host lines are still refused (above). Broken: a 400."""
    received = exchange(server, b"GET /ok HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert received.startswith(b"HTTP/1.1 200"), received[:300]


# -- connection handling --------------------------------------------------------------------


# A client's half-close (shutdown(SHUT_WR) after a whole request) is taken for its leaving, as
# uvicorn takes it: at the socket a FIN is all that either says, and an app waiting in
# receive() for http.disconnect (long polling) must hear of a client that has gone.


# -- WebSocket --------------------------------------------------------------------------------


def ws_handshake(server: ServerProcess, path: str, key: str | None = None) -> RawConnection:
    key = key if key is not None else base64.b64encode(os.urandom(16)).decode()
    conn = server.raw(READ_TIMEOUT)
    conn.send(
        request_bytes(
            "GET",
            path,
            headers=[
                ("Upgrade", "websocket"),
                ("Connection", "Upgrade"),
                ("Sec-WebSocket-Key", key),
                ("Sec-WebSocket-Version", "13"),
            ],
        )
    )
    return conn


def read_ws_frame(conn: RawConnection) -> tuple[int, bytes] | None:
    """(opcode, payload) of the next frame the server sent (servers never mask); None if the
    server closed the connection instead."""
    try:
        first, second = conn.read_exactly(2)
    except IncompleteResponse:
        if conn.eof and not conn.buffer:
            return None
        raise
    length = second & 0x7F
    if length == 126:
        length = int.from_bytes(conn.read_exactly(2), "big")
    elif length == 127:
        length = int.from_bytes(conn.read_exactly(8), "big")
    return first & 0x0F, conn.read_exactly(length)


def test_ws_key_that_is_not_16_base64_bytes_is_refused(server: ServerProcess) -> None:
    """Rule: RFC 6455 4.2.1 requires a Sec-WebSocket-Key that is base64 of 16 bytes, and a
    server that gets a handshake not matching it "MUST stop processing the client's handshake
    and return an HTTP response with an appropriate error code (such as 400 Bad Request)";
    uvicorn (websockets) answers 400 to ``Sec-WebSocket-Key: short``. Before (ferrule): 101
    Switching Protocols."""
    with ws_handshake(server, "/ws", key="short") as conn:
        response = conn.read_response()
    assert response.status != 101, response.raw_head
    still_serving(server)


def app_close_frame(server: ServerProcess, query: str) -> tuple[int, bytes] | None:
    """The frame that follows the 101 when the app accepts and then closes as ``/close?QUERY``
    asks; None if the server closed the connection instead."""
    with ws_handshake(server, f"/close?{query}&key={new_key()}") as conn:
        response = conn.read_response(head=True)
        assert response.status == 101, response.raw_head
        return read_ws_frame(conn)


#: Close codes an endpoint may put in a close frame (RFC 6455 7.4.1/7.4.2 and the IANA
#: registry): 1000-1003, 1007-1014, and 3000-4999 for libraries and applications.
SENDABLE_CLOSE_CODES = {1000, 1001, 1002, 1003, *range(1007, 1015), *range(3000, 5000)}


@pytest.mark.parametrize("code", [1005, 1006, 1015, 999, 5000])
def test_ws_app_close_with_unsendable_code_never_reaches_the_wire(
    server: ServerProcess, code: int
) -> None:
    """Rule: RFC 6455 7.4.1: 1005, 1006 and 1015 "MUST NOT be set as a status code in a Close
    control frame by an endpoint", and codes under 1000 or from 5000 are not close codes at
    all; a client receiving one fails the connection (1002). An app asking for one is the
    app's error: its ``send()`` raises (uvicorn/websockets: ProtocolError "invalid status
    code") and the server closes with a valid code (1011, or 1000; uvicorn drops the TCP
    connection without a close frame, also accepted here). Before (ferrule): the close frame
    carries the forbidden code, and the app's ``send()`` returns as if all was well."""
    frame = app_close_frame(server, f"code={code}")
    if frame is None:
        return  # closed without a close frame: abrupt, but nothing invalid was sent
    opcode, payload = frame
    assert opcode == 0x8, frame
    sent = int.from_bytes(payload[:2], "big") if payload else None
    assert sent is None or sent in SENDABLE_CLOSE_CODES, f"close code {sent} on the wire"


def test_ws_app_close_with_long_reason_keeps_control_frame_small(server: ServerProcess) -> None:
    """Rule: RFC 6455 5.5: "All control frames MUST have a payload length of 125 bytes or
    less", so a close reason fits in 123 bytes. An app that passes a longer reason (say, an
    exception message) gets its ``send()`` refused (uvicorn/websockets: ProtocolError "control
    frame too long") or the reason cut, never an oversized frame. Before (ferrule): a close
    frame with a 202-byte payload (extended length 126), which every conforming client treats
    as a protocol error."""
    frame = app_close_frame(server, "code=1000&reason=200")
    if frame is None:
        return  # closed without a close frame: abrupt, but nothing invalid was sent
    opcode, payload = frame
    assert opcode == 0x8, (opcode, payload[:20])
    assert len(payload) <= 125, f"a close frame of {len(payload)} bytes"


# -- behaviour ferrule gets right, not covered before ----------------------------------------


def test_pipelined_malformed_request_after_a_good_one(hostile: ServerProcess) -> None:
    """Rule: when a malformed request follows a good one on a pipelined connection, the good
    one is answered (200), then the malformed one gets 400 and the connection closes; the
    request after it never reaches the app. (uvicorn/httptools answers only the 400 while its
    app runs the first request; uvicorn/h11 behaves like this.) Broken: the first response
    lost, no 400, the connection left open, or the third request served."""
    marker = new_key()
    good = request_bytes("GET", f"/echo?first={marker}")
    bad = b"GET /x HTTP/1.1\r\nHost: t\r\nBad Header: 1\r\n\r\n"
    third = request_bytes("GET", f"/echo?third={marker}")
    with hostile.raw(READ_TIMEOUT) as conn:
        conn.send(good + bad + third)
        closed = conn.wait_closed(READ_TIMEOUT)
        received = conn.received
    responses, leftover = parse_responses(received)
    assert [r.status for r in responses] == [200, 400], received[:600]
    assert closed and not leftover, received[:600]
    seen = [path for path in hostile.get("/_seen").json() if marker in path]
    assert seen == [f"/echo?first={marker}"], seen


def test_expect_100_continue_ignored_on_http10(hostile: ServerProcess) -> None:
    """Rule: RFC 9110 10.1.1: "A server that receives a 100-continue expectation in an
    HTTP/1.0 request MUST ignore that expectation": no ``100 Continue`` (an HTTP/1.0 client
    does not know 1xx responses), just the final response. (uvicorn sends ``HTTP/1.1 100
    Continue`` to an HTTP/1.0 client.) Broken: an interim response before the 200."""
    data = request_bytes(
        "POST", "/echo", headers=[("Expect", "100-continue")], body=b"hello", version="HTTP/1.0"
    )
    received = exchange(hostile, data)
    assert b" 100 " not in received.split(b"\r\n", 1)[0], received[:300]
    responses, _ = parse_responses(received)
    assert [r.status for r in responses] == [200], received[:300]
    assert responses[0].json()["len"] == 5


@pytest.mark.parametrize("code", [204, 304])
def test_bodyless_status_drops_app_body_and_keeps_framing(server: ServerProcess, code: int) -> None:
    """Rule: a 204 or 304 never carries a body (RFC 9110 15.3.5, 15.4.5; RFC 9112 6.3), even
    when the app sends one: no body bytes on the wire, and the next response on the same
    connection, if the server keeps it, is read intact. Broken: the app's body is written
    after the head, and a client reads it as the start of the next response."""
    first = request_bytes("GET", f"/status?code={code}&body=should-not-be-sent")
    second = request_bytes("GET", "/ok", headers=[("Connection", "close")])
    received = exchange(server, first + second)
    assert b"should-not-be-sent" not in received, received[:400]
    responses, leftover = parse_responses(received)
    assert not leftover, received[:400]
    # Closing after the first response (uvicorn does) is allowed; a garbled second is not.
    assert [r.status for r in responses] in ([code], [code, 200]), received[:400]
    assert responses[-1].body in (b"", b"ok"), received[:400]


def test_http10_keep_alive_is_honoured(hostile: ServerProcess) -> None:
    """Rule: an HTTP/1.0 request with ``Connection: keep-alive`` answered with a
    Content-Length keeps the connection open (RFC 9112 9.3, HTTP/1.0 keep-alive): a second
    request on it is answered. (uvicorn closes after each HTTP/1.0 response, which is allowed
    but costs a reconnect.) Broken: the second request gets no answer."""
    ask = request_bytes("GET", "/ok", version="HTTP/1.0", headers=[("Connection", "keep-alive")])
    with hostile.raw(READ_TIMEOUT) as conn:
        conn.send(ask)
        first = conn.read_response()
        conn.send(request_bytes("GET", "/ok", version="HTTP/1.0"))
        second = conn.read_response()
    assert (first.status, first.body, second.status, second.body) == (200, b"ok", 200, b"ok")


def test_http10_keep_alive_with_a_streamed_body_says_it_closes(hostile: ServerProcess) -> None:
    """Rule: to an HTTP/1.0 ``Connection: keep-alive`` request, a streamed response without a
    Content-Length can only end at the close (HTTP/1.0 has no chunked coding), so it must not
    say ``Connection: keep-alive`` (RFC 9112 9.3): the body is every byte until the close.
    Broken: a keep-alive header on a response whose end is the close (a client that believes
    it waits for a length that never comes, or reuses a dead connection). Seen failing before
    the fix: ``connection: keep-alive``, then the body and the close."""
    ask = request_bytes(
        "GET",
        "/stream?chunks=2&every=0",
        version="HTTP/1.0",
        headers=[("Connection", "keep-alive")],
    )
    received = exchange(hostile, ask)
    head, _, body = received.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 200"), received[:300]
    assert b"keep-alive" not in head.lower(), head
    assert b"transfer-encoding" not in head.lower(), head
    assert body == b"s" * 2 * 16384, (len(body), body[:40])


def test_chunk_extensions_and_trailers_accepted(hostile: ServerProcess) -> None:
    """Rule: chunk extensions (``5;name=value``, quoted values) and a trailer section after
    the last chunk are valid chunked framing (RFC 9112 7.1.1, 7.1.2): the body reaches the app
    intact and complete, and the request is answered. Broken: 400, a body with the extension
    text in it, or the trailer lines read as the next request."""
    key = new_key()
    chunks = b'5;name=val\r\nhello\r\n5;a;b="q s"\r\nworld\r\n0;last=1\r\nX-Trailer: yes\r\n\r\n'
    head = (
        f"POST /echo?key={key} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
        "Connection: close\r\n\r\n"
    )
    received = exchange(hostile, head.encode() + chunks)
    responses, leftover = parse_responses(received)
    assert [r.status for r in responses] == [200] and not leftover, received[:300]
    assert responses[0].json()["len"] == 10, received[:300]
    messages = fetch_record(hostile, key)
    assert messages[-1]["type"] == "http.request" and not messages[-1]["more_body"], messages


def test_ws_upgrade_on_http10_is_plain_http(server: ServerProcess) -> None:
    """Rule: RFC 6455 4.1: the opening handshake is an HTTP/1.1 (or later) GET; an HTTP/1.0
    request with the upgrade headers is an ordinary request (uvicorn upgrades it anyway).
    Broken: 101 to an HTTP/1.0 client."""
    data = request_bytes(
        "GET",
        "/ws",
        version="HTTP/1.0",
        headers=[
            ("Upgrade", "websocket"),
            ("Connection", "Upgrade"),
            ("Sec-WebSocket-Key", base64.b64encode(os.urandom(16)).decode()),
            ("Sec-WebSocket-Version", "13"),
        ],
    )
    received = exchange(server, data)
    assert not received.startswith(b"HTTP/1.1 101"), received[:300]
    responses, _ = parse_responses(received)
    assert responses and responses[0].status == 200, received[:300]
