"""The soak app (benches/soak.py): one route per request kind, and counters on /_stats.

    GET  /hello   a fixed 13-byte body
    GET  /stream  a streamed response: 64 chunks of 1 KiB (chunked)
    POST /echo    reads the request body and sends it back
    GET  /task    creates two asyncio tasks (one awaits asyncio.sleep(0)) and awaits them
    GET  /error   raises before answering: the server answers 500 and logs the traceback
    GET  /slow    streams 1 KiB chunks 2 ms apart; the soak's aborting client hangs up early
    POST /upload  as /echo; the aborting client sends part of the body and hangs up
    GET  /_stats  JSON: per-route requests started and finished, the disconnects the app saw,
                  and the bridge's counters (``ferrule.counters()``: collisions among them)

Every handler is counted at entry and in a ``finally``, so ``started - finished`` is the number
of requests still in the app: zero once the load has stopped, unless a request hangs.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter

import ferrule

HELLO = b"Hello, world!"
CHUNK = b"x" * 1024
STREAM_CHUNKS = 64
SLOW_CHUNKS = 200  # 2 ms apart: up to 0.4 s, far longer than the aborting client waits
SLOW_PAUSE = 0.002
EXPECTED_ERROR = "soak: expected failure"  # soak.py tells these tracebacks from the others
TEXT = (b"content-type", b"text/plain")

started: Counter[str] = Counter()
finished: Counter[str] = Counter()
seen: Counter[str] = Counter()  # what the app observed: disconnects, ClientDisconnected


async def send_body(send, body: bytes, status: int = 200, content_type=TEXT) -> None:
    """Send a complete response with a content-length."""
    headers = [content_type, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def read_body(receive) -> bytes | None:
    """The whole request body, or None if the client disconnected first."""
    parts = []
    while True:
        message = await receive()
        if message["type"] != "http.request":  # http.disconnect
            return None
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(parts)


async def hello(receive, send) -> None:
    await send_body(send, HELLO)


async def stream(receive, send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [TEXT]})
    for _ in range(STREAM_CHUNKS):
        await send({"type": "http.response.body", "body": CHUNK, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def echo(receive, send) -> None:
    body = await read_body(receive)
    if body is None:
        seen["http.disconnect"] += 1
        return  # nobody to answer
    await send_body(send, body)


async def _child(pause: bool) -> bytes:
    if pause:
        await asyncio.sleep(0)
    return HELLO


async def task(receive, send) -> None:
    first = asyncio.create_task(_child(pause=True))
    second = asyncio.create_task(_child(pause=False))
    results = await asyncio.gather(first, second)
    await send_body(send, results[0])


async def error(receive, send) -> None:
    raise RuntimeError(EXPECTED_ERROR)


async def slow(receive, send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [TEXT]})
    try:
        for _ in range(SLOW_CHUNKS):
            await send({"type": "http.response.body", "body": CHUNK, "more_body": True})
            await asyncio.sleep(SLOW_PAUSE)
        await send({"type": "http.response.body", "body": b""})
    except ferrule.ClientDisconnected as exc:
        seen[type(exc).__name__] += 1
        raise  # the server's routine path for an app that lets it propagate
    seen["slow completed"] += 1


async def stats(receive, send) -> None:
    data = {
        "started": dict(started),
        "finished": dict(finished),
        "seen": dict(seen),
        "bridge": ferrule.counters(),
    }
    body = json.dumps(data).encode()
    await send_body(send, body, content_type=(b"content-type", b"application/json"))


ROUTES = {
    "/hello": hello,
    "/stream": stream,
    "/echo": echo,
    "/task": task,
    "/error": error,
    "/slow": slow,
    "/upload": echo,
}


async def lifespan(receive, send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
        return
    if scope["type"] != "http":
        return
    path = scope["path"]
    if path == "/_stats":
        await stats(receive, send)
        return
    handler = ROUTES.get(path)
    if handler is None:
        await send_body(send, b"Not Found", status=404)
        return
    started[path] += 1
    try:
        await handler(receive, send)
    finally:
        finished[path] += 1
