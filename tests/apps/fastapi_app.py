"""A FastAPI app with the features users rely on: async and sync endpoints, BackgroundTasks,
StreamingResponse, an anyio task group, dependency injection, pydantic bodies, lifespan state."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import anyio
from fastapi import BackgroundTasks, Depends, FastAPI, Header, HTTPException, Request
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

RESULTS: dict[str, Any] = {}
DB = {"opened": 0, "closed": 0}


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[dict[str, Any]]:
    yield {"greeting": "hello from lifespan"}


app = FastAPI(lifespan=lifespan)


class Item(BaseModel):
    name: str
    price: float


@app.get("/items/{item_id}")
async def read_item(item_id: int, q: str | None = None) -> dict[str, Any]:
    await asyncio.sleep(0)
    return {"item_id": item_id, "q": q, "loop": type(asyncio.get_running_loop()).__module__}


@app.post("/items")
async def create_item(item: Item) -> dict[str, Any]:
    return {"name": item.name, "price": item.price}


@app.get("/sync")
def sync_endpoint(sleep: float = 0.0) -> dict[str, Any]:
    time.sleep(sleep)
    return {"thread": threading.current_thread().name}


@app.post("/background/{key}")
async def schedule(key: str, tasks: BackgroundTasks) -> dict[str, str]:
    async def async_work() -> None:
        await asyncio.sleep(0.1)
        RESULTS[key] = {"async": True, "at": time.time()}

    def sync_work() -> None:
        RESULTS[key + "-sync"] = {"thread": threading.current_thread().name}

    tasks.add_task(async_work)
    tasks.add_task(sync_work)
    return {"scheduled": key, "at": str(time.time())}


@app.get("/results/{key}")
async def result(key: str) -> dict[str, Any]:
    if key not in RESULTS:
        raise HTTPException(status_code=404, detail="not yet")
    return RESULTS[key]


@app.get("/stream")
async def stream(n: int = 100) -> StreamingResponse:
    async def lines() -> AsyncIterator[bytes]:
        for i in range(n):
            yield f"line {i}\n".encode()
            await asyncio.sleep(0)

    return StreamingResponse(lines(), media_type="text/plain")


@app.get("/taskgroup")
async def taskgroup() -> dict[str, Any]:
    order: list[int] = []

    async def worker(i: int) -> None:
        await anyio.sleep(0.05 * (3 - i))
        order.append(i)

    async with anyio.create_task_group() as group:
        for i in range(3):
            group.start_soon(worker, i)
    in_thread = await anyio.to_thread.run_sync(lambda: threading.current_thread().name)
    with anyio.move_on_after(0.05) as scope:
        await anyio.sleep(10)
    return {"order": order, "to_thread": in_thread, "cancelled": scope.cancel_called}


async def database() -> AsyncIterator[dict[str, str]]:
    DB["opened"] += 1
    try:
        yield {"conn": "fake-db"}
    finally:
        DB["closed"] += 1


def require_token(x_token: str = Header(default="")) -> str:
    if x_token != "secret":
        raise HTTPException(status_code=401, detail="bad token")
    return x_token


@app.get("/me")
async def me(
    db: Annotated[dict[str, str], Depends(database)],
    token: Annotated[str, Depends(require_token)],
) -> dict[str, Any]:
    return {"db": db["conn"], "token": token}


@app.get("/db-state")
async def db_state() -> dict[str, int]:
    return DB


@app.get("/lifespan-state")
async def lifespan_state(request: Request) -> dict[str, Any]:
    return {"greeting": request.state.greeting}
