"""The parent process of ``--workers N`` (``Supervisor``) and ``--reload`` (``Reloader``): it
binds the socket once, starts worker processes (``python -m ferrule.worker`` serving the
inherited socket with the parent's settings, each importing the app itself), watches them
and stops them."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from typing import Any

from ferrule.config import STARTUP_FAILURE, Config
from ferrule.sockets import bound_socket_file, describe, listening_socket, remove_socket_file
from ferrule.watch import WatchedFiles, changed_files
from ferrule.worker import WORKER_ENV, worker_data

logger = logging.getLogger("ferrule.error")


#: How long a new worker may take to start serving (import the app, run lifespan startup)
#: before its silence counts against the health check: generous, as imports can be slow.
WORKER_STARTUP_GRACE = 300.0

#: The pause before replacing a worker that died before it served, doubled at each such death
#: up to the maximum: an app that crashes at import does not respawn in a tight loop.
FIRST_CRASH_DELAY = 0.5
MAX_CRASH_DELAY = 30.0

#: Signals the supervisor acts on as uvicorn's does: restart the workers, one more, one fewer.
MANAGEMENT_SIGNALS = (signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU)


class Worker:
    """A worker process started by ``Supervisor``, and the reading end of the pipe its event
    loop writes heartbeats on (see ``Heartbeat``)."""

    def __init__(self, config: Config, sock: socket.socket) -> None:
        # Always a pipe, even with the health check off: its first beat says the worker serves,
        # which a restart on SIGHUP waits for before it retires the old worker.
        self.fd: int | None
        self.fd, write_end = os.pipe()
        os.set_blocking(self.fd, False)
        try:
            self.process = spawn_worker(config, sock, heartbeat_fd=write_end)
        except BaseException:
            self.close()
            raise
        finally:
            os.close(write_end)  # the worker's now: EOF here once it exits
        self.started = time.monotonic()
        self.last_beat: float | None = None
        self.terminated: float | None = None  # when the supervisor sent SIGTERM

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def serving(self) -> bool:
        """Whether it has beaten once: its server is up (the app imported, lifespan started)."""
        return self.last_beat is not None

    def read_beats(self, now: float) -> None:
        if self.fd is None:
            return
        try:
            if os.read(self.fd, 4096):
                self.last_beat = now
        except BlockingIOError:  # nothing new
            pass

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class Supervisor:
    """``--workers N``: N processes each importing the app itself (never forked after import),
    sharing one listening socket, with uvicorn's signals:

    - a worker that dies is replaced, and so is one whose event loop stops beating
      (``--timeout-worker-healthcheck``); one that exits with ``STARTUP_FAILURE`` (the app would
      not load, lifespan startup failed) stops them all, as the next would fail the same way;
    - SIGHUP replaces the workers one by one, each retired only once its replacement serves
      (new code deployed under the same command); SIGTTIN adds a worker, SIGTTOU retires one;
    - SIGINT/SIGTERM stops all."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.workers: list[Worker] = []
        # When to start a worker again in place of one that died before serving, and the
        # pause after the next such death (doubled each time, reset once a worker serves).
        self.respawns: list[float] = []
        self.crash_delay = FIRST_CRASH_DELAY
        # Workers sent SIGTERM (failed health check, replaced, one fewer): not waited for yet.
        self.retiring: list[Worker] = []
        self.stopping = False
        self.signals: list[int] = []  # SIGHUP, SIGTTIN, SIGTTOU received, not yet handled

    def run(self) -> int:
        bound = parent_socket(self.config)
        if bound is None:
            return STARTUP_FAILURE
        sock, socket_file = bound
        logger.info("ferrule running on %s (Press CTRL+C to quit)", describe(sock, self.config))
        logger.info("Started parent process [%d]", os.getpid())
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._on_stop_signal)
        for signum in MANAGEMENT_SIGNALS:
            signal.signal(signum, self._on_management_signal)
        self.workers = [Worker(self.config, sock) for _ in range(self.config.workers)]
        status = 0
        while not self.stopping:
            self._handle_signals(sock)
            now = time.monotonic()
            gone: list[Worker] = []  # died before serving: replaced later (self.respawns)
            for i, worker in enumerate(self.workers):
                if self.stopping:
                    break
                worker.read_beats(now)
                if worker.process.poll() is not None:
                    if worker.process.returncode == STARTUP_FAILURE:
                        logger.error(
                            "Worker [%d] failed to start; stopping the parent process",
                            worker.pid,
                        )
                        self.stopping = True
                        status = STARTUP_FAILURE
                        break
                    worker.close()
                    if worker.process.returncode == 0:  # it stopped itself: --limit-max-requests
                        logger.info("Worker [%d] finished; starting a new one", worker.pid)
                    elif worker.serving:
                        logger.warning(
                            "Worker [%d] died (%s); starting a new one",
                            worker.pid,
                            worker.process.returncode,
                        )
                    else:
                        # Died before serving: the next one would likely die the same way, so
                        # wait longer each time rather than flood the log with respawns.
                        self.respawns.append(now + self.crash_delay)
                        logger.warning(
                            "Worker [%d] died before serving (%s); starting a new one in %g s",
                            worker.pid,
                            worker.process.returncode,
                            self.crash_delay,
                        )
                        self.crash_delay = min(2 * self.crash_delay, MAX_CRASH_DELAY)
                        gone.append(worker)
                        continue
                    self.workers[i] = Worker(self.config, sock)
                elif not self._healthy(worker, now):
                    self._retire(worker, now)
                    self.workers[i] = Worker(self.config, sock)
                elif worker.serving:
                    self.crash_delay = FIRST_CRASH_DELAY
            self.workers = [worker for worker in self.workers if worker not in gone]
            while self.respawns and self.respawns[0] <= now and not self.stopping:
                self.respawns.pop(0)
                self.workers.append(Worker(self.config, sock))
            self._reap_retiring(now)
            time.sleep(0.1)
        everyone = self.workers + self.retiring
        stop_workers(self.config, [worker.process for worker in everyone])
        for worker in everyone:
            worker.close()
        sock.close()
        remove_socket_file(self.config, socket_file)
        logger.info("Stopping parent process [%d]", os.getpid())
        return status

    def _handle_signals(self, sock: socket.socket) -> None:
        while self.signals and not self.stopping:
            signum = self.signals.pop(0)
            if signum == signal.SIGHUP:
                logger.info("Received SIGHUP, restarting processes.")
                self._restart_all(sock)
            elif signum == signal.SIGTTIN:
                logger.info("Received SIGTTIN, increasing the number of processes.")
                self.workers.append(Worker(self.config, sock))
            elif len(self.workers) <= 1:
                logger.info("Received SIGTTOU, but one process is the fewest there can be.")
            else:
                logger.info("Received SIGTTOU, decreasing the number of processes.")
                self._retire(self.workers.pop(), time.monotonic())

    def _restart_all(self, sock: socket.socket) -> None:
        """Each worker in turn: start its replacement, wait until it serves, then retire the
        old one (SIGTERM: it finishes its requests). A replacement that exits or stays silent
        past the startup grace is killed and the restart given up, the old workers kept."""
        for i, old in enumerate(list(self.workers)):
            new = Worker(self.config, sock)
            grace = self._startup_grace
            while not (new.serving or self.stopping or new.process.poll() is not None):
                now = time.monotonic()
                if now - new.started > grace:
                    break
                time.sleep(0.05)
                new.read_beats(now)
                self._reap_retiring(now)
            if not new.serving or self.stopping:
                if new.process.poll() is None:
                    new.process.kill()
                new.process.wait()
                new.close()
                if not self.stopping:
                    logger.error(
                        "New worker [%d] did not start serving (%s); keeping worker [%d] "
                        "and giving up the restart",
                        new.pid,
                        f"exit status {new.process.returncode}"
                        if new.process.returncode is not None and new.process.returncode >= 0
                        else f"not within {grace:g} seconds",
                        old.pid,
                    )
                return
            self._retire(old, time.monotonic())
            self.workers[i] = new

    def _retire(self, worker: Worker, now: float) -> None:
        """SIGTERM, and watched by ``_reap_retiring`` until it exits."""
        worker.process.send_signal(signal.SIGTERM)
        worker.terminated = now
        self.retiring.append(worker)

    @property
    def _startup_grace(self) -> float:
        """How long a new worker may take to serve its first request."""
        return max(WORKER_STARTUP_GRACE, self.config.timeout_worker_healthcheck)

    def _healthy(self, worker: Worker, now: float) -> bool:
        """False, with a warning, for a worker whose loop has not beaten for the timeout, or
        that has not started serving within ``WORKER_STARTUP_GRACE``."""
        timeout = self.config.timeout_worker_healthcheck
        if not timeout:
            return True
        if worker.last_beat is None:
            grace = self._startup_grace
            if now - worker.started <= grace:
                return True
            logger.warning(
                "Worker [%d] has not started serving within %g seconds; "
                "terminating it and starting a new one",
                worker.pid,
                grace,
            )
            return False
        silent = now - worker.last_beat
        if silent <= timeout:
            return True
        logger.warning(
            "Worker [%d] failed its health check: its event loop has not run for %.1f seconds "
            "(--timeout-worker-healthcheck %g); terminating it and starting a new one",
            worker.pid,
            silent,
            timeout,
        )
        return False

    def _reap_retiring(self, now: float) -> None:
        """Forget the retiring workers that exited; SIGKILL one whose loop is still stuck a
        health-check timeout after its SIGTERM (a blocked loop never runs the handler), or
        still shutting down past the graceful-shutdown timeout and 5 s."""
        timeout = self.config.timeout_worker_healthcheck
        graceful = (self.config.timeout_graceful_shutdown or 30) + 5
        for worker in list(self.retiring):
            if worker.process.poll() is not None:
                worker.close()
                self.retiring.remove(worker)
                continue
            assert worker.terminated is not None
            worker.read_beats(now)
            stuck = worker.last_beat is None or worker.last_beat < worker.terminated
            waited = now - worker.terminated
            if (stuck and waited > timeout) or waited > graceful:
                logger.warning("Worker [%d] did not stop after SIGTERM; killing it", worker.pid)
                worker.process.kill()
                worker.process.wait()
                worker.close()
                self.retiring.remove(worker)

    def _on_stop_signal(self, signum: int, frame: Any) -> None:
        self.stopping = True

    def _on_management_signal(self, signum: int, frame: Any) -> None:
        self.signals.append(signum)


