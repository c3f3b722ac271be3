"""What the access-log path tests (``test_access_fast_path.py``, ``test_access_path_changes.py``,
``test_access_json.py``) share: reading the ``Access log path: ...`` debug lines, the access lines
of stdout, clients that send many requests (pipelined, or one at a time with reconnects), a
WebSocket session, and :class:`HeldStdout`, a server whose stdout the test holds itself (a pipe
it leaves unread, or a terminal).

Imported by the test modules as ``from accessutil import ...`` (pytest puts ``tests/server`` on
``sys.path``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pty
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families
from support.h1raw import IncompleteResponse, RawConnection, RawResponse
from support.serverutil import (
    APPS_DIR,
    STARTUP_TIMEOUT,
    STOP_TIMEOUT,
    WAIT_TIMEOUT,
    ServerFailure,
    base_env,
    ferrule_command,
    poll,
    server_args,
)
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

#: The debug line the server writes at startup and at each change of the access line's path.
PATH_LINE = re.compile(r"Access log path: (fast|logging|off)\b([^\n\"]*)")
FAST_LINE = "Access log path: fast (formatted and written by the server)"
#: How soon a change of logging must take effect (the interface's promise).
CHANGE_DEADLINE = 1.0
#: uvicorn's access line, uncoloured, on stdout: client, method, target, version, status.
ACCESS_LINE = re.compile(
    r'^INFO:     127\.0\.0\.1:(\d+) - "([A-Z]+) (\S+) HTTP/([\d.]+)" (\d{3})(?: [^"\n]*)?$'
)


def path_lines(server: Any) -> list[tuple[str, str]]:
    """Every ``Access log path: KIND (REASON)`` line on stderr so far, as (kind, rest)."""
    return [(m.group(1), m.group(2).strip()) for m in PATH_LINE.finditer(server.stderr)]


def wait_path(
    server: Any, kind: str, *, after: int = 0, timeout: float = WAIT_TIMEOUT
) -> tuple[str, str]:
    """Wait for a path line of ``kind`` beyond the first ``after`` ones; return it."""

    def probe() -> tuple[str, str] | None:
        found = [line for line in path_lines(server)[after:] if line[0] == kind]
        return found[0] if found else None

    try:
        return poll(probe, timeout=timeout, what=f"an 'Access log path: {kind}' line")
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}; path lines so far: {path_lines(server)}\n{server.describe()}"
        ) from None


def stdout_lines(server: Any) -> list[str]:
    """stdout's complete lines (a terminal's CRLF read as LF)."""
    text = server.stdout.replace("\r\n", "\n")
    return text.split("\n")[:-1]


def lines_with(server: Any, marker: str) -> list[str]:
    return [line for line in stdout_lines(server) if marker in line]


def wait_lines(
    server: Any, count: int, what: str = "access lines", timeout: float = WAIT_TIMEOUT
) -> None:
    """Wait until stdout has at least ``count`` complete lines."""
    try:
        poll(lambda: len(stdout_lines(server)) >= count, timeout=timeout, what=f"{count} {what}")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{server.describe()}") from None


def wait_for(
    server: Any, probe: Callable[[], Any], what: str, timeout: float = WAIT_TIMEOUT
) -> Any:
    """:func:`poll` whose failure shows the server's output."""
    try:
        return poll(probe, timeout=timeout, what=what)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{server.describe()}") from None


def normalise(line: str) -> str:
    """A line with the client's port and a WebSocket session's length taken out."""
    line = re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", line)
    return re.sub(r"\[closed (\d+)\] \d+\.\d{3}s", r"[closed \1] N.NNNs", line)


# -- clients ----------------------------------------------------------------------------------


def get_bytes(path: str, headers: Sequence[tuple[str, str]] = ()) -> bytes:
    extra = "".join(f"{name}: {value}\r\n" for name, value in headers)
    return f"GET {path} HTTP/1.1\r\nHost: test\r\n{extra}\r\n".encode("latin-1")


