"""Requests that keep a keep-alive connection quiet for a while: a slow answer, a body that
drips, a large body, and a WebSocket echo (accepted at once or after a while), for the tests
of idle connections."""

from __future__ import annotations

import asyncio
from typing import Any

from asgi_helpers import query, send_response


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        # `?secs=`: the app takes that long to accept, the connection quiet meanwhile.
        await asyncio.sleep(float(query(scope).get("secs", "0")))
        await send({"type": "websocket.accept"})
        message = await receive()
        await send({"type": "websocket.send", "text": message.get("text") or ""})
        await send({"type": "websocket.close", "code": 1000})
        return
    if scope["type"] != "http":
        return
    params = query(scope)
    path = scope["path"]
    if path == "/slow":
        await asyncio.sleep(float(params.get("secs", "1")))
        await send_response(send, b"slow")
    elif path == "/drip":
        # `drops` chunks `gap` seconds apart: the connection sends nothing in between.
        drops, gap = int(params.get("drops", "3")), float(params.get("gap", "1"))
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for _ in range(drops):
            await asyncio.sleep(gap)
            await send({"type": "http.response.body", "body": b"drop;", "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif path == "/big":
        size = int(float(params.get("mb", "8")) * 1024 * 1024)
        await send_response(send, b"x" * size)
    else:
        await send_response(send, b"hello")
