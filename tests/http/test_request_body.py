"""Request bodies through ``receive()``: chunks with more_body, streaming before the body is
complete, ``http.disconnect``, and ``Expect: 100-continue`` (``body_app``)."""

from __future__ import annotations

import hashlib
import os
import signal
import time
import uuid
from collections.abc import Iterator

import pytest
from support.h1raw import RawConnection, request_bytes
from support.serverutil import ServerProcess, fetch_record, running_server


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with running_server("body_app:app") as srv:
        yield srv


def new_key() -> str:
    return uuid.uuid4().hex


def test_content_length_body_delivered_whole(server: ServerProcess) -> None:
    """Rule: a Content-Length body reaches the app intact as http.request messages of bytes, the
    last with more_body False. Broken: bytes lost or altered (sha differs), a str body, or a
    final message still claiming more_body."""
    body = os.urandom(300_000)
    with server.client() as client:
        report = client.post("/echo", content=body).json()
    assert report["len"] == len(body)
    assert report["sha256"] == hashlib.sha256(body).hexdigest()
    messages = report["messages"]
    assert {m["type"] for m in messages} == {"http.request"}
    assert {m["body_type"] for m in messages} == {"bytes"}
    assert [m["more_body"] for m in messages] == [True] * (len(messages) - 1) + [False]


def test_chunked_body_streams_in_several_messages(server: ServerProcess) -> None:
    """Rule: a chunked upload streams through receive() in chunks flagged more_body=True, then
    one with more_body=False. Broken: the server never sets more_body (a single message would
    mean the whole upload was buffered) or corrupts the body."""
    parts = [os.urandom(64 * 1024) for _ in range(16)]

    def slowly() -> Iterator[bytes]:
        for part in parts:
            time.sleep(0.01)
            yield part

    with server.client(timeout=10) as client:
        report = client.post("/echo", content=slowly()).json()
    whole = b"".join(parts)
    assert report["len"] == len(whole)
    assert report["sha256"] == hashlib.sha256(whole).hexdigest()
    flags = [m["more_body"] for m in report["messages"]]
    assert len(flags) >= 2, report["messages"]
    assert flags[-1] is False and all(flags[:-1]), flags


def test_empty_body_is_one_final_message(server: ServerProcess) -> None:
    """Rule: a request without a body gives one http.request with body b"" and more_body
    False. Broken: receive() hangs (the test times out), or the body is not bytes."""
    with server.client() as client:
        report = client.get("/echo").json()
    assert report["messages"] == [
        {"type": "http.request", "len": 0, "body_type": "bytes", "more_body": False}
    ]


def test_app_gets_first_chunk_before_body_is_complete(server: ServerProcess) -> None:
    """Rule: bodies are streamed, never buffered whole before the app runs. The client sends
    1000 of 200000 announced bytes and waits; the app answers after its first receive().
    Broken: the server waits for the rest, no response arrives and the read times out."""
    with server.raw(timeout=5) as conn:
        head = request_bytes("POST", "/first-chunk", headers=[("Content-Length", "200000")])
        conn.send(head + b"x" * 1000)
        response = conn.read_response(timeout=5)
    assert response.status == 200
    report = response.json()
    assert report["type"] == "http.request"
    assert 0 < report["len"] <= 1000
    assert report["more_body"] is True


def test_disconnect_while_reading_body(server: ServerProcess) -> None:
    """Rule: when the client goes away mid-body, receive() returns http.disconnect. Broken:
    receive() hangs forever or raises, and the app never records what it saw."""
    key = new_key()
    with server.raw() as conn:
        head = request_bytes(
            "POST", f"/read-until-disconnect?key={key}", headers=[("Content-Length", "100000")]
        )
        conn.send(head + b"y" * 1000)
        fetch_record(server, key + "-started")
        time.sleep(0.2)
    seen = fetch_record(server, key)
    assert seen[-1] == "http.disconnect", seen
    assert set(seen[:-1]) <= {"http.request"}, seen


def test_disconnect_after_body_while_app_waits(server: ServerProcess) -> None:
    """Rule: http.disconnect is delivered when the client closes while the app is waiting in
    receive() after the whole body (it has not responded). Broken: the server stops watching
    the connection once the body is read, and the app waits forever."""
    key = new_key()
    with server.raw() as conn:
        conn.send(request_bytes("POST", f"/read-until-disconnect?key={key}", body=b"abc"))
        fetch_record(server, key + "-started")
        time.sleep(0.2)
    seen = fetch_record(server, key)
    assert seen == ["http.request", "http.disconnect"], seen


def test_disconnect_on_every_receive_after_response(server: ServerProcess) -> None:
    """Rule: after the response is complete, every receive() returns http.disconnect at once
    (within 5 s, for a loaded machine, even while the keep-alive connection stays open).
    Broken: receive() blocks (recorded as "timeout" after 10 s) or returns something else."""
    key = new_key()
    with server.client() as client:
        assert client.get("/after-response", params={"key": key}).text == "done"
        results = fetch_record(server, key, timeout=40)
    assert [kind for kind, _ in results] == ["http.disconnect"] * 3, results
    assert all(elapsed < 5.0 for _, elapsed in results), results


def test_expect_100_continue_answered_on_receive(server: ServerProcess) -> None:
    """Rule: with "Expect: 100-continue" the server sends "100 Continue" once the app calls
    receive(), then the client sends the body. Broken: no interim response (the read times out
    and the body is never sent) or the body never reaches the app."""
    with server.raw(timeout=5) as conn:
        conn.send(
            request_bytes(
                "POST", "/echo", headers=[("Expect", "100-continue"), ("Content-Length", "5")]
            )
        )
        interim = conn.read_response(timeout=3)
        assert interim.status == 100, interim
        conn.send(b"hello")
        final = conn.read_response()
    assert final.status == 200
    assert final.json()["len"] == 5


