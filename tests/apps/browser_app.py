"""A page whose script opens a WebSocket back to the server, for ``test_browser``.

- ``GET /``: an HTML page; its script opens ``wss://<host>/ws`` (or ``ws://``) and, once open,
  sends ``ws.extensions`` (the extensions the browser agreed to) as its one message.
- websocket ``/ws``: accept, receive that message, record ``{"http_version": ..., "extensions":
  <the message>, "offered": <the browser's Sec-WebSocket-Extensions>}`` under ``browser``.
- ``GET /_record?key=browser``: the record (404 until it exists).
"""

from __future__ import annotations

from typing import Any

from asgi_helpers import RECORDS, lifespan_noop, send_response, serve_record

PAGE = b"""<!doctype html>
<html><head><title>ferrule</title></head><body><p id="out">waiting</p>
<script>
const scheme = location.protocol === "https:" ? "wss" : "ws";
const ws = new WebSocket(`${scheme}://${location.host}/ws`);
ws.onopen = () => ws.send(ws.extensions);
ws.onmessage = (event) => { document.getElementById("out").textContent = event.data; };
</script></body></html>
"""


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await lifespan_noop(receive, send)
    elif scope["type"] == "websocket":
        await receive()
        await send({"type": "websocket.accept"})
        message = await receive()
        offered = dict(scope["headers"]).get(b"sec-websocket-extensions", b"").decode()
        RECORDS["browser"] = {
            "http_version": scope["http_version"],
            "extensions": message.get("text"),
            "offered": offered,
        }
        await send({"type": "websocket.send", "text": "recorded"})
        await receive()
    elif scope["path"] == "/_record":
        await serve_record(scope, send)
    else:
        await send_response(send, PAGE, content_type=b"text/html; charset=utf-8")
