"""``pkg.nested:holder.app`` (dotted attribute) and ``pkg.nested:create_app`` (--factory)."""

from __future__ import annotations

from typing import Any

from asgi_helpers import lifespan_noop, send_response


async def _app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await lifespan_noop(receive, send)
        return
    await send_response(send, b"nested app")


class holder:  # noqa: N801 - the attribute path under test is ``holder.app``
    app = staticmethod(_app)


def create_app() -> Any:
    async def factory_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await lifespan_noop(receive, send)
            return
        await send_response(send, b"made by the factory")

    return factory_app
