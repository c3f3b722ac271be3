"""For the RFC 9112 table (``tests/http/test_rfc9112.py``): logs every request it is called
with (what the scope and ``receive()`` said) and answers according to the first path segment.

Every request but ``/_log`` is appended to ``LOG`` *after* its body was read (or the read ended
in ``http.disconnect``), so the log also tells whether the app was told the body is complete.

- ``/_log``: the whole log as JSON, a list of the entries below, in order.
- ``/echo/...`` (and any other path): answers the entry as JSON: ``method``, ``path``,
  ``raw_path``, ``query_string``, ``scheme``, ``http_version``, ``headers`` (``[name, value]``,
  latin-1), ``host`` (every Host value the scope has), ``body`` (latin-1), ``complete`` (the
  last message was ``http.request`` without ``more_body``), ``last`` (its type).
- ``/no-read/...``: answers at once without reading the body (logged without ``body``).
- ``/sleep/...``: waits 0.3 s, then answers as ``/echo`` (for pipelining order).
- ``/stream/...``: answers ``one`` then ``two`` as two body messages, without Content-Length.
- ``/no-content/...``: answers 204, streamed as an empty body message with ``more_body`` and an
  empty final one, with no framing header.
- ``/fixed/...``: answers :data:`FIXED` with its Content-Length (also to HEAD).
"""

from __future__ import annotations

import asyncio
from typing import Any

from asgi_helpers import lifespan_noop, read_body, send_json, send_response

#: The body of ``/fixed/...``: a HEAD response must announce this length (or none).
FIXED = b"the same body for GET and HEAD\n"

LOG: list[dict[str, Any]] = []


def entry(scope: dict[str, Any]) -> dict[str, Any]:
    headers = [[n.decode("latin-1"), v.decode("latin-1")] for n, v in scope["headers"]]
    return {
        "method": scope["method"],
        "path": scope["path"],
        "raw_path": scope["raw_path"].decode("latin-1"),
        "query_string": scope["query_string"].decode("latin-1"),
        "scheme": scope["scheme"],
        "http_version": scope["http_version"],
        "headers": headers,
        "host": [value for name, value in headers if name == "host"],
    }


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await lifespan_noop(receive, send)
        return
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/_log":
        await send_json(send, LOG)
        return
    kind = path.split("/")[1] if path.startswith("/") else path
    seen = entry(scope)
    if kind == "no-read":
        LOG.append(seen)
        await send_response(send, b"answered without reading the body")
        return
    body, messages = await read_body(receive)
    last = messages[-1]
    seen["body"] = body.decode("latin-1")
    seen["last"] = last["type"]
    seen["complete"] = last["type"] == "http.request" and not last["more_body"]
    LOG.append(seen)
    if not seen["complete"]:
        return  # the client is gone: nothing to answer
    if kind == "sleep":
        await asyncio.sleep(0.3)
    if kind == "stream":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"one", "more_body": True})
        await send({"type": "http.response.body", "body": b"two"})
    elif kind == "no-content":
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b"", "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif kind == "fixed":
        await send_response(send, FIXED)
    else:
        await send_json(send, seen)
