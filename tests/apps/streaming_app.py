"""Large streamed responses and concurrency."""

from __future__ import annotations

import asyncio
from typing import Any

from asgi_helpers import RECORDS, query, send_response, serve_record

CHUNK = 65536


def small_chunk(i: int) -> bytes:
    """Chunk ``i`` of ``/small``: its number, padded to 100 bytes."""
    return f"{i:08d}".encode().ljust(99, b".") + b"\n"


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    params = query(scope)
    path = scope["path"]
    if path == "/_record":
        await serve_record(scope, send)
    elif path == "/big":
        # A fresh bytes object per chunk, so a server that kept references would grow.
        total = int(float(params.get("mb", "50")) * 1024 * 1024)
        key = params.get("key")
        headers = [(b"content-type", b"application/octet-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        sent = 0
        try:
            while sent < total:
                size = min(CHUNK, total - sent)
                await send({"type": "http.response.body", "body": bytes(size), "more_body": True})
                sent += size
            await send({"type": "http.response.body", "body": b""})
        except OSError as exc:
            if key:
                RECORDS[key] = {"sent": sent, "error": type(exc).__name__}
            return
        if key:
            RECORDS[key] = {"sent": sent, "error": None}
    elif path == "/small":
        # `n` numbered chunks of 100 bytes sent without yielding; `length=1` declares the total.
        n = int(params.get("n", "512"))
        headers = [(b"content-type", b"text/plain")]
        if params.get("length") == "1":
            headers.append((b"content-length", str(n * 100).encode()))
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for i in range(n):
            await send({"type": "http.response.body", "body": small_chunk(i), "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif path == "/sleep":
        await asyncio.sleep(float(params.get("secs", "0.1")))
        await send_response(send, params.get("id", "").encode())
    else:
        await send_response(send, b"pong")
