"""Helpers for the black-box tests of the server, in every folder of ``tests/``.

- :func:`running_server` starts ``python -m ferrule APP --port 0 ...`` in its own session (process
  group), with ``tests/apps`` as the working directory, waits for the ``ferrule running on ...``
  line on stderr and yields a :class:`ServerProcess`. On exit it sends SIGINT, waits, kills the
  whole process group after :data:`STOP_TIMEOUT` and always reaps it.
- :class:`RawConnection` speaks HTTP/1.1 over a plain socket: send exact bytes, parse responses
  (interim 1xx, Content-Length, chunked, close-delimited, HEAD) or read until the peer closes.
- :func:`poll` and friends bound every wait, so a broken server fails a test instead of hanging.

Imported by the test modules as ``from serverutil import ...`` (``tests/`` is on ``sys.path``).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import selectors
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx

TESTS_DIR = Path(__file__).resolve().parent
APPS_DIR = TESTS_DIR / "apps"

#: How long the server may take to print its ``running on`` line.
STARTUP_TIMEOUT = 10.0
#: How long a SIGINT'ed server may take to exit before its process group is killed.
STOP_TIMEOUT = 10.0
#: Default bound for one HTTP exchange.
HTTP_TIMEOUT = 5.0

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
        self, pattern: str | re.Pattern[str], timeout: float = 5.0, *, stream: str = "stderr"
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


def server_args(app: str, args: Sequence[str]) -> list[str]:
    """``APP`` plus ``--port 0`` unless ``args`` choose a port or a unix socket."""
    args = list(args)
    if not any(flag in args for flag in ("--port", "--uds")):
        args = ["--port", "0", *args]
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
    timeout: float = 5.0,
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


def fetch_record(server: ServerProcess, key: str, timeout: float = 5.0) -> Any:
    """Poll the app's ``/_record?key=KEY`` until the app has stored something under ``key``."""

    def probe() -> Any:
        response = server.get("/_record", params={"key": key}, timeout=2.0)
        return response.json() if response.status_code == 200 else None

    return poll(probe, timeout=timeout, what=f"the app to record {key!r}")


def free_port() -> int:
    """A TCP port that was free a moment ago (for tests that must know it before start)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_serving(port: int, timeout: float = STARTUP_TIMEOUT, path: str = "/") -> None:
    """Poll ``GET path`` on ``port`` until any HTTP response comes back."""

    def probe() -> bool:
        with httpx.Client(timeout=1.0, trust_env=False) as client:
            client.get(f"http://127.0.0.1:{port}{path}")
        return True

    poll(probe, timeout=timeout, interval=0.1, what=f"a response on port {port}")


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` from ``/proc/PID/status``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def peak_rss_bytes(pid: int) -> int:
    """The most memory ``pid`` has had resident (``VmHWM``), since it started or since the last
    :func:`reset_peak_rss`."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for pid {pid}")


