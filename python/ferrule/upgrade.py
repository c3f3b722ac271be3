"""An upgrade with no request lost (SIGUSR2 to the parent of ``--workers``): the running
supervisor starts a new one from the command it was started with (so a new venv, interpreter
or code at the same paths is what starts), hands it the listening sockets, and once the new
one's workers all serve it hears so on a pipe, stops its own workers gracefully and exits.
Between the two, both sets of workers accept on the same sockets: no connection is refused."""

from __future__ import annotations

import os
import subprocess
import sys

#: The listening sockets' descriptors in the new supervisor, with commas between.
FD_ENV = "FERRULE_UPGRADE_FD"
#: The pipe on which the new supervisor says its workers serve.
READY_ENV = "FERRULE_UPGRADE_READY"


def inherited_fds() -> list[int]:
    """The sockets a supervisor being upgraded handed this process, if any (read once)."""
    fds = os.environ.pop(FD_ENV, "").split(",")
    return [int(fd) for fd in fds if fd.isdigit()]


def tell_ready() -> None:
    """Say on the pipe, if this process was started by an upgrade, that its workers serve."""
    fd = os.environ.pop(READY_ENV, None)
    if not fd or not fd.isdigit():
        return
    try:
        os.write(int(fd), b"ready")
        os.close(int(fd))
    except OSError:
        pass  # the old supervisor is gone already


def command() -> list[str]:
    """The command this process was started with, to start it again: the ``ferrule`` script
    (whose interpreter line names the venv's Python), or ``python -m ferrule``."""
    script = sys.argv[0]
    if os.path.basename(script) == "__main__.py" or not os.access(script, os.X_OK):
        return [sys.executable, "-m", "ferrule", *sys.argv[1:]]
    return [script, *sys.argv[1:]]


class Upgrade:
    """A new supervisor started on the sockets ``sock_fds``: ``poll`` says "ready" once its
    workers serve, "failed" if it exited first, None meanwhile. ``passed_on`` adds to its
    environment what this process took out of its own (systemd's notify socket)."""

    def __init__(self, sock_fds: list[int], passed_on: dict[str, str]) -> None:
        read, write = os.pipe()
        os.set_blocking(read, False)
        fds = ",".join(map(str, sock_fds))
        env = {**os.environ, **passed_on, FD_ENV: fds, READY_ENV: str(write)}
        try:
            self.process = subprocess.Popen(command(), pass_fds=(*sock_fds, write), env=env)
        finally:
            os.close(write)
        self._ready = read

    @property
    def pid(self) -> int:
        return self.process.pid

    def poll(self) -> str | None:
        try:
            said = os.read(self._ready, 16)
        except BlockingIOError:
            said = None
        if said:
            os.close(self._ready)
            return "ready"
        if said == b"" or self.process.poll() is not None:
            os.close(self._ready)
            try:  # the pipe closes as it exits: its status is a moment away
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                pass
            return "failed"
        return None
