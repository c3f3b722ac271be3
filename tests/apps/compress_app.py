"""Responses for the compression tests (``--compress``, ``tests/http/test_compress_*.py``).

``GET /body`` answers :func:`text_body` of ``?size=`` bytes (default 2000), shaped by its query:
``type`` (the Content-Type, ``none`` for none; default ``text/plain``), ``length=0`` (no
Content-Length), ``chunks=K`` (the body in K messages, the last with ``more_body`` false),
``status``, and ``h=NAME:VALUE`` (repeatable) for more headers, such as an ETag or a Vary.

``GET /stream?key=K&n=N`` (and ``/sse``, ``text/event-stream``) sends :func:`stream_chunk` ``i``
for ``i`` in ``0..N``, and before each next chunk waits (at most 10 s) until ``/release?key=K``
has been requested ``i + 1`` times, so a test reads chunk ``i`` while the app holds chunk
``i + 1``. ``/pathsend?file=PATH&type=T`` sends a file by ``http.response.pathsend``,
``/trailers`` a streamed body then a trailer, ``/big?mb=M`` M MiB of text in 64 KiB chunks
(``random=1``: base64 of random bytes; recording in ``/_record?key=`` how far it got before
``send()`` raised).
"""

from __future__ import annotations

import asyncio
import base64
import os
from typing import Any
from urllib.parse import parse_qsl

from asgi_helpers import RECORDS, serve_record

#: How many times ``/release?key=K`` was requested, by key.
RELEASES: dict[str, int] = {}
#: A line of the text bodies: compressible, but not a single repeated byte.
LINE = "{:07d} the quick brown fox jumps over the lazy dog, again and again\n"


def text_body(size: int) -> bytes:
    """``size`` bytes of numbered text lines (compresses well, decodes to something checkable)."""
    out = bytearray()
    i = 0
    while len(out) < size:
        out += LINE.format(i).encode()
        i += 1
    return bytes(out[:size])


def stream_chunk(i: int, sse: bool = False) -> bytes:
    """Chunk ``i`` of ``/stream`` (or event ``i`` of ``/sse``)."""
    if sse:
        return f"id: {i}\nevent: tick\ndata: event number {i}\n\n".encode()
    return f"chunk {i}: ".encode() + text_body(300 + i)


def _params(scope: dict[str, Any]) -> list[tuple[str, str]]:
    return parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)


async def _start(send: Any, status: int, headers: list[tuple[bytes, bytes]], **extra: Any) -> None:
    await send({"type": "http.response.start", "status": status, "headers": headers, **extra})


async def _body(send: Any, data: bytes, more: bool = False) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": more})


async def _wait_released(key: str, count: int) -> None:
    for _ in range(1000):
        if RELEASES.get(key, 0) >= count:
            return
        await asyncio.sleep(0.01)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    path = scope["path"]
    pairs = _params(scope)
    params = dict(pairs)
    if path == "/_record":
        await serve_record(scope, send)
    elif path == "/body":
        size = int(params.get("size", "2000"))
        data = text_body(size)
        status = int(params.get("status", "200"))
        headers: list[tuple[bytes, bytes]] = []
        content_type = params.get("type", "text/plain")
        if content_type != "none":
            headers.append((b"content-type", content_type.encode("latin-1")))
        if params.get("length", "1") == "1" and status not in (204, 304):
            headers.append((b"content-length", str(size).encode()))
        for name, value in pairs:
            if name == "h":
                key, _, val = value.partition(":")
                headers.append((key.strip().encode("latin-1"), val.strip().encode("latin-1")))
        await _start(send, status, headers)
        if status in (204, 304):
            await _body(send, b"")
            return
        chunks = max(int(params.get("chunks", "1")), 1)
        step = -(-size // chunks) if size else 0
        for i in range(chunks):
            await _body(send, data[i * step : (i + 1) * step], more=i < chunks - 1)
    elif path in ("/stream", "/sse"):
        sse = path == "/sse"
        key = params.get("key", "")
        count = int(params.get("n", "3"))
        content_type = b"text/event-stream" if sse else b"text/plain; charset=utf-8"
        await _start(send, 200, [(b"content-type", content_type), (b"cache-control", b"no-cache")])
        for i in range(count):
            if i:
                await _wait_released(key, i)
            await _body(send, stream_chunk(i, sse), more=True)
        await _body(send, b"")
    elif path == "/release":
        key = params.get("key", "")
        RELEASES[key] = RELEASES.get(key, 0) + 1
        await _start(send, 200, [(b"content-type", b"text/plain"), (b"content-length", b"2")])
        await _body(send, b"ok")
    elif path == "/pathsend":
        assert "http.response.pathsend" in scope.get("extensions", {})
        headers = [(b"content-type", params.get("type", "text/plain").encode())]
        await _start(send, 200, headers)
        await send({"type": "http.response.pathsend", "path": params["file"]})
    elif path == "/trailers":
        headers = [(b"content-type", b"text/plain"), (b"trailer", b"x-checksum")]
        await _start(send, 200, headers, trailers=True)
        await _body(send, text_body(3000), more=True)
        await _body(send, text_body(1000))
        trailer = [(b"x-checksum", b"abc123")]
        await send({"type": "http.response.trailers", "headers": trailer, "more_trailers": False})
    elif path == "/big":
        total = int(float(params.get("mb", "1")) * 1024 * 1024)
        key = params.get("key")
        await _start(send, 200, [(b"content-type", b"text/plain")])
        chunk = text_body(65536)
        noisy = params.get("random") == "1"
        sent = 0
        try:
            while sent < total:
                # A fresh object each time; ``random=1``: base64 of random bytes, which
                # compresses to about 3/4 of its size, so the output is as large as the input.
                data = base64.b64encode(os.urandom(49152)) if noisy else bytes(chunk)
                part = data[: min(len(data), total - sent)]
                await _body(send, part, more=True)
                sent += len(part)
            await _body(send, b"")
        except OSError as exc:
            if key:
                RECORDS[key] = {"sent": sent, "error": type(exc).__name__}
            return
        if key:
            RECORDS[key] = {"sent": sent, "error": None}
    else:
        await _start(send, 200, [(b"content-type", b"text/plain"), (b"content-length", b"2")])
        await _body(send, b"ok")
