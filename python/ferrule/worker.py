"""A worker process of ``--workers`` or ``--reload``: ``python -m ferrule.worker``, started by
``ferrule.supervisor`` with the parent's settings as data in its environment (the resolved
``Config``, never a rebuilt command line), serving the listening socket it inherits."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
from typing import Any

from ferrule.config import Config

#: prctl's option to be sent a signal when the parent process dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1

#: The environment variable that carries a worker's settings, as JSON.
WORKER_ENV = "FERRULE_WORKER"


def worker_data(
    config: Config,
    fd: int,
    heartbeat_fd: int | None,
    metrics_slot: tuple[int, int] | None = None,
) -> str:
    """What a worker needs, as JSON: the app, the parent's resolved settings, and the
    inherited descriptors (the listening socket, the heartbeat pipe, the metrics region with
    the worker's slot in it)."""
    settings: dict[str, Any] = config.inherited()
    settings["fd"] = fd
    return json.dumps(
        {
            "app": config.app,
            "settings": settings,
            "heartbeat_fd": heartbeat_fd,
            "metrics_slot": metrics_slot,
            "parent": os.getpid(),
        }
    )


def worker_config(data: str) -> Config:
    loaded = json.loads(data)
    config = Config(loaded["app"], **loaded["settings"], workers=1)
    config.worker = True
    config.heartbeat_fd = loaded["heartbeat_fd"]
    slot = loaded.get("metrics_slot")
    config.metrics_slot = None if slot is None else (slot[0], slot[1])
    return config


def stop_with_parent(parent: int) -> None:
    """SIGTERM (a graceful shutdown) to this process when its parent dies, so that a worker
    never outlives a supervisor that was killed (SIGKILL, an OOM kill) and keeps the port."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the heartbeat's EPIPE is left
        return
    if os.getppid() != parent:  # the parent died before prctl: do as it would have
        os.kill(os.getpid(), signal.SIGTERM)


def main() -> None:
    # Taken out of the environment before the app is imported: it holds the key password,
    # and the app's own subprocesses are no workers.
    data = os.environ.pop(WORKER_ENV, None)
    if data is None:
        sys.exit(
            f"{__spec__.name if __spec__ else 'ferrule.worker'} is started by ferrule's "
            "supervisor, not by hand: run ferrule APP --workers N"
        )
    from ferrule.server import serve_worker

    stop_with_parent(json.loads(data)["parent"])
    sys.exit(serve_worker(worker_config(data)))


if __name__ == "__main__":
    main()
