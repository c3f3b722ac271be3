"""Real frameworks on the server, each under --loop asyncio and --loop uvloop: a FastAPI app
(async and sync endpoints, BackgroundTasks, StreamingResponse, anyio task group, dependency
injection, lifespan state) and a Starlette app (routing, bodies, streaming, middleware)."""

from __future__ import annotations

import gzip
import threading
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest
from support.h1raw import request_bytes
from support.loopkinds import LOOP_KINDS
from support.serverutil import ServerProcess, poll, running_server


@pytest.fixture(scope="module", params=LOOP_KINDS)
def fastapi_server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    with running_server("fastapi_app:app", "--loop", request.param, timeout=15) as srv:
        srv.loop_kind = request.param  # type: ignore[attr-defined]
        yield srv


@pytest.fixture(scope="module", params=LOOP_KINDS)
def starlette_server(request: pytest.FixtureRequest) -> Iterator[ServerProcess]:
    with running_server("starlette_app:app", "--loop", request.param, timeout=15) as srv:
        srv.loop_kind = request.param  # type: ignore[attr-defined]
        yield srv


# -- FastAPI ----------------------------------------------------------------------------------


def test_fastapi_async_endpoint(fastapi_server: ServerProcess) -> None:
    """Rule: FastAPI async endpoints work: path and query parameters parsed, JSON out, on the
    loop asked for. Broken: an error status, wrong values, or another loop module."""
    with fastapi_server.client() as client:
        response = client.get("/items/42", params={"q": "x"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["item_id"] == 42 and body["q"] == "x"
    assert body["loop"].split(".")[0] == fastapi_server.loop_kind  # type: ignore[attr-defined]


def test_fastapi_request_body_validation(fastapi_server: ServerProcess) -> None:
    """Rule: a JSON body reaches pydantic through receive(): valid bodies parse, invalid ones
    give FastAPI's 422. Broken: the body is lost (422 for a valid body) or the server errors."""
    with fastapi_server.client() as client:
        good = client.post("/items", json={"name": "pen", "price": 1.5})
        bad = client.post("/items", json={"name": "pen"})
    assert good.status_code == 200 and good.json() == {"name": "pen", "price": 1.5}
    assert bad.status_code == 422


def test_fastapi_sync_endpoints_run_in_thread_pool(fastapi_server: ServerProcess) -> None:
    """Rule: sync ``def`` endpoints run in anyio's worker threads, concurrently: four calls that
    each sleep 2 s finish in well under 8 s. Broken: they run on the loop thread one after
    another (8 s) or fail because anyio cannot find the loop from the thread. With calls of
    0.5 s and a bound of 1.6 s, two suites at once on two cores took 1.67 s, concurrently."""
    results: list[httpx.Response] = []

    def call() -> None:
        results.append(fastapi_server.get("/sync", params={"sleep": "2"}, timeout=20))

    threads = [threading.Thread(target=call) for _ in range(4)]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    elapsed = time.monotonic() - started
    assert [r.status_code for r in results] == [200] * 4, [r.text for r in results]
    assert all(r.json()["thread"].startswith("AnyIO worker thread") for r in results)
    assert elapsed < 6.0, f"4 sync calls of 2 s took {elapsed:.2f}s (not concurrent?)"


def test_fastapi_background_tasks(fastapi_server: ServerProcess) -> None:
    """Rule: BackgroundTasks run after the response is sent, async and sync ones alike. Broken:
    the tasks never run (the results never appear), or run before the response (the async task
    finishes before the response's own timestamp)."""
    key = uuid.uuid4().hex
    with fastapi_server.client() as client:
        response = client.post(f"/background/{key}")
        assert response.status_code == 200
        responded_at = float(response.json()["at"])

        def result(name: str) -> dict | None:
            r = client.get(f"/results/{name}")
            return r.json() if r.status_code == 200 else None

        done = poll(lambda: result(key), what="the async background task")
        sync_done = poll(lambda: result(key + "-sync"), what="the sync task")
    assert done["at"] >= responded_at
    assert sync_done["thread"].startswith("AnyIO worker thread")


def test_fastapi_streaming_response(fastapi_server: ServerProcess) -> None:
    """Rule: StreamingResponse from an async generator arrives whole and chunked. Broken:
    lines missing or out of order, or the response is not chunked (buffered)."""
    with fastapi_server.raw() as conn:
        conn.send(request_bytes("GET", "/stream?n=200"))
        response = conn.read_response()
    assert response.status == 200
    assert response.chunked
    assert response.body == "".join(f"line {i}\n" for i in range(200)).encode()


def test_fastapi_anyio_task_group(fastapi_server: ServerProcess) -> None:
    """Rule: anyio works inside a request: a task group's children run concurrently (finishing
    in reverse start order), to_thread.run_sync runs in a worker thread, move_on_after cancels.
    Broken: anyio fails to detect the loop (sniffio) or cancellation does not work."""
    with fastapi_server.client() as client:
        body = client.get("/taskgroup").json()
    assert body["order"] == [2, 1, 0]
    assert body["to_thread"].startswith("AnyIO worker thread")
    assert body["cancelled"] is True


def test_fastapi_dependency_injection(fastapi_server: ServerProcess) -> None:
    """Rule: Depends works, including yield dependencies (teardown runs) and a header
    dependency that refuses with 401. Broken: wrong status, missing values, or the teardown
    never runs (closed lags opened)."""
    with fastapi_server.client() as client:
        assert client.get("/me").status_code == 401
        ok = client.get("/me", headers={"X-Token": "secret"})
        assert ok.status_code == 200
        assert ok.json() == {"db": "fake-db", "token": "secret"}
        state = poll(
            lambda: (s := client.get("/db-state").json())["opened"] == s["closed"] and s,
            timeout=5,
            what="the yield dependency's teardown",
        )
    assert state["opened"] >= 2


def test_fastapi_lifespan_state(fastapi_server: ServerProcess) -> None:
    """Rule: the state a FastAPI lifespan yields reaches request.state. Broken: AttributeError
    (500) because the scope has no state."""
    with fastapi_server.client() as client:
        assert client.get("/lifespan-state").json() == {"greeting": "hello from lifespan"}


# -- Starlette --------------------------------------------------------------------------------


def test_starlette_routes_and_params(starlette_server: ServerProcess) -> None:
    """Rule: Starlette routing, path and query params work on the loop asked for. Broken: 404,
    wrong values or another loop."""
    with starlette_server.client() as client:
        assert client.get("/").text == "hello starlette"
        body = client.get("/users/ada", params={"q": "z"}).json()
        assert client.get("/missing").status_code == 404
    assert body["name"] == "ada" and body["q"] == "z"
    assert body["loop"].split(".")[0] == starlette_server.loop_kind  # type: ignore[attr-defined]


def test_starlette_request_body(starlette_server: ServerProcess) -> None:
    """Rule: request.body() gets the whole body (1 MB). Broken: truncated or corrupted."""
    payload = bytes(range(256)) * 4096
    with starlette_server.client() as client:
        response = client.post("/echo", content=payload)
    assert response.status_code == 200
    assert response.content == payload


def test_starlette_streaming_and_middleware(starlette_server: ServerProcess) -> None:
    """Rule: a StreamingResponse passes through BaseHTTPMiddleware intact, with the
    middleware's header. Broken: chunks lost, header missing, or an error."""
    with starlette_server.client() as client:
        response = client.get("/stream")
    assert response.status_code == 200
    assert response.headers["x-middleware"] == "stamped"
    assert response.text == "".join(f"chunk-{i};" for i in range(50))


def test_starlette_gzip(starlette_server: ServerProcess) -> None:
    """Rule: GZipMiddleware's compressed body is sent as is. Broken: bad framing corrupts the
    gzip stream (decompression fails) or the encoding header is lost."""
    with starlette_server.raw() as conn:
        conn.send(request_bytes("GET", "/big", headers=[("Accept-Encoding", "gzip")]))
        response = conn.read_response()
    assert response.header("content-encoding") == "gzip"
    assert gzip.decompress(response.body) == b"compress me " * 20000


def test_starlette_lifespan_state_and_exception_handler(starlette_server: ServerProcess) -> None:
    """Rule: lifespan state reaches request.state, and an app's exception handler turns an
    exception into its response (not the server's 500). Broken: 500 on either."""
    with starlette_server.client() as client:
        assert client.get("/state").json() == {"db": "connected"}
        teapot = client.get("/teapot")
    assert teapot.status_code == 418 and teapot.text == "I'm a teapot"
