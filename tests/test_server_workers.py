"""--workers N: N processes that each import the app, share the port, are replaced when they
die, and all stop on one Ctrl-C (``workers_app``)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
from serverutil import ServerProcess, is_clean_exit, pid_alive, poll, running_server

WORKERS = 2


def serving_pid(server: ServerProcess) -> dict[str, int]:
    """One request on a new connection (so the kernel may pick any worker)."""
    with httpx.Client(base_url=server.base_url, timeout=2, trust_env=False) as client:
        return client.get("/").json()


def collect_workers(server: ServerProcess, count: int, timeout: float = 10.0) -> set[int]:
    """Send requests until ``count`` distinct worker pids have answered."""
    seen: set[int] = set()

    def probe() -> bool:
        for _ in range(20):
            try:
                report = serving_pid(server)
            except httpx.HTTPError:
                continue
            assert report["imported_in"] == report["pid"], report
            seen.add(report["pid"])
        return len(seen) >= count

    poll(probe, timeout=timeout, interval=0.01, what=f"{count} workers to answer (saw {seen})")
    return seen


def test_each_worker_imports_the_app() -> None:
    """Rule: --workers N runs N processes that share the port, each importing the app itself
    (never forked after the import). Broken: fewer than N pids answer, a worker reports the
    parent's pid as the importer (fork after import), or a worker is the parent itself."""
    with running_server("workers_app:app", "--workers", str(WORKERS)) as server:
        pids = collect_workers(server, WORKERS)
    assert len(pids) == WORKERS
    assert server.pid not in pids


def test_killed_worker_is_replaced() -> None:
    """Rule: a worker that dies (kill -9) is replaced within a second or two and the port keeps
    serving. Broken: requests fail for good, or no new worker pid shows up within 3 s."""
    with running_server("workers_app:app", "--workers", str(WORKERS)) as server:
        pids = collect_workers(server, WORKERS)
        victim = min(pids)
        os.kill(victim, signal.SIGKILL)
        killed_at = time.monotonic()
        poll(lambda: not pid_alive(victim), timeout=5, what="the killed worker to disappear")
        replacement: set[int] = set()

        def probe() -> bool:
            try:
                report = serving_pid(server)
            except httpx.HTTPError:
                return False
            assert report["pid"] != victim
            if report["pid"] not in pids:
                replacement.add(report["pid"])
            return bool(replacement)

        poll(probe, timeout=5, interval=0.01, what="a replacement worker to answer")
        replaced_after = time.monotonic() - killed_at
        for _ in range(10):
            assert serving_pid(server)["pid"] != victim
    assert replaced_after < 3.0, f"replacement answered {replaced_after:.1f}s after the kill"


def test_sigint_to_parent_stops_all_workers() -> None:
    """Rule: SIGINT to the parent stops every worker and the parent exits cleanly. Broken:
    orphaned workers keep running (still alive after the parent exits) or the exit is
    unclean."""
    with running_server("workers_app:app", "--workers", str(WORKERS)) as server:
        pids = collect_workers(server, WORKERS)
        code = server.stop(signal.SIGINT)
        poll(
            lambda: not [pid for pid in pids if pid_alive(pid)],
            timeout=5,
            what=f"workers {pids} to exit",
        )
    assert is_clean_exit(code), server.describe()


def test_ctrl_c_to_process_group_stops_cleanly() -> None:
    """Rule: one Ctrl-C stops all: the terminal sends SIGINT to the whole process group
    (parent and workers at once); everything exits cleanly, with no KeyboardInterrupt
    traceback. Broken: workers crash with tracebacks, the parent hangs waiting for them, or
    a worker survives."""
    with running_server("workers_app:app", "--workers", str(WORKERS)) as server:
        pids = collect_workers(server, WORKERS)
        os.killpg(server.pid, signal.SIGINT)
        code = server.wait_exit(10)
        poll(
            lambda: not [pid for pid in pids if pid_alive(pid)],
            timeout=5,
            what=f"workers {pids} to exit",
        )
    assert is_clean_exit(code), server.describe()
    assert "Traceback" not in server.stderr, server.describe()


def test_workers_serve_a_unix_socket(tmp_path: Path) -> None:
    """Rule: with --workers and --uds PATH, the workers serve the parent's unix socket. Seen
    failing before the workers were given the path: each died at startup with "TypeError:
    'None' is not an instance of 'str'" and was replaced, again and again (19 workers in
    3 s); no response (read timed out)."""
    path = tmp_path / "workers.sock"
    with running_server("workers_app:app", "--workers", str(WORKERS), "--uds", str(path)) as srv:
        transport = httpx.HTTPTransport(uds=str(path))
        with httpx.Client(transport=transport, timeout=5, trust_env=False) as client:
            pids = {client.get("http://localhost/").json()["pid"] for _ in range(10)}
        time.sleep(0.5)
        started = srv.stderr.count("Started worker process")
    assert pids and srv.pid not in pids
    assert started == WORKERS, srv.describe()