def reset_peak_rss(pid: int) -> None:
    """Set ``pid``'s ``VmHWM`` back to its current RSS (``/proc/PID/clear_refs``, Linux 4.0+),
    so that :func:`peak_rss_bytes` then tells the peak of what follows alone."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def settled_rss(
    pid: int, *, timeout: float = 5.0, window: float = 0.5, tolerance: int = 512 * 1024
) -> int:
    """``pid``'s RSS once it has moved less than ``tolerance`` bytes over ``window`` seconds
    (sampled every 0.05 s), or the largest seen if it is still moving after ``timeout``: for
    memory that a server fills up to where it stops (queues, buffers), read when it is there."""
    samples: list[tuple[float, int]] = []
    deadline = time.monotonic() + timeout
    while True:
        now = time.monotonic()
        samples.append((now, rss_bytes(pid)))
        recent = [rss for at, rss in samples if at >= now - window]
        if now - samples[0][0] >= window and max(recent) - min(recent) < tolerance:
            return samples[-1][1]
        if now > deadline:
            return max(rss for _, rss in samples)
        time.sleep(0.05)


MiB = 2**20


class RssGrowth:
    """A process's memory against a baseline: made, it waits for the RSS to settle (up to
    ``settle`` seconds), keeps it and resets the peak; then :meth:`now` (the RSS at once),
    :meth:`held` (once settled, see :func:`settled_rss`) and :meth:`peak` (``VmHWM``) tell how
    far above the baseline the process is, or went, in bytes."""

    def __init__(self, pid: int, *, settle: float = 3.0) -> None:
        self.pid = pid
        self.baseline = settled_rss(pid, timeout=settle, window=0.3)
        reset_peak_rss(pid)

    def now(self) -> int:
        return rss_bytes(self.pid) - self.baseline

    def held(self, timeout: float = 5.0) -> int:
        return settled_rss(self.pid, timeout=timeout, window=0.3) - self.baseline

    def peak(self) -> int:
        return peak_rss_bytes(self.pid) - self.baseline


class Flood:
    """Writes ``batch`` on ``sock`` over and over without ever reading, a non-blocking write at
    a time (:meth:`pump`), resuming a short write where it stopped so that the stream is never
    cut inside ``batch`` (make it whole frames or requests). Run several with :func:`flood`."""

    def __init__(self, sock: socket.socket, batch: bytes) -> None:
        self.sock = sock
        self.batch = memoryview(batch)
        self.offset = 0
        self.sent = 0
        self.started = time.monotonic()
        self.last_send = self.started
        #: Seconds from the start to the write that failed (the peer closed or reset), if any.
        self.closed_after: float | None = None
        sock.setblocking(False)

    def pump(self) -> None:
        if self.closed_after is not None:
            return
        try:
            count = self.sock.send(self.batch[self.offset :])
        except (BlockingIOError, ssl.SSLWantWriteError, ssl.SSLWantReadError):
            return
        except OSError:
            self.closed_after = time.monotonic() - self.started
            return
        self.sent += count
        self.offset = (self.offset + count) % len(self.batch)
        self.last_send = time.monotonic()

    def stalled_for(self) -> float:
        """Seconds since the last write the peer took."""
        return time.monotonic() - self.last_send

    def finish(self, timeout: float = 5.0) -> None:
        """Write the rest of the current ``batch`` (blocking, bounded by ``timeout``), so that
        what follows on the socket starts at a batch boundary; the socket is left blocking."""
        self.sock.settimeout(timeout)
        if self.closed_after is None and self.offset:
            self.sock.sendall(self.batch[self.offset :])
            self.sent += len(self.batch) - self.offset
            self.offset = 0


def flood(floods: Sequence[Flood], seconds: float) -> None:
    """Pump every :class:`Flood` whose socket takes more, for ``seconds`` (or until all fail)."""
    deadline = time.monotonic() + seconds
    with selectors.DefaultSelector() as selector:
        for index, each in enumerate(floods):
            selector.register(each.sock, selectors.EVENT_WRITE, index)
        while (left := deadline - time.monotonic()) > 0:
            if all(each.closed_after is not None for each in floods):
                return
            for key, _ in selector.select(min(left, 0.1)):
                floods[key.data].pump()


def closed_within(socks: Sequence[socket.socket], timeout: float) -> int:
    """How many of ``socks`` the peer closes (or resets) within ``timeout``; whatever arrives on
    them meanwhile is read and dropped."""
    left_open = {sock.fileno(): sock for sock in socks}
    deadline = time.monotonic() + timeout
    with selectors.DefaultSelector() as selector:
        for sock in socks:
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ)
        while left_open and (left := deadline - time.monotonic()) > 0:
            for key, _ in selector.select(min(left, 0.1)):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(65536)
                except (BlockingIOError, ssl.SSLWantReadError):
                    continue
                except OSError:
                    data = b""
                if not data:
                    selector.unregister(sock)
                    left_open.pop(sock.fileno(), None)
    return len(socks) - len(left_open)


def pid_alive(pid: int) -> bool:
    """Whether ``pid`` exists and is not a zombie."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    for line in status.splitlines():
        if line.startswith("State:"):
            return "Z" not in line.split()[1]
    return True


def read_events(path: Path) -> list[str]:
    """Lines the apps appended to the events file named by ``FERRULE_TEST_EVENTS``."""
    try:
        return [line.split(" ", 1)[1] for line in path.read_text().splitlines() if " " in line]
    except FileNotFoundError:
        return []


def wait_for_event(path: Path, event: str, timeout: float = 5.0) -> list[str]:
    return poll(
        lambda: (events := read_events(path)) and event in events and events,
        timeout=timeout,
        what=f"event {event!r} in {path}",
    )


# -- raw HTTP ---------------------------------------------------------------------------------


