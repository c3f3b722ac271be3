"""ferrule: an ASGI server whose Rust core drives Python coroutines itself."""

from ferrule._bridge import drive, new_event_loop
from ferrule._ferrule import COUNTERS, Bridge, ClientDisconnected, NativeFuture, __version__
from ferrule.server import counters, run

__all__ = [
    "COUNTERS",
    "Bridge",
    "ClientDisconnected",
    "NativeFuture",
    "__version__",
    "counters",
    "drive",
    "new_event_loop",
    "run",
]
