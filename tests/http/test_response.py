"""Responses on the wire: framing, HEAD, keep-alive, pipelining, Date/Server, and ``send()``
raising ``OSError`` once the client is gone (``response_app``, raw sockets)."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path

import h2.config
import h2.connection
import h2.events
import pytest
from support.h1raw import request_bytes
from support.h2get import h2c_get
from support.serverutil import ServerProcess, fetch_record, running_server


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with running_server("response_app:app") as srv:
        yield srv


def test_content_length_honoured(server: ServerProcess) -> None:
    """Rule: a Content-Length set by the app is sent as is and the body sent in several
    messages is framed by it (no chunked encoding). Broken: Transfer-Encoding: chunked is added
    or the length is rewritten."""
    with server.raw() as conn:
        conn.send(request_bytes("GET", "/content-length"))
        response = conn.read_response()
    assert response.status == 200
    assert response.all("content-length") == ["11"]
    assert response.header("transfer-encoding") is None
    assert response.body == b"hello world"


def test_empty_end_after_every_declared_byte_is_not_a_disconnect(server: ServerProcess) -> None:
    """Rule: an app that sends all of its Content-Length with ``more_body`` and then ends the
    body with an empty message (Starlette's FileResponse does, for a file that is a whole
    number of chunks) completes normally: the client gets the 10 bytes, every ``send()``
    returns, and the connection stays usable. Broken (seen before the fix): hyper drops the
    body once the declared bytes are out, ferrule took that for the client leaving, and the
    final ``send()`` raised ClientDisconnected, so whatever the app does after it (Starlette's
    background tasks) never ran and the log said the client disconnected."""
    key = uuid.uuid4().hex
    with server.raw() as conn:
        conn.send(request_bytes("GET", f"/length-then-empty-end?key={key}"))
        response = conn.read_response()
        assert response.status == 200
        assert response.body == b"0123456789"
        conn.send(request_bytes("GET", "/content-length"))
        assert conn.read_response().body == b"hello world"
    record = fetch_record(server, key, timeout=5)
    assert record == {"sends": ["first half", "second half", "empty end"]}, record
    assert "Client disconnected" not in server.stderr, server.describe()


def test_body_past_the_declared_length_is_an_app_error(server: ServerProcess) -> None:
    """Rule: a non-empty body message after the declared Content-Length has gone out raises a
    RuntimeError in the app (uvicorn's h11 refuses it too), and the client still has its
    complete response. Broken (seen before the fix): the send raised ClientDisconnected, as if
    the client had left."""
    key = uuid.uuid4().hex
    with server.raw() as conn:
        conn.send(request_bytes("GET", f"/length-then-empty-end?key={key}&extra=1"))
        response = conn.read_response()
        assert response.body == b"0123456789"
    record = fetch_record(server, key, timeout=5)
    assert record["sends"] == ["first half", "second half"], record
    assert "longer than Content-Length" in record.get("error", ""), record


def test_chunked_without_content_length_on_http11(server: ServerProcess) -> None:
    """Rule: with no Content-Length, an HTTP/1.1 response is chunked and ends with the
    zero-length chunk when more_body is False. Broken: no Transfer-Encoding (the body would be
    close-delimited or unframed) or a missing terminating chunk (read times out)."""
    with server.raw() as conn:
        conn.send(request_bytes("GET", "/chunked"))
        response = conn.read_response()
    assert response.chunked, response.raw_head
    assert response.body == b"abbccc"
    assert response.chunk_sizes[-1] == 0


def test_http10_response_is_close_delimited(server: ServerProcess) -> None:
    """Rule: an HTTP/1.0 client gets no chunked encoding (it does not know it); a body without
    Content-Length ends when the server closes the connection. Broken: chunk sizes appear in
    the body, or the connection stays open (the read times out)."""
    with server.raw() as conn:
        conn.send(request_bytes("GET", "/chunked", version="HTTP/1.0"))
        data = conn.read_until_close(timeout=5)
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1."), head
    assert b"chunked" not in head.lower(), head
    assert body == b"abbccc"


def test_head_response_has_no_body(server: ServerProcess) -> None:
    """Rule: a HEAD response carries headers but no body, even though the app sent one. A
    second request pipelined behind it must parse cleanly. Broken: "hello" is written after
    the HEAD response and the next status line is corrupted."""
    with server.raw() as conn:
        conn.send(request_bytes("HEAD", "/head") + request_bytes("GET", "/echo?after=head"))
        head = conn.read_response(head=True)
        after = conn.read_response()
    assert head.status == 200
    assert after.status == 200, after
    assert after.body == b"GET /echo?after=head ", after.body


def test_head_response_without_content_length_has_no_body(server: ServerProcess) -> None:
    """Rule: HEAD gets no body also when the app streams one without Content-Length. Broken:
    chunks follow the HEAD response and corrupt the next response on the connection."""
    with server.raw() as conn:
        conn.send(request_bytes("HEAD", "/head-chunked") + request_bytes("GET", "/echo?n=2"))
        head = conn.read_response(head=True)
        after = conn.read_response()
    assert head.status == 200
    assert after.body == b"GET /echo?n=2 ", after.body


def test_keep_alive_reuses_the_connection(server: ServerProcess) -> None:
    """Rule: HTTP/1.1 connections are kept alive: three requests in turn on one socket are
    all answered. Broken: the server closes after the first response (EOF on the second)."""
    with server.raw() as conn:
        for n in range(3):
            conn.send(request_bytes("GET", f"/echo?n={n}"))
            response = conn.read_response()
            assert response.body == f"GET /echo?n={n} ".encode()
            assert (response.header("connection") or "").lower() != "close"


def test_keep_alive_with_httpx_same_client_port(server: ServerProcess) -> None:
    """Rule: keep-alive as an ordinary client sees it: httpx's pooled requests arrive from the
    same client port. Broken: each request comes on a new connection (different ports)."""
    with server.client() as client:
        ports = {client.get("/client-port").text for _ in range(3)}
    assert len(ports) == 1, ports


def test_pipelined_requests_answered_in_order(server: ServerProcess) -> None:
    """Rule: pipelined requests (sent back to back before any response, a body in the middle)
    are answered in order. Broken: responses are missing, reordered, or the POST body is
    taken for the next request line."""
    data = (
        request_bytes("GET", "/echo?n=1")
        + request_bytes("POST", "/echo?n=2", body=b"payload")
        + request_bytes("GET", "/echo?n=3")
    )
    with server.raw() as conn:
        conn.send(data)
        bodies = [conn.read_response().body for _ in range(3)]
    assert bodies == [b"GET /echo?n=1 ", b"POST /echo?n=2 payload", b"GET /echo?n=3 "]


def test_date_and_server_headers(server: ServerProcess) -> None:
    """Rule: every response has a Date header (RFC 9110 format, current time) and a Server
    header. Broken: either header is missing or Date is unparsable or stale."""
    with server.raw() as conn:
        conn.send(request_bytes("GET", "/"))
        response = conn.read_response()
    date = response.header("date")
    assert date, response.raw_head
    sent_at = parsedate_to_datetime(date)
    assert abs((datetime.now(UTC) - sent_at).total_seconds()) < 60, date
    assert response.header("server"), response.raw_head


def test_status_and_repeated_response_headers(server: ServerProcess) -> None:
    """Rule: the app's status and headers reach the client, repeated names (Set-Cookie) kept
    separately, values untouched. Broken: a status replaced by 200, cookies merged or lost."""
    with server.client() as client:
        assert client.get("/status", params={"code": "418"}).status_code == 418
    with server.raw() as conn:
        conn.send(request_bytes("GET", "/multi-header"))
        response = conn.read_response()
    assert response.all("set-cookie") == ["a=1", "b=2"]
    assert response.header("x-custom") == "Value With Case"


@pytest.mark.parametrize("shape", ["tuples", "lists", "tuple", "iterator"])
def test_response_headers_in_every_iterable_shape(server: ServerProcess, shape: str) -> None:
    """Rule: ``headers`` is an iterable of two-item iterables (the spec's examples use lists):
    a list of tuples or of lists, a tuple of tuples, an iterator all reach the client alike,
    in order. Broken: a shape other than a list of tuples loses its headers or fails (seen
    with only a list read: the tuple's and the iterator's responses were 500s)."""
    with server.raw() as conn:
        conn.send(request_bytes("GET", f"/header-shapes?shape={shape}"))
        response = conn.read_response()
    assert response.status == 200
    assert response.all("set-cookie") == ["a=1", "b=2"]
    assert response.header("x-custom") == "Value"


def test_send_raises_oserror_after_client_disconnects(server: ServerProcess) -> None:
    """Rule: once the client has gone away, send() raises an OSError subclass, so the app stops
    producing. The client reads the start of an endless stream and closes. Broken: send() keeps
    succeeding (the app records type None after ~8 s) or raises an
    exception that is not an OSError."""
    key = uuid.uuid4().hex
    with server.raw() as conn:
        conn.send(request_bytes("GET", f"/stream-until-error?key={key}"))
        conn.read_until(b"\r\n\r\n")
        conn.read_exactly(20_000)
    started = time.monotonic()
    record = fetch_record(server, key, timeout=10)
    assert record["is_oserror"], record
    assert time.monotonic() - started < 10


def test_pathsend_sends_the_file(server: ServerProcess, tmp_path: Path) -> None:
    """Rule: ``http.response.pathsend`` (advertised in ``scope["extensions"]``) sends the file
    at the path as the body, with its Content-Length, without the app reading it; HEAD gets
    the same head and no body; a missing file gives 500. Broken: the extension is missing
    from the scope (the app asserts: 500), the body differs, the length is missing, or a
    missing file hangs the request."""
    data = os.urandom(300_000)
    path = tmp_path / "blob.bin"
    path.write_bytes(data)
    target = f"/pathsend?file={path}"
    with server.client() as client:
        response = client.get(target)
        assert response.status_code == 200
        assert response.headers["content-length"] == str(len(data))
        assert response.content == data
        head = client.head(target)
        assert head.status_code == 200 and head.content == b""
        assert head.headers["content-length"] == str(len(data))
        missing = client.get(f"/pathsend?file={tmp_path / 'nope'}")
        assert missing.status_code == 500


def test_trailers_over_http2(server: ServerProcess) -> None:
    """Rule: ``http.response.trailers`` reach an HTTP/2 client (gRPC's way of ending a call)
    as a HEADERS frame after the body's DATA frames, which ends the stream; the body arrives
    whole before it. Broken: no trailers (the stream ends on the last DATA frame), a body
    cut short, or a reset stream. Untested before; it passed when written, and failed with
    the trailers frame dropped from ``ResponseBody::poll_frame``."""
    events = h2c_get(server, "/trailers", [("te", "trailers")])
    kinds = [type(event).__name__ for event in events]
    heads = [e for e in events if isinstance(e, h2.events.ResponseReceived)]
    assert heads and dict(heads[0].headers)[b":status"] == b"200", kinds
    body = b"".join(e.data for e in events if isinstance(e, h2.events.DataReceived))
    assert body == b"part one, part two", kinds
    trailers = [e for e in events if isinstance(e, h2.events.TrailersReceived)]
    assert trailers, f"no trailers: {kinds}"
    assert dict(trailers[0].headers) == {b"x-checksum": b"abc123"}, trailers[0].headers
    assert "StreamEnded" in kinds and "StreamReset" not in kinds, kinds


def test_trailers_follow_a_chunked_body(server: ServerProcess) -> None:
    """Rule: ``http.response.trailers`` (advertised in ``scope["extensions"]``) after a
    response started with ``trailers: True`` reaches an HTTP/1.1 client that sent
    ``TE: trailers`` as a trailer section after the last chunk; the body arrives whole
    before it. Broken: the extension is missing (500), the body is cut or the trailer is
    missing from the chunked framing, or the connection hangs waiting for the end."""
    conn = server.raw()
    conn.send(request_bytes("GET", "/trailers", headers=[("TE", "trailers")]))
    head = conn.read_until(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    assert b"transfer-encoding: chunked" in head.lower(), head
    rest = conn.read_until(b"\r\n0\r\n")
    rest += conn.read_until(b"\r\n\r\n")
    conn.close()
    chunks, _, trailer = rest.partition(b"\r\n0\r\n")
    data = b"".join(chunks.split(b"\r\n")[1::2])
    assert data == b"part one, part two", rest
    assert trailer.lower() == b"x-checksum: abc123\r\n\r\n", rest
