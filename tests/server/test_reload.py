"""--reload: a parent process keeps the port and restarts its one worker when a watched file
changes (uvicorn's StatReload). Each test writes its app into ``tmp_path`` and serves it with
``--app-dir tmp_path --reload-dir tmp_path``.

Files are replaced atomically (written aside, then renamed over) with an mtime moved at least
2 s past the previous one, so that every change is seen once, even within one timestamp tick,
and Python's bytecode cache (keyed on the source's mtime in seconds and its size) never serves
the old code.

Before --reload existed every test here failed ("unrecognized arguments: --reload"); each
docstring says what else it was seen to catch, with the change it names made for the run."""

from __future__ import annotations

import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest
from support.serverutil import (
    WAIT_TIMEOUT,
    ServerProcess,
    ferrule_command,
    pid_alive,
    poll,
    run_to_exit,
    running_server,
)

APP = """
import json
import os

BODY = {body!r}


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    payload = {{"body": BODY, "pid": os.getpid(), "ppid": os.getppid()}}
    await send({{"type": "http.response.start", "status": 200, "headers": []}})
    await send({{"type": "http.response.body", "body": json.dumps(payload).encode()}})
"""

#: Short, so that tests wait less; the default (0.25 s) works the same way.
DELAY = "0.1"
#: Long enough for several looks at the files (a change would have been acted on by then).
QUIET = 1.0

T = TypeVar("T")

STARTED = re.compile(r"Started worker process \[(\d+)\]")


def write(path: Path, text: str) -> None:
    """Replace ``path`` in one step, its mtime 2 s past both now and its previous one."""
    previous = path.stat().st_mtime if path.exists() else 0.0
    stamp = max(time.time(), previous) + 2
    aside = path.with_name(path.name + ".new")  # matches no include glob
    aside.write_text(text)
    os.utime(aside, (stamp, stamp))
    os.replace(aside, path)


def write_app(directory: Path, body: str) -> None:
    write(directory / "watched_app.py", APP.format(body=body))


def start(directory: Path, *args: str) -> AbstractContextManager[ServerProcess]:
    return running_server(
        "watched_app:app",
        "--reload",
        "--app-dir",
        str(directory),
        "--reload-dir",
        str(directory),
        "--reload-delay",
        DELAY,
        "--lifespan",
        "off",
        *args,
    )


def answer(server: ServerProcess) -> dict[str, Any] | None:
    """One request on a new connection; None while no worker answers."""
    try:
        with httpx.Client(base_url=server.base_url, timeout=2, trust_env=False) as client:
            return client.get("/").json()
    except httpx.HTTPError:
        return None


