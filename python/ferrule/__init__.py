"""ferrule: an ASGI server whose Rust core drives Python coroutines itself."""

from ferrule._bridge import drive, new_event_loop
from ferrule._ferrule import COUNTERS, Bridge, ClientDisconnected, NativeFuture, __version__
from ferrule.config import Config
from ferrule.server import Server, counters, run

__all__ = [
    "COUNTERS",
    "Bridge",
    "ClientDisconnected",
    "Config",
    "NativeFuture",
    "Server",
    "__version__",
    "counters",
    "drive",
    "new_event_loop",
    "run",
]
