"""A small app for the command-line tests: reports what the request and the process look like."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from asgi_helpers import query, send_json

IMPORTED_IN = os.getpid()

if os.environ.get("FERRULE_TEST_EXIT_AT_IMPORT"):
    raise SystemExit(1)  # a process that dies before serving, not a startup failure (3)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        from asgi_helpers import lifespan_noop

        await lifespan_noop(receive, send)
        return
    if scope["path"] == "/sleep":
        await asyncio.sleep(float(query(scope).get("secs", "1")))
    loop = asyncio.get_running_loop()
    await send_json(
        send,
        {
            "path": scope["path"],
            "loop": type(loop).__module__,
            "loop_class": type(loop).__name__,
            "pid": os.getpid(),
            "imported_in": IMPORTED_IN,
            "scheme": scope["scheme"],
            "client": list(scope["client"]) if scope.get("client") else None,
            "root_path": scope.get("root_path"),
        },
    )
