"""The WebSocket benchmark app (plain ASGI).

GET /            200 "ok" (the readiness probe)
WS  /echo        sends every message back as it came (text or bytes)
WS  /broadcast   joins the audience of one server-side broadcaster, which sends one of
                 `BROADCASTS` to every socket in the audience, the next one each round, for
                 as long as anyone listens
"""

from __future__ import annotations

import asyncio
import json

#: JSON-like texts of about 1 KiB, what the broadcaster sends in turn: different messages, as a
#: feed's are, and more of them than a deflate window holds, so that none compresses to a mere
#: reference to its previous copy.
BROADCASTS = [
    json.dumps(
        [
            {"id": r * 17 + i, "name": f"user-{(r * 7 + i) % 997}", "score": (r + i) * 3.5}
            | {"online": (r + i) % 3 == 0}
            for i in range(17)
        ]
    )[:1024]
    for r in range(64)
]

audience: set = set()
broadcaster: asyncio.Task | None = None


async def broadcast() -> None:
    messages = [{"type": "websocket.send", "text": text} for text in BROADCASTS]
    round_ = 0
    while audience:
        message = messages[round_ % len(messages)]
        await asyncio.gather(*(send(message) for send in list(audience)), return_exceptions=True)
        round_ += 1


async def app(scope, receive, send) -> None:
    global broadcaster
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] == "http":
        headers = [(b"content-type", b"text/plain"), (b"content-length", b"2")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"ok"})
        return
    await receive()  # websocket.connect
    await send({"type": "websocket.accept"})
    if scope["path"] == "/broadcast":
        audience.add(send)
        if broadcaster is None or broadcaster.done():
            broadcaster = asyncio.ensure_future(broadcast())
        try:
            while (await receive())["type"] != "websocket.disconnect":
                pass
        finally:
            audience.discard(send)
        return
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        if message.get("text") is not None:
            await send({"type": "websocket.send", "text": message["text"]})
        else:
            await send({"type": "websocket.send", "bytes": message["bytes"]})
