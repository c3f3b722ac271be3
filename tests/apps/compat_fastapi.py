"""A FastAPI app as its users write one, for ``tests/compat/test_fastapi.py``: path and query
parameters, pydantic JSON bodies, HTML forms and multipart uploads, StreamingResponse (finite,
and endless until the client leaves), FileResponse (with ranges), BackgroundTasks, a lifespan
that logs startup and shutdown, an endpoint that raises (500), and WebSockets: an echo, routes
with a required ``Query()`` or ``Header()`` and one that validates messages after accepting
(FastAPI then closes with a list as the reason)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from asgi_helpers import log_event
from fastapi import (
    BackgroundTasks,
    FastAPI,
    File,
    Form,
    Header,
    HTTPException,
    Query,
    Request,
    UploadFile,
    WebSocket,
    WebSocketDisconnect,
)
from fastapi.exceptions import WebSocketRequestValidationError
from fastapi.responses import FileResponse, StreamingResponse
from pydantic import BaseModel, ValidationError

RESULTS: dict[str, Any] = {}
#: A file served by ``/file``: this module's own source.
SOURCE = Path(__file__)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
    log_event("fastapi startup")
    yield {"started": True}
    log_event("fastapi shutdown")


app = FastAPI(lifespan=lifespan)


class Item(BaseModel):
    name: str
    price: float
    tags: list[str] = []


@app.get("/items/{item_id}")
async def read_item(item_id: int, request: Request, q: str | None = None) -> dict[str, Any]:
    return {"item_id": item_id, "q": q, "started": request.state.started}


@app.post("/items", status_code=201)
async def create_item(item: Item) -> dict[str, Any]:
    return {"created": item.model_dump(), "total": item.price * 2}


@app.post("/form")
async def form(name: Annotated[str, Form()], tags: Annotated[list[str], Form()]) -> dict[str, Any]:
    return {"name": name, "tags": tags}


@app.post("/upload")
async def upload(
    file: Annotated[UploadFile, File()], note: Annotated[str, Form()] = ""
) -> dict[str, Any]:
    data = await file.read()
    return {
        "filename": file.filename,
        "content_type": file.content_type,
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
        "note": note,
    }


@app.get("/stream")
async def stream(n: int = 20) -> StreamingResponse:
    async def lines() -> AsyncIterator[str]:
        for i in range(n):
            yield f"line {i}\n"
            await asyncio.sleep(0.001)

    return StreamingResponse(lines(), media_type="text/plain")


#: Per key: "streaming" while an endless stream runs, "closed" once its generator ended.
FEEDS: dict[str, str] = {}


@app.get("/endless/{key}")
async def endless(key: str) -> StreamingResponse:
    """An endless stream (a log tail, a token stream): when the client leaves, the server must
    let the app know (``send`` raising under spec 2.4, or ``http.disconnect``), which ends the
    generator (its ``finally`` records it)."""

    async def lines() -> AsyncIterator[str]:
        FEEDS[key] = "streaming"
        try:
            i = 0
            while True:
                yield f"line {i}\n"
                i += 1
                await asyncio.sleep(0.02)
        finally:
            FEEDS[key] = "closed"

    return StreamingResponse(lines(), media_type="text/plain")


@app.get("/feeds/{key}")
async def feed_state(key: str) -> dict[str, Any]:
    return {"state": FEEDS.get(key)}


@app.get("/file")
async def file() -> FileResponse:
    return FileResponse(SOURCE, media_type="text/x-python")


@app.post("/background/{key}", status_code=202)
async def background(key: str, tasks: BackgroundTasks) -> dict[str, str]:
    async def work() -> None:
        await asyncio.sleep(0.05)
        RESULTS[key] = {"done": True}

    tasks.add_task(work)
    return {"scheduled": key}


@app.get("/results/{key}")
async def result(key: str) -> dict[str, Any]:
    if key not in RESULTS:
        raise HTTPException(status_code=404, detail="not yet")
    return RESULTS[key]


@app.get("/boom")
async def boom() -> None:
    raise RuntimeError("compat_fastapi: this endpoint always fails")


@app.websocket("/ws")
async def ws_echo(websocket: WebSocket) -> None:
    await websocket.accept()
    try:
        while True:
            message = await websocket.receive_json()
            await websocket.send_json({"echo": message})
    except WebSocketDisconnect:
        pass


@app.websocket("/ws-query")
async def ws_query(websocket: WebSocket, token: Annotated[str, Query()]) -> None:
    await websocket.accept()
    await websocket.send_json({"token": token})
    await websocket.close()


@app.websocket("/ws-header")
async def ws_header(websocket: WebSocket, x_token: Annotated[str, Header()]) -> None:
    await websocket.accept()
    await websocket.send_json({"x_token": x_token})
    await websocket.close()


@app.websocket("/ws-validate")
async def ws_validate(websocket: WebSocket) -> None:
    """Accepts, then validates each message as an :class:`Item`: an invalid one raises
    FastAPI's own WebSocketRequestValidationError, whose default handler closes the (accepted)
    socket with code 1008 and the list of errors as the reason."""
    await websocket.accept()
    while True:
        raw = await websocket.receive_json()
        try:
            item = Item.model_validate(raw)
        except ValidationError as exc:
            raise WebSocketRequestValidationError(exc.errors(include_url=False)) from None
        await websocket.send_json({"ok": item.name})
