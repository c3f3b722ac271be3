"""What the server did to Python's garbage collector: lifespan startup makes a container kept for
the life of the process; ``GET /`` answers JSON with ``gc.get_freeze_count()`` and whether that
container is still in one of the collector's generations (a frozen object is in none), and the
collector's generation-0 threshold. With ``GC_APP_THRESHOLD`` set, the module sets that threshold
itself when imported."""

from __future__ import annotations

import gc
import json
import os

state: dict[str, list] = {}

if "GC_APP_THRESHOLD" in os.environ:
    gc.set_threshold(int(os.environ["GC_APP_THRESHOLD"]), *gc.get_threshold()[1:])


async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                state["made_at_startup"] = [object()]
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    made = state.get("made_at_startup")
    answer = {
        "freeze_count": gc.get_freeze_count(),
        "startup_state_collected_over": any(o is made for o in gc.get_objects()),
        "threshold": gc.get_threshold()[0],
    }
    body = json.dumps(answer).encode()
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})