def test_expect_100_continue_waits_for_receive(server: ServerProcess) -> None:
    """Rule: "100 Continue" is sent when the app first calls receive(), not at once. The app
    sleeps 0.6 s before reading. Broken: the interim response arrives immediately (the server
    answers on parsing the request, inviting bodies the app may refuse)."""
    with server.raw(timeout=5) as conn:
        started = time.monotonic()
        conn.send(
            request_bytes(
                "POST",
                "/slow-read?delay=0.6",
                headers=[("Expect", "100-continue"), ("Content-Length", "5")],
            )
        )
        interim = conn.read_response(timeout=3)
        waited = time.monotonic() - started
        assert interim.status == 100, interim
        conn.send(b"hello")
        final = conn.read_response()
    assert waited >= 0.5, f"100 Continue came {waited:.3f}s after the request"
    assert final.status == 200 and final.body == b"hello"


def test_no_100_continue_when_app_never_reads(server: ServerProcess) -> None:
    """Rule: an app that responds without calling receive() never triggers "100 Continue"; the
    first response the client sees is the final one. Broken: a 100 precedes the 200."""
    with server.raw(timeout=5) as conn:
        conn.send(
            request_bytes(
                "POST", "/no-read", headers=[("Expect", "100-continue"), ("Content-Length", "5")]
            )
        )
        first = conn.read_response(timeout=3)
        closed = conn.wait_closed(3)
    assert first.status == 200, first
    assert first.body == b"answered without reading"
    # The body never came, so the connection cannot go on; the response must say so, or the
    # client sends its next request on a closed connection. Seen failing before the fix: no
    # Connection header, and the connection closed all the same.
    assert (first.header("connection") or "").lower() == "close", first
    assert closed, "the connection stayed open with the body unread"


@pytest.mark.parametrize("size", [10, 300_000])
def test_receive_called_from_another_thread(server: ServerProcess, size: int) -> None:
    """Rule: ``receive()`` may be called from a thread other than the loop's (a thread pool's
    here), its awaitable awaited on the loop, as uvicorn allows: the whole body comes back.
    Seen failing before the fix: 500, "RuntimeError: ferrule: no tokio runtime on this
    thread", since reading the body started a tokio task through a thread-local runtime
    handle that only the loop and tokio threads had."""
    body = os.urandom(size)
    with server.client() as client:
        response = client.post("/receive-called-in-a-thread", content=body)
    assert response.status_code == 200, response.text
    assert response.content == body


def test_answer_after_cancelled_read_reaches_a_client_still_sending(server: ServerProcess) -> None:
    """Rule: an app that reads the body in a task, answers 413 and cancels that read (Quart,
    for a body over its limit) leaves the rest of the body to the server, which discards it:
    httpx, which sends a 10 MB body before reading, gets the 413 at once (both within 20 s,
    for a loaded machine), and the connection serves the next request. Broken (seen before
    the change): the server neither read the rest nor closed, and httpx timed out after 10 s;
    the request stayed in a reference cycle that held its connection open past the graceful
    timeout at SIGTERM."""
    body = b"x" * 10_000_000
    with server.client(timeout=30) as client:
        started = time.monotonic()
        first = client.post("/answer-then-cancel-read", content=body)
        second = client.post("/answer-then-cancel-read", content=body)
        elapsed = time.monotonic() - started
        assert client.get("/no-read").text == "answered without reading"
    assert (first.status_code, first.text) == (413, "too big")
    assert (second.status_code, second.text) == (413, "too big")
    assert elapsed < 20, f"two 10 MB posts took {elapsed:.1f}s"


def test_a_body_read_ending_while_send_lets_go_of_the_gil_does_not_deadlock(
    server: ServerProcess,
) -> None:
    """Rule: a body read that ends on a tokio thread while the loop thread, inside ``send()``,
    has let go of the GIL (here a message mapping that sleeps; in the field the first use of an
    interned key, or a finalizer) waits for neither. Broken (seen before the change): the tokio
    thread took the GIL and waited for the request's lock, which the loop thread held while it
    waited for the GIL; the server answered nothing, not even SIGTERM (seen here, and once on
    3.14 under load as httpx's write timeout)."""
    body = b"y" * 100_000
    with RawConnection(server.port, timeout=10) as conn:
        head = request_bytes(
            "POST",
            "/start-while-body-arrives",
            headers=[("Content-Length", str(len(body)))],
            content_length=False,
        )
        conn.send(head)
        time.sleep(0.2)  # into the start message's slow read
        conn.send(body)
        response = conn.read_response()
    assert (response.status, response.body) == (200, str(len(body)).encode())


def test_sigterm_after_cancelled_read_stops_promptly() -> None:
    """Rule: once such a request is answered, nothing of it keeps the server from stopping:
    SIGTERM exits within the second (15 s is the bound, for a loaded machine). Broken (seen
    before the change): the server waited at "Waiting for connections to close" for 40 s and
    more, past the 30 s graceful timeout, until Python's garbage collector ran."""
    with running_server("body_app:app") as server:
        with server.client(timeout=10) as client:
            response = client.post("/answer-then-cancel-read", content=b"x" * 10_000_000)
            assert response.status_code == 413
            started = time.monotonic()
            code = server.stop(signal.SIGTERM)
            elapsed = time.monotonic() - started
    assert code == 0, server.describe()
    assert elapsed < 15, f"SIGTERM took {elapsed:.1f}s\n{server.describe()}"
