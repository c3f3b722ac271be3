"""The access-log path tests' app (``tests/server/test_access_*.py``): routes that change the
server's logging while it serves, so a test can see which path an access line takes.

At import, ``FERRULE_TEST_LOGGING_AT_IMPORT`` names a change made then; in lifespan startup,
``FERRULE_TEST_LOGGING_AT_STARTUP`` one made then. Either is ``pass-filter`` (a filter on
``uvicorn.access`` that drops nothing: the logging path, same handler and formatter),
``drop-filter`` (FastAPI's recipe: a filter dropping the lines that mention ``/health``) or
``handler`` (a handler that keeps the records, see ``/handled``).

Routes (anything else, ``/health`` included, answers ``ok`` with its process id in ``x-pid``;
``?size=N`` a body of N bytes, ``?status=N`` that status, ``?sleep=S`` after S seconds):

- ``/add-filter?drop=/health[&on=handler]``: FastAPI's filter on ``uvicorn.access`` (or on the
  handler ferrule installed there); ``/add-filter?pass=1``: one that drops nothing;
  ``/remove-filter``: every filter this app added, gone.
- ``/add-handler``, ``/remove-handler``: the keeping handler on ``uvicorn.access``;
  ``/handled``: what it kept, as JSON (each record's message and access attributes).
- ``/set-level?logger=NAME&level=WARNING``: that logger's level.
- ``/disable?level=INFO``, ``/enable``: ``logging.disable``.
- ``/set-formatter?fmt=...``, ``/restore-formatter``: the installed handler's formatter.
- ``/level-name?name=NOTICE``: ``logging.addLevelName(INFO, name)``.
- ``/record-factory?on=1|0``: a counting record factory in place (or the original back);
  ``/factory-count``: how many access records it made.
- ``/raise?token=T``: raises before answering (the server answers 500).

WebSockets: ``/refuse`` is refused (403); anything else is accepted and, with ``?close=CODE``,
closed by the app, else echoed until the client closes.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

from asgi_helpers import query, send_json, send_response

ACCESS = logging.getLogger("uvicorn.access")

#: The access attributes the server sets on each record (``<missing>`` where absent).
ATTRIBUTES = (
    "client",
    "method",
    "path",
    "query",
    "http_version",
    "status",
    "bytes",
    "duration",
    "user_agent",
    "referer",
    "headers",
)


class PassAll(logging.Filter):
    """A filter that drops nothing: it only takes the line off the fast path."""

    def filter(self, record: logging.LogRecord) -> bool:
        return True


class EndpointFilter(logging.Filter):
    """FastAPI's documented recipe to keep health checks out of the access log."""

    def __init__(self, drop: str) -> None:
        super().__init__()
        self.drop = drop

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage().find(self.drop) == -1


