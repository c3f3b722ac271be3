"""ferrule under systemd, natively: socket activation (``LISTEN_FDS``, from Debian's
``systemd-socket-activate`` or from the test holding the socket as systemd does) and the
notify socket (``READY=1``, ``RELOADING=1``, ``STOPPING=1``, ``STATUS=``, the watchdog's
``WATCHDOG=1``), read by the test on a datagram socket of its own. No running systemd needed."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from support.serverutil import (
    STARTUP_TIMEOUT,
    WAIT_TIMEOUT,
    ServerProcess,
    free_port,
    is_clean_exit,
    poll,
    running_server,
)

APP = "systemd_app:app"

needs_activate = pytest.mark.skipif(
    shutil.which("systemd-socket-activate") is None,
    reason="systemd-socket-activate (Debian's systemd package) is not installed",
)


def get(port: int, path: str = "/", timeout: float = 10.0) -> httpx.Response:
    """One request on a new connection."""
    with httpx.Client(timeout=timeout, trust_env=False) as client:
        return client.get(f"http://127.0.0.1:{port}{path}")


class NotifySocket:
    """A datagram socket standing for systemd's notify socket: the messages it received."""

    def __init__(self, directory: Path) -> None:
        self.path = str(directory / "notify.sock")
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(self.path)
        self.received: list[tuple[float, str]] = []

    def _receive(self, timeout: float) -> bool:
        """One message into ``received`` if it comes within ``timeout``; whether one did."""
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(4096)
        except TimeoutError:
            return False
        self.received.append((time.monotonic(), data.decode()))
        return True

    def read(self, duration: float) -> list[tuple[float, str]]:
        """Messages for ``duration`` seconds; all received so far."""
        deadline = time.monotonic() + duration
        while (left := deadline - time.monotonic()) > 0 and self._receive(left):
            pass
        return self.received

    def wait_for(self, field: str, timeout: float = STARTUP_TIMEOUT, after: float = 0.0) -> float:
        """When a message holding the line ``field`` arrived after ``after`` (waiting up to
        ``timeout``)."""
        deadline = time.monotonic() + timeout
        while True:
            for at, message in self.received:
                if at > after and field in message.split("\n"):
                    return at
            left = deadline - time.monotonic()
            assert left > 0, f"no {field!r} in {timeout}s; received {self.messages()}"
            self._receive(left)

    def messages(self) -> list[str]:
        return [message for _, message in self.received]

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def notify(tmp_path: Path) -> Iterator[NotifySocket]:
    sock = NotifySocket(tmp_path)
    try:
        yield sock
    finally:
        sock.close()


# -- socket activation -----------------------------------------------------------------------


@needs_activate
@pytest.mark.parametrize("workers", [1, 2])
def test_systemd_socket_activate_serves_the_units_socket(workers: int) -> None:
    """Rule: started by socket activation (``systemd-socket-activate -l ADDRESS``, which
    execs ferrule on the first connection with the socket as descriptor 3 and ``LISTEN_FDS=1``),
    ferrule serves that socket, whatever ``--host`` and ``--port`` say, with its workers too;
    the first client, which started it, is answered. Broken: ferrule binds its own --host and
    --port, and the unit's port never answers (seen failing before socket activation)."""
    port = free_port()
    env = ["-E", "PYTHONUNBUFFERED=1", "-E", f"PYTHONPATH={os.environ.get('PYTHONPATH', '')}"]
    argv = [
        "systemd-socket-activate", "-l", f"127.0.0.1:{port}", *env, "--",
        sys.executable, "-m", "ferrule", APP, "--host", "127.0.0.2", "--port", str(free_port()),
        "--workers", str(workers),
    ]  # fmt: skip
    server = ServerProcess(argv)
    try:
        server.wait_for_output(r"Listening on 127\.0\.0\.1:\d+ as 3", timeout=STARTUP_TIMEOUT)
        assert get(port, timeout=STARTUP_TIMEOUT).status_code == 200, server.describe()
        server.wait_for_output(rf"ferrule running on http://127\.0\.0\.1:{port} ")
        pids: set[int] = set()
        poll(
            lambda: pids.add(get(port).json()["pid"]) or len(pids) == workers,
            interval=0.01,
            what=f"{workers} workers answering on the unit's socket",
        )
        code = server.stop(signal.SIGTERM)
        assert is_clean_exit(code, signal.SIGTERM), server.describe()
    finally:
        server.close()


