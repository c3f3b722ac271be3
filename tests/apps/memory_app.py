"""For the memory-bound hostile tests (``tests/hostile/test_memory_*.py``): routes that give an
attacker something to make the server hold (a large streamed response, a body the app reads or
never reads, a call that stays in flight), and counters of the app calls in flight.

HTTP routes:

- ``/ok`` (and any path not listed): 200 ``ok``.
- ``/big?mb=M&chunk=C``: streams M (16) MiB in chunks of C (65536) bytes with ``more_body``,
  until done or ``send()`` raises.
- ``/hold?secs=S``: stays in the app S (2) seconds without reading the body, then answers;
  counted in ``hold`` (``/_gauge``).
- ``/upload``: reads the body to its end (or ``http.disconnect``), keeping only its length;
  counted in ``upload``.
- ``/_gauge``: JSON ``{name: {"now": n, "peak": p, "calls": c}}`` (calls in flight, the most
  at once, calls in all) for ``ok`` (any other path), ``hold``, ``upload``, ``big`` and ``ws``
  (WebSocket sessions); ``/_gauge?reset=1`` sets every peak to its current value first.
- ``/_stats``: pid and number of asyncio tasks.

WebSocket routes:

- ``/echo``: accept, echo text and bytes until the client goes.
- ``/noread?secs=S``: accept, then never call ``receive()`` for S (30) seconds (an app busy
  elsewhere), then close.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator
from typing import Any

from asgi_helpers import lifespan_noop, query, send_json, send_response

GAUGES: dict[str, dict[str, int]] = {
    name: {"now": 0, "peak": 0, "calls": 0} for name in ("ok", "hold", "upload", "big", "ws")
}
#: One chunk object reused for every body message, so the app itself allocates nothing per send.
CHUNKS: dict[int, bytes] = {}


@contextlib.contextmanager
def counted(name: str) -> Iterator[None]:
    gauge = GAUGES[name]
    gauge["now"] += 1
    gauge["calls"] += 1
    gauge["peak"] = max(gauge["peak"], gauge["now"])
    try:
        yield
    finally:
        gauge["now"] -= 1


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await lifespan_noop(receive, send)
    elif scope["type"] == "websocket":
        await websocket(scope, receive, send)
    else:
        await http(scope, receive, send)


async def http(scope: dict[str, Any], receive: Any, send: Any) -> None:
    path = scope["path"]
    params = query(scope)
    if path == "/big":
        size = int(params.get("chunk", "65536"))
        chunk = CHUNKS.setdefault(size, b"b" * size)
        count = int(float(params.get("mb", "16")) * 2**20) // size
        with counted("big"):
            await send({"type": "http.response.start", "status": 200, "headers": []})
            with contextlib.suppress(OSError):
                for _ in range(count):
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
    elif path == "/hold":
        with counted("hold"):
            await asyncio.sleep(float(params.get("secs", "2")))
        await send_response(send, b"held")
    elif path == "/upload":
        total = 0
        with counted("upload"):
            while True:
                message = await receive()
                total += len(message.get("body", b""))
                if message["type"] != "http.request" or not message.get("more_body"):
                    break
        await send_json(send, {"len": total})
    elif path == "/_gauge":
        if params.get("reset"):
            for gauge in GAUGES.values():
                gauge["peak"] = gauge["now"]
        await send_json(send, GAUGES)
    elif path == "/_stats":
        await send_json(send, {"pid": os.getpid(), "tasks": len(asyncio.all_tasks())})
    else:
        with counted("ok"):
            await send_response(send, b"ok")


async def websocket(scope: dict[str, Any], receive: Any, send: Any) -> None:
    first = await receive()
    assert first["type"] == "websocket.connect", first
    await send({"type": "websocket.accept"})
    with counted("ws"):
        if scope["path"] == "/noread":
            await asyncio.sleep(float(query(scope).get("secs", "30")))
            await send({"type": "websocket.close"})
            return
        while True:
            message = await receive()
            if message["type"] != "websocket.receive":
                return
            if message.get("text") is not None:
                await send({"type": "websocket.send", "text": message["text"]})
            else:
                await send({"type": "websocket.send", "bytes": message.get("bytes") or b""})
