"""Django 5.2 served as its users serve it (``apps/compat_django.py`` with
``compat_django_settings``: ``get_asgi_application()``), under both loop kinds, through httpx:
async and sync views, JSON, forms with in-memory and spilled-to-disk uploads, HEAD,
``StreamingHttpResponse`` from async iterators (plain, server-sent events, endless until the
client leaves), percent-encoded paths, cookies, a redirect, ``request.META`` as the server fills
it and ``--root-path``, a 404 and a 500 the server survives; then a clean stop (Django refuses
the lifespan scope, which must not read as an error)."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from compatutil import STOP_CASES, framework_server, parse_sse, stop_cleanly
from support.loopkinds import LOOP_KINDS
from support.serverutil import ServerProcess, poll

APP = "compat_django:app"


@pytest.fixture(scope="module", params=LOOP_KINDS)
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    events = tmp_path_factory.mktemp("django") / "events.log"
    with framework_server(APP, request.param, events) as srv:
        yield srv


def test_views_json_and_head(server: ServerProcess) -> None:
    """Rule: URL patterns with converters reach async views, a JSON body is read whole (201),
    and HEAD gets GET's headers without a body. Broken: 404s, lost body, or a body on HEAD."""
    with server.client() as client:
        index = client.get("/")
        item = client.get("/items/3", params={"q": "a"})
        created = client.post("/json", json={"b": 2, "a": [1]})
        head = client.head("/")
        missing = client.get("/nowhere")
    assert index.status_code == 200 and index.text == "hello django"
    assert item.json() == {"item_id": 3, "q": "a", "method": "GET"}
    assert created.status_code == 201
    assert created.json() == {"received": {"b": 2, "a": [1]}, "keys": ["a", "b"]}
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-length"] == str(len("hello django"))
    assert missing.status_code == 404


def test_form_with_small_and_large_uploads(server: ServerProcess) -> None:
    """Rule: a multipart form reaches a sync view (in Django's thread) whole: fields, a repeated
    field, a small file and a 1 MB one Django spills to a temporary file. Broken: fields lost,
    a file truncated (size or digest differ), or the view ran on the loop thread."""
    small = b"s" * 1000
    large = bytes(range(256)) * 4096
    with server.client() as client:
        response = client.post(
            "/form",
            data={"name": "ada", "tags": ["x", "y"]},
            files={"small": ("s.txt", small), "large": ("l.bin", large)},
        )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["name"] == "ada" and body["tags"] == ["x", "y"]
    assert body["files"]["small"]["size"] == len(small)
    assert body["files"]["small"]["sha256"] == hashlib.sha256(small).hexdigest()
    assert body["files"]["large"] == {
        "filename": "l.bin",
        "size": len(large),
        "sha256": hashlib.sha256(large).hexdigest(),
        "on_disk": True,
    }
    assert body["thread"] != "MainThread"


def test_streaming_and_server_sent_events(server: ServerProcess) -> None:
    """Rule: ``StreamingHttpResponse`` over an async iterator arrives chunked and whole, and as
    ``text/event-stream`` every event arrives in order. Broken: parts or events lost or
    reordered, or the body buffered."""
    with server.client() as client:
        with client.stream("GET", "/stream", params={"n": 25}) as r:
            assert r.headers.get("transfer-encoding") == "chunked"
            lines = list(r.iter_lines())
        with client.stream("GET", "/events", params={"n": 4}) as r:
            assert r.headers["content-type"] == "text/event-stream"
            events = parse_sse(r.read().decode())
    assert lines == [f"part {i}" for i in range(25)]
    assert [(e["event"], e["id"], e["data"]) for e in events] == [
        ("tick", str(i), f'{{"n": {i}}}') for i in range(4)
    ]


def test_client_leaving_an_endless_stream_ends_it(server: ServerProcess) -> None:
    """Rule: when the client closes an endless ``StreamingHttpResponse``, Django hears the
    server's ``http.disconnect`` and stops iterating: the generator ends within 3 s. Broken:
    it runs on for ever (the feed stays "streaming")."""
    key = uuid.uuid4().hex
    text = ""
    with server.client() as client, client.stream("GET", f"/endless/{key}") as response:
        for chunk in response.iter_text():
            text += chunk
            if len(parse_sse(text)) > 3:
                break
    assert [e["data"] for e in parse_sse(text)[:3]] == ["0", "1", "2"]
    poll(
        lambda: server.get(f"/feeds/{key}").json()["state"] == "closed",
        timeout=3,
        what="the stream's iterator to end after the client left",
    )


