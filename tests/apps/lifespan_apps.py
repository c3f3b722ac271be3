"""Lifespan behaviours, one app object per rule (``lifespan_apps:NAME``)."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

from asgi_helpers import RECORDS, log_event, query, send_json, send_response, serve_record

STATUS = {"started": False, "lifespan_called": False}
STARTUP_DELAY = float(os.environ.get("FERRULE_TEST_STARTUP_DELAY", "1.0"))


async def slow_startup(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Startup takes STARTUP_DELAY seconds; requests report whether it had completed."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await asyncio.sleep(STARTUP_DELAY)
                STATUS["started"] = True
                STATUS["started_at"] = time.time()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    await send_json(send, {"started": STATUS["started"]})


async def startup_failed(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        message = await receive()
        assert message["type"] == "lifespan.startup"
        token = os.environ.get("FERRULE_TEST_TOKEN", "no-token")
        await send({"type": "lifespan.startup.failed", "message": f"startup refused {token}"})
        return
    await send_response(send, b"should never be served")


async def startup_raises(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        message = await receive()
        assert message["type"] == "lifespan.startup"
        token = os.environ.get("FERRULE_TEST_TOKEN", "no-token")
        raise RuntimeError(f"startup exploded {token}")
    await send_response(send, b"served despite the lifespan error")


async def rejects_lifespan(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """An app without lifespan support: raises on any scope but http."""
    if scope["type"] != "http":
        raise ValueError(f"unsupported scope type {scope['type']!r}")
    await send_response(send, b"served without lifespan")


async def probe_lifespan(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Records whether the server ever called it with a lifespan scope."""
    if scope["type"] == "lifespan":
        STATUS["lifespan_called"] = True
        from asgi_helpers import lifespan_noop

        await lifespan_noop(receive, send)
        return
    await send_json(send, {"lifespan_called": STATUS["lifespan_called"]})


async def with_state(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Startup stores a token and a shared list in the state; each request reports what its
    scope's state holds, then adds a key of its own and appends to the shared list."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                scope["state"]["token"] = "state-from-startup"
                scope["state"]["shared"] = []
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    state = scope["state"]
    report = {
        "token": state.get("token"),
        "had_request_key": "request_key" in state,
        "shared_len": len(state.get("shared", [])),
    }
    await asyncio.sleep(float(query(scope).get("sleep", "0")))
    state["request_key"] = True
    state.get("shared", []).append(1)
    await send_json(send, report)


async def shutdown_order(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Logs startup, request start/end and shutdown to the events file."""
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
    seconds = float(query(scope).get("sleep", "0"))
    log_event("request-start")
    await asyncio.sleep(seconds)
    log_event("request-end")
    await send_response(send, b"slow done")


async def signal_handler(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Installs a SIGUSR1 handler with ``loop.add_signal_handler`` during startup."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                loop = asyncio.get_running_loop()
                loop.add_signal_handler(
                    signal.SIGUSR1, lambda: RECORDS.__setitem__("usr1", {"handled": True})
                )
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["path"] == "/_record":
        await serve_record(scope, send)
    else:
        await send_response(send, b"ok")
