"""WebSocket edges where ferrule answers as uvicorn does, for ``test_uvicorn_parity``.

Websocket routes (``?key=K`` names what the route records, read back with ``GET /_record``):

- ``/wait-accept?key=K``: receive the connect, then wait for the next message without ever
  answering the handshake; record that message (the disconnect) under ``key``.
- ``/no-handshake`` (or any other path): return without answering the handshake.
- ``/echo?key=K``: accept, echo until the disconnect, record the disconnect under ``key``.
- ``/start-cl0-return``: a denial response ``websocket.http.response.start`` 404 with
  ``content-length: 0``, then return without a body message.
- ``/start-cl0-raise``: the same start, then raise.
- ``/start-raise``: a start 404 without ``content-length``, then raise.
- ``/start-twice?key=K``: the same start twice; record the second send's exception text.
- ``/return-value``: accept, then return ``123``.

HTTP: ``/_record?key=K`` (404 until recorded), anything else ``ok``.
"""

from __future__ import annotations

from typing import Any

from asgi_helpers import RECORDS, lifespan_noop, query, send_response, serve_record

START_404 = {
    "type": "websocket.http.response.start",
    "status": 404,
    "headers": [(b"content-length", b"0"), (b"content-type", b"text/plain")],
}


async def websocket(scope: dict[str, Any], receive: Any, send: Any) -> Any:
    path = scope["path"]
    key = query(scope).get("key", "")
    first = await receive()
    assert first["type"] == "websocket.connect", first
    if path == "/wait-accept":
        RECORDS[key] = dict(await receive())
    elif path == "/echo":
        await send({"type": "websocket.accept"})
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                RECORDS[key] = dict(message)
                return None
            await send({"type": "websocket.send", "text": message.get("text") or ""})
    elif path == "/start-cl0-return":
        await send(START_404)
    elif path == "/start-cl0-raise":
        await send(START_404)
        raise RuntimeError("failed after a whole response head")
    elif path == "/start-raise":
        await send({"type": "websocket.http.response.start", "status": 404, "headers": []})
        raise RuntimeError("failed before the response body")
    elif path == "/start-twice":
        await send(START_404)
        try:
            await send(START_404)
        except Exception as exc:  # noqa: BLE001 - the text is what the test checks
            RECORDS[key] = str(exc)
    elif path == "/return-value":
        await send({"type": "websocket.accept"})
        return 123
    return None


async def app(scope: dict[str, Any], receive: Any, send: Any) -> Any:
    if scope["type"] == "lifespan":
        await lifespan_noop(receive, send)
    elif scope["type"] == "websocket":
        return await websocket(scope, receive, send)
    elif scope["path"] == "/_record":
        await serve_record(scope, send)
    else:
        await send_response(send, b"ok")
    return None
