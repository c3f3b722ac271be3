"""The server under test as a process, for the black-box tests in every folder of ``tests/``.

- :func:`running_server` starts ``python -m ferrule APP --port 0 ...`` in its own session (process
  group), with ``tests/apps`` as the working directory, waits for the ``ferrule running on ...``
  line on stderr and yields a :class:`ServerProcess`. On exit it sends SIGINT, waits, kills the
  whole process group after :data:`STOP_TIMEOUT` and always reaps it.
- :func:`run_to_exit` runs a command that must end on its own (``--help``, a refused option).
- :func:`poll` and friends bound every wait, so a broken server fails a test instead of hanging;
  :func:`read_events` reads what the apps' lifespan hooks wrote to their events file.

The raw HTTP/1.1 client is in :mod:`support.h1raw`, the ``/proc`` readings of memory in
:mod:`support.memutil`. Imported by the test modules as ``from support.serverutil import ...``
(``tests/`` is on ``sys.path``).
"""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx

from support.h1raw import HTTP_TIMEOUT, RawConnection

TESTS_DIR = Path(__file__).resolve().parent.parent
APPS_DIR = TESTS_DIR / "apps"

# The bounds below are what a server that works may take on CI's worst machine (two test runs
# at once on two cores, load above 20); a broken server hangs, so waiting longer only slows a
# failing test down.
#: How long the server may take to print its ``running on`` line.
STARTUP_TIMEOUT = 30.0
#: How long a SIGINT'ed server may take to exit before its process group is killed.
STOP_TIMEOUT = 20.0
#: How long a wait for something the server is to do (a line, an event, a record) may last.
WAIT_TIMEOUT = 20.0

RUNNING_RE = re.compile(r"running on (https?)://[^:\s]+:(\d+)")
UDS_RE = re.compile(r"running on unix socket (\S+)")
#: ``python -m MODULE`` is the server under test. Setting ``FERRULE_TEST_SERVER_MODULE=uvicorn``
#: points the suite at uvicorn, to check the tests themselves against a reference server (the
#: ferrule-specific ones then fail: running line, logger names, ``ferrule.run``, spec 2.4).
SERVER_MODULE = os.environ.get("FERRULE_TEST_SERVER_MODULE", "ferrule")

T = TypeVar("T")


class ServerFailure(AssertionError):
    """The server process did not do what a helper waited for (output attached)."""


def ferrule_command(*args: str) -> list[str]:
    """``python -m ferrule ARGS`` with the interpreter running the tests."""
    return [sys.executable, "-m", SERVER_MODULE, *args]


def base_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    env = os.environ.copy()
    env["PYTHONUNBUFFERED"] = "1"
    env.pop("PYTHONASYNCIODEBUG", None)
    env.pop("WEB_CONCURRENCY", None)  # the server's default --workers: tests say theirs
    env.pop("FORWARDED_ALLOW_IPS", None)  # and of --forwarded-allow-ips
    env.update(extra or {})
    return env


