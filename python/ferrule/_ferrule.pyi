"""Typed stub for the Rust extension module ``ferrule._ferrule``.

Checked against the compiled module by ``tests/bridge/test_stub.py``.
"""

import asyncio
from collections.abc import Callable, Coroutine, Generator
from contextvars import Context
from typing import Any, Generic, Literal, TypeVar

from ferrule.config import Config
from ferrule.tls import TlsFiles

T = TypeVar("T")

__version__: str

Mode = Literal["gated", "loop-only"]

class Bridge:
    """Drives coroutines for one asyncio loop from Rust.

    Create it on the loop's thread while the loop runs. ``mode`` says how tokio threads get
    the right to drive: ``gated`` (asyncio's selector loop: only while the loop thread is
    blocked in ``select``), ``loop-only`` (every drive is handed to the loop thread; the only
    mode uvloop can have); ``auto`` gates a loop that can be gated.
    """

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        *,
        budget: int = 128,
        worker_threads: int = 1,
        trace: bool = False,
        mode: Literal["auto", "gated", "loop-only"] = "auto",
    ) -> None: ...
    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...
    @property
    def budget(self) -> int: ...
    @property
    def mode(self) -> Mode: ...
    @property
    def task_path(self) -> Literal["pop-sentinel-step", "eager-start", "eager-start-per-thread"]:
        """How this interpreter gets a task without a ``__step`` in the loop's queue."""
    @property
    def in_flight(self) -> int:
        """Coroutines handed to the bridge and not finished yet (the driver holds them)."""
    def spawn(self, coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
        """Hand ``coro`` to the bridge; its first drive runs on a tokio thread.

        Returns an asyncio future of this loop resolved with the coroutine's result or exception.
        """
    def spawn_on_loop(self, coro: Coroutine[Any, Any, T]) -> asyncio.Future[T]:
        """Like ``spawn`` but the first drive runs on the loop thread, in its next iteration."""
    def sleep(self, seconds: float, value: T = ...) -> NativeFuture[T]:
        """A native awaitable resolved with ``value`` by a tokio timer after ``seconds``."""
    def ready(self, value: T = ...) -> NativeFuture[T]:
        """A native awaitable that is already resolved with ``value``."""
    def counters(self) -> dict[str, int]:
        """A snapshot of every counter the bridge keeps (see ``COUNTERS``)."""
    def trace(self) -> dict[str, list[int]] | None:
        """The per-request trace (``trace=True``): cumulative bucket counts of the ``gil_wait``,
        ``first_drive`` and ``resume_wait`` latency histograms, and each bucket's upper bound in
        nanoseconds (``bucket_upper_ns``). None when the bridge was made without it."""
    def task_factory(self) -> Callable[..., asyncio.Task[Any]]:
        """A factory for ``loop.set_task_factory``: the app's own tasks on this loop become
        ``Task``s whose coroutines the bridge drives. The bound ``create`` of a
        ``TaskFactory`` (its ``__self__``)."""
    @property
    def app_tasks(self) -> int:
        """Tasks the factory made that have not finished."""
    def reset_counters(self) -> None: ...
    def close(self) -> None:
        """Unhook the bridge from the loop and stop its tokio runtime. Idempotent."""

class TaskFactory:
    """What ``Bridge.task_factory()`` binds ``create`` of."""

    def create(
        self,
        loop: asyncio.AbstractEventLoop,
        coro: Coroutine[Any, Any, T],
        *,
        name: object = None,
        context: Context | None = None,
        eager_start: bool | None = None,
    ) -> asyncio.Task[T]:
        """``loop.set_task_factory``'s callable: a ``Task`` the bridge drives, for the bridge's
        loop; asyncio's own ``Task`` for another loop, or one asked to start eagerly."""

COUNTERS: tuple[str, ...]
#: Whether the I/O threads run under SCHED_BATCH (Linux only).
BATCH_POLICY: bool
#: uvicorn's TRACE log level number, below DEBUG.
TRACE: int
#: The smallest ``--max-head-size`` (hyper's read buffer is twice it, at least 8 KiB).
MIN_HEAD_SIZE: int
#: What ``--http`` may say, once uvicorn's names are mapped onto them.
HTTP_VERSIONS: tuple[str, ...]
#: ``--compress``'s codings, each with its lowest, highest and default level.
COMPRESS_LEVELS: dict[str, tuple[int, int, int]]

def check_compress_types(types: list[str]) -> None:
    """Raise ValueError naming the first entry that is not a media type pattern."""

class NativeFuture(Generic[T]):
    """ferrule's own awaitable, resolved from Rust.

    Driven coroutines suspend on it without involving the asyncio loop; it also speaks enough of
    the asyncio future protocol for plain asyncio tasks to await it.
    """

    _asyncio_future_blocking: bool
    def __await__(self) -> Generator[Any, None, T]: ...
    def __iter__(self) -> Generator[Any, None, T]: ...
    def __next__(self) -> Any: ...
    def done(self) -> bool: ...
    def cancelled(self) -> bool: ...
    def result(self) -> T: ...
    def exception(self) -> BaseException | None: ...
    def cancel(self, msg: Any | None = None) -> bool: ...
    def get_loop(self) -> asyncio.AbstractEventLoop: ...
    def add_done_callback(
        self, fn: Callable[[NativeFuture[T]], object], *, context: Context | None = None
    ) -> None: ...
    def remove_done_callback(self, fn: Callable[[NativeFuture[T]], object]) -> int: ...

class ClientDisconnected(OSError):
    """Raised by an ASGI ``send()`` once the client has gone away."""

class MetricsRegion:
    """The shared memory the metrics are counted in, one slot per worker (``ferrule.metrics``)."""

    CONTENT_TYPE: str
    def __init__(self, fd: int) -> None:
        """Map the memfd ``fd`` (ownership passes to the region), ``size_for(slots)`` bytes."""
    @staticmethod
    def size_for(slots: int) -> int: ...
    @property
    def slots(self) -> int: ...
    def claim(self) -> int | None:
        """A free slot, zeroed, for a worker about to start; None if all are taken."""
    def release(self, slot: int) -> None:
        """The slot's worker exited: its counters stay in the totals, the slot is free."""
    def pids(self) -> list[int]:
        """The pids of the workers counting into a claimed slot."""
    def encode(self, processes: list[tuple[int, int, int]], restarts: dict[str, int]) -> str:
        """Every slot summed, with (pid, resident bytes, open fds) per worker and the restart
        counts by reason, in the Prometheus text format."""

class HttpServer:
    """The ASGI server (HTTP/1.1, HTTP/2, TLS): hyper on the bridge's tokio runtime (see
    ``ferrule.server``)."""

    def __init__(
        self,
        bridge: Bridge,
        app: Callable[..., Any],
        config: Config,
        *,
        state: dict[str, Any] | None = None,
        tls: TlsFiles | None = None,
        metrics: tuple[MetricsRegion, int] | None = None,
    ) -> None:
        """Serve ``app`` with the settings of ``config`` (read once, here), ``state`` the
        lifespan state, ``tls`` the TLS files read (None: no TLS), ``metrics`` a region and the
        slot to count into (``ferrule.metrics``). Raises ValueError for a setting the server
        cannot use."""
    def serve(self, listeners: list[tuple[int, str | None]]) -> NativeFuture[None]:
        """Serve listening sockets, each a descriptor (ownership passes to the server) and the
        path a Unix socket is bound at, or None for TCP; the future resolves once the server
        has stopped and every connection is closed."""
    def shutdown(self, timeout: float | None = None) -> None:
        """Stop accepting; in-flight requests get ``timeout`` seconds, then are cancelled."""
    @property
    def in_flight(self) -> int: ...
    @property
    def stopping(self) -> bool:
        """Whether the server has begun to stop: told to, or at ``--limit-max-requests``."""
    def release_listeners(self) -> None:
        """Say the caller has closed its own descriptors of the listening sockets: a stopping
        server accepts until then (at most 5 s), since the kernel queues connections while one
        is open. Call it before ``shutdown``."""
    @property
    def max_requests_reached(self) -> bool:
        """Whether ``--limit-max-requests`` requests have been served (a supervisor's worker
        keeps serving then, until its successor does)."""
    def set_access_writer(
        self, writer: AccessWriter, colours: bool, phrases: list[tuple[int, str]]
    ) -> None:
        """Give the access log's fast path its writer, whether lines are coloured, and
        ``http.HTTPStatus``'s reason phrases as ``(status, phrase)`` pairs; the first call
        wins."""
    access_path: str
    """Write-only: where access lines go from now on, "fast" (formatted and written by the
    server; ValueError before ``set_access_writer``), "logging" (the ``ferrule.access``
    logger) or "off" (``ferrule.access_route``)."""
    access_fields: bool
    """Write-only: whether access records on the logging path carry the line's fields as
    attributes."""

class AccessWriter:
    """Access lines written to a descriptor by a thread of their own, in batches of whole
    lines (``ferrule._logging.access_writer``: one per process)."""

    def __init__(self, fd: int, limit: int, *, json: bool = False) -> None:
        """Write to ``fd`` (ownership passes here), holding at most ``limit`` bytes of lines
        (at least 4096) while nobody reads; ``json``: the line reporting dropped lines is a
        JSON object. Raises ValueError for a smaller ``limit``."""
    def flush(self, timeout: float) -> bool:
        """Wait (without the GIL) until every line added so far is written, at most
        ``timeout`` seconds; whether it was."""
    @property
    def dropped(self) -> int:
        """Lines dropped so far because ``limit`` bytes were waiting."""

class H3Server:
    """HTTP/3 over QUIC beside an ``HttpServer``: the same app, settings, limits and shutdown
    (see ``ferrule.server``)."""

    def __init__(self, http: HttpServer, tls: TlsFiles) -> None:
        """Serve what ``http`` serves over HTTP/3 with the certificate of ``tls``. Raises
        ValueError for TLS material QUIC cannot use."""
    def serve(self, fd: int) -> NativeFuture[None]:
        """Serve a bound UDP socket (ownership of ``fd`` passes to the server); the future
        resolves once ``http`` has been shut down and every QUIC connection is closed."""
