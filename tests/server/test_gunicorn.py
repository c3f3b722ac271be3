"""ferrule under gunicorn (``gunicorn -k ferrule.workers.FerruleWorker``), real gunicorn: its
sockets, its signals, ``--max-requests``, the ``--timeout`` heartbeat, ``--graceful-timeout``
and its log files, as uvicorn's worker honours them."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from support.serverutil import STARTUP_TIMEOUT, ServerProcess, free_port, poll

pytest.importorskip("gunicorn", reason="gunicorn is an optional test dependency")

WORKER = "ferrule.workers.FerruleWorker"


def gunicorn(app: str, *args: str) -> tuple[ServerProcess, int]:
    """gunicorn's master on a free port with ferrule's worker, once a worker serves."""
    port = free_port()
    argv = [sys.executable, "-m", "gunicorn", "-k", WORKER, "-b", f"127.0.0.1:{port}", *args, app]
    server = ServerProcess(argv)
    try:
        server.wait_for_output(r"ferrule running on http://127\.0\.0\.1", STARTUP_TIMEOUT)
    except BaseException:
        server.close()
        raise
    return server, port


def pid_of(port: int, path: str = "/", timeout: float = 30.0) -> int:
    """The pid of the worker that answers ``path`` on a new connection. A request may wait in
    the master's backlog for a new worker to boot, which takes seconds on a loaded machine."""
    with httpx.Client(timeout=timeout, trust_env=False) as client:
        response = client.get(f"http://127.0.0.1:{port}{path}")
    assert response.status_code == 200, response.text
    return int(response.json()["pid"])


def open_files(pid: int) -> set[str]:
    """The paths of the files ``pid`` has open (``/proc/PID/fd``)."""
    paths = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            paths.add(os.readlink(fd))
    return paths


def test_workers_serve_the_masters_socket() -> None:
    """Rule: ``gunicorn -k ferrule.workers.FerruleWorker -w 2 app`` serves the app from both
    workers on the socket gunicorn's master bound, each worker a ferrule server (its own
    "running on" line, through gunicorn's error log), and, as gunicorn's own workers, no
    access line without ``--access-logfile``. Broken: no such worker class, a worker that
    binds a socket of its own, or access lines on stdout (seen failing: ferrule's default
    handler took the access logger gunicorn had left without one)."""
    server, port = gunicorn("hello_app:app", "-w", "2")
    try:
        pids: set[int] = set()
        poll(
            lambda: pids.add(pid_of(port)) or len(pids) == 2,
            interval=0.01,
            what="both workers answering",
        )
        assert server.stderr.count("ferrule running on") == 2, server.describe()
        assert server.stop(signal.SIGTERM) == 0, server.describe()
        # gunicorn's access log is off without --access-logfile, and so are the workers'.
        assert '"GET / HTTP/1.1"' not in server.stdout + server.stderr, server.describe()
    finally:
        server.close()


def test_every_socket_gunicorn_binds_is_served(tmp_path: Path) -> None:
    """Rule: with two ``--bind`` (a port and a Unix socket), each worker serves both of the
    master's sockets. Broken: the worker refused more than one socket (exit 3, gunicorn's
    WORKER_BOOT_ERROR) and gunicorn stopped."""
    path = str(tmp_path / "web.sock")
    server, port = gunicorn("hello_app:app", "-w", "1", "-b", f"unix:{path}")
    try:
        assert pid_of(port) > 0
        transport = httpx.HTTPTransport(uds=path)
        with httpx.Client(transport=transport, timeout=10, trust_env=False) as client:
            response = client.get("http://localhost/")
        assert response.status_code == 200, response.text
        assert response.json()["pid"] == pid_of(port)
        assert server.stop(signal.SIGTERM) == 0, server.describe()
    finally:
        server.close()


def clients(
    port: int, stop: threading.Event, results: list[str], count: int = 8
) -> list[threading.Thread]:
    """``count`` clients sending requests, each on a new connection, until ``stop``."""

    def client() -> None:
        with httpx.Client(timeout=20, trust_env=False) as http:
            while not stop.is_set():
                try:
                    response = http.get(
                        f"http://127.0.0.1:{port}/", headers={"connection": "close"}
                    )
                    results.append(
                        "ok" if response.status_code == 200 else str(response.status_code)
                    )
                except httpx.HTTPError as exc:
                    results.append(type(exc).__name__)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(count)]
    for thread in threads:
        thread.start()
    return threads


def test_hup_replaces_the_workers_without_a_failed_request() -> None:
    """Rule: SIGHUP to gunicorn's master starts new workers and stops the old ones gracefully;
    clients sending requests throughout (each on a new connection) see no failure, and new
    worker pids answer. Broken: a worker that stops at once on SIGTERM (requests cut), or one
    that never stops (the old pids answer for ever)."""
    server, port = gunicorn("hello_app:app", "-w", "2")
    stop, results = threading.Event(), []
    try:
        old = {pid_of(port) for _ in range(20)}
        threads = clients(port, stop, results)
        poll(lambda: len(results) >= 50, timeout=20, what="requests before the HUP")
        server.send_signal(signal.SIGHUP)
        poll(lambda: pid_of(port) not in old, timeout=20, what="a new worker answering")
        count = len(results)
        poll(lambda: len(results) >= count + 100, timeout=20, what="requests after the HUP")
        # The clients finish their requests before the server goes: closed first, it cut the
        # ones in flight (two RemoteProtocolErrors on a loaded machine).
        stop.set()
        for thread in threads:
            thread.join(25)
    finally:
        stop.set()
        server.close()
    failed = [r for r in results if r != "ok"]
    assert not failed, f"{len(failed)} of {len(results)} failed: {failed[:10]}"


