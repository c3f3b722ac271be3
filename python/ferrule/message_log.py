"""``--log-level trace``: every ASGI message the app receives and sends, logged as uvicorn's
message logger logs them (``ASGI [N] Send {...}``), bodies shortened. Only wrapped around the
app at that level, so it costs nothing otherwise."""

from __future__ import annotations

import itertools
import logging
from typing import Any

from ferrule._logging import TRACE

logger = logging.getLogger("ferrule.asgi")

#: Bytes fields longer than this are logged as ``<N bytes>``.
PLACEHOLDER_AFTER = 80


def _shown(message: dict[str, Any]) -> dict[str, Any]:
    shown = dict(message)
    for key in ("body", "bytes", "text"):
        value = shown.get(key)
        if isinstance(value, (bytes, str)) and len(value) > PLACEHOLDER_AFTER:
            kind = "bytes" if isinstance(value, bytes) else "chars"
            shown[key] = f"<{len(value)} {kind}>"
    return shown


class MessageLogger:
    """Wraps an ASGI3 app: logs each scope's start, its messages both ways, its end."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self._ids = itertools.count(1)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        task = next(self._ids)
        client = scope.get("client")  # uvicorn's prefix: the peer, when there is one
        prefix = f"{client[0]}:{client[1]} - ASGI" if client else "ASGI"

        async def logged_receive() -> Any:
            message = await receive()
            logger.log(TRACE, "%s [%d] Receive %s", prefix, task, _shown(message))
            return message

        async def logged_send(message: Any) -> None:
            logger.log(TRACE, "%s [%d] Send %s", prefix, task, _shown(message))
            await send(message)

        shown_scope = {k: v for k, v in scope.items() if k not in ("state", "extensions")}
        logger.log(TRACE, "%s [%d] Started scope=%s", prefix, task, shown_scope)
        try:
            await self.app(scope, logged_receive, logged_send)
        except BaseException:
            logger.log(TRACE, "%s [%d] Raised exception", prefix, task)
            raise
        logger.log(TRACE, "%s [%d] Completed", prefix, task)
