"""``--interface``: serve ASGI2 and WSGI apps by adapting them, once, to ASGI3 when the app is
loaded. The server itself only ever calls ``app(scope, receive, send)``, so an ASGI3 app is
served as the very object given, and the Rust request path knows nothing of the others."""

from __future__ import annotations

import inspect
from typing import Any, Literal

Interface = Literal["auto", "asgi3", "asgi2", "wsgi"]
INTERFACES: tuple[Interface, ...] = ("auto", "asgi3", "asgi2", "wsgi")

WSGI_NEEDS = "--interface wsgi needs the a2wsgi package: pip install a2wsgi"


class InterfaceError(Exception):
    """The interface asked for cannot be served (a2wsgi is missing): the message says why."""


def detect(app: Any) -> Literal["asgi3", "asgi2"]:
    """``auto``: ASGI2 for a class (unless its instances are awaitable), and for a callable
    that is not a coroutine function and takes exactly one argument, the scope; ASGI3 for
    everything else, so every app ferrule served before this option existed still is, as is."""
    if inspect.isclass(app):
        return "asgi3" if hasattr(app, "__await__") else "asgi2"
    if inspect.iscoroutinefunction(app):
        return "asgi3"
    if not (inspect.isfunction(app) or inspect.ismethod(app)):  # an instance: its __call__
        if inspect.iscoroutinefunction(type(app).__call__):
            return "asgi3"
    try:
        signature = inspect.signature(app)
    except (TypeError, ValueError):  # a builtin or extension callable: nothing to go by
        return "asgi3"
    return "asgi2" if _takes(signature, 1) and not _takes(signature, 3) else "asgi3"


def adapt(app: Any, interface: str) -> tuple[Any, Literal["asgi3", "asgi2", "wsgi"]]:
    """The app as the server calls it (ASGI3), and the interface it was served as."""
    if interface == "auto":
        interface = detect(app)
    if interface == "asgi2":
        return _asgi2_as_asgi3(app), "asgi2"
    if interface == "wsgi":
        return _wsgi_as_asgi3(wsgi_middleware()(app)), "wsgi"
    if interface != "asgi3":
        raise ValueError(f"interface must be one of {', '.join(INTERFACES)}, not {interface!r}")
    return app, "asgi3"


def wsgi_middleware() -> Any:
    """a2wsgi's ``WSGIMiddleware`` (what uvicorn serves WSGI apps with, too): it runs the app
    in a thread pool and answers lifespan on its behalf."""
    try:
        from a2wsgi import WSGIMiddleware
    except ImportError:
        raise InterfaceError(WSGI_NEEDS) from None
    return WSGIMiddleware


def _takes(signature: inspect.Signature, count: int) -> bool:
    try:
        signature.bind(*([None] * count))
    except TypeError:
        return False
    return True


def _asgi2_as_asgi3(app: Any) -> Any:
    """An ASGI2 app is ``app(scope)``, returning an instance awaited as
    ``instance(receive, send)``; its scopes say ``asgi.version`` 2.0."""

    async def asgi2_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        asgi = scope.get("asgi")
        if isinstance(asgi, dict):  # each scope has its own copy
            asgi["version"] = "2.0"
        instance = app(scope)
        await instance(receive, send)

    asgi2_app.__wrapped__ = app  # type: ignore[attr-defined]
    return asgi2_app


def _wsgi_as_asgi3(middleware: Any) -> Any:
    """a2wsgi's middleware, given a ``receive`` it may call from its WSGI threads: it calls
    ``receive()`` there and hands the awaitable to the loop, but ferrule's ``receive()`` starts
    its work when called and needs the loop's or a tokio thread (off them it raises "no tokio
    runtime on this thread"). A coroutine function defers the call to the loop."""

    async def wsgi_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        async def receive_on_the_loop() -> Any:
            return await receive()

        await middleware(scope, receive_on_the_loop, send)

    return wsgi_app
