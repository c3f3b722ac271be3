"""Which ``contextvars`` a request's coroutine sees (``tests/apps/context_app.py``).

uvicorn and granian start each request in a copy of the context the server runs in: a variable
set when the app module was imported is seen by every request, one set inside the lifespan
startup is not (the lifespan runs as a task of its own), and what a request sets stays its own.
uvicorn's ``--reset-contextvars`` starts each request from an empty context instead.
"""

from __future__ import annotations

import json

import pytest
from support.serverutil import running_server
from websockets.sync.client import connect

LOOPS = ["asyncio", "uvloop"]


@pytest.mark.parametrize("loop", LOOPS)
def test_requests_start_from_the_context_the_server_started_in(loop: str) -> None:
    """Rule: on either loop, HTTP requests and WebSockets see the variable set at import, not
    the one set in the lifespan, and never one set by an earlier request (each request sets
    one after reading it). Broken before the fix on asyncio: requests started on a tokio
    thread copied that thread's empty context and saw "unset" for the import-time variable,
    while on uvloop they saw it (the loop thread's context)."""
    expected = {"imported": "set at import", "lifespan": "unset", "per_request": "unset"}
    with running_server("context_app:app", "--loop", loop) as server:
        with server.client() as client:
            for path in ("/first", "/second", "/third"):
                assert client.get(path).json() == expected, server.describe()
        with connect(f"ws://127.0.0.1:{server.port}/ws", open_timeout=5) as ws:
            assert json.loads(ws.recv(timeout=5)) == expected


@pytest.mark.parametrize("loop", LOOPS)
def test_reset_contextvars_starts_each_request_empty(loop: str) -> None:
    """Rule: with ``--reset-contextvars`` (uvicorn's option) a request sees no variable set
    outside it, not even the import-time one, over HTTP and WebSocket. Broken: the option
    unknown (exit 2), or ignored (the import-time value seen)."""
    expected = {"imported": "unset", "lifespan": "unset", "per_request": "unset"}
    with running_server("context_app:app", "--loop", loop, "--reset-contextvars") as server:
        with server.client() as client:
            for path in ("/first", "/second"):
                assert client.get(path).json() == expected, server.describe()
        with connect(f"ws://127.0.0.1:{server.port}/ws", open_timeout=5) as ws:
            assert json.loads(ws.recv(timeout=5)) == expected