@contextmanager
def activated(
    sock: socket.socket, *args: str, env: dict[str, str] | None = None
) -> Iterator[ServerProcess]:
    """ferrule started as systemd starts a socket-activated service: the held listening socket
    as descriptor 3, ``LISTEN_FDS=1``, ``LISTEN_PID`` its own pid (set by the bash that then
    execs it), ``LISTEN_FDNAMES``."""
    fd = sock.fileno()
    move = "" if fd == 3 else f"exec 3<&{fd} {fd}<&-; "  # systemd's sockets start at 3
    script = f'{move}LISTEN_PID=$$ LISTEN_FDS=1 LISTEN_FDNAMES=web exec "$@"'
    argv = [
        "bash",
        "-c",
        script,
        "bash",
        sys.executable,
        "-m",
        "ferrule",
        APP,
        "--port",
        "1",
        *args,
    ]
    server = ServerProcess(argv, env=env, pass_fds=(fd,))
    try:
        server.wait_for_output("Application startup complete", timeout=STARTUP_TIMEOUT)
        yield server
    finally:
        server.close()


def test_a_restart_on_the_socket_systemd_holds_answers_every_request() -> None:
    """Rule: with the listening socket held outside ferrule (as systemd holds a .socket unit's),
    stopping ferrule (SIGTERM) and starting it again on the same socket loses no request:
    clients that connect while no ferrule runs wait in the socket's backlog and are answered
    by the next one. 12 clients, each a new connection a request, for the whole restart; every
    response 200 and whole. Broken: ferrule binds its own port (``--port 1`` here), and
    nothing answers on the held socket (seen failing before socket activation)."""
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(1024)
    port = held.getsockname()[1]
    stop = threading.Event()
    results: list[str] = []

    def client() -> None:
        while not stop.is_set():
            try:
                response = get(port, timeout=20)
                body_ok = response.status_code == 200 and "pid" in response.json()
                results.append("ok" if body_ok else f"{response.status_code}")
            except (httpx.HTTPError, ValueError) as exc:
                results.append(type(exc).__name__)

    threads = [threading.Thread(target=client, daemon=True) for _ in range(12)]
    try:
        with activated(held) as first:
            for thread in threads:
                thread.start()
            poll(lambda: len(results) >= 50, timeout=20, what="requests before the restart")
            before = len(results)
            code = first.stop(signal.SIGTERM)
            assert is_clean_exit(code, signal.SIGTERM), first.describe()
        with activated(held) as second:
            poll(lambda: len(results) >= before + 100, timeout=30, what="requests after it")
            stop.set()
            for thread in threads:
                thread.join(25)
            assert second.returncode is None, second.describe()
    finally:
        stop.set()
        held.close()
    failed = [r for r in results if r != "ok"]
    assert not failed, f"{len(failed)} of {len(results)} requests failed: {failed[:10]}"


def get_unix(path: str, timeout: float = 10.0) -> httpx.Response:
    """One request on a new connection to the Unix socket at ``path``."""
    transport = httpx.HTTPTransport(uds=path)
    with httpx.Client(transport=transport, timeout=timeout, trust_env=False) as client:
        return client.get("http://localhost/")


