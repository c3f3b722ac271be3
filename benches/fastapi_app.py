"""The FastAPI benchmark app: the same small JSON answer from an async and a sync endpoint.

GET /async   an ``async def`` endpoint, run on the event loop
GET /sync    a plain ``def`` endpoint, which FastAPI runs in its thread pool
"""

from __future__ import annotations

from fastapi import FastAPI

app = FastAPI()


@app.get("/async")
async def async_endpoint() -> dict[str, str]:
    return {"message": "Hello, world!"}


@app.get("/sync")
def sync_endpoint() -> dict[str, str]:
    return {"message": "Hello, world!"}
