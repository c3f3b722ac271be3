"""The raw app: a plain ASGI app (no framework) on asyncpg, serving the six test types.

    FERRULE_BENCH_DSN=postgresql://postgres@127.0.0.1:PORT/hello_world \\
        python3 -m ferrule db.raw_app:app --app-dir benches --port 8000

(benches/db/run.py starts the database and the servers itself.) Routes:

    /json                 {"message": "Hello, World!"}, application/json
    /plaintext            Hello, World!, text/plain
    /db                   one random world row, {"id": .., "randomNumber": ..}
    /queries?queries=N    N random rows (N clamped to 1..500, a bad value counts as 1), a list
    /fortunes             every fortune plus one added now, sorted by message, an HTML table
    /updates?queries=N    N random rows, each given a new random number and written back

The pool (at most 64 connections, as many as the load generator's connections) is made in the
lifespan startup, or on the first request under a server that runs no lifespan. For /queries
and /updates each row is read by its own query (a prepared statement: asyncpg prepares each
query once per connection and caches it), one after another on one connection, never a single
query for all rows. /updates writes its rows back in one batch (executemany, one transaction),
sorted by id so that concurrent batches lock rows in the same order and cannot deadlock.
"""

from __future__ import annotations

import asyncio
import os

import asyncpg

from db import rules

POOL_SIZE = 64
DSN_VARIABLE = "FERRULE_BENCH_DSN"

_pool: asyncpg.Pool | None = None
_pool_lock: asyncio.Lock | None = None


async def open_pool() -> asyncpg.Pool:
    global _pool, _pool_lock
    if _pool is None:
        if _pool_lock is None:
            _pool_lock = asyncio.Lock()
        async with _pool_lock:  # the first requests arrive together: one pool for them all
            if _pool is None:
                _pool = await asyncpg.create_pool(
                    os.environ[DSN_VARIABLE], min_size=1, max_size=POOL_SIZE
                )
    return _pool


async def close_pool() -> None:
    global _pool
    if _pool is not None:
        await _pool.close()
        _pool = None


JSON = b"application/json"
TEXT = b"text/plain"
HTML = b"text/html; charset=utf-8"


async def json_route(scope: dict) -> tuple[bytes, bytes]:
    return JSON, rules.dumps({"message": "Hello, World!"})


async def plaintext_route(scope: dict) -> tuple[bytes, bytes]:
    return TEXT, rules.HELLO


async def db_route(scope: dict) -> tuple[bytes, bytes]:
    pool = await open_pool()
    id_, number = await pool.fetchrow(rules.SELECT_WORLD, rules.random_id())
    return JSON, rules.dumps({"id": id_, "randomNumber": number})


async def queries_route(scope: dict) -> tuple[bytes, bytes]:
    count = rules.query_count(rules.queries_param(scope["query_string"]))
    pool = await open_pool()
    async with pool.acquire() as conn:
        rows = [
            tuple(await conn.fetchrow(rules.SELECT_WORLD, rules.random_id())) for _ in range(count)
        ]
    return JSON, rules.world_json(rows)


async def fortunes_route(scope: dict) -> tuple[bytes, bytes]:
    pool = await open_pool()
    rows = [tuple(row) for row in await pool.fetch(rules.SELECT_FORTUNES)]
    return HTML, rules.render_fortunes(rows)


async def updates_route(scope: dict) -> tuple[bytes, bytes]:
    count = rules.query_count(rules.queries_param(scope["query_string"]))
    pool = await open_pool()
    async with pool.acquire() as conn:
        rows = []
        for _ in range(count):
            id_, _number = await conn.fetchrow(rules.SELECT_WORLD, rules.random_id())
            rows.append((id_, rules.random_number()))
        await conn.executemany(rules.UPDATE_WORLD, sorted(rows))
    return JSON, rules.world_json(rows)


ROUTES = {
    "/json": json_route,
    "/plaintext": plaintext_route,
    "/db": db_route,
    "/queries": queries_route,
    "/fortunes": fortunes_route,
    "/updates": updates_route,
}


async def lifespan(receive, send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            try:
                await open_pool()
            except Exception as exc:  # the server reports it and stops
                await send({"type": "lifespan.startup.failed", "message": repr(exc)})
                return
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await close_pool()
            await send({"type": "lifespan.shutdown.complete"})
            return


async def app(scope: dict, receive, send) -> None:
    if scope["type"] == "lifespan":
        await lifespan(receive, send)
        return
    if scope["type"] != "http":
        return
    route = ROUTES.get(scope["path"])
    if route is None:
        status, content_type, body = 404, TEXT, b"Not Found"
    else:
        status = 200
        content_type, body = await route(scope)
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", content_type),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
