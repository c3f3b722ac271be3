"""A Starlette app serving server-sent events with sse-starlette, for
``tests/compat/test_sse.py``: a finite ``EventSourceResponse`` (named events with ids and JSON
data, a retry hint), an endless feed whose generator records that the client went away (so a
test can see the server delivered ``http.disconnect``), a lifespan that logs startup and
shutdown, and the state endpoint tests read back."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from asgi_helpers import log_event
from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

#: Per key: "streaming" while an endless feed runs, "closed" once its generator ended.
FEEDS: dict[str, str] = {}


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    log_event("sse startup")
    yield
    log_event("sse shutdown")


async def events(request: Request) -> Response:
    count = int(request.query_params.get("n", "5"))

    async def feed() -> AsyncIterator[ServerSentEvent]:
        for i in range(count):
            yield ServerSentEvent(data=json.dumps({"n": i}), event="tick", id=str(i), retry=1000)
            await asyncio.sleep(0.01)

    return EventSourceResponse(feed())


async def endless(request: Request) -> Response:
    key = request.path_params["key"]

    async def feed() -> AsyncIterator[dict[str, Any]]:
        FEEDS[key] = "streaming"
        i = 0
        try:
            while True:
                yield {"event": "tick", "data": str(i)}
                i += 1
                await asyncio.sleep(0.02)
        finally:
            FEEDS[key] = "closed"

    return EventSourceResponse(feed(), ping=1)


async def feed_state(request: Request) -> Response:
    return JSONResponse({"state": FEEDS.get(request.path_params["key"])})


app = Starlette(
    routes=[
        Route("/events", events),
        Route("/endless/{key}", endless),
        Route("/feeds/{key}", feed_state),
    ],
    lifespan=lifespan,
)