def test_percent_encoded_path_and_query(server: ServerProcess) -> None:
    """Rule: a percent-encoded UTF-8 path reaches URL matching decoded (``café``, ``€ x``) while
    ``get_full_path`` keeps the raw form, and ``+`` and ``%20`` in the query both decode to a
    space. Broken: 404 (the path not decoded, or decoded as Latin-1), or mangled values."""
    with server.client() as client:
        cafe = client.get("/names/caf%C3%A9?q=a+b&q=c%20d")
        euro = client.get("/names/%E2%82%AC%20x")
    assert cafe.status_code == 200, cafe.text
    assert cafe.json() == {
        "name": "café",
        "path": "/names/café",
        "full": "/names/caf%C3%A9?q=a+b&q=c%20d",
        "q": ["a b", "c d"],
    }
    assert euro.json()["name"] == "€ x"


def test_cookies_and_redirect(server: ServerProcess) -> None:
    """Rule: two ``Set-Cookie`` headers both arrive (the client sends both back), and a redirect
    is followed to the right view. Broken: a cookie lost or merged, or a bad Location."""
    with server.client(follow_redirects=True) as client:
        first = client.get("/cookies")
        second = client.get("/cookies")
        moved = client.get("/old")
    assert len(first.headers.get_list("set-cookie")) == 2
    assert second.json() == {"seen": {"first": "1", "second": "2"}}
    assert moved.status_code == 200
    assert [r.status_code for r in moved.history] == [302]
    assert moved.json() == {"item_id": 7, "q": "moved", "method": "GET"}


def test_request_meta(server: ServerProcess) -> None:
    """Rule: Django's ``request.META`` built from the ASGI scope names the client address,
    the server's host and port, an empty script name; absolute URIs use the Host header.
    Broken: missing or wrong values (the scope's ``client``, ``server`` or ``root_path``)."""
    with server.client() as client:
        body = client.get("/meta", params={"a": "1"}).json()
    assert body["meta"] == {
        "REMOTE_ADDR": "127.0.0.1",
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": str(server.port),
        "SCRIPT_NAME": "",
        "QUERY_STRING": "a=1",
    }
    assert body["absolute"] == f"http://127.0.0.1:{server.port}/x"
    assert body["secure"] is False and body["path"] == "/meta"
    assert body["user_agent"].startswith("python-httpx/")


def test_unhandled_exception_is_500_and_server_lives(server: ServerProcess) -> None:
    """Rule: a view that raises gives Django's 500 page and the server serves on. Broken: the
    connection drops without a response, or later requests fail."""
    with server.client() as client:
        boom = client.get("/boom")
        after = client.get("/items/1")
    assert boom.status_code == 500
    assert after.status_code == 200


def test_root_path_becomes_script_name(tmp_path: Path) -> None:
    """Rule: ``--root-path /api`` (an app mounted under a prefix by a proxy that strips it)
    becomes Django's ``SCRIPT_NAME``, and ``request.path`` carries the prefix, as under
    uvicorn. Broken: an empty SCRIPT_NAME or a path without the prefix (links the app builds
    point outside its mount)."""
    with framework_server(APP, "asyncio", tmp_path / "events.log", "--root-path", "/api") as srv:
        body = srv.get("/meta").json()
    assert body["meta"]["SCRIPT_NAME"] == "/api"
    assert body["path"] == "/api/meta"


@pytest.mark.parametrize(("loop", "sig"), STOP_CASES)
def test_clean_stop_after_serving(tmp_path: Path, loop: str, sig: int) -> None:
    """Rule: Django refuses the lifespan scope (it raises), which the server takes quietly;
    after JSON, form, streaming and SSE traffic, SIGINT or SIGTERM stops the server within 5 s
    with a clean exit and stderr holds no "Task was destroyed but it is pending!", Traceback,
    ERROR or Exception. Broken: the lifespan refusal is logged as an error, or a slow or
    unclean exit, or such lines on stderr."""
    with framework_server(APP, loop, tmp_path / "events.log") as srv:
        with srv.client() as client:
            assert client.post("/json", json={"a": 1}).status_code == 201
            assert client.post("/form", files={"f": ("f", b"abc")}).status_code == 200
            assert client.get("/stream").status_code == 200
            assert len(parse_sse(client.get("/events").text)) == 5
        stop_cleanly(srv, sig)
