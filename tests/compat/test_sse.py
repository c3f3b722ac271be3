"""Starlette with sse-starlette's ``EventSourceResponse`` (``apps/compat_sse.py``), under both
loop kinds, read by httpx as an EventSource client reads it: a finite feed (named events, ids,
a retry hint), an endless feed the client walks away from (the app must be told: its generator
ends), lifespan; then a clean stop after a stream was read."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from compatutil import STOP_CASES, framework_server, logged_events, parse_sse, stop_cleanly
from support.loopkinds import LOOP_KINDS
from support.serverutil import ServerProcess, poll

APP = "compat_sse:app"


@pytest.fixture(scope="module", params=LOOP_KINDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    events = tmp_path_factory.mktemp("sse") / "events.log"
    with framework_server(APP, request.param, events) as srv:
        yield srv


def read_endless(server: ServerProcess, key: str, count: int) -> list[dict[str, str]]:
    """Open ``/endless/KEY``, read ``count`` events, then close the connection."""
    text = ""
    with server.client() as client, client.stream("GET", f"/endless/{key}") as response:
        assert response.status_code == 200
        for chunk in response.iter_text():
            text += chunk
            if len(parse_sse(text)) > count:
                break
    return parse_sse(text)[:count]


def test_finite_event_stream(server: ServerProcess) -> None:
    """Rule: an EventSourceResponse is served as ``text/event-stream``, unbuffered (chunked, no
    Content-Length), each event with its id, name, JSON data and retry hint, in order, and the
    response ends when the generator does. Broken: events lost, merged or reordered, or the
    body buffered."""
    with server.client() as client, client.stream("GET", "/events", params={"n": 6}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        assert r.headers.get("transfer-encoding") == "chunked"
        assert "content-length" not in r.headers
        events = parse_sse(r.read().decode())
    assert [e["id"] for e in events] == [str(i) for i in range(6)]
    assert {e["event"] for e in events} == {"tick"}
    assert [json.loads(e["data"]) for e in events] == [{"n": i} for i in range(6)]
    assert {e["retry"] for e in events} == {"1000"}


def test_client_leaving_an_endless_stream_ends_it(server: ServerProcess) -> None:
    """Rule: when the client closes an endless event stream, the app learns it (sse-starlette
    waits for ``http.disconnect``) and its generator ends within 3 s, then the server serves
    on. Broken: the generator runs on forever (the feed stays "streaming")."""
    key = uuid.uuid4().hex
    events = read_endless(server, key, 3)
    assert [e["data"] for e in events] == ["0", "1", "2"]
    state = poll(
        lambda: server.get(f"/feeds/{key}").json()["state"] == "closed" or None,
        timeout=3,
        what="the feed's generator to end after the client left",
    )
    assert state
    assert logged_events(server).count("sse startup") == 1


@pytest.mark.parametrize(("loop", "sig"), STOP_CASES)
def test_clean_stop_after_streams(tmp_path: Path, loop: str, sig: int) -> None:
    """Rule: after a finite event stream and an endless one were read (and closed by the
    client), SIGINT or SIGTERM stops the server within 5 s with a clean exit, the lifespan
    shutdown runs, and stderr holds no "Task was destroyed but it is pending!", Traceback, ERROR
    or Exception. Broken (ferrule before the fix): sse-starlette's shutdown watcher task was
    left pending when the loop closed ("Task was destroyed but it is pending!" once)."""
    with framework_server(APP, loop, tmp_path / "events.log") as srv:
        with srv.client() as client:
            assert len(parse_sse(client.get("/events", params={"n": 3}).text)) == 3
        key = uuid.uuid4().hex
        read_endless(srv, key, 2)
        poll(lambda: srv.get(f"/feeds/{key}").json()["state"] == "closed")
        stop_cleanly(srv, sig)
    assert logged_events(srv) == ["sse startup", "sse shutdown"]
