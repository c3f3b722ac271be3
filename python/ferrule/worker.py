"""A worker process of ``--workers`` or ``--reload``: ``python -m ferrule.worker``, started by
``ferrule.supervisor`` with the parent's settings as data in its environment (the resolved
``Config``, never a rebuilt command line), serving the listening socket it inherits.

Nothing in the package imports this module: run by ``-m`` after being imported, it would be
loaded twice (Python warns so). What the supervisor shares with it is in ``ferrule.handshake``."""

from __future__ import annotations

import ctypes
import json
import os
import select
import signal
import sys
import threading
import time

from ferrule.handshake import WORKER_ENV, worker_config
from ferrule.server import serve_worker

#: prctl's option to be sent a signal when the parent process dies (linux/prctl.h).
PR_SET_PDEATHSIG = 1
#: How often a worker without prctl or kqueue looks whether its parent is still there.
PARENT_POLL_INTERVAL = 1.0


def stop_with_parent(parent: int) -> None:
    """SIGTERM (a graceful shutdown) to this process when its parent dies, so that a worker
    never outlives a supervisor that was killed (SIGKILL, an OOM kill) and keeps the port.
    Linux says so itself (prctl); elsewhere a thread waits for the parent's exit."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent:  # the parent died before prctl: do as it would have
            os.kill(os.getpid(), signal.SIGTERM)
        return
    watch_parent(parent, kqueue=hasattr(select, "kqueue"))


def watch_parent(parent: int, kqueue: bool) -> threading.Thread:
    """A daemon thread that sends this process SIGTERM once ``parent`` exits: told by kqueue's
    ``NOTE_EXIT`` (macOS, the BSDs), else by ``getppid()`` changing, looked at every second."""

    def wait_for_kqueue() -> None:
        queue = select.kqueue()
        event = select.kevent(
            parent,
            filter=select.KQ_FILTER_PROC,
            flags=select.KQ_EV_ADD | select.KQ_EV_ONESHOT,
            fflags=select.KQ_NOTE_EXIT,
        )
        try:
            queue.control([event], 0)
        except OSError:  # ESRCH: the parent is gone already
            return
        # Checked once registered: an exit before it would never be reported.
        if os.getppid() == parent:
            queue.control(None, 1)

    def wait_by_polling() -> None:
        while os.getppid() == parent:
            time.sleep(PARENT_POLL_INTERVAL)

    def watch() -> None:
        (wait_for_kqueue if kqueue else wait_by_polling)()
        os.kill(os.getpid(), signal.SIGTERM)

    thread = threading.Thread(target=watch, name="ferrule-parent-watch", daemon=True)
    thread.start()
    return thread


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
