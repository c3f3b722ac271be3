"""SIGUSR2 to the parent of ``--workers``: an upgrade that loses nothing. A new parent process
starts from the same command (new code on disk is what it imports), takes the listening socket,
and once its workers serve the old parent stops its own gracefully and exits by itself."""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import httpx
from support.serverutil import STARTUP_TIMEOUT, pid_alive, poll, running_server

APP_SOURCE = """
import os

VERSION = "{version}"


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    body = VERSION.encode()
    headers = [(b"content-length", str(len(body)).encode())]
    await send({{"type": "http.response.start", "status": 200, "headers": headers}})
    await send({{"type": "http.response.body", "body": body}})
"""


def write_app(directory: Path, version: str) -> None:
    (directory / "versioned_app.py").write_text(APP_SOURCE.format(version=version))


#: No bytecode cache: a source rewritten within the second at the same size looks unchanged to
#: it (seen: the new parent served the old code under 3.14).
NO_PYC = {"PYTHONDONTWRITEBYTECODE": "1"}


def test_sigusr2_upgrades_to_the_new_code_with_no_request_lost(tmp_path: Path) -> None:
    """Rule: with new code on disk, SIGUSR2 to the parent of ``--workers 2`` starts a new
    parent from the same command, on the same socket; once its workers serve, the old parent
    stops its workers gracefully and exits 0 by itself. 12 clients sending requests throughout
    (each on a new connection) get every one answered, first by the old code, then by the
    new. Broken: SIGUSR2's default action kills the parent (seen failing before the upgrade:
    the clients' connections refused), or the old parent never leaves."""
    write_app(tmp_path, "1")
    stop, seen, failed = threading.Event(), [], []

    def client(port: int) -> None:
        with httpx.Client(timeout=20, trust_env=False) as http:
            while not stop.is_set():
                try:
                    response = http.get(
                        f"http://127.0.0.1:{port}/", headers={"connection": "close"}
                    )
                    seen.append(response.text if response.status_code == 200 else "?")
                except httpx.HTTPError as exc:
                    failed.append(type(exc).__name__)

    with running_server("versioned_app:app", "--workers", "2", cwd=tmp_path, env=NO_PYC) as server:
        threads = [threading.Thread(target=client, args=(server.port,)) for _ in range(12)]
        for thread in threads:
            thread.start()
        new_pid = None
        try:
            poll(lambda: len(seen) >= 50, timeout=20, what="requests to the old code")
            server.wait_startups(2, STARTUP_TIMEOUT)
            write_app(tmp_path, "2")
            server.send_signal(signal.SIGUSR2)
            found = server.wait_for_output(r"new parent process \[(\d+)\] started")
            new_pid = int(found.group(1))
            assert server.wait_exit(timeout=STARTUP_TIMEOUT + 40) == 0, server.describe()
            gone = len(seen)
            poll(lambda: len(seen) >= gone + 100, timeout=20, what="requests to the new code")
        finally:
            stop.set()
            for thread in threads:
                thread.join(25)
            if new_pid is not None and pid_alive(new_pid):
                os.kill(new_pid, signal.SIGTERM)
                poll(lambda: not pid_alive(new_pid), timeout=30, what="the new parent to stop")
    assert not failed, f"{len(failed)} requests failed: {failed[:5]}"
    assert set(seen) == {"1", "2"}, set(seen)
    # Both sets of workers answer between the two parents; once the old one has exited
    # (a few answers then still on their way to the list), only the new code does.
    assert seen[0] == "1" and set(seen[gone + 12 :]) == {"2"}, "".join(seen)[-200:]
    assert "New parent process" in server.stderr and "serving; stopping this one" in server.stderr


def test_a_new_parent_that_cannot_start_leaves_the_old_one_serving(tmp_path: Path) -> None:
    """Rule: if the new code cannot start (an import that fails), the new parent exits, the
    old one says so and serves on with its workers. Broken: the old parent stops anyway, and
    nothing serves."""
    write_app(tmp_path, "1")
    with running_server("versioned_app:app", "--workers", "2", cwd=tmp_path, env=NO_PYC) as server:
        # Both workers have imported the good code (one still importing would take the bad).
        server.wait_startups(2, STARTUP_TIMEOUT)
        (tmp_path / "versioned_app.py").write_text("raise RuntimeError('broken deploy')\n")
        server.send_signal(signal.SIGUSR2)
        server.wait_for_output(r"exited before serving \(exit status 3\); serving on", timeout=60)
        assert server.returncode is None, server.describe()
        assert server.get("/").text == "1"
