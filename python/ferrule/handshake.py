"""What a supervisor and its worker processes say to each other: the worker's settings, as data
in its environment (the resolved ``Config``, never a rebuilt command line), and the heartbeat
pipe, on which the worker's event loop beats and asks to be replaced."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

from ferrule.config import Config

#: The environment variable that carries a worker's settings, as JSON.
WORKER_ENV = "FERRULE_WORKER"


def worker_data(
    config: Config,
    fds: list[int],
    heartbeat_fd: int | None,
    metrics_slot: tuple[int, int] | None = None,
) -> str:
    """What a worker needs, as JSON: the app, the parent's resolved settings, and the
    inherited descriptors (the listening sockets, the heartbeat pipe, the metrics region with
    the worker's slot in it)."""
    settings: dict[str, Any] = config.inherited()
    settings["fd"] = fds[0]  # the settings say the socket is inherited, not bound here
    return json.dumps(
        {
            "app": config.app,
            "settings": settings,
            "fds": fds,
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
    config.inherited_fds = loaded["fds"]
    slot = loaded.get("metrics_slot")
    config.metrics_slot = None if slot is None else (slot[0], slot[1])
    return config


#: What a worker writes on its heartbeat pipe, besides its beats, once it has served
#: ``--limit-max-requests``: it asks to be replaced, and serves until its successor does.
REPLACE_ME = b"R"


class Heartbeat:
    """A worker's sign of life to its supervisor: a byte written on an inherited pipe by the
    event loop itself, every second or so. An app that blocks the loop (``time.sleep`` in an
    ``async def``) stops them, which a thread beating instead would not."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, timeout: float) -> None:
        self.loop = loop
        self.fd = fd
        # Several beats per timeout, so one late tick is not a missed check.
        self.interval = min(1.0, timeout / 4) if timeout else 1.0
        os.set_blocking(fd, False)
        os.set_inheritable(fd, False)  # not to the app's own subprocesses
        self.handle: asyncio.TimerHandle | None = None
        self.asked_replacement = False
        self._beat()

    def _beat(self) -> None:
        try:
            os.write(self.fd, b".")
        except BlockingIOError:  # the pipe is full: the supervisor has beats to read
            pass
        except OSError:  # the supervisor is gone
            return
        self.handle = self.loop.call_later(self.interval, self._beat)

    def ask_replacement(self) -> None:
        """Tells the supervisor this worker is past ``--limit-max-requests``: it starts a
        successor, and stops this worker once that one serves. Tried again on the next call
        while the pipe is full."""
        try:
            os.write(self.fd, REPLACE_ME)
        except BlockingIOError:
            return
        except OSError:  # the supervisor is gone
            pass
        self.asked_replacement = True

    def stop(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
        os.close(self.fd)
