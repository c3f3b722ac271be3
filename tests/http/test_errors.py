"""App errors (``errors_app``): what the client gets and what lands in the log."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from support.h1raw import IncompleteResponse, raw_exchange, request_bytes
from support.serverutil import ServerProcess, fetch_record, running_server


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with running_server("errors_app:app") as srv:
        yield srv


def token() -> str:
    return uuid.uuid4().hex


def still_serving(server: ServerProcess) -> None:
    assert server.get("/ok").text == "ok", "the server stopped serving after an app error"


def received_until_close(server: ServerProcess, target: str) -> bytes:
    """Everything a GET of ``target`` gets until the server closes (within 5 s)."""
    with server.raw() as conn:
        conn.send(request_bytes("GET", target))
        try:
            conn.read_until_close(timeout=5)
        except IncompleteResponse as exc:
            raise AssertionError("the connection was left open after the app failed") from exc
    return conn.received


def assert_cut_after_partial(data: bytes) -> None:
    """The head and the chunk "partial" arrived, and no terminating chunk."""
    assert data.startswith(b"HTTP/1.1 200") and b"\r\n\r\n7\r\npartial\r\n" in data, data
    assert not data.endswith(b"0\r\n\r\n"), data[-200:]


def test_exception_before_start_gives_500_and_traceback(server: ServerProcess) -> None:
    """Rule: an exception before http.response.start gives a 500 and a logged traceback that
    names the exception. Broken: the client hangs or gets a closed connection, or stderr has
    no traceback (with the app's frame) ending in the exception message."""
    tok = token()
    response = server.get("/raise-before", params={"token": tok})
    assert response.status_code == 500
    log = server.wait_for_output(rf"RuntimeError: failure before start {tok}")
    before = server.stderr[: log.end()]
    assert "Traceback (most recent call last)" in before, before[-3000:]
    assert "errors_app.py" in before, f"the traceback has no frame of the app\n{before[-3000:]}"
    still_serving(server)


def test_exception_after_start_closes_connection(server: ServerProcess) -> None:
    """Rule: an exception after the response started (a chunked body under way) closes the
    connection without the terminating chunk, and is logged; what the app sent before reaches
    the client (the head and the chunk "partial"), as under uvicorn. Broken: the response is
    completed as if nothing happened (ends with the 0-chunk), the connection hangs open (no EOF
    within 5 s), or the exception is not in the log. Seen failing before hyper was given a
    flush ahead of the body error: the client got 0 bytes, then the close."""
    tok = token()
    assert_cut_after_partial(received_until_close(server, f"/raise-after?token={tok}"))
    server.wait_for_output(rf"failure after start {tok}")
    still_serving(server)


def test_return_mid_body_sends_what_was_sent_then_closes(server: ServerProcess) -> None:
    """Rule: an app that returns after a ``more_body`` chunk, never ending its body: the client
    gets the head and that chunk, then the connection closes without the terminating chunk
    (the response is incomplete, and says so), and the log says "ASGI callable returned
    without completing response.", as uvicorn's does. Broken: 0 bytes then the close (the
    client cannot even see the status), or the body ended as if whole. Seen failing before
    hyper was given a flush ahead of the body error: 0 bytes."""
    log_before = len(server.stderr)
    assert_cut_after_partial(received_until_close(server, "/return-after"))
    server.wait_for_output("ASGI callable returned without completing response.")
    assert server.stderr.count("returned without completing", log_before) == 1
    still_serving(server)


def test_exception_after_start_with_content_length_closes(server: ServerProcess) -> None:
    """Rule: the same with a Content-Length of 100 and 10 bytes sent: the connection closes
    short of 100 bytes. Broken: the server pads the body, or keeps the connection open (a
    client would wait for the 90 missing bytes forever)."""
    tok = token()
    received = received_until_close(server, f"/raise-after-content-length?token={tok}")
    head, _, body = received.partition(b"\r\n\r\n")
    if head.startswith(b"HTTP/1.1 200"):
        assert len(body) < 100, received[:300]
    server.wait_for_output(rf"failure after start {tok}")


def test_return_without_response_gives_500(server: ServerProcess) -> None:
    """Rule: an app that returns without sending a response gives a 500. Broken: the client
    waits forever (timeout), gets an empty 200, or the connection drops."""
    assert server.get("/no-response").status_code == 500
    still_serving(server)


@pytest.mark.parametrize("char", ["cr", "lf", "nul", "crlf"])
@pytest.mark.parametrize("where", ["name", "value"])
def test_bad_header_gives_500_and_never_reaches_wire(
    server: ServerProcess, where: str, char: str
) -> None:
    """Rule: a response header whose name or value contains CR, LF or NUL gives a 500 and is
    never written (no header injection). Broken: "injected" appears in the bytes on the wire,
    or the app's 200 is sent."""
    data = raw_exchange(
        server.port,
        request_bytes(
            "GET", f"/bad-header?where={where}&char={char}", headers=[("Connection", "close")]
        ),
    )
    assert data.startswith(b"HTTP/1.1 500"), data[:300]
    assert b"injected" not in data, data[:500]
    assert b"should not be sent" not in data
    still_serving(server)


def test_second_response_start_raises(server: ServerProcess) -> None:
    """Rule: a second http.response.start is an error: send() raises in the app, and the
    client never sees the second status (it gets a 500 if nothing was sent yet, else a closed
    connection). Broken: the app records "raised": None, or a 201 reaches the client."""
    key = token()
    data = raw_exchange(
        server.port,
        request_bytes("GET", f"/double-start?key={key}", headers=[("Connection", "close")]),
    )
    record = fetch_record(server, key)
    assert record["raised"], record
    assert not data.startswith(b"HTTP/1.1 201"), data[:300]
    assert b"second start accepted" not in data
    if data:
        assert data.startswith((b"HTTP/1.1 500", b"HTTP/1.1 200")), data[:300]
    still_serving(server)


def test_body_before_start_raises(server: ServerProcess) -> None:
    """Rule: http.response.body before http.response.start is a protocol error: send() raises
    and the client gets a 500. Broken: the body is sent with an invented status line, or the
    call is silently ignored (the app records "raised": None)."""
    key = token()
    response = server.get("/body-before-start", params={"key": key})
    assert response.status_code == 500
    assert fetch_record(server, key)["raised"]


def test_app_raising_before_returning_a_coroutine_gives_500_and_traceback() -> None:
    """Rule: an ASGI callable that raises when called (before there is a coroutine to drive)
    gets the same treatment as one raising inside: 500, a logged traceback, an access line, and
    the server keeps serving.
    Broken before: the error went to ``sys.unraisablehook`` ("Exception ignored in ...") with no
    ``ferrule.error`` line and no access line."""
    with running_server("sync_raise_app:app") as srv:
        for _ in range(2):
            assert srv.get("/").status_code == 500
        srv.wait_for_output(r'"GET / HTTP/1.1" 500', stream="stdout")
        # Another pipe: the traceback may be read after the access line.
        srv.wait_for_output("raised while calling the app")
        log = srv.stderr
        assert "Exception in ASGI application" in log
        assert "ValueError: raised while calling the app" in log
        assert "Traceback (most recent call last)" in log
