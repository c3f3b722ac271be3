"""Response compression (``--compress``) of streamed bodies and over each protocol: each chunk
flushed as the app sends it, server-sent events, ``http.response.pathsend``, trailers after a
compressed body, and HTTP/1.1, HTTP/2, HTTP/3 and TLS.

The app is ``compress_app``: ``/body`` answers :func:`text_body` shaped by its query (type, length,
chunks, status, extra headers), ``/stream`` and ``/sse`` hold each next chunk until the test asks
for it. Bodies are decoded by hand (``compressutil.Decoder``: ``zlib``, ``brotli``, ``zstandard``)
from the bytes on the wire, so what is checked is what the server sent, never what a client library
made of it. Bytes are read from raw sockets, httpx's ``iter_raw``, the ``h2`` library and aioquic.
The working paths are split by concern: ``test_compress_codings.py`` (each coding, the headers of a
compressed response, curl), ``test_compress_negotiation.py`` (the coding chosen, which responses are
compressed), ``test_compress_streaming.py`` (flushing, SSE, pathsend, trailers, HTTP/2, HTTP/3, TLS)
and ``test_compress_settings.py`` (the options' values, ``ferrule.run``, usage errors); the hostile
clients in ``tests/hostile/test_compress_hostile.py``.
"""

from __future__ import annotations

import asyncio
import ssl
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import h2.config
import h2.connection
import h2.events
import pytest
from support.certs import Certs
from support.compressutil import (
    APP,
    CODINGS,
    FLUSH_TIMEOUT,
    ORDER,
    TIMEOUT,
    Decoder,
    assert_plain,
    body_target,
    decode,
    fetch,
    stream_chunk,
    text_body,
    vary,
)
from support.h1raw import IncompleteResponse, RawConnection, request_bytes
from support.h2get import h2c_get
from support.h3client import h3_connection
from support.serverutil import (
    ServerProcess,
    running_server,
)

# -- clients -------------------------------------------------------------------------------------


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


def tls_args(certs: Certs) -> list[str]:
    return ["--ssl-certfile", str(certs.server_cert), "--ssl-keyfile", str(certs.server_key)]


# -- servers -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    """``--compress zstd,br,gzip`` with the default minimum size (500) and types."""
    with running_server(APP, "--compress", ORDER) as srv:
        yield srv


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
    events = h2c_get(
        server, "/trailers", [("accept-encoding", "gzip"), ("te", "trailers")], TIMEOUT
    )
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