class ServerProcess:
    """A server subprocess whose stdout and stderr are drained by reader threads."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        cwd: Path | str = APPS_DIR,
        env: dict[str, str] | None = None,
        pass_fds: Sequence[int] = (),
    ) -> None:
        self.argv = list(argv)
        self.port: int | None = None
        self.uds: str | None = None
        self.host = "127.0.0.1"
        self.scheme = "http"  # "https" when the running line says so (TLS)
        self._chunks: dict[str, list[str]] = {"stdout": [], "stderr": []}
        self._cond = threading.Condition()
        self._readers: list[threading.Thread] = []
        self.proc = subprocess.Popen(
            self.argv,
            cwd=str(cwd),
            env=base_env(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=pass_fds,
        )
        for name in ("stdout", "stderr"):
            reader = threading.Thread(
                target=self._drain, args=(name, getattr(self.proc, name)), daemon=True
            )
            reader.start()
            self._readers.append(reader)

    # -- output -------------------------------------------------------------------------------

    def _drain(self, name: str, stream: Any) -> None:
        for raw in iter(stream.readline, b""):
            with self._cond:
                self._chunks[name].append(raw.decode("utf-8", "replace"))
                self._cond.notify_all()
        stream.close()
        with self._cond:
            self._cond.notify_all()

    @property
    def stderr(self) -> str:
        with self._cond:
            return "".join(self._chunks["stderr"])

    @property
    def stdout(self) -> str:
        with self._cond:
            return "".join(self._chunks["stdout"])

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.poll()

    def describe(self) -> str:
        """Command, exit status and captured output, for assertion messages."""
        tail = lambda text: text[-6000:]  # noqa: E731
        return (
            f"command: {' '.join(self.argv)}\n"
            f"exit code: {self.proc.poll()}\n"
            f"--- stderr ---\n{tail(self.stderr)}\n--- stdout ---\n{tail(self.stdout)}"
        )

    def wait_for_output(
        self,
        pattern: str | re.Pattern[str],
        timeout: float = WAIT_TIMEOUT,
        *,
        stream: str = "stderr",
    ) -> re.Match[str]:
        """Wait until ``pattern`` matches the collected ``stream``; fail with the output."""
        regex = re.compile(pattern) if isinstance(pattern, str) else pattern
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                match = regex.search("".join(self._chunks[stream]))
                if match:
                    return match
                remaining = deadline - time.monotonic()
                finished = self.proc.poll() is not None and not any(
                    reader.is_alive() for reader in self._readers
                )
                if remaining <= 0 or finished:
                    break
                self._cond.wait(min(remaining, 0.1))
        why = "the process exited" if self.proc.poll() is not None else f"{timeout}s passed"
        raise ServerFailure(
            f"{why} before {regex.pattern!r} appeared on {stream}\n{self.describe()}"
        )

    def wait_startups(self, count: int, timeout: float = WAIT_TIMEOUT) -> None:
        """Wait for ``count`` "Application startup complete." lines: one per worker that has
        imported the app and run its startup (a parent prints its running line before that)."""
        self.wait_for_output(rf"(?:Application startup complete\.[\s\S]*?){{{count}}}", timeout)

    def wait_running(self, timeout: float = STARTUP_TIMEOUT) -> ServerProcess:
        """Wait for the ``running on`` line; record the scheme and port (or unix socket path)."""
        match = self.wait_for_output(r"running on (https?://[^:\s]+:\d+|unix socket \S+)", timeout)
        http = RUNNING_RE.search(match.group(0))
        if http:
            self.scheme = http.group(1)
            self.port = int(http.group(2))
        else:
            uds = UDS_RE.search(match.group(0))
            assert uds is not None
            self.uds = uds.group(1)
        return self

    @property
    def base_url(self) -> str:
        assert self.port is not None, "the server has no TCP port (not started, or --uds)"
        return f"{self.scheme}://{self.host}:{self.port}"

    def client(self, timeout: float = HTTP_TIMEOUT, **options: Any) -> httpx.Client:
        """An httpx client for this server (bounded timeouts, no proxies from the env)."""
        return httpx.Client(base_url=self.base_url, timeout=timeout, trust_env=False, **options)

    def get(self, path: str, timeout: float = HTTP_TIMEOUT, **options: Any) -> httpx.Response:
        """One request on a new connection."""
        with self.client(timeout=timeout) as client:
            return client.get(path, **options)

    def raw(self, timeout: float = HTTP_TIMEOUT) -> RawConnection:
        assert self.port is not None
        return RawConnection(self.port, host=self.host, timeout=timeout)

    # -- lifetime -----------------------------------------------------------------------------

    def send_signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait_exit(self, timeout: float = STOP_TIMEOUT) -> int:
        """Wait for the process to exit; fail (leaving it running) after ``timeout``."""
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise ServerFailure(
                f"the server did not exit within {timeout}s\n{self.describe()}"
            ) from None
        for reader in self._readers:
            reader.join(2.0)
        return code

    def stop(self, sig: int = signal.SIGINT, timeout: float = STOP_TIMEOUT) -> int:
        """Send ``sig`` and wait; kill the process group after ``timeout`` and fail."""
        if self.proc.poll() is None:
            self.send_signal(sig)
        try:
            return self.wait_exit(timeout)
        except ServerFailure:
            self.kill_group()
            raise

    def kill_group(self) -> None:
        """SIGKILL every process still in the server's process group (workers included)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5.0)

    def close(self) -> None:
        """Stop gracefully if still running, then make sure nothing of the group survives."""
        try:
            if self.proc.poll() is None:
                with contextlib.suppress(ServerFailure):
                    self.stop()
        finally:
            self.kill_group()
            for reader in self._readers:
                reader.join(2.0)


#: ``FERRULE_TEST_TASK_IMPL`` gives every server the tests start that ``--task-impl``, unless
#: the test says one: the suite run once with each.
TASK_IMPL = os.environ.get("FERRULE_TEST_TASK_IMPL")


def server_args(app: str, args: Sequence[str]) -> list[str]:
    """``APP`` plus ``--port 0`` unless ``args`` choose a port or a unix socket."""
    args = list(args)
    if not any(flag in args for flag in ("--port", "--uds")):
        args = ["--port", "0", *args]
    if TASK_IMPL and SERVER_MODULE == "ferrule" and "--task-impl" not in args:
        args = ["--task-impl", TASK_IMPL, *args]
    return [app, *args]


def start_server(
    app: str,
    *args: str,
    cwd: Path | str = APPS_DIR,
    env: dict[str, str] | None = None,
    wait: bool = True,
    timeout: float = STARTUP_TIMEOUT,
) -> ServerProcess:
    """Start ``python -m ferrule APP --port 0 ARGS``; wait for ``running on`` unless ``wait``
    is false. The caller must :meth:`ServerProcess.close` it (prefer :func:`running_server`)."""
    server = ServerProcess(ferrule_command(*server_args(app, args)), cwd=cwd, env=env)
    if wait:
        try:
            server.wait_running(timeout)
        except BaseException:
            server.close()
            raise
    return server