class IncompleteResponse(AssertionError):
    """The peer closed (or went silent) before a complete response was read."""

    def __init__(self, message: str, received: bytes) -> None:
        super().__init__(f"{message}; received so far: {received[:600]!r}")
        self.received = received


@dataclass
class RawResponse:
    version: str
    status: int
    reason: str
    headers: list[tuple[str, str]]
    body: bytes
    raw_head: bytes
    chunked: bool = False
    chunk_sizes: list[int] = field(default_factory=list)

    def header(self, name: str) -> str | None:
        values = self.all(name)
        return values[0] if values else None

    def all(self, name: str) -> list[str]:
        name = name.lower()
        return [value for key, value in self.headers if key == name]

    def json(self) -> Any:
        return json.loads(self.body)


class RawConnection:
    """One TCP connection with a read buffer, every operation bounded by ``timeout``."""

    def __init__(self, port: int, host: str = "127.0.0.1", timeout: float = HTTP_TIMEOUT) -> None:
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.timeout = timeout
        # A bytearray and a list of chunks: a 32 MiB body read into bytes by `+=` took most of
        # a minute on a loaded machine.
        self._buffer = bytearray()
        self._received: list[bytes] = []  # everything read, for diagnostics
        self.eof = False

    @property
    def buffer(self) -> bytes:
        """What was read and not yet consumed."""
        return bytes(self._buffer)

    @property
    def received(self) -> bytes:
        """Everything read so far."""
        return b"".join(self._received)

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def local_port(self) -> int:
        return self.sock.getsockname()[1]

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _fill(self, deadline: float) -> bool:
        """Read more bytes into the buffer; False at EOF. Raises ``TimeoutError`` at deadline."""
        if self.eof:
            return False
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("deadline passed")
        self.sock.settimeout(remaining)
        try:
            data = self.sock.recv(65536)
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
            return False
        self._buffer += data
        self._received.append(data)
        return True

    def _deadline(self, timeout: float | None) -> float:
        return time.monotonic() + (self.timeout if timeout is None else timeout)

    def read_until(self, marker: bytes, timeout: float | None = None) -> bytes:
        """Bytes up to and including ``marker``."""
        deadline = self._deadline(timeout)
        while marker not in self._buffer:
            try:
                more = self._fill(deadline)
            except TimeoutError:
                raise IncompleteResponse(f"no {marker!r} in time", self.received) from None
            if not more:
                raise IncompleteResponse(f"EOF before {marker!r}", self.received)
        index = self._buffer.index(marker) + len(marker)
        data = bytes(self._buffer[:index])
        del self._buffer[:index]
        return data

    def read_exactly(self, count: int, timeout: float | None = None) -> bytes:
        deadline = self._deadline(timeout)
        while len(self._buffer) < count:
            try:
                more = self._fill(deadline)
            except TimeoutError:
                raise IncompleteResponse(
                    f"fewer than {count} bytes in time", self.received
                ) from None
            if not more:
                raise IncompleteResponse(f"EOF before {count} bytes", self.received)
        data = bytes(self._buffer[:count])
        del self._buffer[:count]
        return data

    def read_until_close(self, timeout: float | None = None) -> bytes:
        """Everything until the peer closes; raises :class:`IncompleteResponse` on timeout."""
        deadline = self._deadline(timeout)
        while True:
            try:
                more = self._fill(deadline)
            except TimeoutError:
                raise IncompleteResponse("the peer did not close in time", self.received) from None
            if not more:
                data = bytes(self._buffer)
                self._buffer.clear()
                return data

    def wait_closed(self, timeout: float) -> bool:
        """True if the peer closes within ``timeout`` (any unread bytes are discarded)."""
        try:
            self.read_until_close(timeout)
        except IncompleteResponse:
            return False
        return True

    def read_response(self, *, head: bool = False, timeout: float | None = None) -> RawResponse:
        """Parse one response (an interim 1xx response is returned as is)."""
        deadline = self._deadline(timeout)

        def left() -> float:
            return max(deadline - time.monotonic(), 0.001)

        raw_head = self.read_until(b"\r\n\r\n", left())
        lines = raw_head[:-4].split(b"\r\n")
        version, _, rest = lines[0].decode("latin-1").partition(" ")
        status_text, _, reason = rest.partition(" ")
        headers = []
        for line in lines[1:]:
            name, _, value = line.decode("latin-1").partition(":")
            headers.append((name.strip().lower(), value.strip()))
        response = RawResponse(version, int(status_text), reason, headers, b"", raw_head)
        encoding = ",".join(response.all("transfer-encoding")).lower()
        length = response.header("content-length")
        if head or 100 <= response.status < 200 or response.status in (204, 304):
            return response
        if "chunked" in encoding:
            response.chunked = True
            body = []
            while True:
                size_line = self.read_until(b"\r\n", left())
                size = int(size_line.split(b";")[0].strip(), 16)
                response.chunk_sizes.append(size)
                if size == 0:
                    while self.read_until(b"\r\n", left()) != b"\r\n":  # trailers
                        pass
                    break
                body.append(self.read_exactly(size, left()))
                if self.read_exactly(2, left()) != b"\r\n":
                    raise IncompleteResponse("chunk not followed by CRLF", self.received)
            response.body = b"".join(body)
        elif length is not None:
            response.body = self.read_exactly(int(length), left())
        else:
            response.body = self.read_until_close(left())
        return response

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def request_bytes(
    method: str,
    target: str,
    *,
    headers: Sequence[tuple[str, str]] = (),
    body: bytes = b"",
    version: str = "HTTP/1.1",
    host: str = "test",
    content_length: bool | None = None,
) -> bytes:
    """A request as bytes; ``Content-Length`` is added when there is a body (or when asked)."""
    lines = [f"{method} {target} {version}", f"Host: {host}"]
    lines += [f"{name}: {value}" for name, value in headers]
    if content_length or (content_length is None and body):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def raw_exchange(port: int, data: bytes, timeout: float = HTTP_TIMEOUT) -> bytes:
    """Send ``data`` on a new connection and return what arrives until close or ``timeout``."""
    with RawConnection(port, timeout=timeout) as conn:
        conn.send(data)
        try:
            conn.read_until_close(timeout)
        except IncompleteResponse:
            pass
        return conn.received


