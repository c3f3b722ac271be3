"""HTTP/2 and TLS: what the request looked like, concurrency on one connection, large bodies.

- ``GET /scope``: JSON of ``http_version``, ``scheme``, ``client`` and ``server``.
- ``GET /sleep?secs=S&id=N``: sleeps, then answers JSON with ``id``, ``client`` (the peer's
  port tells the TCP connection apart), ``http_version`` and ``peak``: the most requests that
  were inside this route at the same time so far (a gauge kept in this process).
- ``POST /echo``: answers the request body as received, with ``x-received-messages`` the number
  of ``http.request`` messages it came in.
- ``GET /stream?chunks=N&size=S&delay=D``: N chunks of S bytes (chunk i is byte i repeated, no
  Content-Length), ``D`` seconds apart, then an empty final body message.
"""

from __future__ import annotations

import asyncio
from typing import Any

from asgi_helpers import lifespan_noop, query, read_body, send_json, send_response

GAUGE = {"now": 0, "peak": 0}


def describe(scope: dict[str, Any]) -> dict[str, Any]:
    return {
        "http_version": scope.get("http_version", "<missing>"),
        "scheme": scope.get("scheme", "<missing>"),
        "client": list(scope["client"]) if scope.get("client") is not None else None,
        "server": list(scope["server"]) if scope.get("server") is not None else None,
    }


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await lifespan_noop(receive, send)
        return
    if scope["type"] != "http":
        return
    path = scope["path"]
    params = query(scope)
    if path == "/scope":
        await send_json(send, describe(scope))
    elif path == "/sleep":
        GAUGE["now"] += 1
        GAUGE["peak"] = max(GAUGE["peak"], GAUGE["now"])
        try:
            await asyncio.sleep(float(params.get("secs", "0.2")))
        finally:
            GAUGE["now"] -= 1
        await send_json(send, {"id": params.get("id"), "peak": GAUGE["peak"], **describe(scope)})
    elif path == "/echo":
        body, messages = await read_body(receive)
        count = sum(1 for message in messages if message["type"] == "http.request")
        headers = [(b"x-received-messages", str(count).encode())]
        await send_response(send, body, headers=headers, content_type=b"application/octet-stream")
    elif path == "/stream":
        chunks = int(params.get("chunks", "4"))
        size = int(params.get("size", "1000"))
        delay = float(params.get("delay", "0"))
        headers = [(b"content-type", b"application/octet-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        for index in range(chunks):
            body = bytes([index % 256]) * size
            await send({"type": "http.response.body", "body": body, "more_body": True})
            if delay:
                await asyncio.sleep(delay)
        await send({"type": "http.response.body", "body": b""})
    else:
        await send_response(send, b"not found", 404)
