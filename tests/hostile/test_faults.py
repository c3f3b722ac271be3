"""Faults: clients that vanish mid-request or mid-stream, a crowd of half-open slow
connections, an app that raises now and then, and a worker killed with SIGKILL. The server
must tell the app, keep serving everyone else, and leave no descriptor or task behind
(``hostile_app``, ``workers_app``)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import struct
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from support.h1raw import RawConnection, request_bytes
from support.memutil import fd_count
from support.serverutil import ServerProcess, fetch_record, pid_alive, poll, running_server


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with running_server("hostile_app:app") as srv:
        stats = srv.get("/_stats").json()
        assert stats["pid"] == srv.pid, "the app does not run in the server process"
        yield srv


def check_still_serving(server: ServerProcess) -> None:
    assert server.returncode is None, f"the server died\n{server.describe()}"
    assert server.get("/ok").status_code == 200


def settled_fds(server: ServerProcess) -> int:
    """The server's descriptor count once it has been the same for 0.3 s."""
    history: list[int] = []

    def probe() -> int | None:
        history.append(fd_count(server.pid))
        recent = history[-4:]
        return recent[0] if len(recent) == 4 and len(set(recent)) == 1 else None

    return poll(probe, interval=0.1, what="the descriptor count to settle")


def app_tasks(server: ServerProcess) -> int:
    """asyncio tasks alive in the server (the ``/_stats`` request counts itself) plus app calls
    still running (besides that ``/_stats`` call)."""
    stats = server.get("/_stats").json()
    return stats["tasks"] + stats["in_flight"]


def check_back_to_baseline(server: ServerProcess, fds: int, tasks: int) -> None:
    """Descriptors and asyncio tasks return to what they were before (within a poll's wait)."""
    now: dict[str, int] = {}

    def probe() -> bool:
        now["fds"] = fd_count(server.pid)
        now["tasks"] = app_tasks(server)
        return now["fds"] <= fds and now["tasks"] <= tasks

    try:
        poll(probe, interval=0.1, what="descriptors and tasks back to baseline")
    except AssertionError:
        raise AssertionError(
            f"left behind: descriptors {now.get('fds')} (baseline {fds}), asyncio tasks + app "
            f"calls in flight {now.get('tasks')} (baseline {tasks})"
        ) from None


def baseline(server: ServerProcess) -> tuple[int, int]:
    server.get("/ok")
    tasks = app_tasks(server)
    return settled_fds(server), tasks


def abort(conn: RawConnection, how: str) -> None:
    """Close like a client that went away: a FIN, or a RST (SO_LINGER 0)."""
    if how == "rst":
        conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


CLIENTS = 10
MB = 1024 * 1024

PARTIAL_REQUESTS = {
    "headers-only": "POST {t} HTTP/1.1\r\nHost: test\r\nContent-Length: 1000\r\n\r\n",
    "partial-body": "POST {t} HTTP/1.1\r\nHost: test\r\nContent-Length: 1000\r\n\r\n" + "p" * 100,
    "partial-chunked": "POST {t} HTTP/1.1\r\nHost: test\r\nTransfer-Encoding: chunked\r\n\r\n"
    "64\r\n" + "q" * 50,
}


@pytest.mark.parametrize("how", ["fin", "rst"])
@pytest.mark.parametrize("partial", list(PARTIAL_REQUESTS))
def test_disconnect_mid_request(server: ServerProcess, partial: str, how: str) -> None:
    """Rule: when 10 clients go away (FIN or RST) in the middle of sending a request body, the
    app waiting in receive() gets http.disconnect for each, and the server's descriptors and
    asyncio tasks return to their baseline. Broken: an app never gets http.disconnect (stuck in
    receive: a leaked task), a descriptor is kept open, or the server stops serving; or it logs
    "ASGI callable returned without completing response." for an app that stops once the client
    has gone, which is what the spec asks of it (seen 698 times in a 50k-request soak before
    the fix)."""
    fds, tasks = baseline(server)
    log_before = len(server.stderr)
    keys = [uuid.uuid4().hex for _ in range(CLIENTS)]
    conns = [server.raw(timeout=5) for _ in keys]
    try:
        for conn, key in zip(conns, keys, strict=True):
            conn.send(
                PARTIAL_REQUESTS[partial].format(t=f"/read-until-disconnect?key={key}").encode()
            )
        for key in keys:
            fetch_record(server, key + "-started")
    finally:
        for conn in conns:
            abort(conn, how)
    seen = [fetch_record(server, key) for key in keys]
    assert all(messages[-1] == "http.disconnect" for messages in seen), seen
    check_back_to_baseline(server, fds, tasks)
    check_still_serving(server)
    assert "without completing response" not in server.stderr[log_before:]


