"""Small helpers shared by the plain ASGI test apps (imported from ``tests/apps`` on sys.path).

``RECORDS`` keeps what an app observed in this process; a test reads it back over HTTP with
``GET /_record?key=KEY`` (404 until the key exists). ``log_event`` appends a line to the file
named by ``FERRULE_TEST_EVENTS`` for what must survive the process (shutdown, cancellation).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any
from urllib.parse import parse_qsl

RECORDS: dict[str, Any] = {}


def query(scope: dict[str, Any]) -> dict[str, str]:
    return dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))


def log_event(text: str) -> None:
    path = os.environ.get("FERRULE_TEST_EVENTS")
    if path:
        with open(path, "a", encoding="utf-8") as events:
            events.write(f"{time.time():.6f} {text}\n")
            events.flush()


async def read_body(receive: Any) -> tuple[bytes, list[dict[str, Any]]]:
    """The whole request body and a summary of each message received."""
    chunks: list[bytes] = []
    messages: list[dict[str, Any]] = []
    while True:
        message = await receive()
        body = message.get("body", b"")
        messages.append(
            {
                "type": message["type"],
                "len": len(body),
                "body_type": type(body).__name__,
                "more_body": message.get("more_body", False),
            }
        )
        if message["type"] != "http.request":
            break
        chunks.append(body)
        if not message.get("more_body", False):
            break
    return b"".join(chunks), messages


async def send_response(
    send: Any,
    body: bytes,
    status: int = 200,
    headers: list[tuple[bytes, bytes]] | None = None,
    content_type: bytes = b"text/plain",
) -> None:
    all_headers = [(b"content-type", content_type), (b"content-length", str(len(body)).encode())]
    all_headers += headers or []
    await send({"type": "http.response.start", "status": status, "headers": all_headers})
    await send({"type": "http.response.body", "body": body})


async def send_json(send: Any, value: Any, status: int = 200) -> None:
    await send_response(send, json.dumps(value).encode(), status, content_type=b"application/json")


async def serve_record(scope: dict[str, Any], send: Any) -> None:
    key = query(scope).get("key", "")
    if key in RECORDS:
        await send_json(send, RECORDS[key])
    else:
        await send_response(send, b"not recorded yet", 404)


async def lifespan_noop(receive: Any, send: Any) -> None:
    """Accept startup and shutdown."""
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


def describe_scope(scope: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """``keys`` of ``scope`` (``"<missing>"`` if absent) with their Python types kept, for a
    test to read back with ``repr`` / ``ast.literal_eval``; asgi, client, server and headers
    normalised to plain dicts and tuples."""
    info: dict[str, Any] = {key: scope.get(key, "<missing>") for key in keys}
    info["asgi"] = dict(scope["asgi"])
    info["client"] = tuple(scope["client"]) if scope.get("client") is not None else None
    info["server"] = tuple(scope["server"]) if scope.get("server") is not None else None
    info["headers"] = [tuple(pair) for pair in scope.get("headers", [])]
    return info