def wait(server: ServerProcess, probe: Callable[[], T | None], what: str, timeout: float) -> T:
    """:func:`poll`, failing with the server's output as it is then."""
    try:
        return poll(probe, timeout=timeout, interval=0.05, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{server.describe()}") from None


def wait_for_body(server: ServerProcess, body: str, timeout: float = 10.0) -> dict[str, Any]:
    return wait(
        server,
        lambda: (seen := answer(server)) and seen["body"] == body and seen,
        f"a worker answering {body!r}",
        timeout,
    )


def workers_started(server: ServerProcess) -> list[int]:
    return [int(pid) for pid in STARTED.findall(server.stderr)]


class RefusalWatch:
    """Connects to the port every 10 ms in a thread, counting refused connections."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.attempts = 0
        self.refused = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.wait(0.01):
            self.attempts += 1
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
            except ConnectionRefusedError:
                self.refused += 1
            except OSError:
                pass

    def stop(self) -> None:
        self.done.set()
        self.thread.join(5)


def test_a_change_is_served_by_a_new_worker_on_the_same_port(tmp_path: Path) -> None:
    """Rule: rewriting the app file makes the reloader log uvicorn's "StatReload detected
    changes in '...watched_app.py'. Reloading...", stop the worker and start a new one (another
    pid, child of the same parent) that serves the new code; the parent keeps the listening
    socket, so no connection attempt is refused meanwhile. Seen failing: with change detection
    disabled (``changed_files`` returning []), "two" never came (timed out after 10 s); with
    the reloader closing its socket and binding a new one around the restart, connections were
    refused in between."""
    write_app(tmp_path, "one")
    with start(tmp_path) as server:
        first = wait_for_body(server, "one")
        assert first["ppid"] == server.pid, first
        watch = RefusalWatch(server.port)
        try:
            write_app(tmp_path, "two")
            second = wait_for_body(server, "two")
            time.sleep(0.2)
        finally:
            watch.stop()
        server.wait_for_output(r"StatReload detected changes in '[^']*watched_app\.py'\. Reload")
        assert server.returncode is None, server.describe()
    assert second["pid"] != first["pid"]
    assert second["ppid"] == server.pid, second
    assert not pid_alive(first["pid"])
    assert watch.attempts > 10 and watch.refused == 0, (watch.attempts, watch.refused)
    assert "Started reloader process" in server.stderr and "using StatReload" in server.stderr
    assert "Will watch for changes in these directories: [" in server.stderr


#: Directories whose files are not watched: excluded by the default globs (.git), by
#: --reload-exclude (build), or always (__pycache__, a virtualenv, a cache directory).
UNWATCHED_DIRS = (".git", "__pycache__", "build", "venv", "target")


def test_unwatched_files_do_not_restart_but_new_and_deleted_ones_do(tmp_path: Path) -> None:
    """Rule: a file no include glob matches (notes.txt), one an exclude glob matches (the
    defaults: .hidden.py; --reload-exclude 'skip_*.py'), and files in unwatched directories
    (``UNWATCHED_DIRS``) do not restart the worker; a file matching --reload-include '*.cfg'
    does, and so does a .py file created or deleted. Seen failing: with nothing excluded (no
    exclude glob matching, no directory skipped), the worker restarted on '.git/module.py',
    '.hidden.py', '__pycache__/module.py', 'build/module.py', 'skip_me.py',
    'target/module.py', 'venv/module.py' (only on the last two with just the virtualenv and
    cache directory rule turned off); with --reload-include ignored, settings.cfg did not
    restart it (timed out); with deletions not compared (only the files present now),
    removing helper.py did not (timed out)."""
    write_app(tmp_path, "one")
    for name in ("notes.txt", ".hidden.py", "skip_me.py", "settings.cfg"):
        write(tmp_path / name, "x = 1\n")
    for directory in UNWATCHED_DIRS:
        (tmp_path / directory).mkdir()
        write(tmp_path / directory / "module.py", "x = 1\n")
    write(tmp_path / "venv" / "pyvenv.cfg", "home = /usr/bin\n")
    write(tmp_path / "target" / "CACHEDIR.TAG", "Signature: 8a477f597d28d172789f06886806bc55\n")
    options = ["--reload-include", "*.cfg", "--reload-exclude", "skip_*.py"]
    with start(tmp_path, *options, "--reload-exclude", "build") as server:
        first = wait_for_body(server, "one")
        for name in ("notes.txt", ".hidden.py", "skip_me.py"):
            write(tmp_path / name, "x = 2\n")
        for directory in UNWATCHED_DIRS:
            write(tmp_path / directory / "module.py", "x = 2\n")
        write(tmp_path / "new_notes.txt", "created\n")
        time.sleep(QUIET)
        assert answer(server) == first, server.describe()
        assert "detected changes" not in server.stderr, server.describe()

        restarts = [("settings.cfg", lambda: write(tmp_path / "settings.cfg", "x = 2\n"))]
        restarts.append(("helper.py", lambda: write(tmp_path / "helper.py", "x = 1\n")))
        restarts.append(("helper.py", lambda: (tmp_path / "helper.py").unlink()))
        for name, change in restarts:
            before = len(workers_started(server))
            change()
            restarted = lambda n=before: len(workers_started(server)) > n  # noqa: E731
            wait(server, restarted, f"{name}'s restart", WAIT_TIMEOUT)
            server.wait_for_output(rf"detected changes in '[^']*{re.escape(name)}'")
        assert answer(server) is not None
        assert len(workers_started(server)) == 4, server.describe()


def test_a_worker_that_fails_waits_for_the_next_change(tmp_path: Path) -> None:
    """Rule: when the new code does not import (a syntax error), the worker exits, the parent
    stays up and logs it, and does not start workers again and again; the next change (the
    fix) starts one that serves. Seen failing: with the reloader restarting a dead worker at
    once (as ``Supervisor`` does), "Started worker process" lines kept coming (6 by the end
    of the quiet second, against 2); with a change not starting a worker when none runs, the
    fix was never served (timed out)."""
    write_app(tmp_path, "one")
    with start(tmp_path) as server:
        wait_for_body(server, "one")
        write(tmp_path / "watched_app.py", "def broken(:\n")
        # 3: an app that does not import is a startup failure.
        server.wait_for_output(r"Worker \[\d+\] died \(3\); waiting for file changes")
        count = len(workers_started(server))
        time.sleep(QUIET)
        assert len(workers_started(server)) == count == 2, server.describe()
        assert server.returncode is None, server.describe()
        write_app(tmp_path, "fixed")
        fixed = wait_for_body(server, "fixed")
        assert fixed["ppid"] == server.pid
    assert "SyntaxError" in server.stderr


@pytest.mark.parametrize(
    ("signum", "group"),
    [(signal.SIGINT, False), (signal.SIGTERM, False), (signal.SIGINT, True)],
    ids=["SIGINT", "SIGTERM", "SIGINT-to-group"],
)
def test_signal_to_the_parent_stops_the_worker(tmp_path: Path, signum: int, group: bool) -> None:
    """Rule: SIGINT or SIGTERM to the reloader alone stops the worker and exits 0 within a few
    seconds, leaving no process behind; so does Ctrl-C in a terminal, SIGINT to the whole
    process group, without a traceback. --workers 2 is ignored with a warning: one worker.
    Seen failing: with the reloader not stopping its worker on the way out, the worker was
    still alive 3 s after the parent alone was signalled and exited; with no signal handlers
    in the reloader, all three failed (the group case: killed by SIGINT, exit -2, not 0);
    without the warning, its assertion."""
    write_app(tmp_path, "one")
    with start(tmp_path, "--workers", "2") as server:
        worker = wait_for_body(server, "one")["pid"]
        if group:
            os.killpg(server.pid, signum)
        else:
            server.send_signal(signum)
        code = server.wait_exit()
        poll(lambda: not pid_alive(worker), what=f"worker {worker} to exit")
    assert code == 0, server.describe()
    assert workers_started(server) == [worker], server.describe()
    assert '"workers" flag is ignored when reloading is enabled.' in server.stderr
    assert "Stopping reloader process" in server.stderr
    assert "Traceback" not in server.stderr, server.describe()


@pytest.mark.parametrize(
    ("option", "value", "named"),
    [("--reload-delay", "0", "--reload-delay"), ("--reload-dir", "no/such/dir", "--reload-dir")],
)
def test_bad_reload_options_are_usage_errors(
    tmp_path: Path, option: str, value: str, named: str
) -> None:
    """Rule: a reload delay that is not positive, or a reload directory that does not exist, is
    a usage error (exit 2, naming the option). Seen failing: without the checks in
    ``Config.__post_init__`` the server started (delay 0: polling without pause; no such
    directory: watching nothing) and did not exit (killed after 10 s)."""
    write_app(tmp_path, "one")
    argv = ferrule_command("watched_app:app", "--reload", "--app-dir", str(tmp_path), "--port")
    result = run_to_exit([*argv, "0", option, value], cwd=tmp_path, timeout=10)
    assert result.returncode == 2, result.describe()
    assert named in result.stderr and "Traceback" not in result.stderr, result.describe()


def test_run_with_an_app_object_and_reload_returns_1(tmp_path: Path) -> None:
    """Rule: ``ferrule.run(app_object, reload=True)`` returns 3 with uvicorn's message: a
    worker process cannot import an object. Seen failing: without the check, run() started a
    reloader whose worker could not import the object's repr, and which then waited for file
    changes (killed after 10 s)."""
    script = (
        "import sys, ferrule\n"
        "async def app(scope, receive, send): pass\n"
        "sys.exit(ferrule.run(app, reload=True, port=0))\n"
    )
    result = run_to_exit([sys.executable, "-c", script], cwd=tmp_path, timeout=10)
    assert result.returncode == 3, result.describe()
    message = "You must pass the application as an import string to enable 'reload' or 'workers'."
    assert message in result.stderr, result.describe()