class Reloader:
    """``--reload``: one worker process, as ``Supervisor`` starts them (it never watches), on a
    socket this process binds once and keeps, so the port stays open across restarts. Every
    ``reload_delay`` seconds the watched files' mtimes are compared with the last look; on a
    change the worker is stopped gracefully and a new one started. A worker that fails (a
    syntax error, an import error) is not restarted until the next change. No health check
    (``--timeout-worker-healthcheck``), as in uvicorn: while developing, a loop stopped at a
    ``breakpoint()`` is wanted, not a worker to replace."""

    name = "StatReload"

    def __init__(self, config: Config) -> None:
        self.config = config
        self.files = WatchedFiles(
            config.reload_dirs or [os.getcwd()],
            includes=config.reload_includes or [],
            excludes=config.reload_excludes or [],
        )
        self.should_exit = threading.Event()

    def run(self) -> int:
        bound = parent_socket(self.config)
        if bound is None:
            return STARTUP_FAILURE
        sock, socket_file = bound
        logger.info("Will watch for changes in these directories: %s", sorted(self.files.dirs))
        logger.info("ferrule running on %s (Press CTRL+C to quit)", describe(sock, self.config))
        logger.info("Started reloader process [%d] using %s", os.getpid(), self.name)
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._on_signal)
        seen = self.files.snapshot()
        worker: subprocess.Popen[bytes] | None = spawn_worker(self.config, sock)
        # Event.wait, not sleep: a signal wakes it at once.
        while not self.should_exit.wait(self.config.reload_delay):
            if worker is not None and worker.poll() is not None:
                if worker.returncode == 0:  # it stopped itself: --limit-max-requests
                    logger.info("Worker [%d] finished; starting a new one", worker.pid)
                    worker = spawn_worker(self.config, sock)
                else:
                    logger.warning(
                        "Worker [%d] died (%s); waiting for file changes to start it again",
                        worker.pid,
                        worker.returncode,
                    )
                    worker = None
            now = self.files.snapshot()
            changes = changed_files(seen, now)
            seen = now
            if not changes:
                continue
            logger.warning(
                "%s detected changes in %s. Reloading...", self.name, self.files.describe(changes)
            )
            if worker is not None:
                stop_workers(self.config, [worker])
            if self.should_exit.is_set():
                worker = None
                break
            # Changes made while the old worker stopped are in the new one: not seen again.
            seen = self.files.snapshot()
            worker = spawn_worker(self.config, sock)
        if worker is not None:
            stop_workers(self.config, [worker])
        sock.close()
        remove_socket_file(self.config, socket_file)
        logger.info("Stopping reloader process [%d]", os.getpid())
        return 0

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.should_exit.set()


