"""For --workers: each response says which process served it and which one imported the app;
``/block?secs=N`` first blocks the worker's event loop for N seconds (60 by default), logging
"blocking PID" to the events file. ``FERRULE_TEST_IMPORT_DELAY`` seconds make the import slow;
the import fails while the file ``FERRULE_TEST_BROKEN_FLAG`` names exists (broken code deployed)."""

from __future__ import annotations

import os
import time
from typing import Any

from asgi_helpers import lifespan_noop, log_event, query, send_json

IMPORTED_IN = os.getpid()
time.sleep(float(os.environ.get("FERRULE_TEST_IMPORT_DELAY", "0")))  # a slow import
if os.path.exists(os.environ.get("FERRULE_TEST_BROKEN_FLAG", "/nonexistent")):
    raise RuntimeError("the code deployed is broken")


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await lifespan_noop(receive, send)
        return
    if scope["path"] == "/block":  # blocks the event loop, as a sync call in async code does
        log_event(f"blocking {os.getpid()}")
        time.sleep(float(query(scope).get("secs", "60")))
    await send_json(send, {"pid": os.getpid(), "imported_in": IMPORTED_IN, "ppid": os.getppid()})