def pipelined(
    port: int | RawConnection,
    paths: Sequence[str],
    *,
    batch: int = 50,
    timeout: float = 10.0,
    answered: list[tuple[str, RawResponse]] | None = None,
) -> list[tuple[str, RawResponse]]:
    """Sends ``paths`` on one keep-alive connection (a new one to ``port``, or the one given),
    ``batch`` requests at a time, each batch's answers read before the next; returns (path,
    response) for each, all 200 (fails on anything else). ``answered``, if given, is filled
    as the answers come (to tell how far it got)."""
    answered = [] if answered is None else answered
    given = isinstance(port, RawConnection)
    with port if given else RawConnection(port, timeout=timeout) as conn:
        for start in range(0, len(paths), batch):
            chunk = paths[start : start + batch]
            conn.send(b"".join(get_bytes(path) for path in chunk))
            for path in chunk:
                response = conn.read_response()
                assert response.status == 200, (path, response.status, response.body[:200])
                answered.append((path, response))
    return answered


def connections_to_both_workers(
    server: Any, count: int = 8, timeout: float = 20.0
) -> list[RawConnection]:
    """``count`` keep-alive connections, among them at least one to each of the two workers
    (each connection's first request tells its worker). New connections are opened, a little
    apart, until both workers have answered: the kernel gives a shared listening socket's
    connections to whichever worker wakes first, and a run of 64 back to back once all went
    to one worker."""
    server.wait_startups(2)
    by_worker: dict[str, list[RawConnection]] = {}
    deadline = time.monotonic() + timeout
    while len(by_worker) < 2 or sum(map(len, by_worker.values())) < count:
        assert time.monotonic() < deadline, f"{timeout}s of connections, one worker: {by_worker}"
        conn = RawConnection(server.port, timeout=10)
        conn.send(get_bytes("/which-worker"))
        pid = conn.read_response().header("x-pid")
        kept = by_worker.setdefault(pid, [])
        if len(kept) < count - 1:
            kept.append(conn)
        else:
            conn.close()
        time.sleep(0.01)
    # Each worker's first connection leads, so the ``count`` kept reach both.
    ordered = [kept[0] for kept in by_worker.values()]
    ordered += [conn for kept in by_worker.values() for conn in kept[1:]]
    for conn in ordered[count:]:
        conn.close()
    return ordered[:count]


def dropped_counter(port: int) -> float | None:
    """``ferrule_access_log_lines_dropped_total`` from the metrics endpoint (None if absent)."""
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5, trust_env=False).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "ferrule_access_log_lines_dropped_total":
                return sample.value
    return None


def in_threads(
    jobs: Sequence[Callable[[], Any]],
    timeout: float = 60.0,
    during: Callable[[], None] | None = None,
) -> list[Any]:
    """Runs each job on a thread of its own, and ``during`` on this one meanwhile; returns the
    jobs' results; re-raises a job's error."""
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException] = []

    def run(index: int, job: Callable[[], Any]) -> None:
        try:
            results[index] = job()
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=item, daemon=True) for item in enumerate(jobs)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    if during is not None:
        during()
    for thread in threads:
        thread.join(max(deadline - time.monotonic(), 0.01))
    assert not any(thread.is_alive() for thread in threads), f"clients still busy after {timeout}s"
    if errors:
        raise errors[0]
    return results


@dataclass
class Traffic:
    """Requests sent one at a time on keep-alive connections, reconnecting when the server
    closes one (a worker stopping): each attempt has a path of its own."""

    answered: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)


def keep_sending(
    port: int, prefix: str, until: Callable[[], bool], *, limit: int, timeout: float = 5.0
) -> Traffic:
    """One client: ``GET /prefix-SEQ`` until ``until()`` or ``limit`` attempts."""
    traffic = Traffic()
    conn: RawConnection | None = None
    try:
        for seq in range(limit):
            if until():
                break
            path = f"{prefix}-{seq}"
            try:
                if conn is None:
                    conn = RawConnection(port, timeout=timeout)
                conn.send(get_bytes(path))
                response = conn.read_response()
            except (OSError, IncompleteResponse):
                traffic.failed.append(path)
                if conn is not None:
                    conn.close()
                conn = None
                continue
            assert response.status == 200, (path, response.status)
            traffic.answered.append(path)
            if (response.header("connection") or "").lower() == "close":
                conn.close()
                conn = None
    finally:
        if conn is not None:
            conn.close()
    return traffic