@needs_activate
@pytest.mark.parametrize("workers", [1, 2])
def test_systemd_socket_activate_serves_a_tcp_and_a_unix_socket(
    tmp_path: Path, workers: int
) -> None:
    """Rule: a unit with two ``ListenStream=`` lines, one a port and one a path
    (``systemd-socket-activate -l PORT -l PATH``: ``LISTEN_FDS=2``, a TCP socket as descriptor
    3 and a Unix one as 4), is served on both by every worker, each request's scope naming the
    socket it came to, and the log names both. Broken: ferrule refused two sockets (exit 3),
    and served a Unix socket from systemd not at all (no ``--uds`` path to give the core)."""
    port = free_port()
    path = str(tmp_path / "web.sock")
    env = ["-E", "PYTHONUNBUFFERED=1", "-E", f"PYTHONPATH={os.environ.get('PYTHONPATH', '')}"]
    argv = [
        "systemd-socket-activate", "-l", f"127.0.0.1:{port}", "-l", path, *env, "--",
        sys.executable, "-m", "ferrule", APP, "--workers", str(workers),
    ]  # fmt: skip
    server = ServerProcess(argv)
    try:
        server.wait_for_output(r"as 4", timeout=10)
        assert get(port, timeout=STARTUP_TIMEOUT).status_code == 200, server.describe()
        server.wait_for_output(
            rf"ferrule running on http://127\.0\.0\.1:{port}, unix socket {path} "
        )
        answers = {"tcp": set(), "unix": set()}

        def both_served_by_every_worker() -> bool:
            tcp, unix = get(port).json(), get_unix(path).json()
            assert tcp["server"] == ["127.0.0.1", port], tcp
            assert unix["server"] == [path, None], unix
            answers["tcp"].add(tcp["pid"])
            answers["unix"].add(unix["pid"])
            return all(len(pids) == workers for pids in answers.values())

        poll(
            both_served_by_every_worker,
            timeout=30,  # a worker may still be importing on a loaded machine
            interval=0.01,
            what=f"{workers} workers answering on both sockets",
        )
        code = server.stop(signal.SIGTERM)
        assert is_clean_exit(code, signal.SIGTERM), server.describe()
    finally:
        server.close()


def test_several_held_sockets_are_served_through_an_upgrade(tmp_path: Path) -> None:
    """Rule: the sockets systemd passes (two here, held by the test as systemd holds a .socket
    unit's) are all served by ``--workers``, and a SIGUSR2 upgrade hands every one of them to
    the new parent: after it, both still answer, from the new workers. Broken: the upgrade
    passed on one socket, and the second was closed with the old parent."""
    a, b = socket.socket(), socket.socket()
    for sock in (a, b):
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
    ports = [a.getsockname()[1], b.getsockname()[1]]
    script = (
        f"exec 3<&{a.fileno()} 4<&{b.fileno()}; "
        'LISTEN_PID=$$ LISTEN_FDS=2 LISTEN_FDNAMES=web:admin exec "$@"'
    )
    argv = ["bash", "-c", script, "bash", sys.executable, "-m", "ferrule", APP, "--workers", "2"]
    server = ServerProcess(argv, pass_fds=(a.fileno(), b.fileno()))
    try:
        server.wait_for_output(r"ferrule running on http://127\.0\.0\.1:\d+, http://127")
        before: set[int] = set()
        poll(
            lambda: before.update(get(port).json()["pid"] for port in ports) or len(before) == 2,
            timeout=STARTUP_TIMEOUT,
            interval=0.01,
            what="both workers answering on both sockets",
        )
        server.send_signal(signal.SIGUSR2)
        server.wait_for_output(r"New parent process \[\d+\] serving", timeout=STARTUP_TIMEOUT)
        after: set[int] = set()

        def new_workers_on_both() -> bool:
            pids = [get(port).json()["pid"] for port in ports]
            after.update(pid for pid in pids if pid not in before)
            return len(after) == 2 and not before & set(pids)

        poll(new_workers_on_both, timeout=STARTUP_TIMEOUT, interval=0.05, what="new workers")
    finally:
        server.close()
        a.close()
        b.close()


# -- the notify socket -------------------------------------------------------------------------


