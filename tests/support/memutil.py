"""What a server process holds, read from ``/proc/PID`` (Linux): its resident memory now, at its
peak and once settled (:class:`RssGrowth` against a baseline), and its open file descriptors.
For the tests that bound memory (``tests/hostile/``, idle connections, streaming).

Imported by the test modules as ``from support.memutil import ...`` (``tests/`` is on ``sys.path``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

MiB = 2**20


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` from ``/proc/PID/status``."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def peak_rss_bytes(pid: int) -> int:
    """The most memory ``pid`` has had resident (``VmHWM``), since it started or since the last
    :func:`reset_peak_rss`."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for pid {pid}")


def reset_peak_rss(pid: int) -> None:
    """Set ``pid``'s ``VmHWM`` back to its current RSS (``/proc/PID/clear_refs``, Linux 4.0+),
    so that :func:`peak_rss_bytes` then tells the peak of what follows alone."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def settled_rss(
    pid: int, *, timeout: float = 5.0, window: float = 0.5, tolerance: int = 512 * 1024
) -> int:
    """``pid``'s RSS once it has moved less than ``tolerance`` bytes over ``window`` seconds
    (sampled every 0.05 s), or the largest seen if it is still moving after ``timeout``: for
    memory that a server fills up to where it stops (queues, buffers), read when it is there."""
    samples: list[tuple[float, int]] = []
    deadline = time.monotonic() + timeout
    while True:
        now = time.monotonic()
        samples.append((now, rss_bytes(pid)))
        recent = [rss for at, rss in samples if at >= now - window]
        if now - samples[0][0] >= window and max(recent) - min(recent) < tolerance:
            return samples[-1][1]
        if now > deadline:
            return max(rss for _, rss in samples)
        time.sleep(0.05)


class RssGrowth:
    """A process's memory against a baseline: made, it waits for the RSS to settle (up to
    ``settle`` seconds), keeps it and resets the peak; then :meth:`now` (the RSS at once),
    :meth:`held` (once settled, see :func:`settled_rss`) and :meth:`peak` (``VmHWM``) tell how
    far above the baseline the process is, or went, in bytes."""

    def __init__(self, pid: int, *, settle: float = 3.0) -> None:
        self.pid = pid
        self.baseline = settled_rss(pid, timeout=settle, window=0.3)
        reset_peak_rss(pid)

    def now(self) -> int:
        return rss_bytes(self.pid) - self.baseline

    def held(self, timeout: float = 5.0) -> int:
        return settled_rss(self.pid, timeout=timeout, window=0.3) - self.baseline

    def peak(self) -> int:
        return peak_rss_bytes(self.pid) - self.baseline


def fd_count(pid: int) -> int:
    """Open file descriptors of ``pid`` (entries of ``/proc/PID/fd``)."""
    return len(os.listdir(f"/proc/{pid}/fd"))
