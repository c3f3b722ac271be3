"""An app that leaks on purpose, for worker recycling: ``/leak`` keeps the memory it allocates
(``FERRULE_TEST_LEAK_MIB``, 8 by default) in a module-level list; every path answers with the
process id and its resident memory. Its lifespan startup takes ``FERRULE_TEST_STARTUP_SECONDS``
(0 by default): a worker that stopped before its successor served would leave a gap that long.
It fails to import while the file ``FERRULE_TEST_BROKEN_FLAG`` names exists."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from asgi_helpers import send_json

LEAK = int(os.environ.get("FERRULE_TEST_LEAK_MIB", "8")) * 1024 * 1024
STARTUP_SECONDS = float(os.environ.get("FERRULE_TEST_STARTUP_SECONDS", "0"))
#: While a file is at this path, the module raises at import (a broken deploy).
BROKEN_FLAG = os.environ.get("FERRULE_TEST_BROKEN_FLAG")
if BROKEN_FLAG and os.path.exists(BROKEN_FLAG):
    raise RuntimeError("broken on purpose")
KEPT: list[bytes] = []


def resident_mib() -> int:
    with open(f"/proc/{os.getpid()}/statm", "rb") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // (1024 * 1024)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await asyncio.sleep(STARTUP_SECONDS)
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["path"] == "/leak":
        # Written, not calloc'ed: every page is touched, so it counts as resident at once.
        KEPT.append(b"\x01" * LEAK)
    await send_json(send, {"pid": os.getpid(), "rss_mib": resident_mib(), "kept": len(KEPT)})
