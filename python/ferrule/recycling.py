"""``Recycling``: when a worker is due for replacement, past ``--workers-max-rss`` or
``--workers-lifetime`` (``ferrule.supervisor`` replaces it, its successor serving first)."""

from __future__ import annotations

import logging
import random

from ferrule.config import Config
from ferrule.usage import resident_bytes

logger = logging.getLogger("ferrule.error")

#: A worker's lifetime is ``--workers-lifetime`` plus up to this fraction of it, drawn per
#: worker: workers started together are not all replaced together.
LIFETIME_JITTER = 0.1

#: Seconds between two readings of the workers' resident memory.
RSS_INTERVAL = 1.0

MIB = 1024 * 1024

#: The restart reasons ``Supervisor.restarts`` counts.
REASONS = ("crash", "health_check", "max_requests", "max_rss", "lifetime")


class Recycling:
    """The recycling limits of one supervisor's workers."""

    def __init__(self, config: Config) -> None:
        self.max_rss: int | None = config.workers_max_rss
        self.lifetime: int | None = config.workers_lifetime
        self.next_rss_reading = 0.0

    def lifetime_end(self, started: float) -> float | None:
        """When a worker started at ``started`` is due: its lifetime with its jitter drawn."""
        if self.lifetime is None:
            return None
        return started + self.lifetime * (1 + random.uniform(0, LIFETIME_JITTER))

    def rss_due(self, now: float) -> bool:
        """Whether the workers' memory is to be read now (about once a second)."""
        if self.max_rss is None or now < self.next_rss_reading:
            return False
        self.next_rss_reading = now + RSS_INTERVAL
        return True

    def over_rss(self, pid: int) -> str | None:
        """Why the process ``pid`` is past ``--workers-max-rss`` (logged), or None."""
        assert self.max_rss is not None
        rss = resident_bytes(pid)
        if rss is None or rss <= self.max_rss * MIB:
            return None
        # Rounded up: a worker just past the limit does not read as at it.
        return f"--workers-max-rss ({-(-rss // MIB)} MiB > {self.max_rss} MiB)"

    def over_lifetime(self, end: float | None, started: float, now: float) -> str | None:
        """Why a worker started at ``started``, due at ``end``, is past its lifetime, or None."""
        if end is None or now < end:
            return None
        return f"--workers-lifetime ({now - started:.1f} s > {self.lifetime} s)"