@pytest.mark.parametrize("how", ["fin", "rst"])
def test_disconnect_mid_stream(server: ServerProcess, how: str) -> None:
    """Rule: when 10 clients go away while the app streams a response to them, the app's next
    send() raises (it records the exception) and descriptors and tasks return to baseline.
    Broken: send() keeps succeeding until the app's 10 s of streaming is over (no record within
    5 s), a descriptor or task is left behind, or the server stops serving."""
    fds, tasks = baseline(server)
    keys = [uuid.uuid4().hex for _ in range(CLIENTS)]
    conns = [server.raw(timeout=5) for _ in keys]
    try:
        for conn, key in zip(conns, keys, strict=True):
            conn.send(request_bytes("GET", f"/stream?key={key}"))
        for conn in conns:
            conn.read_until(b"\r\n\r\n")
            conn.read_exactly(16384)
    finally:
        for conn in conns:
            abort(conn, how)
    results = [fetch_record(server, key) for key in keys]
    assert all(result["error"] for result in results), results
    check_back_to_baseline(server, fds, tasks)
    check_still_serving(server)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_clients_leaving_as_streams_start_never_deadlock(loop: str) -> None:
    """Rule: clients that ask for a streamed response and leave at any moment around its
    start, 8 at a time for 3 s, never stop the server: afterwards it answers at once. Broken
    (seen with uvloop, about 1 run in 3 of this test): the app's first body message found hyper
    no longer waiting for the head, and dropping the unsent streamed body (which tells the
    exchange the client is gone) took the exchange's lock that the same thread held; the loop
    thread hung with the GIL, the tokio thread waited for the GIL, and every client of the
    server got no answer. The same cut in benches/run.py's stream scenario timed it out."""
    with running_server("streaming_app:app", "--loop", loop) as srv:
        deadline = time.monotonic() + 3

        def leave_early(worker: int) -> int:
            rounds = 0
            while time.monotonic() < deadline:
                conn = srv.raw(timeout=5)
                try:
                    conn.send(request_bytes("GET", "/big?mb=0.25"))
                    if rounds % 3 == 1:
                        time.sleep(0.0005 * (worker % 4))
                    elif rounds % 3 == 2:
                        conn.sock.recv(1)
                finally:
                    abort(conn, "rst" if rounds % 2 else "fin")
                rounds += 1
            return rounds

        with ThreadPoolExecutor(8) as pool:
            rounds = sum(pool.map(leave_early, range(8)))
        assert rounds > 50, rounds
        with httpx.Client(timeout=5, trust_env=False) as client:
            response = client.get(f"http://127.0.0.1:{srv.port}/big", params={"mb": "0.25"})
        assert response.status_code == 200, srv.describe()
        assert len(response.content) == MB // 4


HALF_OPEN_COUNT = 1000  # a slowloris crowd: far more connections than any one client needs
HALF_OPEN = {
    "no-bytes": b"",
    "partial-head": b"GET /ok HTTP/1.1\r\nHost: test\r\nX-Slow: aaaa",
    "partial-body": b"POST /count-body HTTP/1.1\r\nHost: test\r\nContent-Length: 1000\r\n\r\nxxxx",
}


@pytest.mark.parametrize("kind", list(HALF_OPEN))
def test_half_open_connections_do_not_stop_service(server: ServerProcess, kind: str) -> None:
    """Rule: 1,000 connections that send nothing, part of a head, or a head and part of a body,
    and then sit there, do not stop service: a normal client gets 200 to each of 10 requests
    on new connections, each within 10 s (at once on an idle machine, a second or two on a
    loaded one); once they go away, descriptors and tasks return to baseline. Broken: a normal
    request times out or fails (the server is saturated: no answer at all), or
    descriptors/tasks of the abandoned connections are kept."""
    fds, tasks = baseline(server)
    conns: list[RawConnection] = []
    try:
        for _ in range(HALF_OPEN_COUNT):
            conn = server.raw(timeout=5)
            conns.append(conn)
            if HALF_OPEN[kind]:
                conn.send(HALF_OPEN[kind])
        time.sleep(0.3)
        latencies = []
        for i in range(10):
            started = time.monotonic()
            response = server.get(f"/ok?i={i}", timeout=10.0)
            latencies.append(round(time.monotonic() - started, 3))
            assert response.status_code == 200, response
        assert max(latencies) < 10.0, latencies
    finally:
        for conn in conns:
            conn.close()
    check_back_to_baseline(server, fds, tasks)
    check_still_serving(server)