def parent_socket(config: Config) -> tuple[socket.socket, tuple[int, int] | None] | None:
    """The socket a parent binds once for all its workers (inheritable), and the identity of
    the Unix socket file it made, if any; None (the error logged) if it cannot be bound."""
    try:
        sock = listening_socket(config)
    except OSError as exc:
        logger.error("%s", exc)
        return None
    sock.set_inheritable(True)
    return sock, bound_socket_file(config)


def spawn_worker(
    config: Config, sock: socket.socket, heartbeat_fd: int | None = None
) -> subprocess.Popen[bytes]:
    """A worker process (``python -m ferrule.worker``) serving the inherited ``sock`` with the
    parent's settings; it imports the app itself, and beats on ``heartbeat_fd`` when given."""
    fds = [sock.fileno()]
    if heartbeat_fd is not None:
        fds.append(heartbeat_fd)
    # In the environment, not on the command line, which any user can read with ps (the key
    # password is a setting); a process's environment is readable only by its owner.
    env = {**os.environ, WORKER_ENV: worker_data(config, sock.fileno(), heartbeat_fd)}
    worker = subprocess.Popen(
        [sys.executable, "-m", "ferrule.worker"],
        pass_fds=fds,
        start_new_session=False,
        env=env,
    )
    logger.info("Started worker process [%d]", worker.pid)
    return worker


def stop_workers(config: Config, workers: Iterable[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to each running worker, then wait for all: the graceful-shutdown timeout (30 s
    if none) and 5 s more, after which a worker still running is killed."""
    workers = list(workers)
    for worker in workers:
        if worker.poll() is None:
            worker.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + (config.timeout_graceful_shutdown or 30) + 5
    for worker in workers:
        try:
            worker.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()
