"""Request bodies: how ``receive()`` delivers them, disconnects, and ``Expect: 100-continue``."""

from __future__ import annotations

import asyncio
import hashlib
import time
from typing import Any

from asgi_helpers import RECORDS, query, read_body, send_json, send_response, serve_record


class SlowToRead(dict):  # type: ignore[type-arg]
    """A message whose ``trailers`` flag takes a while to read, without the GIL: as a first use
    of an interned key or a finalizer run meanwhile may, it lets go of the GIL while the server
    reads it."""

    def __getitem__(self, key: str) -> Any:
        if key == "trailers":
            time.sleep(0.6)
        return super().__getitem__(key)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    path = scope["path"]
    params = query(scope)
    if path == "/_record":
        await serve_record(scope, send)
    elif path == "/echo":
        body, messages = await read_body(receive)
        await send_json(
            send,
            {"len": len(body), "sha256": hashlib.sha256(body).hexdigest(), "messages": messages},
        )
    elif path == "/first-chunk":
        # Answer after one receive(): proves the body is not buffered whole before the app runs.
        message = await receive()
        await send_json(
            send,
            {
                "type": message["type"],
                "len": len(message.get("body", b"")),
                "more_body": message.get("more_body", False),
            },
        )
    elif path == "/read-until-disconnect":
        # Keep receiving (never respond) and record every message type until a disconnect.
        seen = []
        RECORDS[params["key"] + "-started"] = True
        while True:
            message = await receive()
            seen.append(message["type"])
            if message["type"] != "http.request":
                break
        RECORDS[params["key"]] = seen
    elif path == "/after-response":
        await send_response(send, b"done")
        results = []
        for _ in range(3):
            started = time.monotonic()
            try:
                message = await asyncio.wait_for(receive(), 10.0)
                results.append([message["type"], round(time.monotonic() - started, 3)])
            except TimeoutError:
                results.append(["timeout", 10.0])
        RECORDS[params["key"]] = results
    elif path == "/receive-called-in-a-thread":
        # receive() called from a pool thread (as code that hands the callable around may do),
        # its awaitable then awaited here, as it can be under uvicorn.
        loop = asyncio.get_running_loop()
        body = b""
        while True:
            message = await (await loop.run_in_executor(None, receive))
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        await send_response(send, body)
    elif path == "/answer-then-cancel-read":
        # Read in a task, answer 413 without waiting for the body, then cancel the read: what
        # Quart does with a body over its MAX_CONTENT_LENGTH.
        async def reader() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        task = asyncio.ensure_future(reader())
        for _ in range(3):
            await asyncio.sleep(0)
        await send_response(send, b"too big", 413)
        task.cancel()
    elif path == "/start-while-body-arrives":
        # A task waits in receive() for the body while the response starts; the client sends
        # the body while the server is still reading the start message.
        reading = asyncio.ensure_future(read_body(receive))
        await asyncio.sleep(0)
        await send(SlowToRead(type="http.response.start", status=200, headers=[]))
        body, _ = await reading
        await send({"type": "http.response.body", "body": str(len(body)).encode()})
    elif path == "/no-read":
        await send_response(send, b"answered without reading")
    elif path == "/slow-read":
        await asyncio.sleep(float(params.get("delay", "0.5")))
        body, _ = await read_body(receive)
        await send_response(send, body)
    else:
        await send_response(send, b"not found", 404)
