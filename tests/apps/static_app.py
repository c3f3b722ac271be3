"""The app behind the static-file tests (``--static-path-mount``): it shows whether a request
reached Python at all.

- ``/ok`` answers ``ok`` (the hostile tests' check that the server still serves).
- ``/_seen`` answers the JSON list of ``METHOD PATH`` of every other request the app was called
  with, in order, so a test can check that a static request never entered Python.
- Anything else answers 404 with ``x-from-app: static_app`` and the body ``app 404: METHOD
  PATH`` (a recognisable page of its own, what ``--static-path-fallthrough`` hands it).
"""

from __future__ import annotations

import json
from typing import Any

from asgi_helpers import lifespan_noop, send_response

#: ``METHOD PATH`` of every request the app answered, except ``/ok`` and ``/_seen``.
SEEN: list[str] = []

APP_HEADER = (b"x-from-app", b"static_app")


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await lifespan_noop(receive, send)
        return
    assert scope["type"] == "http"
    path = scope["path"]
    if path == "/ok":
        await send_response(send, b"ok", headers=[APP_HEADER])
        return
    if path == "/_seen":
        await send_response(
            send, json.dumps(SEEN).encode(), headers=[APP_HEADER], content_type=b"application/json"
        )
        return
    # Drain the request body, then answer the app's own 404 page.
    while True:
        message = await receive()
        if message["type"] != "http.request" or not message.get("more_body", False):
            break
    SEEN.append(f"{scope['method']} {path}")
    body = f"app 404: {scope['method']} {path}".encode()
    await send_response(send, body, 404, headers=[APP_HEADER])
