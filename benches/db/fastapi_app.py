"""The FastAPI app: the six test types of raw_app.py through FastAPI, on SQLAlchemy 2's asyncio
engine (asyncpg underneath) with Core statements, and Jinja2 for the fortunes page.

    FERRULE_BENCH_DSN=postgresql://postgres@127.0.0.1:PORT/hello_world \\
        python3 -m ferrule db.fastapi_app:app --app-dir benches --port 8000

(benches/db/run.py starts the database and the servers itself.) The routes and their answers are
raw_app.py's. The engine is made in the lifespan startup, its pool 64 connections with no
overflow. Each request takes a connection as SQLAlchemy's users write it (`engine.connect()`,
so reads run in the transaction SQLAlchemy begins and rolls back; `engine.begin()` for the
updates, committed). /queries and /updates read each row by its own query, one after another;
/updates writes its rows back in one executemany, sorted by id so that concurrent batches lock
rows in the same order and cannot deadlock.
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.responses import HTMLResponse, PlainTextResponse, Response
from sqlalchemy import Column, Integer, MetaData, String, Table, bindparam, select, update
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from db import rules

POOL_SIZE = 64
DSN_VARIABLE = "FERRULE_BENCH_DSN"

metadata = MetaData()
world = Table(
    "world",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("randomnumber", Integer),
)
fortune = Table(
    "fortune",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("message", String(2048)),
)

SELECT_WORLD = select(world.c.id, world.c.randomnumber).where(world.c.id == bindparam("id"))
SELECT_FORTUNES = select(fortune.c.id, fortune.c.message)
# Bound names differ from the columns': SQLAlchemy reserves the column names for SET values.
UPDATE_WORLD = (
    update(world)
    .where(world.c.id == bindparam("row_id"))
    .values(randomnumber=bindparam("new_number"))
)

engine: AsyncEngine | None = None


def sqlalchemy_url(dsn: str) -> str:
    """postgresql://... as SQLAlchemy names its asyncpg driver."""
    scheme, _, rest = dsn.partition("://")
    return f"postgresql+asyncpg://{rest}" if scheme in ("postgres", "postgresql") else dsn


@asynccontextmanager
async def lifespan(app: FastAPI):
    global engine
    engine = create_async_engine(
        sqlalchemy_url(os.environ[DSN_VARIABLE]), pool_size=POOL_SIZE, max_overflow=0
    )
    try:
        yield
    finally:
        await engine.dispose()
        engine = None


app = FastAPI(lifespan=lifespan)


class JSONBytes(Response):
    """JSON already encoded by rules.dumps (orjson when installed)."""

    media_type = "application/json"


@app.get("/json")
async def json_route() -> Response:
    return JSONBytes(rules.dumps({"message": "Hello, World!"}))


@app.get("/plaintext")
async def plaintext_route() -> Response:
    return PlainTextResponse(rules.HELLO)


@app.get("/db")
async def db_route() -> Response:
    async with engine.connect() as conn:
        id_, number = (await conn.execute(SELECT_WORLD, {"id": rules.random_id()})).one()
    return JSONBytes(rules.dumps({"id": id_, "randomNumber": number}))


@app.get("/queries")
async def queries_route(queries: str = "1") -> Response:
    count = rules.query_count(queries)
    rows = []
    async with engine.connect() as conn:
        for _ in range(count):
            row = (await conn.execute(SELECT_WORLD, {"id": rules.random_id()})).one()
            rows.append(tuple(row))
    return JSONBytes(rules.world_json(rows))


@app.get("/fortunes")
async def fortunes_route() -> Response:
    async with engine.connect() as conn:
        rows = [tuple(row) for row in await conn.execute(SELECT_FORTUNES)]
    return HTMLResponse(rules.render_fortunes(rows))


@app.get("/updates")
async def updates_route(queries: str = "1") -> Response:
    count = rules.query_count(queries)
    rows = []
    async with engine.begin() as conn:
        for _ in range(count):
            id_, _number = (await conn.execute(SELECT_WORLD, {"id": rules.random_id()})).one()
            rows.append((id_, rules.random_number()))
        await conn.execute(UPDATE_WORLD, [{"row_id": i, "new_number": n} for i, n in sorted(rows)])
    return JSONBytes(rules.world_json(rows))
