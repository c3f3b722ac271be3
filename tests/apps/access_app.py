"""The access log tests' app: an HTTP response whose status, body size, delay and a response
header the query chooses; WebSockets that echo until the client closes, or close with a code
the query chooses, or are refused."""

from __future__ import annotations

import asyncio
from typing import Any

from asgi_helpers import lifespan_noop, query


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await lifespan_noop(receive, send)
        return
    params = query(scope)
    if scope["type"] == "websocket":
        await websocket(scope, params, receive, send)
        return
    await asyncio.sleep(float(params.get("sleep", "0")))
    size = int(params.get("size", "5"))
    await send(
        {
            "type": "http.response.start",
            "status": int(params.get("status", "200")),
            "headers": [(b"x-served-by", params.get("served-by", "app").encode())],
        }
    )
    # Two body messages: the size counted is the whole body, not its last message.
    half = size // 2
    await send({"type": "http.response.body", "body": b"x" * half, "more_body": True})
    await send({"type": "http.response.body", "body": b"y" * (size - half)})


async def websocket(scope: dict[str, Any], params: dict[str, str], receive: Any, send: Any):
    await receive()  # websocket.connect
    if scope["path"] == "/refuse":
        await send({"type": "websocket.close"})
        return
    await send({"type": "websocket.accept"})
    if "close" in params:
        await send({"type": "websocket.close", "code": int(params["close"])})
        return
    while (await receive())["type"] != "websocket.disconnect":
        pass
