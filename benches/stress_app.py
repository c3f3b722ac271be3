"""The collision stress app: a tiny GIL switch interval, then the benchmark app unchanged.

``sys.setswitchinterval(1e-4)`` makes CPython ask the thread holding the GIL to drop it every
0.1 ms instead of every 5 ms, so the server's threads (ferrule's tokio threads and its loop
thread) trade the GIL as often as they can: any window where two of them drive Python code of
the same loop is hit far more often than under normal settings.
"""

import sys

sys.setswitchinterval(1e-4)

from apps import app  # noqa: E402 - imported after the switch interval is set

__all__ = ["app"]
