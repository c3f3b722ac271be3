"""The parent process of ``--reload`` (``Reloader``): one worker process, restarted when the
watched files change."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import threading
from typing import Any

from ferrule.config import STARTUP_FAILURE, Config
from ferrule.sockets import close_all, describe, remove_socket_file
from ferrule.spawning import parent_sockets, spawn_worker, stop_workers
from ferrule.watch import WatchedFiles, changed_files

logger = logging.getLogger("ferrule.error")


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
        bound = parent_sockets(self.config)
        if bound is None:
            return STARTUP_FAILURE
        socks, socket_file = bound
        logger.info("Will watch for changes in these directories: %s", sorted(self.files.dirs))
        logger.info("ferrule running on %s (Press CTRL+C to quit)", describe(socks, self.config))
        logger.info("Started reloader process [%d] using %s", os.getpid(), self.name)
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._on_signal)
        worker = self._reload_until_stopped(socks)
        if worker is not None:
            stop_workers(self.config, [worker])
        close_all(socks)
        remove_socket_file(self.config, socket_file)
        logger.info("Stopping reloader process [%d]", os.getpid())
        return 0

    def _reload_until_stopped(self, socks: list[socket.socket]) -> subprocess.Popen[bytes] | None:
        """Runs a worker, replaced on each change of the watched files, until a stop signal;
        returns the worker still running then, if any."""
        seen = self.files.snapshot()
        worker: subprocess.Popen[bytes] | None = spawn_worker(self.config, socks)
        # Event.wait, not sleep: a signal wakes it at once.
        while not self.should_exit.wait(self.config.reload_delay):
            if worker is not None and worker.poll() is not None:
                worker = self._after_exit(worker, socks)
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
                return None
            # Changes made while the old worker stopped are in the new one: not seen again.
            seen = self.files.snapshot()
            worker = spawn_worker(self.config, socks)
        return worker

    def _after_exit(
        self, worker: subprocess.Popen[bytes], socks: list[socket.socket]
    ) -> subprocess.Popen[bytes] | None:
        """The worker in place of ``worker``, which exited: a new one if it stopped itself
        (``--limit-max-requests``), else none until the next change of the files."""
        if worker.returncode == 0:
            logger.info("Worker [%d] finished; starting a new one", worker.pid)
            return spawn_worker(self.config, socks)
        logger.warning(
            "Worker [%d] died (%s); waiting for file changes to start it again",
            worker.pid,
            worker.returncode,
        )
        return None

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.should_exit.set()
