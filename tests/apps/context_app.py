"""contextvars as requests see them: one set when this module is imported, one set in the
lifespan startup, one each request sets after reading it (to show requests do not share)."""

from __future__ import annotations

import contextvars
import json
from typing import Any

from asgi_helpers import send_json

IMPORTED = contextvars.ContextVar("imported", default="unset")
IMPORTED.set("set at import")
LIFESPAN = contextvars.ContextVar("lifespan", default="unset")
PER_REQUEST = contextvars.ContextVar("per_request", default="unset")


def seen() -> dict[str, str]:
    return {
        "imported": IMPORTED.get(),
        "lifespan": LIFESPAN.get(),
        "per_request": PER_REQUEST.get(),
    }


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                LIFESPAN.set("set in lifespan")
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    before = seen()
    PER_REQUEST.set(scope["path"])
    if scope["type"] == "websocket":
        await receive()  # websocket.connect
        await send({"type": "websocket.accept"})
        await send({"type": "websocket.send", "text": json.dumps(before)})
        await send({"type": "websocket.close"})
        return
    await send_json(send, before)
