"""The scope's extensions: the TLS extension and 103 Early Hints.

- ``GET /tls``: JSON of ``http_version``, the sorted names of ``scope["extensions"]`` and
  ``scope["extensions"].get("tls")`` (null when absent), and whether that dict is the very
  object the previous request on the same connection got (``same_as_before``; per client
  port).
- ``GET /hints``: an ``http.response.early_hint`` with the links of ``?links=`` (``,``
  separated; ``</style.css>; rel=preload; as=style`` by default), then 200 ``hinted``.
- ``GET /hints-after-start``: ``http.response.start`` first, then the hint, then the body (the
  final head is not on the wire until the first body message).
- ``GET /hints-late``: the hint after the first body message (the final response is out): the
  hint is ignored; the body says ``late``.
- ``GET /hints-bad``: a hint whose links are ``str``, not ``bytes``: the app's ``send()``
  raises and the server answers 500.
- websocket ``/tls``: accepts, sends the JSON ``/tls`` answers, and closes.
"""

from __future__ import annotations

import json
from typing import Any

from asgi_helpers import lifespan_noop, query, send_json

DEFAULT_LINK = "</style.css>; rel=preload; as=style"
#: The TLS dict each client port was last given.
SEEN: dict[Any, int] = {}


def describe(scope: dict[str, Any]) -> dict[str, Any]:
    extensions = scope.get("extensions") or {}
    tls = extensions.get("tls")
    port = scope["client"][1] if scope.get("client") else None
    same = tls is not None and SEEN.get(port) == id(tls)
    if tls is not None:
        SEEN[port] = id(tls)
    return {
        "http_version": scope["http_version"],
        "extensions": sorted(extensions),
        "tls": tls,
        "same_as_before": same,
    }


def links(scope: dict[str, Any]) -> list[bytes]:
    return [link.encode() for link in query(scope).get("links", DEFAULT_LINK).split(",")]


async def hint(send: Any, scope: dict[str, Any]) -> None:
    await send({"type": "http.response.early_hint", "links": links(scope)})


async def start(send: Any) -> None:
    headers = [(b"content-type", b"text/plain")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await lifespan_noop(receive, send)
        return
    path = scope["path"]
    if scope["type"] == "websocket":
        await receive()
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": json.dumps(describe(scope))})
        await send({"type": "websocket.close", "code": 1000})
        return
    if path == "/tls":
        await send_json(send, describe(scope))
    elif path == "/hints":
        await hint(send, scope)
        await start(send)
        await send({"type": "http.response.body", "body": b"hinted"})
    elif path == "/hints-after-start":
        await start(send)
        await hint(send, scope)
        await send({"type": "http.response.body", "body": b"hinted"})
    elif path == "/hints-late":
        await start(send)
        await send({"type": "http.response.body", "body": b"la", "more_body": True})
        await hint(send, scope)
        await send({"type": "http.response.body", "body": b"te"})
    elif path == "/hints-bad":
        await send({"type": "http.response.early_hint", "links": ["</a.css>; rel=preload"]})
        await start(send)
        await send({"type": "http.response.body", "body": b"unreachable"})
    else:
        await send_json(send, {"error": "no such path"}, status=404)
