"""A python-socketio ASGI app as its users write one, for ``tests/compat/test_socketio.py``:
``socketio.AsyncServer(async_mode="asgi")`` wrapped in ``socketio.ASGIApp`` in front of a small
Starlette app (the plain HTTP routes), with an auth check on connect, an event answered by an
acknowledgement, rooms and a broadcast, a server-side background task that pushes events, the
disconnect handler, and ``on_startup`` / ``on_shutdown`` (lifespan)."""

from __future__ import annotations

from typing import Any

import socketio
from asgi_helpers import log_event
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

#: A short ping interval and timeout: a long-polling client's ``disconnect()`` waits for its
#: pending poll, which the server answers only at its next ping (within 3 s here; with the
#: defaults, 25 + 20 s).
sio = socketio.AsyncServer(
    async_mode="asgi", cors_allowed_origins="*", ping_interval=1, ping_timeout=2
)
#: What the socket.io handlers saw, read back over HTTP at ``/state``.
STATE: dict[str, Any] = {"connected": [], "disconnected": [], "refused": 0}


@sio.event
async def connect(sid: str, environ: dict[str, Any], auth: Any) -> bool:
    if not isinstance(auth, dict) or auth.get("token") != "good":
        STATE["refused"] += 1
        return False
    STATE["connected"].append(sid)
    await sio.save_session(sid, {"user": auth.get("user", "anonymous")})
    await sio.emit("welcome", {"sid": sid}, to=sid)
    return True


@sio.event
async def disconnect(sid: str, reason: Any = None) -> None:
    STATE["disconnected"].append(sid)


@sio.event
async def echo(sid: str, data: Any) -> Any:
    session = await sio.get_session(sid)
    return {"echo": data, "user": session["user"]}


@sio.event
async def join(sid: str, room: str) -> str:
    await sio.enter_room(sid, room)
    return room


@sio.event
async def shout(sid: str, data: dict[str, Any]) -> None:
    await sio.emit("shouted", {"from": sid, "text": data["text"]}, room=data["room"])


@sio.event
async def ticks(sid: str, count: int) -> None:
    """Start a background task that pushes ``count`` ``tick`` events to the caller."""

    async def push() -> None:
        for i in range(count):
            await sio.emit("tick", i, to=sid)
            await sio.sleep(0.01)

    sio.start_background_task(push)


async def state(request: Request) -> JSONResponse:
    return JSONResponse(STATE)


async def health(request: Request) -> JSONResponse:
    return JSONResponse({"ok": True})


async def startup() -> None:
    log_event("socketio startup")


async def shutdown() -> None:
    log_event("socketio shutdown")


web = Starlette(routes=[Route("/state", state), Route("/health", health)])
app = socketio.ASGIApp(sio, other_asgi_app=web, on_startup=startup, on_shutdown=shutdown)
