"""A worker process of ``--workers`` or ``--reload``: ``python -m ferrule.worker``, started by
``ferrule.supervisor`` with the parent's settings as data in its environment (the resolved
``Config``, never a rebuilt command line), serving the listening socket it inherits.

Nothing in the package imports this module: run by ``-m`` after being imported, it would be
loaded twice (Python warns so). What the supervisor shares with it is in ``ferrule.handshake``."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys

from ferrule.handshake import WORKER_ENV, worker_config
from ferrule.server import serve_worker

#: prctl's option to be sent a signal when the parent process dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1


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
    stop_with_parent(json.loads(data)["parent"])
    sys.exit(serve_worker(worker_config(data)))


if __name__ == "__main__":
    main()