class Keeper(logging.Handler):
    """Keeps each record's message and access attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[dict[str, Any]] = []

    def emit(self, record: logging.LogRecord) -> None:
        kept: dict[str, Any] = {"message": record.getMessage(), "name": record.name}
        for name in ATTRIBUTES:
            value = getattr(record, name, "<missing>")
            if not isinstance(value, (str, int, float, bool, type(None), dict, list)):
                value = f"<{type(value).__name__}> {value!r}"
            kept[name] = value
            kept[f"{name}_type"] = type(getattr(record, name, None)).__name__
        self.seen.append(kept)


KEEPER = Keeper()
#: Filters this app added, with what they were added to.
ADDED: list[tuple[Any, logging.Filter]] = []
FACTORY_COUNT = [0]
ORIGINAL_FACTORY = logging.getLogRecordFactory()


def installed_handler() -> logging.Handler:
    """The handler ferrule installed on ``uvicorn.access`` (the first one)."""
    return ACCESS.handlers[0]


def apply(change: str) -> None:
    if change == "pass-filter":
        add_filter(ACCESS, PassAll())
    elif change == "drop-filter":
        add_filter(ACCESS, EndpointFilter("/health"))
    elif change == "handler":
        ACCESS.addHandler(KEEPER)
    elif change:
        raise ValueError(f"unknown logging change {change!r}")


def add_filter(target: Any, kind: logging.Filter) -> None:
    target.addFilter(kind)
    ADDED.append((target, kind))


def counting_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
    record = ORIGINAL_FACTORY(*args, **kwargs)
    if record.name in ("ferrule.access", "uvicorn.access"):
        FACTORY_COUNT[0] += 1
    return record


apply(os.environ.get("FERRULE_TEST_LOGGING_AT_IMPORT", ""))


def change_logging(path: str, params: dict[str, str]) -> Any:
    """Applies the route's change; returns what to answer, or None for no such route."""
    if path == "/add-filter":
        target = installed_handler() if params.get("on") == "handler" else ACCESS
        kind = PassAll() if params.get("pass") else EndpointFilter(params.get("drop", "/health"))
        add_filter(target, kind)
    elif path == "/remove-filter":
        while ADDED:
            target, kind = ADDED.pop()
            target.removeFilter(kind)
    elif path == "/add-handler":
        ACCESS.addHandler(KEEPER)
    elif path == "/remove-handler":
        ACCESS.removeHandler(KEEPER)
    elif path == "/handled":
        return KEEPER.seen
    elif path == "/set-level":
        level = logging.getLevelName(params.get("level", "INFO"))
        logging.getLogger(params.get("logger", "uvicorn.access")).setLevel(level)
    elif path == "/disable":
        logging.disable(logging.getLevelName(params.get("level", "INFO")))
    elif path == "/enable":
        logging.disable(logging.NOTSET)
    elif path == "/set-formatter":
        installed_handler().setFormatter(logging.Formatter(params.get("fmt", "%(message)s")))
    elif path == "/restore-formatter":
        installed_handler().setFormatter(ORIGINAL_FORMATTER[0])
    elif path == "/level-name":
        logging.addLevelName(logging.INFO, params.get("name", "INFO"))
    elif path == "/record-factory":
        on = params.get("on", "1") == "1"
        logging.setLogRecordFactory(counting_factory if on else ORIGINAL_FACTORY)
    elif path == "/factory-count":
        return FACTORY_COUNT[0]
    else:
        return None
    return "done"


#: ferrule's formatter on its handler, kept at startup for ``/restore-formatter``.
ORIGINAL_FORMATTER: list[logging.Formatter | None] = [None]


async def lifespan(receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            if ACCESS.handlers:
                ORIGINAL_FORMATTER[0] = installed_handler().formatter
            apply(os.environ.get("FERRULE_TEST_LOGGING_AT_STARTUP", ""))
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
        return
    params = query(scope)
    if scope["type"] == "websocket":
        await websocket(scope, params, receive, send)
        return
    path = scope["path"]
    if path == "/raise":
        raise RuntimeError(f"the app failed on purpose {params.get('token', '')}")
    answer = change_logging(path, params)
    if answer is not None:
        await send_json(send, answer)
        return
    if "sleep" in params:
        await asyncio.sleep(float(params["sleep"]))
    body = b"x" * int(params["size"]) if "size" in params else b"ok"
    pid = (b"x-pid", str(os.getpid()).encode())
    await send_response(send, body, int(params.get("status", "200")), headers=[pid])


async def websocket(scope: dict[str, Any], params: dict[str, str], receive: Any, send: Any):
    await receive()  # websocket.connect
    if scope["path"] == "/refuse":
        await send({"type": "websocket.close"})
        return
    await send({"type": "websocket.accept"})
    if "close" in params:
        await send({"type": "websocket.close", "code": int(params["close"])})
        return
    while True:
        message = await receive()
        if message["type"] == "websocket.disconnect":
            return
        if message.get("text") is not None:
            await send({"type": "websocket.send", "text": message["text"]})