def test_ready_once_startup_is_done_then_stopping(notify: NotifySocket) -> None:
    """Rule (sd_notify): ``READY=1`` once the app's lifespan startup is done and the socket
    serves, with ``STATUS=Serving on ADDRESS``; ``STOPPING=1`` on SIGTERM. A service of
    ``Type=notify`` is started only then. Broken: READY=1 before startup completes (a 1 s
    startup here), or never (seen failing: nothing was sent)."""
    env = {"NOTIFY_SOCKET": notify.path, "FERRULE_TEST_STARTUP_DELAY": "1"}
    with running_server(APP, env=env, wait=False) as server:
        started = time.monotonic()
        ready = notify.wait_for("READY=1")
        assert ready - started >= 0.9, f"READY=1 after {ready - started:.2f}s"
        # Logged before READY=1 was sent; the test's reader of stderr may lag the datagram.
        server.wait_for_output("Application startup complete")
        server.wait_running()
        assert get(server.port or 0).status_code == 200
        assert f"STATUS=Serving on http://127.0.0.1:{server.port}" in notify.messages()[0]
        server.send_signal(signal.SIGTERM)
        notify.wait_for("STOPPING=1")
        assert is_clean_exit(server.wait_exit(), signal.SIGTERM), server.describe()


def test_workers_ready_when_all_serve_and_reloading_on_sighup(notify: NotifySocket) -> None:
    """Rule: with ``--workers 2`` the parent (the process systemd watches) says ``READY=1`` once
    both workers serve, ``STATUS=2 workers serving``; SIGHUP (``systemctl reload`` with
    ``ExecReload=kill -HUP $MAINPID``) says ``RELOADING=1`` with ``MONOTONIC_USEC``, then
    ``READY=1`` again once the new workers serve. The workers say nothing (they are not the
    main process). Broken: READY=1 before the workers serve, or no RELOADING=1 (seen failing:
    nothing was sent)."""
    env = {"NOTIFY_SOCKET": notify.path}
    with running_server(APP, "--workers", "2", env=env) as server:
        notify.wait_for("READY=1")
        server.wait_startups(2)
        assert "STATUS=2 workers serving" in notify.messages()[0].split("\n")
        server.send_signal(signal.SIGHUP)
        reloading = notify.wait_for("RELOADING=1")
        message = next(m for at, m in notify.received if at == reloading)
        assert any(line.startswith("MONOTONIC_USEC=") for line in message.split("\n")), message
        notify.wait_for("READY=1", after=reloading)
        server.wait_startups(4)


def test_watchdog_pings_while_the_loop_answers_and_stops_when_it_is_stuck(
    notify: NotifySocket,
) -> None:
    """Rule (sd_notify's watchdog): with ``WATCHDOG_USEC`` set (400 ms), ``WATCHDOG=1`` comes
    at least every half of it while the event loop answers, and none while the loop is stuck
    (an app blocking it for 3 s), so that systemd restarts a stuck server. Broken: no pings
    (seen failing), or pings from a thread that go on while the loop is stuck.

    The pings are timed as this process receives them: a loaded machine may hold them up, so
    the rate asked for is loose (three within 5 s, where a loop that answers sends 25), and the
    stuck loop's gap (3 s) is well over the 1.2 s asked for, against 0.2 s between a thread's
    pings."""
    env = {"NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "400000"}
    with running_server(APP, env=env) as server:
        notify.wait_for("READY=1")
        pings = lambda: [at for at, m in notify.received if m == "WATCHDOG=1"]  # noqa: E731
        deadline = time.monotonic() + 5
        while len(pings()) < 3 and time.monotonic() < deadline:
            notify.read(0.1)
        assert len(pings()) >= 3, notify.messages()
        blocker = threading.Thread(target=get, args=(server.port or 0, "/block?secs=3", 30))
        blocker.start()
        while blocker.is_alive():
            notify.read(0.1)
        blocker.join()
        answered = time.monotonic()
        notify.wait_for("WATCHDOG=1", timeout=WAIT_TIMEOUT, after=answered)
        times = pings()
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        assert max(gaps) >= 1.2, f"pings went on while the loop was stuck: gaps {gaps}"
