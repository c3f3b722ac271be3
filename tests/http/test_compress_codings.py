"""Response compression (``--compress``): each coding (gzip, br, zstd) of a body sent whole,
streamed or large, the headers of a compressed response (Content-Encoding, Content-Length, Vary,
ETag, Accept-Ranges, HEAD), and curl's ``--compressed`` as the real client that decodes.

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

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.compressutil import (
    APP,
    CODINGS,
    ORDER,
    TIMEOUT,
    body_target,
    check_each,
    decode,
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
