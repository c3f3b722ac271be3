"""A Starlette app: routing, path params, request bodies, streaming, middleware, lifespan
state, exception handlers."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route


class Teapot(Exception):
    pass


@asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
    yield {"db": "connected"}


async def home(request: Request) -> Response:
    return PlainTextResponse("hello starlette")


async def user(request: Request) -> Response:
    return JSONResponse(
        {
            "name": request.path_params["name"],
            "q": request.query_params.get("q"),
            "loop": type(asyncio.get_running_loop()).__module__,
        }
    )


async def echo(request: Request) -> Response:
    body = await request.body()
    return Response(body, media_type="application/octet-stream")


async def stream_chunks(request: Request) -> Response:
    async def chunks() -> AsyncIterator[bytes]:
        for i in range(50):
            yield f"chunk-{i};".encode()
            await asyncio.sleep(0.001)

    return StreamingResponse(chunks())


async def big(request: Request) -> Response:
    return PlainTextResponse("compress me " * 20000)


async def state(request: Request) -> Response:
    return JSONResponse({"db": request.state.db})


async def teapot(request: Request) -> Response:
    raise Teapot()


async def handle_teapot(request: Request, exc: Exception) -> Response:
    return PlainTextResponse("I'm a teapot", status_code=418)


class StampMiddleware(BaseHTTPMiddleware):
    async def dispatch(self, request: Request, call_next: Any) -> Response:
        response = await call_next(request)
        response.headers["x-middleware"] = "stamped"
        return response


app = Starlette(
    routes=[
        Route("/", home),
        Route("/users/{name}", user),
        Route("/echo", echo, methods=["POST"]),
        Route("/stream", stream_chunks),
        Route("/big", big),
        Route("/state", state),
        Route("/teapot", teapot),
    ],
    middleware=[Middleware(StampMiddleware), Middleware(GZipMiddleware, minimum_size=500)],
    exception_handlers={Teapot: handle_teapot},
    lifespan=lifespan,
)
