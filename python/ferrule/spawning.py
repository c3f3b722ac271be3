"""Worker processes as a parent starts and stops them (``Supervisor`` and ``Reloader``): the
sockets bound once for all, ``python -m ferrule.worker`` serving the inherited sockets with the
parent's settings (each importing the app itself), and stopping them."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable

from ferrule.config import Config
from ferrule.handshake import WORKER_ENV, worker_data
from ferrule.sockets import bound_socket_file, listening_sockets

logger = logging.getLogger("ferrule.error")


def parent_sockets(config: Config) -> tuple[list[socket.socket], tuple[int, int] | None] | None:
    """The sockets a parent binds once for all its workers (inheritable), and the identity of
    the Unix socket file it made, if any; None (the error logged) if they cannot be had."""
    try:
        socks = listening_sockets(config)
    except OSError as exc:
        logger.error("%s", exc)
        return None
    for sock in socks:
        sock.set_inheritable(True)
    return socks, bound_socket_file(config)


def spawn_worker(
    config: Config,
    socks: list[socket.socket],
    heartbeat_fd: int | None = None,
    metrics_slot: tuple[int, int] | None = None,
) -> subprocess.Popen[bytes]:
    """A worker process (``python -m ferrule.worker``) serving the inherited ``socks`` with the
    parent's settings; it imports the app itself, beats on ``heartbeat_fd`` when given, and
    counts into slot ``metrics_slot[1]`` of the metrics region ``metrics_slot[0]``."""
    sock_fds = [sock.fileno() for sock in socks]
    fds = list(sock_fds)
    if heartbeat_fd is not None:
        fds.append(heartbeat_fd)
    if metrics_slot is not None:
        fds.append(metrics_slot[0])
    # In the environment, not on the command line, which any user can read with ps (the key
    # password is a setting); a process's environment is readable only by its owner.
    data = worker_data(config, sock_fds, heartbeat_fd, metrics_slot)
    env = {**os.environ, WORKER_ENV: data}
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
