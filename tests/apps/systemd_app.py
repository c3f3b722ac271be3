"""For the systemd tests: ``FERRULE_TEST_STARTUP_DELAY`` seconds of lifespan startup;
``/block?secs=S`` blocks the event loop (a sync call in async code); every answer is JSON of
the serving process's pid and the scope's ``server``."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from asgi_helpers import query, send_json


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await asyncio.sleep(float(os.environ.get("FERRULE_TEST_STARTUP_DELAY", "0")))
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["path"] == "/block":
        time.sleep(float(query(scope).get("secs", "1")))
    await send_json(send, {"pid": os.getpid(), "server": scope["server"]})