def test_max_requests_replaces_the_worker() -> None:
    """Rule: ``--max-requests 20`` replaces a worker after its 20th request: 60 requests on
    new connections are all answered, by at least two worker pids. Broken: the limit not
    passed on (one pid throughout), or requests failing at the change."""
    server, port = gunicorn("hello_app:app", "-w", "1", "--max-requests", "20")
    try:
        pids = [pid_of(port) for _ in range(60)]
    finally:
        server.close()
    assert len(set(pids)) >= 2, pids


def test_the_heartbeat_keeps_an_idle_worker_and_timeout_replaces_a_stuck_one() -> None:
    """Rule (``--timeout 5``): a worker's event loop beats gunicorn's heartbeat, so an idle
    worker lives past twice the timeout; one whose loop is blocked (an app calling
    ``time.sleep`` for 30 s) is killed by the master ("WORKER TIMEOUT") and a new one serves.
    Broken: without the heartbeat the master kills every worker after the timeout, busy or
    not (seen failing with the heartbeat's callback removed). The timeout is 5 s, not less,
    for an idle loop on a loaded machine not to miss it."""
    server, port = gunicorn("workers_app:app", "-w", "1", "--timeout", "5")
    try:
        first = pid_of(port)
        time.sleep(12)
        assert pid_of(port) == first, server.describe()
        # Its request is cut when the master kills the stuck worker: that is the point.
        in_background(port, "/block?secs=30")
        server.wait_for_output("WORKER TIMEOUT", timeout=25)
        poll(lambda: pid_of(port) != first, timeout=30, what="a new worker answering")
    finally:
        server.close()


def in_background(port: int, path: str) -> tuple[threading.Thread, list[str]]:
    """``path`` requested on a thread of its own; the list gets the answering pid, or the
    client's error's name."""
    outcome: list[str] = []

    def request() -> None:
        try:
            outcome.append(str(pid_of(port, path, timeout=40)))
        except (httpx.HTTPError, AssertionError) as exc:
            outcome.append(type(exc).__name__)

    thread = threading.Thread(target=request, daemon=True)
    thread.start()
    return thread, outcome


def test_term_lets_a_request_in_progress_finish(tmp_path: Path) -> None:
    """Rule: SIGTERM to the master stops the workers gracefully (within
    ``--graceful-timeout``): a request inside the app when the signal comes (its loop busy
    for 1.5 s) is answered, and the master exits 0. Broken: the worker stops at once and the
    request is cut (a worker that left SIGTERM to gunicorn's default handler)."""
    events = tmp_path / "events"
    port = free_port()
    argv = [sys.executable, "-m", "gunicorn", "-k", WORKER, "-b", f"127.0.0.1:{port}", "-w", "1"]
    server = ServerProcess([*argv, "workers_app:app"], env={"FERRULE_TEST_EVENTS": str(events)})
    try:
        server.wait_for_output(r"ferrule running on", STARTUP_TIMEOUT)
        request, outcome = in_background(port, "/block?secs=1.5")
        poll(lambda: events.exists() and "blocking" in events.read_text(), timeout=20,
             what="the request inside the app")  # fmt: skip
        server.send_signal(signal.SIGTERM)
        code = server.wait_exit(timeout=30)
        request.join(10)
    finally:
        server.close()
    assert outcome and outcome[0].isdigit(), (outcome, server.describe())
    assert code == 0, server.describe()


def test_quit_stops_at_once() -> None:
    """Rule: SIGQUIT is gunicorn's quick shutdown: a request that would take 30 s is cut and
    the master exits within seconds (15 s at most, for a loaded machine). Broken: the worker
    waits for the request (QUIT taken for a graceful stop)."""
    server, port = gunicorn("hello_app:app", "-w", "1")
    try:
        request, outcome = in_background(port, "/sleep?secs=30")
        time.sleep(0.5)
        started = time.monotonic()
        server.send_signal(signal.SIGQUIT)
        server.wait_exit(timeout=25)
        took = time.monotonic() - started
        request.join(10)
    finally:
        server.close()
    assert outcome and not outcome[0].isdigit(), (outcome, server.describe())
    assert took < 15, f"QUIT took {took:.1f}s"


def test_access_lines_go_to_gunicorns_access_log_which_usr1_reopens(tmp_path: Path) -> None:
    """Rule: with ``--access-logfile FILE`` the access lines go to gunicorn's file; SIGUSR1 (as
    logrotate sends it after moving the file) makes the master and the workers reopen it, so
    later lines land in the new file. Without ``--access-logfile`` no access line is written.
    Broken: lines on stdout instead, or on in the moved file after USR1."""
    log = tmp_path / "access.log"
    server, port = gunicorn("hello_app:app", "-w", "1", "--access-logfile", str(log))
    try:
        worker = pid_of(port, "/before-rotation")
        poll(lambda: "/before-rotation" in log.read_text(), what="the first line")
        log.rename(tmp_path / "access.log.1")
        server.send_signal(signal.SIGUSR1)
        poll(lambda: log.exists(), what="gunicorn reopening the file")
        # The master passes USR1 on to the worker, which reopens the file in its own time.
        poll(lambda: str(log.resolve()) in open_files(worker), what="the worker reopening the file")
        pid_of(port, "/after-rotation")
        poll(lambda: "/after-rotation" in log.read_text(), what="a line in the new file")
    finally:
        server.close()
    assert "/after-rotation" not in (tmp_path / "access.log.1").read_text()
    assert "/before-rotation" not in server.stdout, server.describe()
