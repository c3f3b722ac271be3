"""Graceful shutdown on SIGINT/SIGTERM (``shutdown_app``): stop accepting, finish in-flight
requests within --timeout-graceful-shutdown, cancel the rest, run lifespan shutdown, exit."""

from __future__ import annotations

import signal
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
from support.h1raw import request_bytes
from support.serverutil import (
    WAIT_TIMEOUT,
    ServerProcess,
    is_clean_exit,
    poll,
    read_events,
    refused,
    running_server,
    wait_for_event,
)


def events_env(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    path = tmp_path / "events.log"
    return path, {"FERRULE_TEST_EVENTS": str(path)}


class Background:
    """One request in a thread; ``result`` is the response or the exception."""

    def __init__(self, server: ServerProcess, path: str, timeout: float = 20.0) -> None:
        self.result: httpx.Response | BaseException | None = None
        self.thread = threading.Thread(target=self._run, args=(server, path, timeout))
        self.thread.start()

    def _run(self, server: ServerProcess, path: str, timeout: float) -> None:
        try:
            self.result = server.get(path, timeout=timeout)
        except BaseException as exc:  # noqa: BLE001 - inspected by the test
            self.result = exc

    def join(self, timeout: float = 20.0) -> httpx.Response | BaseException | None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the background request is still running"
        return self.result


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_signal_stops_server_and_runs_lifespan_shutdown(tmp_path: Path, sig: int) -> None:
    """Rule: SIGINT and SIGTERM stop an idle server gracefully: lifespan shutdown runs and the
    exit is clean (0), within 10 s (well under a second on an idle machine). Broken: the
    signal is ignored while Rust code runs (no exit at all), the process dies without
    "shutdown" in the events, or exits with an error status."""
    events, env = events_env(tmp_path)
    with running_server("shutdown_app:app", env=env) as server:
        assert server.get("/").text == "ok"
        started = time.monotonic()
        code = server.stop(sig)
        elapsed = time.monotonic() - started
    assert is_clean_exit(code, sig), server.describe()
    assert read_events(events) == ["startup", "shutdown"]
    assert elapsed < 10, f"an idle server took {elapsed:.1f}s to stop"
    assert "Traceback" not in server.stderr, server.describe()


def test_in_flight_request_completes_during_shutdown(tmp_path: Path) -> None:
    """Rule: a request in flight when SIGINT arrives is allowed to finish and its response is
    delivered whole. Broken: the client gets a connection error or a 5xx, or the app logs
    "cancelled"."""
    events, env = events_env(tmp_path)
    with running_server("shutdown_app:app", env=env) as server:
        request = Background(server, "/slow?sleep=1.5&key=a")
        wait_for_event(events, "start a")
        server.send_signal(signal.SIGINT)
        result = request.join()
        code = server.wait_exit()
    assert isinstance(result, httpx.Response), result
    assert result.status_code == 200 and result.text == "finished a"
    assert is_clean_exit(code), server.describe()
    assert "cancelled a" not in read_events(events)


def test_stops_accepting_new_connections(tmp_path: Path) -> None:
    """Rule: once shutdown starts, new connections are not served while an in-flight request
    still runs: after a moment for the connections on their way, the listener closes (new ones
    are refused). Broken: a request sent after SIGINT gets a 200 as if nothing happened (the
    listener open until the request ends)."""
    events, env = events_env(tmp_path)
    with running_server("shutdown_app:app", env=env) as server:
        request = Background(server, "/slow?sleep=5&key=a")
        wait_for_event(events, "start a")
        server.send_signal(signal.SIGINT)
        # The listener takes connections on their way for a moment more (the core's 0.1 s
        # accept grace, which a loaded machine makes longer), then closes: while the request
        # runs, not once it has ended and the server exits.
        server.wait_for_output(r"Waiting for connections to close")
        poll(lambda: refused(server), interval=0.01, what="the listener to close")
        assert request.thread.is_alive(), "the listener closed only once the request had ended"
        served_late = False
        try:
            with socket.create_connection(("127.0.0.1", server.port), timeout=2) as sock:
                sock.settimeout(2)
                sock.sendall(request_bytes("GET", "/"))
                served_late = sock.recv(100).startswith(b"HTTP/1.1 200")
        except OSError:
            pass
        result = request.join()
        code = server.wait_exit()
    assert not served_late, "a connection opened after SIGINT was served"
    assert isinstance(result, httpx.Response) and result.status_code == 200, result
    assert is_clean_exit(code), server.describe()


def test_graceful_timeout_cancels_stuck_requests(tmp_path: Path) -> None:
    """Rule: requests still running after --timeout-graceful-shutdown seconds are cancelled
    (the app sees CancelledError), then lifespan shutdown runs and the process exits cleanly:
    after the 1 s grace and within 20 s (1.1 s on an idle machine). Broken: the server waits
    for the 60 s request (no exit within 30 s), exits without cancelling (no "cancelled"
    event), or skips lifespan shutdown."""
    events, env = events_env(tmp_path)
    with running_server("shutdown_app:app", "--timeout-graceful-shutdown", "1", env=env) as server:
        request = Background(server, "/slow?sleep=60&key=stuck")
        wait_for_event(events, "start stuck")
        started = time.monotonic()
        server.send_signal(signal.SIGINT)
        code = server.wait_exit(30)
        elapsed = time.monotonic() - started
        result = request.join()
    assert is_clean_exit(code), server.describe()
    assert 0.8 <= elapsed < 20, f"exited {elapsed:.1f}s after SIGINT with a 1 s grace period"
    seen = read_events(events)
    assert "cancelled stuck" in seen, seen
    assert seen.index("cancelled stuck") < seen.index("shutdown"), seen
    assert not (isinstance(result, httpx.Response) and result.status_code == 200), result


def test_idle_keep_alive_connection_does_not_delay_shutdown(tmp_path: Path) -> None:
    """Rule: idle keep-alive connections are closed at shutdown rather than waited for. A client
    keeps one open; SIGINT must still stop the server promptly (well under a second on an idle
    machine; within 15 s on a loaded one). Broken: the server waits for the keep-alive timeout
    (60 s here) or forever."""
    events, env = events_env(tmp_path)
    with running_server("shutdown_app:app", "--timeout-keep-alive", "60", env=env) as server:
        with server.raw() as conn:
            conn.send(request_bytes("GET", "/"))
            assert conn.read_response().status == 200
            started = time.monotonic()
            server.send_signal(signal.SIGINT)
            code = server.wait_exit(30)
            elapsed = time.monotonic() - started
            assert conn.wait_closed(5), "the idle connection was left open"
    assert is_clean_exit(code), server.describe()
    assert elapsed < 15, f"shutdown took {elapsed:.1f}s with an idle keep-alive connection"


def test_shutdown_under_load(tmp_path: Path) -> None:
    """Rule: SIGINT works while the server is busy (the signal is seen even when Rust code or
    app code is running): 8 threads keep sending requests, the server still stops cleanly.
    Broken: the signal is lost under load (no exit within 20 s) or the exit is a crash."""
    events, env = events_env(tmp_path)
    stop = threading.Event()
    with running_server("shutdown_app:app", env=env) as server:

        def hammer() -> None:
            with httpx.Client(base_url=server.base_url, timeout=10, trust_env=False) as client:
                while not stop.is_set():
                    try:
                        client.get("/slow", params={"sleep": "0.01", "key": "load"})
                    except httpx.HTTPError:
                        time.sleep(0.01)

        threads = [threading.Thread(target=hammer) for _ in range(8)]
        for thread in threads:
            thread.start()
        try:
            time.sleep(1.0)
            code = server.stop(signal.SIGINT)
        finally:
            stop.set()
            for thread in threads:
                thread.join(15)
    assert is_clean_exit(code), server.describe()
    assert read_events(events)[-1] == "shutdown", read_events(events)[-5:]


@pytest.mark.parametrize("second", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_second_signal_forces_the_exit(tmp_path: Path, second: int) -> None:
    """Rule: with a request that would run for a minute and no graceful timeout, the first
    Ctrl-C says "Waiting for connections to close. (CTRL+C to force quit)" and a second SIGINT
    or SIGTERM cancels the request and exits at once, as uvicorn's second Ctrl-C does (a
    second SIGTERM too: ``docker stop`` then needs no SIGKILL). Broken: the second and third
    signals ignored, the process alive until SIGKILL (seen before). The exit comes well under a
    second after the second signal on an idle machine; the bound is 15 s, for a loaded one."""
    events, env = events_env(tmp_path)
    with running_server("shutdown_app:app", env=env) as server:
        request = Background(server, "/slow?sleep=60&key=long")
        wait_for_event(events, "start long")
        server.send_signal(signal.SIGINT)
        server.wait_for_output(r"Waiting for connections to close\. \(CTRL\+C to force quit\)")
        started = time.monotonic()
        server.send_signal(second)
        code = server.wait_exit(30)
        elapsed = time.monotonic() - started
        request.join()
    assert is_clean_exit(code) or code == -second, server.describe()
    assert elapsed < 15, f"exited {elapsed:.1f}s after the second signal"
    assert "cancelled long" in read_events(events)
    assert "Traceback" not in server.stderr, server.describe()


def test_started_and_finished_lines_name_the_process(tmp_path: Path) -> None:
    """Rule: the server logs uvicorn's "Started server process [PID]" and "Finished server
    process [PID]". Broken: only the second (seen before)."""
    with running_server("hello_app:app") as server:
        pid = server.pid
        server.stop(signal.SIGINT)
    assert f"Started server process [{pid}]" in server.stderr, server.describe()
    assert f"Finished server process [{pid}]" in server.stderr, server.describe()


def test_idle_stop_says_nothing_of_waiting(tmp_path: Path) -> None:
    """Rule: a server with no request or WebSocket in progress stops without logging "Waiting
    for connections to close", which the docs promise only while some are open (an idle
    keep-alive connection is closed at once, not waited for). Broken (seen before the change):
    the line came at every stop."""
    events, env = events_env(tmp_path)
    with running_server("shutdown_app:app", env=env) as server:
        with server.raw() as conn:
            conn.send(request_bytes("GET", "/"))
            assert conn.read_response().status == 200
            code = server.stop(signal.SIGTERM)
    assert is_clean_exit(code, signal.SIGTERM), server.describe()
    assert "Waiting for connections to close" not in server.stderr, server.describe()


def test_tasks_left_running_are_cancelled_at_exit(tmp_path: Path) -> None:
    """Rule: tasks the app left running (python-socketio's ping tasks, sse-starlette's
    watchers) are cancelled at exit and their ``finally`` blocks run, as ``asyncio.run`` (and
    so uvicorn) does; nothing is printed of them. Broken (seen before the change): the loop was
    closed with the tasks pending: no "finally" event, and "Task was destroyed but it is
    pending!" on stderr."""
    events, env = events_env(tmp_path)
    with running_server("shutdown_app:app", env=env) as server:
        assert server.get("/spawn?key=a").text == "spawned"
        assert server.get("/spawn?key=b").text == "spawned"
        code = server.stop(signal.SIGTERM)
    assert is_clean_exit(code, signal.SIGTERM), server.describe()
    assert sorted(e for e in read_events(events) if e.startswith("finally")) == [
        "finally a",
        "finally b",
    ]
    assert "Task was destroyed" not in server.stderr, server.describe()
    assert "Traceback" not in server.stderr, server.describe()


def test_connections_in_the_backlog_are_served_at_a_stop() -> None:
    """Rule: at a stop, connections the kernel had already accepted into the listen backlog are
    served, not reset as the listener closes: with ``--limit-max-requests 1`` and four clients
    connecting and sending at once, each of the four gets a response (as under uvicorn, which
    accepts for a moment longer). Five rounds. Broken (seen before the change): in four rounds
    of five, two or three of the four requests were reset.

    A client the loaded machine let connect only once the listener had closed is refused, as
    it should be; one that connected but could send its request only 0.1 s later may find its
    connection closed (a connection accepted at the stop has that long to deliver its first
    request). Neither tells anything of the backlog: they are left out, and every other client
    must get its response."""

    def client(port: int, start: threading.Barrier, answers: list[bytes]) -> None:
        start.wait(WAIT_TIMEOUT)
        try:
            sock = socket.create_connection(("127.0.0.1", port), WAIT_TIMEOUT)
        except ConnectionRefusedError:
            answers.append(b"late: refused")
            return
        with sock:
            connected = time.monotonic()
            sent: float | None = None
            try:
                sock.sendall(request_bytes("GET", "/"))
                sent = time.monotonic() - connected
                answer = sock.recv(100).split(b"\r\n")[0]
            except OSError as exc:
                answer = repr(exc).encode()
            if sent is None:  # the send itself failed: it went no sooner than that
                sent = time.monotonic() - connected
            if not answer.startswith(b"HTTP/") and sent > 0.1:
                answer = b"late: sent after %.3f s: " % sent + answer
            answers.append(answer)

    for _ in range(5):
        with running_server("shutdown_app:app", "--limit-max-requests", "1") as server:
            answers: list[bytes] = []
            start = threading.Barrier(4)
            clients = [
                threading.Thread(target=client, args=(server.port, start, answers))
                for _ in range(4)
            ]
            for thread in clients:
                thread.start()
            for thread in clients:
                thread.join(2 * WAIT_TIMEOUT)
            assert server.wait_exit() == 0, server.describe()
        told = [answer for answer in answers if not answer.startswith(b"late")]
        assert len(answers) == 4 and told, answers
        assert told == [b"HTTP/1.1 200 OK"] * len(told), answers


def test_a_client_connecting_during_a_self_stop_is_refused_or_answered() -> None:
    """Rule: once a server has stopped itself (``--limit-max-requests 1``), a client connecting
    while the request that reached the limit is still running is refused, or accepted and
    answered, never accepted by the kernel and then reset, on either loop: clients 0.3 and 0.6 s
    into a 1.5 s request. Broken (seen before the change): the Python
    side kept its copies of the listening sockets open until every request was answered, so
    the kernel queued both clients and the exit reset them, in every round; uvicorn refuses
    them."""

    def client(port: int) -> bytes:
        try:
            sock = socket.create_connection(("127.0.0.1", port), WAIT_TIMEOUT)
        except ConnectionRefusedError:
            return b"refused"
        with sock:
            sock.settimeout(WAIT_TIMEOUT)
            connected = time.monotonic()
            try:
                sock.sendall(request_bytes("GET", "/"))
                sent = time.monotonic() - connected
                answer = sock.recv(100).split(b"\r\n")[0] or b"closed without an answer"
            except OSError as exc:
                sent = time.monotonic() - connected
                answer = repr(exc).encode()
            # A connection taken at the stop has 0.1 s to deliver its request (as in the test
            # above): one the loaded machine let send only later tells nothing of the queue.
            if not answer.startswith(b"HTTP/") and sent > 0.1:
                return b"late"
            return answer

    for loop in ("asyncio", "uvloop"):
        with running_server(
            "shutdown_app:app", "--limit-max-requests", "1", "--loop", loop
        ) as server:
            assert server.port is not None
            slow = Background(server, "/slow?sleep=1.5")
            started = time.monotonic()
            answers = []
            for at in (0.3, 0.6):
                time.sleep(max(0.0, started + at - time.monotonic()))
                answers.append(client(server.port))
            response = slow.join()
            assert isinstance(response, httpx.Response), response
            assert response.status_code == 200
            assert server.wait_exit() == 0, server.describe()
        assert all(a in (b"refused", b"late", b"HTTP/1.1 200 OK") for a in answers), (loop, answers)
