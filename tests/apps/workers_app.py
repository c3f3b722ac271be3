"""For --workers: each response says which process served it and which one imported the app."""

from __future__ import annotations

import os
from typing import Any

from asgi_helpers import lifespan_noop, send_json

IMPORTED_IN = os.getpid()


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await lifespan_noop(receive, send)
        return
    await send_json(send, {"pid": os.getpid(), "imported_in": IMPORTED_IN, "ppid": os.getppid()})
