"""A Litestar app as its users write one, for ``tests/compat/test_litestar.py``: typed path
and query parameters, dataclass JSON bodies, url-encoded forms and multipart uploads, a
``Stream`` and a ``ServerSentEvent`` response, a ``BackgroundTask``, ``on_startup`` /
``on_shutdown`` hooks (lifespan), an exception handler and a handler that raises (500), and
WebSockets: a ``@websocket`` handler, a ``@websocket_listener`` and a ``@websocket_stream``
that pushes until the client leaves."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncGenerator, AsyncIterator
from dataclasses import dataclass, field
from typing import Annotated, Any

from asgi_helpers import log_event
from litestar import Litestar, MediaType, Request, Response, WebSocket, get, post, websocket
from litestar.background_tasks import BackgroundTask
from litestar.datastructures import UploadFile
from litestar.enums import RequestEncodingType
from litestar.exceptions import NotFoundException, WebSocketDisconnect
from litestar.handlers import websocket_listener, websocket_stream
from litestar.params import Body
from litestar.response import ServerSentEvent, Stream

RESULTS: dict[str, Any] = {}


class Teapot(Exception):
    pass


@dataclass
class Item:
    name: str
    price: float
    tags: list[str] = field(default_factory=list)


@dataclass
class Upload:
    file: UploadFile
    note: str = ""


async def startup() -> None:
    log_event("litestar startup")


async def shutdown() -> None:
    log_event("litestar shutdown")


@get("/")
async def index() -> str:
    return "hello litestar"


@get("/items/{item_id:int}")
async def read_item(item_id: int, q: str | None = None) -> dict[str, Any]:
    return {"item_id": item_id, "q": q}


@post("/items")
async def create_item(data: Item) -> dict[str, Any]:
    return {"created": {"name": data.name, "price": data.price, "tags": data.tags}}


@post("/form")
async def form(
    data: Annotated[dict[str, Any], Body(media_type=RequestEncodingType.URL_ENCODED)],
) -> dict[str, Any]:
    return {"form": data}


@post("/upload")
async def upload(
    data: Annotated[Upload, Body(media_type=RequestEncodingType.MULTI_PART)],
) -> dict[str, Any]:
    content = await data.file.read()
    return {
        "filename": data.file.filename,
        "size": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
        "note": data.note,
    }


@post("/raw")
async def raw_body(request: Request) -> dict[str, Any]:
    body = await request.body()
    return {"size": len(body), "sha256": hashlib.sha256(body).hexdigest()}


@get("/stream")
async def stream(n: int = 10) -> Stream:
    async def parts() -> AsyncIterator[str]:
        for i in range(n):
            yield f"part {i}\n"
            await asyncio.sleep(0.001)

    return Stream(parts(), media_type=MediaType.TEXT)


@get("/sse")
async def sse(n: int = 5) -> ServerSentEvent:
    async def events() -> AsyncIterator[str]:
        for i in range(n):
            yield f"tick {i}"
            await asyncio.sleep(0.01)

    return ServerSentEvent(events(), event_type="tick")


@post("/background/{key:str}", status_code=202)
async def background(key: str) -> Response[dict[str, str]]:
    async def work() -> None:
        await asyncio.sleep(0.05)
        RESULTS[key] = {"done": True}

    return Response({"scheduled": key}, background=BackgroundTask(work))


@get("/results/{key:str}")
async def result(key: str) -> dict[str, Any]:
    if key not in RESULTS:
        raise NotFoundException("not yet")
    return RESULTS[key]


@get("/teapot")
async def raise_teapot() -> None:
    raise Teapot("short and stout")


@get("/boom")
async def boom() -> None:
    raise RuntimeError("compat_litestar: this handler always fails")


@websocket("/ws")
async def ws_echo(socket: WebSocket) -> None:
    await socket.accept()
    try:
        while True:
            message = await socket.receive_json()
            await socket.send_json({"echo": message})
    except WebSocketDisconnect:
        pass


@websocket_listener("/ws-listener")
async def ws_listener(data: str) -> str:
    return data.upper()


#: Per key: "streaming" while a ``/ws-stream`` generator runs, "closed" once it ended.
FEEDS: dict[str, str] = {}


@websocket_stream("/ws-stream/{key:str}")
async def ws_stream(key: str) -> AsyncGenerator[str, None]:
    """Pushes a tick every 20 ms until the client goes away (Litestar listens for the
    disconnect and then stops the generator: its ``finally`` records it)."""
    FEEDS[key] = "streaming"
    try:
        i = 0
        while True:
            yield f"tick {i}"
            i += 1
            await asyncio.sleep(0.02)
    finally:
        FEEDS[key] = "closed"


@get("/feeds/{key:str}")
async def feed_state(key: str) -> dict[str, Any]:
    return {"state": FEEDS.get(key)}


def teapot_handler(request: Request, exc: Teapot) -> Response[dict[str, str]]:
    return Response({"error": "teapot", "detail": str(exc)}, status_code=418)


app = Litestar(
    route_handlers=[
        index,
        read_item,
        create_item,
        form,
        upload,
        raw_body,
        stream,
        sse,
        background,
        result,
        raise_teapot,
        boom,
        ws_echo,
        ws_listener,
        ws_stream,
        feed_state,
    ],
    on_startup=[startup],
    on_shutdown=[shutdown],
    exception_handlers={Teapot: teapot_handler},
)
