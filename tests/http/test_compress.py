"""Response compression (``--compress``, ``--compress-min-size``, ``--compress-types``): the
coding chosen from the request's Accept-Encoding, which responses are compressed and which are
not, the headers of a compressed response (Content-Encoding, Content-Length, Vary, ETag,
Accept-Ranges), streamed bodies flushed chunk by chunk, and HTTP/1.1, HTTP/2, HTTP/3 and TLS.

The app is ``compress_app``: ``/body`` answers :func:`text_body` shaped by its query (type,
length, chunks, status, extra headers), ``/stream`` and ``/sse`` hold each next chunk until the
test asks for it. Bodies are decoded by hand (``zlib``, ``brotli``, ``zstandard``) from the
bytes on the wire (raw sockets, httpx's ``iter_raw``, the ``h2`` library, aioquic), so what is
checked is what the server sent, never what a client library made of it; curl's
``--compressed`` is the real client that decodes. The hostile clients are in
``tests/hostile/test_compress_hostile.py``.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import subprocess
import sys
import time
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import h2.config
import h2.connection
import h2.events
import pytest
from certs import Certs
from h1raw import IncompleteResponse, RawConnection, RawResponse, request_bytes
from h3client import h3_connection
from serverutil import (
    APPS_DIR,
    ServerProcess,
    ferrule_command,
    import_app,
    run_to_exit,
    running_server,
)

APP = "compress_app:app"
CODINGS = ["gzip", "br", "zstd"]
#: The main server's codings, in its order of preference.
ORDER = "zstd,br,gzip"
#: Bound for one exchange.
TIMEOUT = 5.0
#: How long a chunk the app has sent may take to be decodable by the client.
FLUSH_TIMEOUT = 3.0

text_body = import_app("compress_app:text_body")
stream_chunk = import_app("compress_app:stream_chunk")


# -- decoding ------------------------------------------------------------------------------------


class Decoder:
    """An incremental decoder of one content coding: :meth:`feed` returns what the bytes so far
    decode to; :attr:`finished` says the coding's end marker was seen."""

    def __init__(self, coding: str) -> None:
        self.coding = coding
        if coding == "gzip":
            self._obj: Any = zlib.decompressobj(wbits=31)
        elif coding == "br":
            self._obj = pytest.importorskip("brotli").Decompressor()
        elif coding == "zstd":
            self._obj = pytest.importorskip("zstandard").ZstdDecompressor().decompressobj()
        else:
            raise AssertionError(f"not a coding the tests decode: {coding!r}")

    def feed(self, data: bytes) -> bytes:
        if self.coding == "br":
            return self._obj.process(data)
        return self._obj.decompress(data)

    @property
    def finished(self) -> bool:
        if self.coding == "br":
            return self._obj.is_finished()
        return self._obj.eof


def decode(coding: str, data: bytes) -> bytes:
    """``data`` decoded whole; fails if the coding's stream does not end properly."""
    decoder = Decoder(coding)
    out = decoder.feed(data)
    assert decoder.finished, f"the {coding} stream is truncated ({len(data)} bytes)"
    return out


def decoded(response: RawResponse) -> bytes:
    """The body of ``response`` decoded by its Content-Encoding (as is without one)."""
    coding = response.header("content-encoding")
    return response.body if coding is None else decode(coding, response.body)


def vary(headers: Any) -> list[str]:
    """The Vary tokens of a response (all its Vary lines), lowercased, in order."""
    values = headers.all("vary") if isinstance(headers, RawResponse) else headers
    return [token.strip().lower() for value in values for token in value.split(",") if token]


# -- clients -------------------------------------------------------------------------------------


def fetch(
    server: ServerProcess,
    target: str,
    accept: str | None = None,
    *,
    method: str = "GET",
    headers: list[tuple[str, str]] | None = None,
) -> RawResponse:
    """One request on a new HTTP/1.1 connection, with ``Accept-Encoding: accept`` when given."""
    extra = list(headers or [])
    if accept is not None:
        extra.append(("Accept-Encoding", accept))
    with server.raw() as conn:
        conn.send(request_bytes(method, target, headers=extra))
        return conn.read_response(head=method == "HEAD")


def body_target(**query: Any) -> str:
    """``/body?...``; ``h`` may be a list of ``NAME:VALUE`` headers."""
    parts = []
    for name, value in query.items():
        for item in value if isinstance(value, list) else [value]:
            parts.append(f"{name}={quote(str(item), safe='')}")
    return "/body?" + "&".join(parts)


def assert_plain(response: RawResponse, expected: bytes, *, vary_added: bool) -> None:
    """Sent as the app gave it; with ``Vary: Accept-Encoding`` exactly when ``vary_added``."""
    assert response.status == 200, response.raw_head
    assert response.header("content-encoding") is None, response.raw_head
    assert response.body == expected
    assert ("accept-encoding" in vary(response)) is vary_added, response.raw_head


def read_chunk(conn: RawConnection, timeout: float) -> bytes | None:
    """The data of the next chunk of a chunked body; None at the last chunk (trailers read)."""
    size_line = conn.read_until(b"\r\n", timeout)
    size = int(size_line.split(b";")[0].strip(), 16)
    if size == 0:
        while conn.read_until(b"\r\n", timeout) != b"\r\n":
            pass
        return None
    data = conn.read_exactly(size, timeout)
    assert conn.read_exactly(2, timeout) == b"\r\n", conn.received[-200:]
    return data


