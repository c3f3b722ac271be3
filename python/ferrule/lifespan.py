"""The ASGI lifespan protocol, run as an ordinary asyncio task: it is off the request path."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

logger = logging.getLogger("ferrule.error")


class LifespanFailure(Exception):
    """Startup failed: the server must not serve, and the process exits non-zero."""


class Lifespan:
    def __init__(self, app: Any, mode: str) -> None:
        self.app = app
        self.mode = mode
        self.state: dict[str, Any] = {}
        self.supported = False
        self._messages: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._startup_done = asyncio.Event()
        self._shutdown_done = asyncio.Event()
        self._startup_failed: str | None = None
        self._shutdown_failed: str | None = None
        self._error: BaseException | None = None
        self._task: asyncio.Task[None] | None = None

    async def startup(self) -> None:
        if self.mode == "off":
            return
        logger.info("Waiting for application startup.")
        self._task = asyncio.get_running_loop().create_task(self._run())
        await self._messages.put({"type": "lifespan.startup"})
        await self._startup_done.wait()
        if self._startup_failed is not None:
            raise LifespanFailure(f"Application startup failed. {self._startup_failed}".strip())
        if self._error is not None and self.mode == "on":
            raise LifespanFailure("Application startup failed: the lifespan protocol raised.")
        logger.info("Application startup complete.")  # also when unsupported, as uvicorn

    async def shutdown(self) -> None:
        if not self.supported or self._error is not None:
            return
        logger.info("Waiting for application shutdown.")
        await self._messages.put({"type": "lifespan.shutdown"})
        await self._shutdown_done.wait()
        if self._shutdown_failed is not None:
            logger.error("Application shutdown failed. %s", self._shutdown_failed)
        else:
            logger.info("Application shutdown complete.")

    async def cancel(self) -> None:
        """Stops the lifespan task without a shutdown message (a forced exit)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        scope = {
            "type": "lifespan",
            "asgi": {"version": "3.0", "spec_version": "2.0"},
            "state": self.state,
        }
        try:
            await self.app(scope, self._receive, self._send)
        except asyncio.CancelledError:
            raise  # a forced exit (``cancel``): no failure of the app
        except BaseException as exc:
            self._error = exc
            if self._startup_failed is None and self._shutdown_failed is None:
                if self.mode == "auto":
                    logger.info("ASGI 'lifespan' protocol appears unsupported.")
                else:
                    logger.error("Exception in 'lifespan' protocol", exc_info=exc)
        finally:
            self._startup_done.set()
            self._shutdown_done.set()

    async def _receive(self) -> dict[str, Any]:
        return await self._messages.get()

    async def _send(self, message: dict[str, Any]) -> None:
        kind = message.get("type")
        if kind == "lifespan.startup.complete":
            self.supported = True
            self._startup_done.set()
        elif kind == "lifespan.startup.failed":
            self.supported = True
            self._startup_failed = str(message.get("message", ""))
            self._startup_done.set()
        elif kind == "lifespan.shutdown.complete":
            self._shutdown_done.set()
        elif kind == "lifespan.shutdown.failed":
            self._shutdown_failed = str(message.get("message", ""))
            self._shutdown_done.set()
        else:
            raise RuntimeError(f"Unexpected ASGI lifespan message type {kind!r}")
