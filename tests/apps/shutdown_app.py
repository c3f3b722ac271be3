"""Graceful shutdown: slow requests log start/end/cancellation, lifespan logs shutdown.
``/spawn?key=K`` leaves a task running that logs ``finally K`` when it ends."""

from __future__ import annotations

import asyncio
from typing import Any

from asgi_helpers import log_event, query, send_response

#: Tasks the app leaves running (held, as the asyncio docs advise).
BACKGROUND: set[asyncio.Task[None]] = set()


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                log_event("startup")
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                log_event("shutdown")
                await send({"type": "lifespan.shutdown.complete"})
                return
    params = query(scope)
    if scope["path"] == "/spawn":
        key = params.get("key", "spawned")

        async def forever() -> None:
            try:
                await asyncio.sleep(3600)
            finally:
                log_event(f"finally {key}")

        BACKGROUND.add(asyncio.ensure_future(forever()))
        await send_response(send, b"spawned")
    elif scope["path"] == "/slow":
        key = params.get("key", "slow")
        log_event(f"start {key}")
        try:
            await asyncio.sleep(float(params.get("sleep", "1")))
        except asyncio.CancelledError:
            log_event(f"cancelled {key}")
            raise
        log_event(f"end {key}")
        await send_response(send, f"finished {key}".encode())
    else:
        await send_response(send, b"ok")
