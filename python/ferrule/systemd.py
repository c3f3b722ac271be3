"""systemd's side of a service, without libsystemd: the listening sockets it passes (socket
activation, as ``sd_listen_fds(3)`` reads them) and what the service tells it on its notify
socket (``sd_notify(3)``: ``READY=1``, ``RELOADING=1``, ``STOPPING=1``, ``STATUS=``,
``WATCHDOG=1``). Outside systemd, each finds nothing and does nothing."""

from __future__ import annotations

import os
import socket
import time

#: The first descriptor systemd passes (``SD_LISTEN_FDS_START``).
LISTEN_FDS_START = 3


def listen_fds() -> list[tuple[int, str]]:
    """The sockets systemd passed this process, as (descriptor, name) pairs, when
    ``LISTEN_PID`` is this process. The variables are removed, as ``sd_listen_fds(1)`` does,
    so that a process this one starts does not take the descriptors for its own."""
    pid, count = os.environ.get("LISTEN_PID"), os.environ.get("LISTEN_FDS")
    names = os.environ.get("LISTEN_FDNAMES", "")
    for name in ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES"):
        os.environ.pop(name, None)
    if pid != str(os.getpid()) or not count or not count.isdigit():
        return []
    fds = range(LISTEN_FDS_START, LISTEN_FDS_START + int(count))
    given = names.split(":") if names else []
    return [(fd, given[i] if i < len(given) else "unknown") for i, fd in enumerate(fds)]


class Notifier:
    """Messages to systemd's notify socket (``NOTIFY_SOCKET``), and the watchdog's pace: a
    ``WATCHDOG=1`` at half of ``WATCHDOG_USEC`` from ``tick`` (called by the loop that must
    keep answering). Made once, in the process systemd started; a no-op without the socket."""

    def __init__(self) -> None:
        path = os.environ.pop("NOTIFY_SOCKET", "")
        usec = os.environ.pop("WATCHDOG_USEC", "")
        watchdog_pid = os.environ.pop("WATCHDOG_PID", "")
        #: What a process that takes this one's place (an upgrade) needs to speak to systemd.
        self.environment = {"NOTIFY_SOCKET": path, "WATCHDOG_USEC": usec} if path else {}
        self._address: str | bytes | None = None
        if path.startswith("@"):  # the abstract namespace
            self._address = b"\0" + path[1:].encode()
        elif path.startswith("/"):
            self._address = path
        mine = not watchdog_pid or watchdog_pid == str(os.getpid())
        self.watchdog_interval: float | None = None
        if self._address is not None and mine and usec.isdigit() and int(usec) > 0:
            self.watchdog_interval = int(usec) / 2e6
        self._last_ping = 0.0

    @property
    def active(self) -> bool:
        return self._address is not None

    def send(self, *fields: str) -> None:
        """One datagram of ``fields``, a line each; lost silently if systemd is gone."""
        if self._address is None:
            return
        message = "\n".join(fields).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
                sock.sendto(message, self._address)
        except OSError:
            pass

    def reloading(self) -> None:
        # systemd 253+ wants the monotonic time with RELOADING=1 (Type=notify-reload).
        usec = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
        self.send("RELOADING=1", f"MONOTONIC_USEC={usec}")

    def tick(self) -> None:
        """A ``WATCHDOG=1`` if half the watchdog's timeout has passed since the last one."""
        if self.watchdog_interval is None:
            return
        now = time.monotonic()
        if now - self._last_ping >= self.watchdog_interval:
            self._last_ping = now
            self.send("WATCHDOG=1")