def ws_session(port: int, path: str, client_close: int | None = None) -> None:
    """Opens a WebSocket on ``path``; closes it with ``client_close``, or waits for the server
    to close it. A refused handshake is no error."""

    async def session() -> None:
        url = f"ws://127.0.0.1:{port}{path}"
        try:
            async with connect(url, open_timeout=5, close_timeout=5, proxy=None) as ws:
                if client_close is not None:
                    await ws.close(client_close)
                else:
                    with contextlib.suppress(ConnectionClosed):
                        await asyncio.wait_for(ws.recv(), 5)
        except InvalidStatus:
            pass

    asyncio.run(asyncio.wait_for(session(), 15))


# -- a server whose stdout the test holds -----------------------------------------------------


class HeldStdout:
    """``python -m ferrule APP ARGS`` with stderr drained (and read as :class:`ServerProcess`'s)
    and stdout either a pipe the test leaves unread until :meth:`read_stdout` (``"held"``), a
    pipe drained from the start (``"pipe"``), or a terminal (``"tty"``), drained too."""

    def __init__(self, app: str, *args: str, stdout: str = "held", env: Any = None) -> None:
        self.port: int | None = None
        self._out: list[bytes] = []
        self._err: list[bytes] = []
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._master: int | None = None
        target: Any = subprocess.PIPE
        if stdout == "tty":
            self._master, target = pty.openpty()
        self.argv = ferrule_command(*server_args(app, args))
        self.proc = subprocess.Popen(
            self.argv,
            cwd=str(APPS_DIR),
            env=base_env(env),
            stdin=subprocess.DEVNULL,
            stdout=target,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        self._drain(self._err, lambda: self.proc.stderr.read1(65536))
        if self._master is not None:
            os.close(target)
            self._drain(self._out, self._read_master)
        elif stdout == "pipe":
            self.read_stdout()

    def _read_master(self) -> bytes:
        try:
            return os.read(self._master, 65536)
        except OSError:  # EIO: the terminal's other side is closed
            return b""

    def _drain(self, into: list[bytes], read: Callable[[], bytes]) -> None:
        def run() -> None:
            while chunk := read():
                with self._lock:
                    into.append(chunk)

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self._threads.append(thread)

    def read_stdout(self) -> None:
        """Start reading the pipe (until the server closes it)."""
        self._drain(self._out, lambda: self.proc.stdout.read1(65536))

    @property
    def stdout(self) -> str:
        with self._lock:
            return b"".join(self._out).decode("utf-8", "replace")

    @property
    def stderr(self) -> str:
        with self._lock:
            return b"".join(self._err).decode("utf-8", "replace")

    def describe(self) -> str:
        return (
            f"command: {' '.join(self.argv)}\nexit code: {self.proc.poll()}\n"
            f"--- stderr ---\n{self.stderr[-6000:]}\n--- stdout ---\n{self.stdout[-3000:]}"
        )

    def wait_running(self) -> HeldStdout:
        match = poll(
            lambda: (
                re.search(r"running on http://127\.0\.0\.1:(\d+)", self.stderr)
                or self.proc.poll() is not None
            ),
            timeout=STARTUP_TIMEOUT,
            what="the running line",
        )
        if match is True:
            raise ServerFailure(f"the server exited before serving\n{self.describe()}")
        self.port = int(match.group(1))
        return self

    def stop(self, sig: int = signal.SIGTERM) -> int | None:
        """Signal the server, wait for it (killed after the stop timeout), collect output."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            return None
        finally:
            self.close()

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5.0)
        for thread in self._threads:
            thread.join(3.0)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None and not any(t.is_alive() for t in self._threads):
                with contextlib.suppress(OSError):
                    stream.close()
        if self._master is not None:
            with contextlib.suppress(OSError):
                os.close(self._master)
            self._master = None

    def __enter__(self) -> HeldStdout:
        try:
            return self.wait_running()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *exc: object) -> None:
        self.close()
