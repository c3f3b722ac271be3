"""Echoes the request scope: ``repr`` of the standard keys, so tests see the exact Python types.

``GET /anything`` answers ``repr(dict)`` (read back with ``ast.literal_eval``). Lifespan startup
puts ``token`` in the state so the scope's ``state`` can be checked too.
"""

from __future__ import annotations

from typing import Any

from asgi_helpers import describe_scope, send_response

KEYS = (
    "type",
    "asgi",
    "http_version",
    "method",
    "scheme",
    "path",
    "raw_path",
    "query_string",
    "root_path",
    "client",
    "server",
)


def describe(scope: dict[str, Any]) -> dict[str, Any]:
    info = describe_scope(scope, KEYS)
    info["headers_container"] = type(scope["headers"]).__name__
    info["state"] = sorted(scope["state"]) if "state" in scope else "<missing>"
    info["extra_keys"] = sorted(set(scope) - set(KEYS) - {"headers", "state", "extensions"})
    return info


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                scope["state"]["token"] = "from-lifespan"
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    body = repr(describe(scope)).encode()
    await send_response(send, body)
