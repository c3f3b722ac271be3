"""Graceful shutdown: slow requests log start/end/cancellation, lifespan logs shutdown."""

from __future__ import annotations

import asyncio
from typing import Any

from asgi_helpers import log_event, query, send_response


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
    if scope["path"] == "/slow":
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
