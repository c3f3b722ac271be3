"""Apps written as uvicorn users write them, for ``tests/cli/test_uvicorn_dropin.py``."""

from __future__ import annotations

import logging
import os
from typing import Any

log = logging.getLogger("uvicorn.error")


async def _text(send: Any, body: bytes, status: int = 200) -> None:
    headers = [(b"content-type", b"text/plain")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def logs_to_uvicorn(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Logs to ``uvicorn.error`` on each request, as FastAPI's docs show."""
    if scope["type"] != "http":
        return
    log.info("app says hello through uvicorn.error")
    await _text(send, b"logged")


class ClassApp:
    """A class-based ASGI3 app as uvicorn's tests write it: instantiated with ``(scope,
    receive, send)``, each instance awaitable, and with a ``send`` attribute of its own."""

    def __init__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.scope = scope
        self.receive = receive
        self.send = send

    def __await__(self) -> Any:
        return self.asgi().__await__()

    async def asgi(self) -> None:
        if self.scope["type"] == "http":
            await _text(self.send, b"served by an awaitable instance")
        elif self.scope["type"] == "websocket":
            await self.receive()  # websocket.connect
            await self.send({"type": "websocket.accept"})
            message = await self.receive()
            await self.send({"type": "websocket.send", "text": "echo " + message["text"]})
            await self.send({"type": "websocket.close"})


def create_app() -> Any:
    """A factory: called with no arguments, it makes the app."""

    async def made(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await _text(send, b"made by the factory")

    return made


if os.environ.get("DROPIN_RAISE_AT_IMPORT"):
    raise RuntimeError("this app cannot start: " + os.environ["DROPIN_RAISE_AT_IMPORT"])