def is_clean_exit(code: int | None, sig: int = signal.SIGINT) -> bool:
    """A graceful stop: exit status 0, or death by re-raising the same signal after the
    shutdown (what uvicorn does, and what a supervisor reads as a clean stop too)."""
    return code == 0 or code == -sig


# -- hostile input (``tests/hostile/``) -----------------------------------------------


def fd_count(pid: int) -> int:
    """Open file descriptors of ``pid`` (entries of ``/proc/PID/fd``)."""
    return len(os.listdir(f"/proc/{pid}/fd"))


class _ReceivedBytes(RawConnection):
    """A :class:`RawConnection` over bytes already read (no socket), to reuse its parser."""

    def __init__(self, data: bytes) -> None:  # no socket on purpose
        self.timeout = 0.001
        self._buffer = bytearray(data)
        self._received = [data]
        self.eof = True

    def close(self) -> None:
        pass


def parse_responses(data: bytes) -> tuple[list[RawResponse], bytes]:
    """Split everything read from one connection into complete responses, in order; also
    returns the bytes left over after the last complete one (a truncated response, junk)."""
    reader = _ReceivedBytes(data)
    responses: list[RawResponse] = []
    while reader.buffer:
        before = reader.buffer
        try:
            responses.append(reader.read_response())
        except (IncompleteResponse, ValueError, IndexError):
            return responses, before
    return responses, b""


def send_in_background(conn: RawConnection, data: bytes) -> threading.Thread:
    """``sendall`` on a daemon thread (errors such as a reset are swallowed), so the caller can
    read an early answer while a large request is still being written. Join it when done."""

    def run() -> None:
        with contextlib.suppress(OSError):
            conn.sock.sendall(data)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def import_app(name: str) -> Any:
    """``module:attr`` from ``tests/apps``, imported into the test process itself (the servers
    import their apps in their own processes)."""
    module, _, attr = name.partition(":")
    if str(APPS_DIR) not in sys.path:
        sys.path.insert(0, str(APPS_DIR))
    return getattr(importlib.import_module(module), attr)


#: Offset of ``tcpi_data_segs_in`` (segments with data received) in Linux's ``struct tcp_info``.
TCPI_DATA_SEGS_IN = 152


def data_segments_in(sock: socket.socket) -> int:
    """How many TCP segments with data ``sock`` has received (Linux ``TCP_INFO``): with the
    server's ``TCP_NODELAY``, about how many writes the server made to it."""
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 256)
    return int.from_bytes(info[TCPI_DATA_SEGS_IN : TCPI_DATA_SEGS_IN + 4], "little")
