"""An ASGI callable that raises before returning a coroutine (a plain function, not async)."""

from typing import Any


def app(scope: dict[str, Any], receive: Any, send: Any) -> Any:
    if scope["type"] == "http":
        raise ValueError("raised while calling the app")

    async def ignore_lifespan() -> None:
        return None

    return ignore_lifespan()