@contextlib.contextmanager
def running_server(
    app: str,
    *args: str,
    cwd: Path | str = APPS_DIR,
    env: dict[str, str] | None = None,
    wait: bool = True,
    timeout: float = STARTUP_TIMEOUT,
) -> Iterator[ServerProcess]:
    """:func:`start_server` as a context manager that always stops and reaps the server."""
    server = start_server(app, *args, cwd=cwd, env=env, wait=wait, timeout=timeout)
    try:
        yield server
    finally:
        server.close()


@dataclass
class Finished:
    """A command that ran to its end (see :func:`run_to_exit`)."""

    returncode: int
    stdout: str
    stderr: str

    def describe(self) -> str:
        return (
            f"exit code: {self.returncode}\n--- stderr ---\n{self.stderr[-6000:]}\n"
            f"--- stdout ---\n{self.stdout[-3000:]}"
        )


def run_to_exit(
    argv: Sequence[str],
    *,
    cwd: Path | str = APPS_DIR,
    env: dict[str, str] | None = None,
    timeout: float = 15.0,
) -> Finished:
    """Run a command that must exit on its own within ``timeout`` (killed and failed if not)."""
    proc = subprocess.Popen(
        list(argv),
        cwd=str(cwd),
        env=base_env(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate(timeout=5)
        raise ServerFailure(
            f"{' '.join(argv)} did not exit within {timeout}s\n--- stderr ---\n"
            f"{err.decode('utf-8', 'replace')[-6000:]}"
        ) from None
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
    return Finished(proc.returncode, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"))


# -- waiting ----------------------------------------------------------------------------------


def poll(
    probe: Callable[[], T | None],
    *,
    timeout: float = WAIT_TIMEOUT,
    interval: float = 0.05,
    what: str = "the condition",
) -> T:
    """Call ``probe`` until it returns something truthy (returned); fail after ``timeout``.

    Exceptions from ``probe`` count as "not yet" (the last one is reported on failure)."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = probe()
        except Exception as exc:  # noqa: BLE001 - reported below
            last_error = exc
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{detail}")
        time.sleep(interval)


def fetch_record(server: ServerProcess, key: str, timeout: float = WAIT_TIMEOUT) -> Any:
    """Poll the app's ``/_record?key=KEY`` until the app has stored something under ``key``."""

    def probe() -> Any:
        response = server.get("/_record", params={"key": key}, timeout=2.0)
        return response.json() if response.status_code == 200 else None

    return poll(probe, timeout=timeout, what=f"the app to record {key!r}")


def wait_until_serving(port: int, timeout: float = STARTUP_TIMEOUT, path: str = "/") -> None:
    """Poll ``GET path`` on ``port`` until any HTTP response comes back."""

    def probe() -> bool:
        with httpx.Client(timeout=1.0, trust_env=False) as client:
            client.get(f"http://127.0.0.1:{port}{path}")
        return True

    poll(probe, timeout=timeout, interval=0.1, what=f"a response on port {port}")


def read_events(path: Path) -> list[str]:
    """Lines the apps appended to the events file named by ``FERRULE_TEST_EVENTS``."""
    try:
        return [line.split(" ", 1)[1] for line in path.read_text().splitlines() if " " in line]
    except FileNotFoundError:
        return []


def wait_for_event(path: Path, event: str, timeout: float = WAIT_TIMEOUT) -> list[str]:
    return poll(
        lambda: (events := read_events(path)) and event in events and events,
        timeout=timeout,
        what=f"event {event!r} in {path}",
    )


# -- ports, processes, apps -------------------------------------------------------------------


def free_port() -> int:
    """A TCP port that was free a moment ago (for tests that must know it before start)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def refused(server: ServerProcess) -> bool:
    """Whether the server's port refuses connections: it has closed its listener."""
    try:
        socket.create_connection((server.host, server.port or 0), timeout=HTTP_TIMEOUT).close()
    except ConnectionRefusedError:
        return True
    return False


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie (where there is no ``/proc``: exists)."""
    if not os.path.isdir("/proc/self"):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    for line in status.splitlines():
        if line.startswith("State:"):
            return "Z" not in line.split()[1]
    return True


def is_clean_exit(code: int | None, sig: int = signal.SIGINT) -> bool:
    """A graceful stop: exit status 0, or death by re-raising the same signal after the
    shutdown (what uvicorn does, and what a supervisor reads as a clean stop too)."""
    return code == 0 or code == -sig


def import_app(name: str) -> Any:
    """``module:attr`` from ``tests/apps``, imported into the test process itself (the servers
    import their apps in their own processes)."""
    module, _, attr = name.partition(":")
    if str(APPS_DIR) not in sys.path:
        sys.path.insert(0, str(APPS_DIR))
    return getattr(importlib.import_module(module), attr)
