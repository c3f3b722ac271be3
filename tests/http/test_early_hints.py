"""103 Early Hints: the ``http.response.early_hint`` message (``{"links": [bytes, ...]}``, as
hypercorn takes it) sent as a 103 response with a ``link`` field per link ahead of the final
response, over HTTP/1.1 (raw socket and ``curl -v``), HTTP/2 (raw frames) and HTTP/3 (aioquic),
against ``extensions_app``; none to an HTTP/1.0 client, none once the final head is out, and a
malformed message raised into the app.

Each test was seen failing first: before the message was served, ``send()`` raised "Unexpected
ASGI message type 'http.response.early_hint'" and every hinted route answered 500 with no 103
(the scope did not offer the extension). Every read is bounded.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
from collections.abc import Iterator
from urllib.parse import quote

import hpack
import pytest
from support.certs import Certs
from support.h1raw import RawConnection, request_bytes
from support.h2raw import DATA, END_STREAM, HEADERS, H2Raw, Received, get
from support.h3client import h3_connection
from support.serverutil import ServerProcess, running_server

APP = "extensions_app:app"
TIMEOUT = 5.0
STYLE = "</style.css>; rel=preload; as=style"


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with running_server(APP) as srv:
        yield srv


def connection(server: ServerProcess) -> RawConnection:
    assert server.port is not None
    return RawConnection(server.port, timeout=TIMEOUT)


def test_http1_103_before_the_final_response(server: ServerProcess) -> None:
    """Rule: over HTTP/1.1 the hint arrives as ``HTTP/1.1 103 Early Hints`` with the link as a
    ``link`` field, then the final 200; the scope offers the extension. Broken: no 103 (the
    200 first), the 103 after the 200's head, or a 500 for the message."""
    with connection(server) as conn:
        conn.send(request_bytes("GET", "/hints"))
        early = conn.read_response()
        final = conn.read_response()
        conn.send(request_bytes("GET", "/tls"))
        scope = conn.read_response().json()
    assert early.raw_head.startswith(b"HTTP/1.1 103 Early Hints\r\n"), early.raw_head
    assert early.all("link") == [STYLE]
    assert (final.status, final.body) == (200, b"hinted")
    assert "http.response.early_hint" in scope["extensions"], scope


def test_http1_several_links_after_start(server: ServerProcess) -> None:
    """Rule: a hint sent after ``http.response.start`` but before the first body message still
    goes out before the final head (which waits for the body), one ``link`` line per link.
    Broken: the links joined or lost, or the hint ignored there."""
    links = "</a.css>; rel=preload; as=style,</b.js>; rel=preload; as=script"
    with connection(server) as conn:
        conn.send(request_bytes("GET", f"/hints-after-start?links={quote(links)}"))
        early = conn.read_response()
        final = conn.read_response()
    assert early.status == 103
    assert early.all("link") == links.split(",")
    assert (final.status, final.body) == (200, b"hinted")


def test_http1_pipelined_requests_keep_their_order(server: ServerProcess) -> None:
    """Rule: two hinted requests sent back to back on one connection get 103, 200, 103, 200,
    each 103 after the previous response ended and before its own final head. Broken: the
    second 103 written into (or before) the first response's bytes."""
    with connection(server) as conn:
        first = request_bytes("GET", "/hints?links=%3C/1%3E")
        second = request_bytes("GET", "/hints?links=%3C/2%3E")
        conn.send(first + second)
        responses = [conn.read_response() for _ in range(4)]
    assert [r.status for r in responses] == [103, 200, 103, 200]
    assert responses[0].all("link") == ["</1>"]
    assert responses[2].all("link") == ["</2>"]
    assert responses[1].body == responses[3].body == b"hinted"


def test_http10_gets_no_hint(server: ServerProcess) -> None:
    """Rule: an HTTP/1.0 client, which cannot take informational responses, gets the final
    response alone, the message accepted and ignored, and the scope does not offer the
    extension. Broken: a 103 sent to it, or a 500."""
    with connection(server) as conn:
        conn.send(request_bytes("GET", "/hints", version="HTTP/1.0"))
        received = conn.read_until_close()
    assert received.startswith(b"HTTP/1.0 200 OK\r\n") or received.startswith(
        b"HTTP/1.1 200 OK\r\n"
    ), received[:200]
    assert b"103" not in received.split(b"\r\n", 1)[0]
    assert b"link:" not in received.lower()
    with connection(server) as conn:
        conn.send(request_bytes("GET", "/tls", version="HTTP/1.0"))
        scope = conn.read_response().json()
    assert "http.response.early_hint" not in scope["extensions"], scope


def test_hint_after_the_final_head_is_ignored(server: ServerProcess) -> None:
    """Rule: a hint sent once the final response is on the wire (after a body message) is
    ignored, as hypercorn ignores it; the response completes. Broken: a 103 in the middle of
    the body, or the app's send() raising."""
    with connection(server) as conn:
        conn.send(request_bytes("GET", "/hints-late"))
        final = conn.read_response()
        conn.send(request_bytes("GET", "/tls"))
        after = conn.read_response()
    assert (final.status, final.body) == (200, b"late")
    assert after.status == 200, "the connection did not go on cleanly"


