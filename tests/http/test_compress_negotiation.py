"""Response compression (``--compress``, the default ``--compress-min-size`` and
``--compress-types``): the coding chosen from the request's Accept-Encoding, and which responses are
compressed and which are not (their size, type, status, the app's own Content-Encoding,
``no-transform``).

The app is ``compress_app``: ``/body`` answers :func:`text_body` shaped by its query (type, length,
chunks, status, extra headers), ``/stream`` and ``/sse`` hold each next chunk until the test asks
for it. Bodies are decoded by hand (``compressutil.Decoder``: ``zlib``, ``brotli``, ``zstandard``)
from the bytes on the wire, so what is checked is what the server sent, never what a client library
made of it. The working paths are split by concern: ``test_compress_codings.py`` (each coding, the
headers of a compressed response, curl), ``test_compress_negotiation.py`` (the coding chosen, which
responses are compressed), ``test_compress_streaming.py`` (flushing, SSE, pathsend, trailers,
HTTP/2, HTTP/3, TLS) and ``test_compress_settings.py`` (the options' values, ``ferrule.run``, usage
errors); the hostile clients in ``tests/hostile/test_compress_hostile.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from support.compressutil import (
    APP,
    ORDER,
    assert_plain,
    body_target,
    check_each,
    decoded,
    fetch,
    text_body,
    vary,
)
from support.h1raw import request_bytes
from support.serverutil import (
    ServerProcess,
    running_server,
)

# -- servers -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    """``--compress zstd,br,gzip`` with the default minimum size (500) and types."""
    with running_server(APP, "--compress", ORDER) as srv:
        yield srv


# -- negotiation ---------------------------------------------------------------------------------


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
