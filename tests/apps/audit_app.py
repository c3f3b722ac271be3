"""For ``tests/hostile/test_audit.py``: an app whose mistakes are made on purpose (a body that
does not match its own Content-Length, a close frame the wire cannot carry) and that records
what the server handed it (``?key=K``, read back with ``GET /_record?key=K``).

HTTP routes:

- ``/_record?key=K``: what a route stored under ``K`` (404 until then).
- ``/ok``: 200 ``ok``.
- ``/length?declared=D&body=B[&key=K]``: ``http.response.start`` with ``content-length: D``
  (sent as given, digits or not), then ``B`` in one final body message; records
  ``{"raised": exception name or None}``.
- ``/length-stream?declared=D&key=K``: the same head, then ``b"hdrbody"`` with ``more_body``
  and an empty final message; records ``{"raised": ..., "message": ...}``.
- ``/status?code=N&body=B``: status ``N`` with the body ``B`` (no Content-Length).
- anything else: 200 ``ok``; with an ``x-key: K`` request header, records the scope's
  ``method``, ``path`` and ``raw_path`` (latin-1) under ``K`` first (for request targets that
  carry no query string).

WebSocket routes:

- ``/close?code=C&reason=N&key=K``: accept, then ``websocket.close`` with code ``C`` and a
  reason of ``N`` times ``"r"``; records ``{"raised": exception name or None}``.
- anything else: accept, then wait for ``websocket.disconnect``.
"""

from __future__ import annotations

from typing import Any

from asgi_helpers import RECORDS, lifespan_noop, query, send_response, serve_record


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await lifespan_noop(receive, send)
    elif scope["type"] == "websocket":
        await websocket(scope, receive, send)
    elif scope["type"] == "http":
        await http(scope, receive, send)


async def http(scope: dict[str, Any], receive: Any, send: Any) -> None:
    path = scope["path"]
    params = query(scope)
    key = params.get("key")
    if path == "/_record":
        await serve_record(scope, send)
    elif path == "/length":
        headers = [(b"content-length", params["declared"].encode("latin-1"))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        try:
            await send({"type": "http.response.body", "body": params["body"].encode("latin-1")})
        except Exception as exc:
            if key:
                RECORDS[key] = {"raised": type(exc).__name__}
            raise
        if key:
            RECORDS[key] = {"raised": None}
    elif path == "/length-stream":
        headers = [(b"content-length", params["declared"].encode("latin-1"))]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        try:
            await send({"type": "http.response.body", "body": b"hdrbody", "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        except Exception as exc:
            if key:
                RECORDS[key] = {"raised": type(exc).__name__, "message": str(exc)}
            raise
        if key:
            RECORDS[key] = {"raised": None, "message": ""}
    elif path == "/status":
        await send({"type": "http.response.start", "status": int(params["code"]), "headers": []})
        await send({"type": "http.response.body", "body": params.get("body", "").encode()})
    else:
        headers = dict(scope["headers"])
        record_key = headers.get(b"x-key")
        if record_key:
            RECORDS[record_key.decode("latin-1")] = {
                "method": scope["method"],
                "path": scope["path"],
                "raw_path": scope["raw_path"].decode("latin-1"),
            }
        await send_response(send, b"ok")


async def websocket(scope: dict[str, Any], receive: Any, send: Any) -> None:
    params = query(scope)
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    if scope["path"] == "/close":
        message = {
            "type": "websocket.close",
            "code": int(params["code"]),
            "reason": "r" * int(params.get("reason", "0")),
        }
        try:
            await send(message)
        except Exception as exc:
            RECORDS[params["key"]] = {"raised": type(exc).__name__}
            raise
        RECORDS[params["key"]] = {"raised": None}
        return
    while (await receive())["type"] != "websocket.disconnect":
        pass
