"""Apps written as uvicorn users write them, for ``tests/test_uvicorn_dropin.py``."""

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


def create_app() -> Any:
    """A factory: called with no arguments, it makes the app."""

    async def made(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await _text(send, b"made by the factory")

    return made


if os.environ.get("DROPIN_RAISE_AT_IMPORT"):
    raise RuntimeError("this app cannot start: " + os.environ["DROPIN_RAISE_AT_IMPORT"])
