"""How much of a core went to other processes during a run: this machine is shared, and a
server starved of its core both slows down and batches more work per wake-up, which makes its
CPU a request look cheaper than it is. run.py measures a run again when it was contended.

Not run by itself: run.py and alone.py call `Busy`.
"""

from __future__ import annotations

import os
import time

# A run in which other processes took more than this share of the server core is measured
# again (up to run.py's retries): a few percent is the kernel's own work and wrk's interrupts.
LIMIT = 0.10


def busy_seconds(cpu: int) -> float:
    """Time core `cpu` has spent running processes since boot, steal included (a hypervisor's
    other guests take the core as surely as a process does). Interrupt time is left out: much
    of it is the measured server's own network work, which its CPU time may not include."""
    with open("/proc/stat") as stat:
        for line in stat:
            if line.startswith(f"cpu{cpu} "):
                user, nice, system, _idle, _iowait, _irq, _softirq, steal = map(
                    int, line.split()[1:9]
                )
                return (user + nice + system + steal) / os.sysconf("SC_CLK_TCK")
    raise ValueError(f"no cpu{cpu} in /proc/stat")


class Busy:
    """Started around a run: `others(cpu_seconds)` is the share of the core's wall time that
    went to anything but the `cpu_seconds` the measured process used."""

    def __init__(self, cpu: int) -> None:
        self.cpu = cpu
        self.start_busy = busy_seconds(cpu)
        self.start = time.monotonic()

    def others(self, cpu_seconds: float) -> float:
        wall = time.monotonic() - self.start
        busy = busy_seconds(self.cpu) - self.start_busy
        return max(0.0, busy - cpu_seconds) / wall if wall > 0 else 0.0
