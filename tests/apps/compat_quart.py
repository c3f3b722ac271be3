"""A Quart app as its users write one, for ``tests/compat/test_quart.py``: routing with
converters, JSON in and out, forms and multipart files, a body size limit
(``MAX_CONTENT_LENGTH`` -> 413), a route that refuses an unauthorised POST (401) without
reading its body, a streamed response, ``add_background_task``, ``before_serving`` /
``after_serving`` (lifespan), an error handler and a route that raises (500), and WebSockets:
an echo, a ticker (a producer task beside the receive loop) that must end when the client
leaves, and one that refuses the handshake with 401 (the denial-response extension)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import AsyncIterator
from typing import Any

from asgi_helpers import log_event
from quart import Quart, abort, jsonify, request, websocket

#: Bodies above this are refused with 413 by Quart itself.
MAX_BODY = 1024 * 1024

app = Quart(__name__)
app.config["MAX_CONTENT_LENGTH"] = MAX_BODY

RESULTS: dict[str, Any] = {}


class Teapot(Exception):
    pass


@app.before_serving
async def startup() -> None:
    log_event("quart startup")


@app.after_serving
async def shutdown() -> None:
    log_event("quart shutdown")


@app.errorhandler(Teapot)
async def teapot(error: Teapot) -> Any:
    return jsonify(error="teapot", detail=str(error)), 418


@app.get("/")
async def index() -> str:
    return "hello quart"


@app.get("/items/<int:item_id>")
async def item(item_id: int) -> Any:
    return {"item_id": item_id, "q": request.args.get("q")}


@app.post("/json")
async def echo_json() -> Any:
    data = await request.get_json()
    return {"received": data, "keys": sorted(data)}, 201


@app.post("/form")
async def form() -> Any:
    fields = await request.form
    files = await request.files
    upload = files.get("file")
    content = upload.read() if upload is not None else b""
    return {
        "name": fields.get("name"),
        "tags": fields.getlist("tags"),
        "filename": upload.filename if upload is not None else None,
        "size": len(content),
        "sha256": hashlib.sha256(content).hexdigest(),
    }


@app.post("/upload")
async def upload() -> Any:
    data = await request.get_data()
    return {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}


@app.post("/protected")
async def protected() -> Any:
    if request.headers.get("Authorization") != "Bearer good":
        return {"error": "unauthorised"}, 401
    data = await request.get_data()
    return {"size": len(data)}


@app.get("/stream")
async def stream() -> Any:
    count = int(request.args.get("n", "10"))

    async def lines() -> AsyncIterator[bytes]:
        for i in range(count):
            yield f"part {i}\n".encode()
            await asyncio.sleep(0.001)

    return lines(), 200, {"Content-Type": "text/plain"}


@app.post("/background/<key>")
async def background(key: str) -> Any:
    async def work() -> None:
        await asyncio.sleep(0.05)
        RESULTS[key] = {"done": True}

    app.add_background_task(work)
    return {"scheduled": key}, 202


@app.get("/results/<key>")
async def result(key: str) -> Any:
    if key not in RESULTS:
        abort(404)
    return RESULTS[key]


@app.get("/teapot")
async def raise_teapot() -> Any:
    raise Teapot("short and stout")


@app.get("/boom")
async def boom() -> Any:
    raise RuntimeError("compat_quart: this route always fails")


@app.websocket("/ws")
async def ws_echo() -> None:
    while True:
        message = await websocket.receive()
        await websocket.send(f"echo: {message}")


#: Per key: "streaming" while a ``/ws-ticker`` handler runs, "closed" once it ended.
FEEDS: dict[str, str] = {}


@app.websocket("/ws-ticker/<key>")
async def ws_ticker(key: str) -> None:
    """The producer/consumer pattern of Quart's docs: one task pushes ticks, the handler
    answers what the client sends; when the client goes away Quart cancels the handler, whose
    ``finally`` records it."""
    FEEDS[key] = "streaming"

    async def producer() -> None:
        i = 0
        while True:
            await websocket.send(f"tick {i}")
            i += 1
            await asyncio.sleep(0.02)

    task = asyncio.ensure_future(producer())
    try:
        while True:
            message = await websocket.receive()
            await websocket.send(f"got {message}")
    finally:
        task.cancel()
        FEEDS[key] = "closed"


@app.get("/feeds/<key>")
async def feed_state(key: str) -> Any:
    return {"state": FEEDS.get(key)}


@app.websocket("/ws-auth")
async def ws_auth() -> None:
    if websocket.args.get("token") != "good":
        abort(401)
    await websocket.accept()
    await websocket.send("welcome")