def test_app_raising_in_one_request_of_ten(server: ServerProcess) -> None:
    """Rule: an app that raises in 10% of requests (those with i % 10 == 0, 100 requests from 8
    threads over keep-alive connections) gives exactly those a 500 and each one a logged
    traceback; the other 90 get 200 with their own number. Broken: a failure leaks into a
    neighbour (a 500 or wrong body for a good request, a dropped keep-alive connection), a
    raising request gets anything but 500, or a traceback is missing."""
    local = threading.local()
    clients: list[httpx.Client] = []

    def one(i: int) -> tuple[int, int, str]:
        if not hasattr(local, "client"):
            local.client = server.client(timeout=5)
            clients.append(local.client)
        response = local.client.get("/maybe-raise", params={"i": i})
        return i, response.status_code, response.text

    try:
        with ThreadPoolExecutor(8) as pool:
            results = list(pool.map(one, range(100)))
    finally:
        for client in clients:
            client.close()
    wrong = []
    for i, status, text in results:
        expected = (500, None) if i % 10 == 0 else (200, str(i))
        if (status, text if status == 200 else None) != expected:
            wrong.append((i, status, text[:80]))
    assert not wrong, f"unexpected outcomes (i, status, body): {wrong}"
    for i in range(0, 100, 10):
        server.wait_for_output(rf"planned failure {i}\b")
    check_still_serving(server)


# -- workers ----------------------------------------------------------------------------------


def children(pid: int) -> set[int]:
    """Live child processes of ``pid`` (from ``/proc/*/stat``)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.add(int(entry.name))
    return found


def test_worker_killed_with_sigkill_is_replaced() -> None:
    """Rule: with --workers 2, a worker killed with SIGKILL is replaced at once (a new child
    process exists within a second on an idle machine; 10 s is the bound, for a loaded one)
    and the port keeps serving: while a client keeps sending requests on new connections,
    every request sent after the killed worker is gone gets 200, and the new worker answers.
    Broken: no new child within 10 s, failed requests after the death (the dead worker's
    socket still takes connections: refused, or no answer within 10 s), or the replacement
    never serves."""
    with running_server("workers_app:app", "--workers", "2") as server:

        def two_workers() -> set[int] | None:
            kids = children(server.pid)
            return kids if len(kids) == 2 else None

        workers = poll(two_workers, what="two workers")
        poll(lambda: server.get("/").status_code == 200, what="serving")
        stop = threading.Event()
        log: list[tuple[float, int | str, int | None]] = []

        def load() -> None:
            while not stop.is_set():
                sent = time.monotonic()
                try:
                    with httpx.Client(timeout=10, trust_env=False) as client:
                        response = client.get(server.base_url + "/")
                    log.append((sent, response.status_code, response.json()["pid"]))
                except (httpx.HTTPError, ValueError) as exc:
                    log.append((sent, type(exc).__name__, None))

        loader = threading.Thread(target=load, daemon=True)
        loader.start()
        try:
            time.sleep(0.3)
            victim = min(workers)
            os.kill(victim, signal.SIGKILL)
            killed = time.monotonic()
            poll(lambda: not pid_alive(victim), what="the victim to die")
            gone = time.monotonic()
            new = poll(lambda: children(server.pid) - workers, interval=0.02, what="a new worker")
            replaced_after = time.monotonic() - killed
            poll(lambda: any(pid in new for _, _, pid in log), what="the new worker to serve")
            # Enough requests after the death to tell: on a loaded machine a request on a new
            # connection can take a tenth of a second, and 0.3 s once gave only four.
            poll(
                lambda: len([1 for t, _, _ in log if t > gone]) >= 5,
                what="five requests after the death",
            )
        finally:
            stop.set()
            loader.join(15)
    failures_after = [(round(t - killed, 3), s) for t, s, _ in log if t > gone and s != 200]
    assert replaced_after <= 10.0, f"a new worker appeared {replaced_after:.2f}s after the kill"
    assert not failures_after, f"requests failed after the worker died: {failures_after}"
    assert len([1 for t, _, _ in log if t > gone]) >= 5, "too few requests to tell"