def h2_exchange(
    server: ServerProcess, path: str, headers: list[tuple[str, str]], timeout: float = TIMEOUT
) -> list[Any]:
    """One GET over h2c with the ``h2`` library on a raw socket (so the body is not decoded):
    the events of the server's frames until its stream ends or is reset."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    head = [(":method", "GET"), (":path", path), (":scheme", "http"), (":authority", "t")]
    conn.send_headers(1, [*head, *headers], end_stream=True)
    events: list[Any] = []
    with socket.create_connection(("127.0.0.1", server.port), timeout=timeout) as sock:
        sock.sendall(conn.data_to_send())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            data = sock.recv(65536)
            if not data:
                break
            for event in conn.receive_data(data):
                events.append(event)
                if isinstance(event, h2.events.DataReceived):
                    conn.acknowledge_received_data(event.flow_controlled_length, 1)
            sock.sendall(conn.data_to_send())
            if any(isinstance(e, (h2.events.StreamEnded, h2.events.StreamReset)) for e in events):
                break
    return events


def tls_args(certs: Certs) -> list[str]:
    return ["--ssl-certfile", str(certs.server_cert), "--ssl-keyfile", str(certs.server_key)]


# -- servers -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    """``--compress zstd,br,gzip`` with the default minimum size (500) and types."""
    with running_server(APP, "--compress", ORDER) as srv:
        yield srv


@pytest.fixture(scope="module")
def custom() -> Iterator[ServerProcess]:
    """Settings of its own: gzip at level 9 preferred to br, no zstd, a minimum of 10 bytes,
    and only ``application/x-custom`` and ``image/*``."""
    args = ["--compress", "gzip:9,br", "--compress-min-size", "10"]
    args += ["--compress-types", "application/x-custom,image/*"]
    with running_server(APP, *args) as srv:
        yield srv


# -- each coding ---------------------------------------------------------------------------------


@pytest.mark.parametrize("coding", CODINGS)
def test_each_coding_decodes_to_the_apps_bytes(server: ServerProcess, coding: str) -> None:
    """Rule: a 5000-byte text/plain body sent in one message with its Content-Length, to a
    client that accepts only ``coding``, comes compressed with it: ``Content-Encoding`` names
    it, ``Content-Length`` is the compressed length (smaller), ``Vary: Accept-Encoding`` is
    added, and the bytes decode (by Python's own decoder) to the app's exactly. Broken: no
    Content-Encoding, the old Content-Length (the read waits for bytes that never come, or
    the decoder sees junk), a truncated stream (the decoder's end is not reached)."""
    expected = text_body(5000)
    response = fetch(server, body_target(size=5000), coding)
    assert response.status == 200
    assert response.header("content-encoding") == coding, response.raw_head
    assert response.header("content-length") == str(len(response.body)), response.raw_head
    assert len(response.body) < len(expected) // 4, len(response.body)
    assert vary(response) == ["accept-encoding"], response.raw_head
    assert decode(coding, response.body) == expected


@pytest.mark.parametrize("coding", CODINGS)
def test_a_streamed_body_is_compressed_and_chunked(server: ServerProcess, coding: str) -> None:
    """Rule: a body streamed in 4 messages without Content-Length is compressed (whatever its
    size) and goes out chunked over HTTP/1.1, with no Content-Length; it decodes to the app's
    bytes. Broken: sent uncompressed, a Content-Length beside chunked, or a stream that ends
    without the coding's end (the decoder is not finished)."""
    response = fetch(server, body_target(size=5000, length=0, chunks=4), coding)
    assert response.header("content-encoding") == coding, response.raw_head
    assert response.chunked and response.header("content-length") is None, response.raw_head
    assert decode(coding, response.body) == text_body(5000)


@pytest.mark.parametrize("coding", CODINGS)
def test_a_large_body_round_trips(server: ServerProcess, coding: str) -> None:
    """Rule: 3 MiB of text, with its Content-Length but sent in 48 messages, comes compressed,
    chunked (its Content-Length removed: the compressed length is not known in advance) and
    decodes to the same 3 MiB. Broken: the old Content-Length kept (the client reads 3 MiB of
    a shorter body and times out), a chunk lost or reordered (the decoded bytes differ)."""
    size = 3 * 1024 * 1024
    with server.raw(timeout=30) as conn:
        target = body_target(size=size, chunks=48)
        conn.send(request_bytes("GET", target, headers=[("Accept-Encoding", coding)]))
        response = conn.read_response(timeout=30)
    assert response.header("content-encoding") == coding, response.raw_head
    assert response.header("content-length") is None, response.raw_head
    assert response.chunked, response.raw_head
    assert len(response.body) < size // 5
    assert decode(coding, response.body) == text_body(size)


# -- negotiation ---------------------------------------------------------------------------------


def check_each(cases: list[Any], check: Any) -> None:
    """Run ``check(case)`` for every case of a table and fail once with every case that failed
    (so one run shows the whole picture, not only the first mismatch)."""
    failures = []
    for case in cases:
        try:
            check(case)
        except AssertionError as exc:
            failures.append(f"{case!r}: {str(exc).splitlines()[0][:300]}")
    assert not failures, f"{len(failures)} of {len(cases)} cases failed:\n" + "\n".join(failures)


#: Accept-Encoding and the coding the main server (zstd, br, gzip) must choose.
NEGOTIATED = [
    ("gzip", "gzip"),
    ("br", "br"),
    ("gzip, br", "br"),  # a tie: the server's order
    ("gzip, deflate, br, zstd", "zstd"),
    ("gzip;q=0.5, br", "br"),
    ("gzip;q=1.0, br;q=0.9, zstd;q=0.1", "gzip"),
    ("br;q=0.8, gzip;q=0.8", "br"),
    ("*", "zstd"),
    ("zstd;q=0, *", "br"),
    ("zstd;q=0, br;q=0, *;q=0.3", "gzip"),
    ("x-gzip", "gzip"),
    ("GZip", "gzip"),
    ("gzip ; q=0.5 ,  br ; q=0.4", "gzip"),
]
#: Accept-Encoding that accepts none of the main server's codings.
NONE_ACCEPTABLE = [
    "deflate",
    "identity",
    "zstd;q=0",
    "gzip;q=0, br;q=0, zstd;q=0",
    "*;q=0",
    "br;q=0, gzip;q=0.000, zstd;q=0.0",
]


def test_negotiation(server: ServerProcess) -> None:
    """Rule (RFC 9110 12.5.3): of the configured codings the one with the highest q wins, ties
    go to the server's order (zstd, br, gzip), ``*`` stands for every coding not named,
    ``x-gzip`` is gzip, coding names are case-insensitive and spaces around ``;`` allowed, and
    the response says ``Vary: Accept-Encoding``. Broken: a tie won by the client's order, ``q``
    ignored, ``*`` or ``x-gzip`` not understood (the case's line says which)."""

    def check(case: tuple[str, str]) -> None:
        accept, chosen = case
        response = fetch(server, body_target(size=2000), accept)
        assert response.status == 200, response.raw_head
        assert response.header("content-encoding") == chosen, response.raw_head
        assert vary(response) == ["accept-encoding"], response.raw_head
        assert decoded(response) == text_body(2000)

    check_each(NEGOTIATED, check)


def test_none_acceptable_is_identity_with_vary(server: ServerProcess) -> None:
    """Rule: when no configured coding is acceptable (not named, or ``q=0`` in any spelling,
    ``*;q=0`` included) the body is sent as the app gave it, with its Content-Length, and
    still with ``Vary: Accept-Encoding`` (another client would get it compressed). Broken: a
    refused coding used (the client cannot decode), or no Vary (a cache would serve this
    identity answer to every client, or a compressed one to this client)."""

    def check(accept: str) -> None:
        response = fetch(server, body_target(size=2000), accept)
        assert_plain(response, text_body(2000), vary_added=True)
        assert response.header("content-length") == "2000", response.raw_head

    check_each(NONE_ACCEPTABLE, check)


def test_no_accept_encoding_is_identity_with_vary(server: ServerProcess) -> None:
    """Rule: a request without Accept-Encoding gets the body as the app sent it (with its own
    Content-Length) and ``Vary: Accept-Encoding``, since a client that sent one would have had
    it compressed. Broken: compressed anyway (RFC 9110 allows any coding then, but a client
    that sends none may not decode), or no Vary."""
    response = fetch(server, body_target(size=2000))
    assert_plain(response, text_body(2000), vary_added=True)
    assert response.header("content-length") == "2000"


def test_the_servers_order_and_level_are_its_own(custom: ServerProcess) -> None:
    """Rule: the order of ``--compress gzip:9,br`` is the server's preference (gzip wins a tie
    with br), a coding not configured (zstd) is never used, and the level is used: the same
    1 MB of text at ``gzip:1`` comes out larger than at ``gzip:9``. Broken: a fixed order
    (br first), zstd sent although not configured, the level ignored (same sizes)."""
    small = body_target(size=2000, type="image/png")  # the custom server's types
    assert fetch(custom, small, "br, gzip").header("content-encoding") == "gzip"
    assert fetch(custom, small, "zstd, br").header("content-encoding") == "br"
    assert_plain(fetch(custom, small, "zstd"), text_body(2000), vary_added=True)
    target = body_target(size=1_000_000, type="image/png")
    best = fetch(custom, target, "gzip")
    with running_server(APP, "--compress", "gzip:1", "--compress-types", "image/*") as fast:
        quick = fetch(fast, target, "gzip")
    assert best.header("content-encoding") == quick.header("content-encoding") == "gzip"
    assert decoded(best) == decoded(quick) == text_body(1_000_000)
    assert len(quick.body) > len(best.body), (len(quick.body), len(best.body))


# -- which responses -----------------------------------------------------------------------------


#: (``/body`` query, Accept-Encoding, compressed with gzip?) against the minimum of 500 bytes.
MIN_SIZE_CASES = [
    ({"size": 499}, "gzip", False),
    ({"size": 500}, "gzip", True),
    ({"size": 499, "length": 0}, "gzip", False),  # one message: its length counts
    ({"size": 500, "length": 0}, "gzip", True),
    ({"size": 499, "length": 0, "chunks": 2}, "gzip", True),  # streamed, length unknown
    ({"size": 499, "chunks": 2}, "gzip", False),  # streamed, but Content-Length: 499
    ({"size": 100}, "gzip, identity;q=0", True),
    ({"size": 100}, "gzip, *;q=0", True),
    ({"size": 100}, "gzip, *;q=0, identity", False),  # identity named: still acceptable
    ({"size": 100, "type": "image/png"}, "gzip, identity;q=0", False),
]


def test_minimum_size(server: ServerProcess) -> None:
    """Rule: a body under ``--compress-min-size`` (default 500) by its Content-Length, or by its
    length when sent in one message, goes as it is and without Vary (it would not be
    compressed for anyone); 500 bytes are compressed; a streamed body of unknown length always
    is; a client refusing identity (``identity;q=0``, or ``*;q=0`` without identity named)
    waives the minimum, not the type. Broken: the bound off by one, a one-message body without
    Content-Length taken as streamed, the waiver ignored, or an image compressed because of
    it (the failing cases are listed)."""

    def check(case: tuple[dict[str, Any], str, bool]) -> None:
        query, accept, compressed = case
        expected = text_body(query["size"])
        response = fetch(server, body_target(**query), accept)
        if compressed:
            assert response.header("content-encoding") == "gzip", response.raw_head
            assert decoded(response) == expected
            assert "accept-encoding" in vary(response), response.raw_head
        else:
            assert_plain(response, expected, vary_added=False)

    check_each(MIN_SIZE_CASES, check)


def test_custom_minimum_size(custom: ServerProcess) -> None:
    """Rule: ``--compress-min-size 10`` makes 10 bytes enough and 9 too few. Broken: the
    default 500 kept (10 bytes sent as they are)."""
    response = fetch(custom, body_target(size=10, type="image/png"), "gzip")
    assert response.header("content-encoding") == "gzip", response.raw_head
    assert decoded(response) == text_body(10)
    assert_plain(
        fetch(custom, body_target(size=9, type="image/png"), "gzip"), text_body(9), vary_added=False
    )


#: Content-Type and whether the default ``--compress-types`` compress it.
DEFAULT_TYPE_CASES = [
    ("application/json", True),
    ("text/html; charset=utf-8", True),
    ("TEXT/CSS", True),
    ("application/problem+json", True),
    ("image/svg+xml", True),
    ("application/javascript", True),
    ("application/atom+xml", True),
    ("application/wasm", True),
    ("text/event-stream", True),
    ("image/png", False),
    ("application/octet-stream", False),
    ("application/jsonp", False),
    ("none", False),  # no Content-Type at all
]


def test_default_types(server: ServerProcess) -> None:
    """Rule: the default ``--compress-types`` compress text of any subtype, JSON and any
    ``+json``, JavaScript, XML and any ``+xml``, SVG and WebAssembly, ignoring parameters and
    case; other types (images, octet-stream, a type that merely starts like json) and a
    response without Content-Type are sent as they are, with no Vary. Broken: parameters or
    case break the match, ``*+json`` not understood, a prefix match (jsonp), or a PNG
    compressed (the failing cases are listed)."""

    def check(case: tuple[str, bool]) -> None:
        content_type, compressed = case
        response = fetch(server, body_target(size=2000, type=content_type), "gzip")
        if compressed:
            assert response.header("content-encoding") == "gzip", response.raw_head
            assert decoded(response) == text_body(2000)
        else:
            assert_plain(response, text_body(2000), vary_added=False)

    check_each(DEFAULT_TYPE_CASES, check)


def test_custom_types(custom: ServerProcess) -> None:
    """Rule: ``--compress-types application/x-custom,image/*`` replaces the default list:
    ``application/x-custom`` and ``image/png`` are compressed, ``text/plain`` no longer is.
    Broken: the default list kept or merged in."""
    for content_type in ("application/x-custom", "image/png"):
        response = fetch(custom, body_target(size=2000, type=content_type), "gzip")
        assert response.header("content-encoding") == "gzip", (content_type, response.raw_head)
        assert decoded(response) == text_body(2000)
    plain = fetch(custom, body_target(size=2000, type="text/plain"), "gzip")
    assert_plain(plain, text_body(2000), vary_added=False)


def test_the_apps_own_content_encoding_is_untouched(server: ServerProcess) -> None:
    """Rule: a response whose app set Content-Encoding (any value, even one the client asked
    for, even ``identity``) is sent as the app made it: the same single Content-Encoding, the
    same bytes and Content-Length, no Vary added. Broken: compressed twice (the client's
    decoder gives the app's compressed bytes back), a second Content-Encoding, or the header
    replaced."""

    def check(value: str) -> None:
        target = body_target(size=2000, h=[f"content-encoding:{value}"])
        response = fetch(server, target, "gzip, br, zstd")
        assert response.all("content-encoding") == [value], response.raw_head
        assert response.body == text_body(2000)
        assert response.header("content-length") == "2000", response.raw_head
        assert "accept-encoding" not in vary(response), response.raw_head

    check_each(["gzip", "br", "identity", "x-custom"], check)


def test_no_transform_is_respected(server: ServerProcess) -> None:
    """Rule (RFC 9111 5.2.2.6): ``Cache-Control: no-transform`` (any case, among other
    directives) forbids compressing: the body goes as it is with its Content-Length. Broken:
    compressed anyway, or only a lone lowercase ``no-transform`` recognised."""

    def check(cache_control: str) -> None:
        target = body_target(size=2000, h=[f"cache-control:{cache_control}"])
        response = fetch(server, target, "gzip")
        assert response.header("content-encoding") is None, response.raw_head
        assert response.body == text_body(2000)
        assert response.header("content-length") == "2000", response.raw_head

    check_each(["no-transform", "public, No-Transform, max-age=60"], check)


def test_statuses(server: ServerProcess) -> None:
    """Rule: 204, 304 and 206 (a byte range of the unencoded body) are never compressed: 204
    and 304 keep no body, no Content-Encoding and their strong ETag, 206 goes byte for byte;
    any other status, an error page too, is compressed like a 200. A response pipelined
    behind each parses cleanly. Broken: an encoded empty body (a gzip header after a 204
    corrupts the connection's next response), a 206 range compressed, or error pages left
    out (the failing statuses are listed)."""

    def check(case: tuple[int, bool]) -> None:
        status, compressed = case
        headers = ['etag:"v1"'] + (["content-range:bytes 0-1999/9000"] if status == 206 else [])
        with server.raw() as conn:
            target = body_target(size=2000, status=status, h=headers)
            conn.send(request_bytes("GET", target, headers=[("Accept-Encoding", "gzip")]))
            conn.send(request_bytes("GET", "/ok"))
            response = conn.read_response()
            after = conn.read_response()
        assert response.status == status, response.raw_head
        assert (after.status, after.body) == (200, b"ok"), after.raw_head
        if compressed:
            assert response.header("content-encoding") == "gzip", response.raw_head
            assert decoded(response) == text_body(2000)
        else:
            assert response.header("content-encoding") is None, response.raw_head
            assert response.body == (text_body(2000) if status == 206 else b"")
            assert response.header("etag") == '"v1"', response.raw_head

    check_each([(204, False), (304, False), (206, False), (404, True), (500, True)], check)


# -- the headers of a compressed response --------------------------------------------------------


def test_etag_becomes_weak(server: ServerProcess) -> None:
    """Rule: compressing changes the bytes, so a strong ETag becomes weak (``W/"abc"``); a weak
    one stays as it is (not ``W/W/``); an uncompressed answer keeps the strong one. Broken: the
    same strong validator for two different representations, ``W/`` doubled, or the
    identity answer's ETag weakened too."""

    def check(case: tuple[str, str | None, str]) -> None:
        etag, accept, sent = case
        response = fetch(server, body_target(size=2000, h=[f"etag:{etag}"]), accept)
        assert response.all("etag") == [sent], response.raw_head
        assert decoded(response) == text_body(2000)

    cases = [('"abc"', "gzip", 'W/"abc"'), ('W/"abc"', "br", 'W/"abc"'), ('"abc"', None, '"abc"')]
    check_each(cases, check)


def test_vary_is_merged(server: ServerProcess) -> None:
    """Rule: ``Accept-Encoding`` is added to the app's own Vary, never twice (whatever the
    case the app wrote it in), and not beside ``Vary: *``, which already says everything.
    Broken: the app's Vary replaced, ``accept-encoding`` listed twice, or added to ``*``."""

    def check(case: tuple[str, list[str]]) -> None:
        app_vary, sent = case
        response = fetch(server, body_target(size=2000, h=[f"vary:{app_vary}"]), "br")
        assert decoded(response) == text_body(2000)
        assert sorted(vary(response)) == sorted(sent), response.raw_head

    cases = [
        ("Origin", ["origin", "accept-encoding"]),
        ("Accept-Encoding", ["accept-encoding"]),
        ("origin, ACCEPT-ENCODING", ["origin", "accept-encoding"]),
        ("*", ["*"]),
    ]
    check_each(cases, check)


def test_accept_ranges_is_removed(server: ServerProcess) -> None:
    """Rule: a compressed response drops the app's ``Accept-Ranges: bytes`` (ranges of the
    encoded body are not what the app serves), and the uncompressed one keeps it. Broken: a
    client is told it may ask for ranges of bytes it cannot map."""
    target = body_target(size=2000, h=["accept-ranges:bytes"])
    compressed = fetch(server, target, "zstd")
    assert compressed.header("content-encoding") == "zstd", compressed.raw_head
    assert compressed.header("accept-ranges") is None, compressed.raw_head
    assert fetch(server, target).header("accept-ranges") == "bytes"


@pytest.mark.parametrize("length", [1, 0], ids=["content-length", "streamed"])
def test_head_gets_the_headers_of_get(server: ServerProcess, length: int) -> None:
    """Rule: HEAD gets the head GET would: Content-Encoding and Vary (a Content-Length, if any,
    is not the unencoded one), and no body: the response pipelined behind it parses cleanly.
    Broken: HEAD not compressed (its headers differ from GET's, a cache mixes them), the old
    Content-Length, or compressed bytes (a gzip header and trailer of an empty body) written
    after the head, which corrupts the next response."""
    target = body_target(size=2000, length=length, chunks=1 if length else 2)
    with server.raw() as conn:
        head_request = request_bytes("HEAD", target, headers=[("Accept-Encoding", "gzip")])
        conn.send(head_request + request_bytes("GET", "/ok"))
        head = conn.read_response(head=True)
        after = conn.read_response()
    assert head.status == 200
    assert head.header("content-encoding") == "gzip", head.raw_head
    assert "accept-encoding" in vary(head), head.raw_head
    assert head.header("content-length") != "2000", head.raw_head
    assert (after.status, after.body) == (200, b"ok"), conn.received[-400:]


# -- streaming -----------------------------------------------------------------------------------


def read_decoded_up_to(
    conn: RawConnection, decoder: Decoder, want: int, what: str
) -> tuple[bytes, bool]:
    """Read chunks and decode until ``want`` bytes are decoded (or the body ends): what was
    decoded and whether the body ended; fails if that takes :data:`FLUSH_TIMEOUT`."""
    got = b""
    deadline = time.monotonic() + FLUSH_TIMEOUT
    while len(got) < want:
        try:
            data = read_chunk(conn, max(deadline - time.monotonic(), 0.01))
        except IncompleteResponse as exc:
            raise AssertionError(
                f"{what} was not decodable within {FLUSH_TIMEOUT}s while the app held the "
                f"next one: {len(got)} of {want} bytes decoded"
            ) from exc
        if data is None:
            return got, True
        got += decoder.feed(data)
    return got, False


@pytest.mark.parametrize("coding", CODINGS)
def test_each_chunk_is_flushed(server: ServerProcess, coding: str) -> None:
    """Rule: each body message the app sends is compressed and flushed at once: the client
    decodes chunk i whole while the app waits to be told (``/release``) before it sends chunk
    i + 1, and at the end the coding's stream ends properly. Broken: the compressor buffers
    until it has a block's worth or the body ends (the first chunk's bytes never decode:
    "chunk 0 was not decodable within 3s")."""
    key = uuid.uuid4().hex
    count = 4
    decoder = Decoder(coding)
    with server.raw(timeout=10) as conn:
        conn.send(
            request_bytes(
                "GET", f"/stream?key={key}&n={count}", headers=[("Accept-Encoding", coding)]
            )
        )
        head = conn.read_until(b"\r\n\r\n").lower()
        assert f"content-encoding: {coding}\r\n".encode() in head, head
        assert b"transfer-encoding: chunked" in head, head
        for i in range(count):
            want = stream_chunk(i)
            got, ended = read_decoded_up_to(conn, decoder, len(want), f"chunk {i}")
            assert got == want, (i, got[:80])
            assert not ended, f"the body ended after chunk {i}"
            if i < count - 1:
                assert fetch(server, f"/release?key={key}").body == b"ok"
        rest, ended = read_decoded_up_to(conn, decoder, 1 << 30, "the end")
        assert ended and rest == b"", rest[:80]
    assert decoder.finished, f"the {coding} stream did not end"


@pytest.mark.parametrize("coding", CODINGS)
def test_server_sent_events_are_compressed_event_by_event(
    server: ServerProcess, coding: str
) -> None:
    """Rule: an SSE response (``text/event-stream``, a text type) is compressed too, and each
    event reaches an ``EventSource``-like client (httpx, reading the raw bytes as they come)
    before the app sends the next. Broken: SSE left uncompressed, or events held back until
    the stream ends (the read of event 0 times out: ``httpx.ReadTimeout``)."""
    key = uuid.uuid4().hex
    count = 3
    decoder = Decoder(coding)
    with (
        server.client(timeout=FLUSH_TIMEOUT) as client,
        client.stream(
            "GET", f"/sse?key={key}&n={count}", headers={"accept-encoding": coding}
        ) as response,
    ):
        assert response.headers.get("content-encoding") == coding, response.headers
        assert response.headers["content-type"] == "text/event-stream"
        raw = response.iter_raw()
        got = b""
        for i in range(count):
            want = b"".join(stream_chunk(j, sse=True) for j in range(i + 1))
            while len(got) < len(want):
                got += decoder.feed(next(raw))
            assert got == want, got
            if i < count - 1:
                assert fetch(server, f"/release?key={key}").body == b"ok"
        for data in raw:
            got += decoder.feed(data)
    assert decoder.finished
    assert got == b"".join(stream_chunk(j, sse=True) for j in range(count))


@pytest.mark.parametrize("coding", CODINGS)
def test_pathsend_is_compressed(server: ServerProcess, tmp_path: Path, coding: str) -> None:
    """Rule: a file sent by ``http.response.pathsend`` is compressed like any body when its
    type is eligible (decoding to the file's bytes, without the file's length as
    Content-Length), and sent as it is, with its length, when not (image/png). Broken: the
    file path bypasses the compressor (no Content-Encoding), or the file's length sent with
    the compressed body."""
    data = text_body(200_000)
    path = tmp_path / "page.txt"
    path.write_bytes(data)
    response = fetch(server, f"/pathsend?file={quote(str(path))}&type=text/plain", coding)
    assert response.status == 200, response.raw_head
    assert response.header("content-encoding") == coding, response.raw_head
    assert response.header("content-length") in (None, str(len(response.body))), response.raw_head
    assert decode(coding, response.body) == data
    image = fetch(server, f"/pathsend?file={quote(str(path))}&type=image/png", coding)
    assert_plain(image, data, vary_added=False)
    assert image.header("content-length") == str(len(data))


# -- HTTP/2, HTTP/3, TLS -------------------------------------------------------------------------


def test_http2_h2c(server: ServerProcess) -> None:
    """Rule: over HTTP/2 (h2c) the same negotiation and headers hold: one connection, each
    coding in turn, a body of known length and a streamed one, decode to the app's bytes,
    with Vary and a recomputed or absent Content-Length. Broken: the HTTP/2 path skips the
    compressor, or sends the unencoded Content-Length (an h2 client rejects the stream)."""
    with server.client(http1=False, http2=True) as client:
        for coding in CODINGS:
            for query in ({"size": 5000}, {"size": 5000, "length": 0, "chunks": 3}):
                target = body_target(**query)
                with client.stream("GET", target, headers={"accept-encoding": coding}) as r:
                    raw = b"".join(r.iter_raw())
                assert r.http_version == "HTTP/2"
                assert r.headers.get("content-encoding") == coding, (target, r.headers)
                assert r.headers.get("content-length") in (None, str(len(raw))), r.headers
                assert vary(r.headers.get_list("vary")) == ["accept-encoding"], r.headers
                assert decode(coding, raw) == text_body(5000), target
        plain = client.get(body_target(size=5000), headers={"accept-encoding": "identity"})
        assert plain.headers.get("content-encoding") is None
        assert plain.content == text_body(5000)


def test_http2_stream_is_flushed_per_chunk(server: ServerProcess) -> None:
    """Rule: over HTTP/2 too each chunk is flushed: chunk 0 decodes from the DATA frames that
    came while the app holds chunk 1. Broken: the h2 body buffers compressed output (reading
    chunk 0 times out: ``httpx.ReadTimeout``)."""
    key = uuid.uuid4().hex
    decoder = Decoder("br")
    with (
        server.client(timeout=FLUSH_TIMEOUT, http1=False, http2=True) as client,
        client.stream("GET", f"/stream?key={key}&n=2", headers={"accept-encoding": "br"}) as r,
    ):
        assert r.headers.get("content-encoding") == "br", r.headers
        raw = r.iter_raw()
        got = b""
        while len(got) < len(stream_chunk(0)):
            got += decoder.feed(next(raw))
        assert got == stream_chunk(0)
        assert fetch(server, f"/release?key={key}").body == b"ok"
        for data in raw:
            got += decoder.feed(data)
    assert decoder.finished
    assert got == stream_chunk(0) + stream_chunk(1)


def test_http2_trailers_follow_a_compressed_body(server: ServerProcess) -> None:
    """Rule: ``http.response.trailers`` still arrive over HTTP/2 after a compressed body: the
    DATA frames decode to the app's body (the coding's end included, before the trailers) and
    a HEADERS frame with the trailer ends the stream. Broken: the trailers lost (the stream
    ends on DATA), the coding's end written after them or never (the decoder is not
    finished), or the stream reset."""
    events = h2_exchange(server, "/trailers", [("accept-encoding", "gzip"), ("te", "trailers")])
    kinds = [type(event).__name__ for event in events]
    heads = [e for e in events if isinstance(e, h2.events.ResponseReceived)]
    assert heads, kinds
    head = dict(heads[0].headers)
    assert head[b":status"] == b"200", head
    assert head.get(b"content-encoding") == b"gzip", head
    body = b"".join(e.data for e in events if isinstance(e, h2.events.DataReceived))
    assert decode("gzip", body) == text_body(3000) + text_body(1000)
    trailers = [e for e in events if isinstance(e, h2.events.TrailersReceived)]
    assert trailers, f"no trailers: {kinds}"
    assert dict(trailers[0].headers) == {b"x-checksum": b"abc123"}
    assert "StreamEnded" in kinds and "StreamReset" not in kinds, kinds


def test_http1_trailers_follow_a_compressed_body(server: ServerProcess) -> None:
    """Rule: over HTTP/1.1 (``TE: trailers``) the trailer section follows the last chunk of a
    compressed body, whose chunks decode to the app's body. Broken: the trailer dropped, or
    the coding's end missing before the zero chunk."""
    with server.raw() as conn:
        headers = [("Accept-Encoding", "zstd"), ("TE", "trailers")]
        conn.send(request_bytes("GET", "/trailers", headers=headers))
        head = conn.read_until(b"\r\n\r\n").lower()
        assert b"content-encoding: zstd\r\n" in head, head
        body = b""
        while True:
            size = int(conn.read_until(b"\r\n").split(b";")[0], 16)
            if size == 0:
                break
            body += conn.read_exactly(size)
            assert conn.read_exactly(2) == b"\r\n"
        trailer = conn.read_until(b"\r\n\r\n")
    assert decode("zstd", body) == text_body(3000) + text_body(1000)
    assert trailer.lower() == b"x-checksum: abc123\r\n\r\n", trailer


@pytest.fixture(scope="module")
def tls_server(certs: Certs) -> Iterator[ServerProcess]:
    """TLS (h2 and HTTP/1.1 by ALPN) and ``--http3``, with ``--compress zstd,br,gzip``."""
    with running_server(APP, "--http3", "--compress", ORDER, *tls_args(certs)) as srv:
        yield srv


def test_http3(tls_server: ServerProcess, certs: Certs) -> None:
    """Rule: over HTTP/3 a body of known length and a streamed one are compressed with the
    negotiated coding (zstd, then gzip) and decode to the app's bytes, with Vary. Broken: the
    HTTP/3 path bypasses the compressor, or the unencoded Content-Length is sent (aioquic
    would see more or fewer bytes than announced)."""

    async def main() -> list[Any]:
        assert tls_server.port is not None
        async with h3_connection(tls_server.port, certs.ca) as client:
            known = await client.request(
                "GET", body_target(size=5000), [(b"accept-encoding", b"zstd")]
            )
            streamed = await client.request(
                "GET",
                body_target(size=5000, length=0, chunks=3),
                [(b"accept-encoding", b"gzip;q=1, zstd;q=0.5")],
            )
            return [known, streamed]

    known, streamed = asyncio.run(main())
    for response, coding in ((known, "zstd"), (streamed, "gzip")):
        assert response.status == 200
        assert response.header(b"content-encoding") == coding.encode(), response.headers
        assert response.header(b"vary") is not None, response.headers
        assert response.header(b"content-length") in (None, str(len(response.body)).encode())
        assert decode(coding, bytes(response.body)) == text_body(5000)


def test_http3_stream_is_flushed_and_trailers_follow(
    tls_server: ServerProcess, certs: Certs
) -> None:
    """Rule: over HTTP/3 each chunk is flushed too (chunk 0 decodes from what arrived while the
    app holds chunk 1), and ``http.response.trailers`` follow a compressed body. Broken: the
    HTTP/3 stream pump buffers compressed output (chunk 0 never decodes in time), or the
    trailers are lost or come before the coding's end."""
    key = uuid.uuid4().hex

    async def main() -> tuple[bytes, bytes, Any, Any]:
        assert tls_server.port is not None
        async with h3_connection(tls_server.port, certs.ca) as client:
            accept = [(b"accept-encoding", b"gzip")]
            stream_id, waiter = client.start_request("GET", f"/stream?key={key}&n=2", accept)
            partial = client._responses[stream_id][0]
            decoder = Decoder("gzip")
            got = b""
            deadline = time.monotonic() + FLUSH_TIMEOUT
            while len(got) < len(stream_chunk(0)) and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
                got += decoder.feed(bytes(partial.body))
                partial.body.clear()
            assert (await client.request("GET", f"/release?key={key}")).status == 200
            streamed = await asyncio.wait_for(waiter, TIMEOUT)
            rest = decoder.feed(bytes(streamed.body))
            assert decoder.finished, "the gzip stream did not end"
            trailers = await client.request("GET", "/trailers", [(b"accept-encoding", b"br")])
            return got, rest, streamed, trailers

    got, rest, streamed, trailers = asyncio.run(main())
    assert got == stream_chunk(0), f"chunk 0 not decodable in {FLUSH_TIMEOUT}s: {got[:60]!r}"
    assert rest == stream_chunk(1)
    assert streamed.header(b"content-encoding") == b"gzip", streamed.headers
    assert trailers.header(b"content-encoding") == b"br", trailers.headers
    assert decode("br", bytes(trailers.body)) == text_body(3000) + text_body(1000)
    assert trailers.trailers == [(b"x-checksum", b"abc123")], trailers.trailers


@pytest.mark.parametrize("http2", [False, True], ids=["http1.1", "http2"])
def test_tls(tls_server: ServerProcess, certs: Certs, http2: bool) -> None:
    """Rule: over TLS (HTTP/1.1, and h2 by ALPN) the response is compressed as over plain TCP.
    Broken: the TLS connection's body path skips the compressor."""
    context = ssl.create_default_context(cafile=str(certs.ca))
    with (
        tls_server.client(verify=context, http2=http2) as client,
        client.stream("GET", body_target(size=5000), headers={"accept-encoding": "br"}) as r,
    ):
        raw = b"".join(r.iter_raw())
    assert r.http_version == ("HTTP/2" if http2 else "HTTP/1.1")
    assert r.headers.get("content-encoding") == "br", r.headers
    assert decode("br", raw) == text_body(5000)


# -- a real client -------------------------------------------------------------------------------

#: curl's feature name for each coding (``curl --version``'s Features line).
CURL_FEATURES = {"gzip": "libz", "br": "brotli", "zstd": "zstd"}


@pytest.mark.parametrize("coding", CODINGS)
def test_curl_compressed(server: ServerProcess, tmp_path: Path, coding: str) -> None:
    """Rule: curl ``--compressed``, offered only ``coding``, gets it and decodes a chunked
    compressed body to the app's bytes. Broken: curl reports a decoding error (exit 61,
    "Unrecognized content encoding" or a bad stream) or writes other bytes."""
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    version = subprocess.run([curl, "--version"], capture_output=True, text=True, check=True)
    features = next(
        (line.split()[1:] for line in version.stdout.splitlines() if line.startswith("Features")),
        [],
    )
    if CURL_FEATURES[coding] not in features:
        pytest.skip(f"this curl cannot decode {coding}")
    out = tmp_path / "body"
    url = f"{server.base_url}{body_target(size=20000, length=0, chunks=3)}"
    argv = [curl, "-sS", "--compressed", "-H", f"Accept-Encoding: {coding}", "-D", "-"]
    result = subprocess.run(
        [*argv, "-o", str(out), "--max-time", str(TIMEOUT), url],
        capture_output=True,
        text=True,
        timeout=TIMEOUT + 5,
    )
    assert result.returncode == 0, result.stderr
    assert f"content-encoding: {coding}" in result.stdout.lower().splitlines(), result.stdout
    assert out.read_bytes() == text_body(20000)


# -- off by default, ferrule.run, usage errors ---------------------------------------------------


def test_off_by_default() -> None:
    """Rule: without ``--compress`` nothing is compressed: a client accepting every coding gets
    the app's bytes, their Content-Length and no Vary. Broken: compression on by default (a
    behaviour change for every existing deployment)."""
    with running_server(APP) as srv:
        response = fetch(srv, body_target(size=5000), "gzip, br, zstd")
        assert_plain(response, text_body(5000), vary_added=False)
        assert response.header("content-length") == "5000"
        streamed = fetch(srv, body_target(size=5000, length=0, chunks=3), "gzip")
        assert_plain(streamed, text_body(5000), vary_added=False)


def test_ferrule_run_takes_the_settings(tmp_path: Path) -> None:
    """Rule: ``ferrule.run(app, compress=..., compress_min_size=..., compress_types=...)`` sets
    the same as the options: br, a 10-byte minimum, text/plain only. Broken: a keyword
    refused (TypeError, the script dies), or ignored (nothing compressed)."""
    script = tmp_path / "serve.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(APPS_DIR)!r})\n"
        "import ferrule\n"
        "ferrule.run('compress_app:app', host='127.0.0.1', port=0, compress='br',\n"
        "            compress_min_size=10, compress_types='text/plain')\n"
    )
    srv = ServerProcess([sys.executable, str(script)])
    try:
        srv.wait_running()
        small = fetch(srv, body_target(size=10), "gzip, br")
        assert small.header("content-encoding") == "br", small.raw_head
        assert decoded(small) == text_body(10)
        html = fetch(srv, body_target(size=2000, type="text/html"), "br")
        assert_plain(html, text_body(2000), vary_added=False)
    finally:
        srv.close()


#: Refused settings, each with the option the message must name.
BAD_VALUES = [
    ["--compress", "lz4"],
    ["--compress", "gzip:12"],
    ["--compress", "gzip:0"],
    ["--compress", "br:12"],
    ["--compress", "zstd:23"],
    ["--compress", "gzip:fast"],
    ["--compress", ""],
    ["--compress-min-size", "-1"],
]


def test_a_bad_value_is_a_usage_error() -> None:
    """Rule: an unknown coding, a level out of its range or not a number, an empty list, or a
    negative minimum size is refused before serving: exit status 2 and a message naming the
    option, no traceback. Broken: the server starts (the run is killed after its timeout:
    "did not exit"), exits 1 with a traceback, or the message does not say which option is
    wrong (the failing values are listed)."""

    def check(args: list[str]) -> None:
        option = args[0]
        if option == "--compress-min-size":
            args = ["--compress", "gzip", *args]
        result = run_to_exit(ferrule_command(APP, "--port", "0", *args), timeout=10)
        assert result.returncode == 2, result.describe()
        assert option in result.stderr, result.describe()
        assert "Traceback" not in result.stderr, result.describe()

    check_each(BAD_VALUES, check)