def test_malformed_hint_raises_into_the_app(server: ServerProcess) -> None:
    """Rule: links that are not bytes make ``send()`` raise TypeError into the app, which the
    server answers with 500 and a logged traceback, as for any malformed message. Broken: a
    panic, a 103 with garbage, or the message silently taken."""
    with connection(server) as conn:
        conn.send(request_bytes("GET", "/hints-bad"))
        response = conn.read_response()
    assert response.status == 500
    server.wait_for_output(r"TypeError: http\.response\.early_hint 'links' must hold bytes")


def h2_responses(conn: H2Raw, streams: set[int]) -> list[tuple[int, str, list[tuple[str, str]]]]:
    """Reads until each of ``streams`` has ended; every HEADERS block in order, as (stream,
    ``:status``, the other fields)."""
    deadline = time.monotonic() + TIMEOUT
    data = b""
    while time.monotonic() < deadline:
        received = Received(data, False)
        ended = {
            f.stream for f in received.frames if f.kind in (DATA, HEADERS) and f.flags & END_STREAM
        }
        if streams <= ended:
            break
        conn.sock.settimeout(max(0.01, deadline - time.monotonic()))
        chunk = conn.sock.recv(65536)
        assert chunk, f"closed early: {received.describe()}"
        data += chunk
    decoder = hpack.Decoder()
    blocks = []
    for f in Received(data, False).frames:
        if f.kind == HEADERS:
            fields = decoder.decode(f.payload)
            status = dict(fields)[":status"]
            blocks.append((f.stream, status, [(n, v) for n, v in fields if n != ":status"]))
    return blocks


def test_http2_103_frames(server: ServerProcess) -> None:
    """Rule: over HTTP/2 (h2c, raw frames) the hint is a HEADERS frame with ``:status`` 103,
    one ``link`` field per link and no END_STREAM, on the request's stream before its final
    HEADERS; two streams at once each get their own, and the hint after the final head is
    ignored. Broken: no 103 frame (hyper offers no way; the vendored h2 puts a sender in the
    request), the 103 after the 200, or on the wrong stream."""
    with H2Raw(server) as conn:
        conn.send(
            get(1, "/hints?links=" + quote("</a.css>,</b.js>"))
            + get(3, "/hints-after-start?links=%3C/c%3E")
            + get(5, "/hints-late")
        )
        blocks = h2_responses(conn, {1, 3, 5})
    by_stream: dict[int, list[tuple[str, list[tuple[str, str]]]]] = {}
    for stream, status, fields in blocks:
        by_stream.setdefault(stream, []).append((status, fields))
    assert [s for s, _ in by_stream[1]] == ["103", "200"], by_stream
    assert by_stream[1][0][1] == [("link", "</a.css>"), ("link", "</b.js>")]
    assert [s for s, _ in by_stream[3]] == ["103", "200"], by_stream
    assert by_stream[3][0][1] == [("link", "</c>")]
    assert [s for s, _ in by_stream[5]] == ["200"], by_stream


@pytest.mark.skipif(shutil.which("curl") is None, reason="needs curl")
@pytest.mark.parametrize(
    ("version", "early_line", "final_line"),
    [
        ("--http1.1", "< HTTP/1.1 103 Early Hints", "< HTTP/1.1 200 OK"),
        ("--http2-prior-knowledge", "< HTTP/2 103", "< HTTP/2 200"),
    ],
)
def test_curl_sees_103(
    server: ServerProcess, version: str, early_line: str, final_line: str
) -> None:
    """Rule: ``curl -v`` shows the 103 and its link before the 200, over HTTP/1.1 and h2c.
    Broken: as for the raw socket and frames, seen by another client's parser."""
    url = f"{server.base_url}/hints"
    command = ["curl", "-sv", version, "--max-time", str(TIMEOUT), url]
    done = subprocess.run(command, capture_output=True, timeout=TIMEOUT + 2, check=False)
    assert done.returncode == 0, done.stderr.decode()
    trace = done.stderr.decode()
    early = trace.find(early_line)
    link = trace.find(f"< link: {STYLE}")
    final = trace.find(final_line)
    assert 0 <= early < link < final, trace
    assert done.stdout == b"hinted"


def test_http3_103(certs: Certs) -> None:
    """Rule: over HTTP/3 the hint is a HEADERS frame with ``:status`` 103 and the links, before
    the final response's HEADERS; the scope offers the extension. Broken: no informational
    HEADERS, or a 500."""
    args = ["--ssl-certfile", str(certs.server_cert), "--ssl-keyfile", str(certs.server_key)]

    async def scenario(port: int) -> tuple[object, object]:
        async with h3_connection(port, certs.ca, timeout=TIMEOUT) as client:
            hinted = await client.request("GET", "/hints?links=" + quote("</a.css>,</b.js>"))
            scope = await client.request("GET", "/tls")
        return hinted, scope

    with running_server(APP, "--http3", *args) as tls:
        assert tls.port is not None
        hinted, scope = asyncio.run(scenario(tls.port))
    assert hinted.informational == [(103, [(b"link", b"</a.css>"), (b"link", b"</b.js>")])]
    assert (hinted.status, bytes(hinted.body)) == (200, b"hinted")
    assert b"http.response.early_hint" in bytes(scope.body)
