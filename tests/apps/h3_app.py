"""HTTP/3: what the request looked like, concurrency on one connection, bodies both ways,
trailers and pathsend, for ``test_http3``.

- ``GET /scope``: JSON of ``http_version``, ``scheme``, ``client``, ``server`` and ``headers``.
- ``GET /sleep?secs=S``: sleeps, then answers JSON with ``peak``: the most requests inside this
  route at once so far, and ``now``, those inside it as it answers.
- ``GET /gauge``: JSON of ``now``, requests inside ``/sleep`` or ``/echo`` right now.
- ``POST /echo``: answers the request body as received.
- ``GET /trailers``: a body in two messages, then an ``x-checksum`` trailer.
- ``GET /pathsend?file=F``: the file, by ``http.response.pathsend``.
- ``GET /alt-svc``: a response with the app's own ``alt-svc`` header.
"""

from __future__ import annotations

import asyncio
from typing import Any

from asgi_helpers import lifespan_noop, query, read_body, send_json, send_response

GAUGE = {"now": 0, "peak": 0}


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await lifespan_noop(receive, send)
        return
    path = scope["path"]
    params = query(scope)
    if path == "/scope":
        await send_json(
            send,
            {
                "http_version": scope["http_version"],
                "scheme": scope["scheme"],
                "client": list(scope["client"]),
                "server": list(scope["server"]),
                "headers": [[k.decode(), v.decode()] for k, v in scope["headers"]],
            },
        )
    elif path == "/sleep":
        GAUGE["now"] += 1
        GAUGE["peak"] = max(GAUGE["peak"], GAUGE["now"])
        try:
            await asyncio.sleep(float(params.get("secs", "0.2")))
        finally:
            GAUGE["now"] -= 1
        await send_json(send, {"peak": GAUGE["peak"], "now": GAUGE["now"]})
    elif path == "/gauge":
        await send_json(send, {"now": GAUGE["now"]})
    elif path == "/echo":
        GAUGE["now"] += 1
        try:
            body, _ = await read_body(receive)
        finally:
            GAUGE["now"] -= 1
        await send_response(send, body, content_type=b"application/octet-stream")
    elif path == "/trailers":
        headers = [(b"content-type", b"text/plain"), (b"trailer", b"x-checksum")]
        await send(
            {"type": "http.response.start", "status": 200, "headers": headers, "trailers": True}
        )
        await send({"type": "http.response.body", "body": b"part one, ", "more_body": True})
        await send({"type": "http.response.body", "body": b"part two", "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        trailers = [(b"x-checksum", b"abc123")]
        await send({"type": "http.response.trailers", "headers": trailers, "more_trailers": False})
    elif path == "/pathsend":
        headers = [(b"content-type", b"application/octet-stream")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.pathsend", "path": params["file"]})
    elif path == "/alt-svc":
        await send_response(send, b"own", headers=[(b"alt-svc", b'h3=":1"')])
    else:
        await send_response(send, b"not found", 404)
