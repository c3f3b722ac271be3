"""The benchmark app: one plain ASGI app, one scenario per path.

    GET  /hello   a fixed 13-byte body
    GET  /sleep   awaits asyncio.sleep(0) three times (three continuations through the loop)
    GET  /task    creates an asyncio task and awaits it
    GET  /anyio   an anyio task group running two children
    GET  /stream  a streamed response: 256 chunks of 1 KiB, no content-length (chunked)
    POST /echo    reads the request body (10 KiB in the benchmark) and sends it back
    GET  /cpu     CPU-bound work (about 1 ms of pure Python), used by the collision stress
    WS   any      a WebSocket that echoes each message (the idle-memory benchmark's sockets)

Every fixed-size response carries a content-length, so no server falls back to chunked framing.
"""

from __future__ import annotations

import asyncio

import anyio

HELLO = b"Hello, world!"
CHUNK = b"x" * 1024
CHUNKS = 256
TEXT = (b"content-type", b"text/plain")
NOT_FOUND = b"Not Found"


async def send_body(send, body: bytes, status: int = 200) -> None:
    """Send a complete response with a content-length."""
    headers = [TEXT, (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def hello(receive, send) -> None:
    await send_body(send, HELLO)


async def sleep3(receive, send) -> None:
    for _ in range(3):
        await asyncio.sleep(0)
    await send_body(send, HELLO)


async def _child() -> bytes:
    return HELLO


async def task(receive, send) -> None:
    body = await asyncio.create_task(_child())
    await send_body(send, body)


async def anyio_group(receive, send) -> None:
    results: list[bytes] = []

    async def child() -> None:
        results.append(HELLO)

    async with anyio.create_task_group() as tg:
        tg.start_soon(child)
        tg.start_soon(child)
    await send_body(send, results[0])


async def stream(receive, send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [TEXT]})
    for _ in range(CHUNKS):
        await send({"type": "http.response.body", "body": CHUNK, "more_body": True})
    await send({"type": "http.response.body", "body": b""})


async def echo(receive, send) -> None:
    parts = []
    while True:
        message = await receive()
        if message["type"] != "http.request":  # http.disconnect
            return
        parts.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    await send_body(send, b"".join(parts))


def burn_cpu(n: int = 5_000) -> int:
    """Pure-Python arithmetic that holds the GIL (about 1 ms for the default n)."""
    total = 0
    for i in range(n):
        total += i * i % 7
    return total


async def cpu(receive, send) -> None:
    await send_body(send, str(burn_cpu()).encode())


async def websocket_echo(receive, send) -> None:
    while True:
        message = await receive()
        if message["type"] == "websocket.connect":
            await send({"type": "websocket.accept"})
        elif message["type"] == "websocket.receive":
            await send({"type": "websocket.send", "text": message.get("text") or ""})
        else:
            return


ROUTES = {
    "/hello": hello,
    "/sleep": sleep3,
    "/task": task,
    "/anyio": anyio_group,
    "/stream": stream,
    "/echo": echo,
    "/cpu": cpu,
}


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] == "websocket":
        await websocket_echo(receive, send)
        return
    if scope["type"] != "http":
        return
    handler = ROUTES.get(scope["path"])
    if handler is None:
        await send_body(send, NOT_FOUND, status=404)
        return
    await handler(receive, send)
