"""Apps of each ``--interface`` (``interface_apps:NAME``). Every HTTP answer is JSON naming the
interface the app was written for, the ``asgi.version`` of its scope, whether lifespan startup
ran first, and the coroutine awaiting the app's (``caller``: ferrule's adapter, or none for an
app the server calls as the very object given)."""

from __future__ import annotations

import inspect
import json
import sys
from typing import Any

from asgi_helpers import read_body, send_json

STARTED: dict[str, bool] = {}


def _caller() -> str:
    """``module.qualname`` of the coroutine that awaits the app's coroutine (two frames up from
    here): ferrule's adapter for an adapted app; "" for an app the server calls itself, whose
    coroutine is driven from Rust (no Python caller, or a frame that is not a coroutine's)."""
    try:
        frame = sys._getframe(2)
    except ValueError:  # the call stack is not that deep
        return ""
    if not frame.f_code.co_flags & inspect.CO_COROUTINE:
        return ""
    return f"{frame.f_globals.get('__name__')}.{frame.f_code.co_qualname}"


async def _lifespan(name: str, receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            STARTED[name] = True
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            print(f"{name}: lifespan shutdown", file=sys.stderr, flush=True)
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _answer(name: str, scope: dict[str, Any], receive: Any, send: Any, caller: str) -> None:
    body, _ = await read_body(receive)
    await send_json(
        send,
        {
            "interface": name,
            "asgi_version": scope["asgi"]["version"],
            "started": STARTED.get(name, False),
            "path": scope["path"],
            "body": body.decode(),
            "caller": caller,
        },
    )


async def asgi3(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """A plain ASGI3 app: ``auto`` must serve it as it is."""
    caller = _caller()
    if scope["type"] == "lifespan":
        await _lifespan("asgi3", receive, send)
    else:
        await _answer("asgi3", scope, receive, send, caller)


class Asgi2Class:
    """ASGI2 as a class: instantiated with the scope, the instance called with receive, send."""

    def __init__(self, scope: dict[str, Any]) -> None:
        self.scope = scope

    async def __call__(self, receive: Any, send: Any) -> None:
        caller = _caller()
        if self.scope["type"] == "lifespan":
            await _lifespan("asgi2-class", receive, send)
        else:
            await _answer("asgi2-class", self.scope, receive, send, caller)


def asgi2_function(scope: dict[str, Any]) -> Any:
    """ASGI2 as a plain function of the scope returning the instance."""

    async def instance(receive: Any, send: Any) -> None:
        caller = _caller()
        if scope["type"] == "lifespan":
            await _lifespan("asgi2-function", receive, send)
        else:
            await _answer("asgi2-function", scope, receive, send, caller)

    return instance


def wsgi(environ: dict[str, Any], start_response: Any) -> list[bytes]:
    """A WSGI app: echoes the method, path and body it was given."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    body = environ["wsgi.input"].read(length) if length else b""
    payload = {
        "interface": "wsgi",
        "method": environ["REQUEST_METHOD"],
        "path": environ["PATH_INFO"],
        "query": environ["QUERY_STRING"],
        "body": body.decode(),
    }
    data = json.dumps(payload).encode()
    start_response(
        "201 Created", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
    )
    return [data]
