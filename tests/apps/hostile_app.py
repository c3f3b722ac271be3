"""For the hostile-input tests (``tests/hostile/``): records every path it serves (so a
smuggled request is visible), reports what ``receive()`` delivered, streams until the client
goes away, raises on demand and sends ASGI messages described by the client (fuzzing).

Endpoints (paths starting with ``/_`` are not recorded in ``/_seen``):

- ``/_record?key=K``: what an endpoint stored under ``K`` (404 until then).
- ``/_seen``: every path (with query) the app was called with, in order.
- ``/_stats``: pid, number of asyncio tasks, requests in flight in the app.
- ``/ok``: 200 ``ok``.
- ``/echo?key=K``: reads the whole body; answers its length and sha256; stores the ``receive()``
  summary under ``K``.
- ``/count-body?key=K``: reads the body, storing the running total after every message (so a
  test sees how far the app got even if the server cut it off).
- ``/read-until-disconnect?key=K``: receives until a non-``http.request`` message, never answers.
- ``/stream?key=K[&chunks=N&every=S]``: streams N (2000) chunks of 16 KiB, S (0.005) s apart,
  until ``send()`` raises.
- ``/sleep?secs=S&key=K``: sleeps, then answers (on entry ``K-started`` is stored and the
  event ``sleep-started K`` logged to ``FERRULE_TEST_EVENTS``).
- ``/maybe-raise?i=N``: raises when ``N`` is a multiple of 10, else answers ``N``.
- ``/fuzz``: the body is JSON describing a list of ASGI messages (see :func:`decode`); the app
  builds and sends them in order, letting any exception from ``send()`` propagate.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from typing import Any

from asgi_helpers import (
    RECORDS,
    log_event,
    query,
    read_body,
    send_json,
    send_response,
    serve_record,
)

SEEN: list[str] = []
IN_FLIGHT = 0


def decode(value: Any) -> Any:
    """A tagged JSON value as a Python object: ``{"b": latin-1 text}`` bytes, ``{"s": ...}`` str,
    ``{"i": n}`` int, ``{"f": x}`` float, ``{"t": bool}``, ``{"n": null}`` None, ``{"l": [...]}``
    list, ``{"tu": [...]}`` tuple, ``{"d": {...}}`` dict (str keys), ``{"big": n}`` ``n`` bytes."""
    ((tag, inner),) = value.items()
    if tag == "b":
        return inner.encode("latin-1")
    if tag in ("s", "i", "f", "t"):
        return inner
    if tag == "n":
        return None
    if tag == "l":
        return [decode(item) for item in inner]
    if tag == "tu":
        return tuple(decode(item) for item in inner)
    if tag == "d":
        return {key: decode(item) for key, item in inner.items()}
    if tag == "big":
        return b"x" * inner
    raise ValueError(f"unknown tag {tag!r}")


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    global IN_FLIGHT
    if scope["type"] == "lifespan":
        from asgi_helpers import lifespan_noop

        await lifespan_noop(receive, send)
        return
    if scope["type"] != "http":
        return
    path = scope["path"]
    params = query(scope)
    if not path.startswith("/_"):
        qs = scope.get("query_string", b"").decode("latin-1")
        SEEN.append(path + ("?" + qs if qs else ""))
    IN_FLIGHT += 1
    try:
        await dispatch(scope, receive, send, path, params)
    finally:
        IN_FLIGHT -= 1


async def dispatch(
    scope: dict[str, Any], receive: Any, send: Any, path: str, params: dict[str, str]
) -> None:
    key = params.get("key")
    if path == "/_record":
        await serve_record(scope, send)
    elif path == "/_seen":
        await send_json(send, SEEN)
    elif path == "/_stats":
        await send_json(
            send,
            {"pid": os.getpid(), "tasks": len(asyncio.all_tasks()), "in_flight": IN_FLIGHT - 1},
        )
    elif path == "/echo":
        body, messages = await read_body(receive)
        if key:
            RECORDS[key] = messages
        await send_json(send, {"len": len(body), "sha256": hashlib.sha256(body).hexdigest()})
    elif path == "/count-body":
        totals: list[int] = []
        types: list[str] = []
        total = 0
        while True:
            message = await receive()
            types.append(message["type"])
            total += len(message.get("body", b""))
            totals.append(total)
            if key:
                RECORDS[key] = {"totals": totals, "types": types}
            if message["type"] != "http.request" or not message.get("more_body", False):
                break
        await send_json(send, {"len": total})
    elif path == "/read-until-disconnect":
        seen = []
        if key:
            RECORDS[key + "-started"] = True
        while True:
            message = await receive()
            seen.append(message["type"])
            if message["type"] != "http.request":
                break
        if key:
            RECORDS[key] = seen
    elif path == "/stream":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        if key:
            RECORDS[key + "-started"] = True
        sent = 0
        try:
            for _ in range(int(params.get("chunks", "2000"))):
                await send({"type": "http.response.body", "body": b"s" * 16384, "more_body": True})
                sent += 1
                await asyncio.sleep(float(params.get("every", "0.005")))
        except Exception as exc:
            if key:
                RECORDS[key] = {"error": type(exc).__name__, "chunks": sent}
            return
        if key:
            RECORDS[key] = {"error": None, "chunks": sent}
        await send({"type": "http.response.body", "body": b""})
    elif path == "/sleep":
        if key:
            RECORDS[key + "-started"] = True
            log_event(f"sleep-started {key}")
        await asyncio.sleep(float(params.get("secs", "1")))
        await send_response(send, b"slept")
    elif path == "/maybe-raise":
        number = int(params["i"])
        if number % 10 == 0:
            raise RuntimeError(f"hostile_app: planned failure {number}")
        await send_response(send, str(number).encode())
    elif path == "/fuzz":
        body, _ = await read_body(receive)
        for message in decode(json.loads(body)):
            await send(message)
    else:
        await send_response(send, b"ok")
