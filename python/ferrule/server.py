"""Running the server: one process (`serve`), or (`--workers`, `--reload`) a parent process
that supervises workers (`ferrule.supervisor`)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import Any

from ferrule import systemd, tls
from ferrule._bridge import close_event_loop, new_event_loop
from ferrule._ferrule import BATCH_POLICY, Bridge, H3Server, HttpServer, TaskFactory
from ferrule._logging import TRACE, configure_logging, flush_access_lines
from ferrule.access_route import AccessRouting
from ferrule.config import (
    STARTUP_FAILURE,
    AppLoadError,
    Config,
    forwarded_allow_ips_from_environment,
    settings_signature,
    workers_from_environment,
)
from ferrule.handshake import Heartbeat
from ferrule.interface import InterfaceError, wsgi_middleware
from ferrule.lifespan import Lifespan, LifespanFailure
from ferrule.message_log import MessageLogger
from ferrule.metrics import Metrics, MetricsListenError, worker_region
from ferrule.reloader import Reloader
from ferrule.sockets import (
    bound_socket_file,
    close_all,
    describe,
    listening_sockets,
    quic_socket,
    remove_socket_file,
    unix_path,
)
from ferrule.supervisor import Supervisor

logger = logging.getLogger("ferrule.error")


def run(app: Any, **options: Any) -> int:
    """Serve ``app`` (an ASGI app or a ``"module:attribute"`` string) until stopped by a signal.

    Options are the settings' names (uvicorn's), as keywords: ``host``, ``port``, ``uds``,
    ``workers``, ``loop``, ``lifespan``, ``root_path``, ... (``docs/settings.md``). Returns 0
    after a clean shutdown. A server that could not start exits the program with status 3
    (``SystemExit``), as ``uvicorn.run`` does, so that a script calling it does not exit 0.
    """
    return run_config(Config(app=app, **options), options)


#: The notify hooks are uvicorn's ``Config``'s only.
run.__signature__ = settings_signature(  # type: ignore[attr-defined]
    "app", leaving=("callback_notify", "timeout_notify")
)


def run_config(config: Config, options: dict[str, Any]) -> int:
    """``run`` with the ``Config`` already made of ``options`` (the command line makes one to
    check them, and serves that one: its log config applied once)."""
    status = _run(config, options)
    if status == STARTUP_FAILURE:
        sys.exit(STARTUP_FAILURE)
    return status


def _run(config: Config, options: dict[str, Any]) -> int:
    try:
        if config.log_config_problem is not None:
            raise ValueError(config.log_config_problem)
        if config.env_file is not None:
            load_env_file(config.env_file)
            if options.get("workers") is None:  # as uvicorn, the file may set it
                config.workers = workers_from_environment()
            if options.get("forwarded_allow_ips") is None:  # and this one
                config.forwarded_allow_ips = forwarded_allow_ips_from_environment()
        if config.interface == "wsgi":  # before any worker fails on it, again and again
            wsgi_middleware()
    except (ValueError, InterfaceError) as exc:
        _configure_logging(config)
        logger.error("%s", exc)
        return STARTUP_FAILURE
    _configure_logging(config)
    reload_options = config.reload_dirs or config.reload_includes or config.reload_excludes
    if reload_options and not config.reload:
        logger.warning("The reload options have no effect without reload (--reload).")
    if config.use_subprocess:
        if not isinstance(config.app, str):
            logger.warning(  # uvicorn's level for it, though the server then exits 3
                "You must pass the application as an import string to enable 'reload' or 'workers'."
            )
            return STARTUP_FAILURE
        if isinstance(config.log_config, dict):
            logger.error(
                "With reload or workers, log_config must be a file: the workers read it themselves."
            )
            return STARTUP_FAILURE
        if config.reload:
            if config.workers > 1:
                logger.warning('"workers" flag is ignored when reloading is enabled.')
            if config.recycles_workers:
                logger.warning(
                    "--workers-max-rss and --workers-lifetime have no effect with --reload."
                )
            return Reloader(config).run()
        return Supervisor(config).run()
    return serve(config)


def _configure_logging(config: Config) -> None:
    given = config.log_level is not None
    configure_logging(
        config.log_level_number, config.use_colors, given=given, log_format=config.log_format
    )


def _freeze_startup_objects() -> None:
    """Takes what the app's import and lifespan startup left (modules, classes, routes, pools)
    out of the collector's generations: a full collection under load then walks only what
    requests made, not the whole app, and stalls the loop's thread that much less. The garbage
    of startup is collected first, so none of it is kept."""
    gc.collect()
    gc.freeze()
    logger.debug("gc.freeze(): %d objects out of the collector's way", gc.get_freeze_count())


def serve_worker(config: Config) -> int:
    """A worker process's life (``ferrule.worker``): the parent's log config and logging, then
    ``serve`` on the inherited socket."""
    _configure_logging(config)
    if config.log_config_problem is not None:
        logger.error("%s", config.log_config_problem)
        return STARTUP_FAILURE
    return serve(config)


def load_env_file(path: str) -> None:
    """uvicorn's ``--env-file``: the file's variables into ``os.environ`` (python-dotenv,
    as uvicorn uses; variables already set win). Worker processes inherit them."""
    try:
        from dotenv import load_dotenv
    except ImportError:
        raise ValueError("--env-file needs python-dotenv (pip install python-dotenv)") from None
    if not os.path.isfile(path):
        raise ValueError(f"--env-file: no file at {path}")
    load_dotenv(path)


def serve(config: Config) -> int:
    """Serve in this process until SIGINT or SIGTERM; returns the exit status. The app is
    imported before the event loop exists, as uvicorn does: a module that runs ``asyncio.run``
    at import works."""
    try:
        config.load()
    except AppLoadError as exc:
        logger.error("%s", exc)
        return STARTUP_FAILURE
    try:
        Server(config).run()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    return 0


# The bridge of the server running in this process, for counters() (None when not serving).
_serving_bridge: Bridge | None = None


def counters() -> dict[str, int] | None:
    """The coroutine bridge's counters (``ferrule.COUNTERS``: drives, GIL acquisitions, thread
    handoffs, task collisions...) of the server running in this process, or None if none is.
    For benchmarks and soak tests: an app can report them on a route of its own."""
    bridge = _serving_bridge
    return None if bridge is None else bridge.counters()


#: The signals that stop a server: the first gracefully, a second at once.
HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Server:
    """uvicorn's ``Server``: ``Server(config).run()`` serves on a new event loop, ``await
    Server(config).serve()`` on the running one, next to the program's own tasks. It stops when
    ``should_exit`` is set, on SIGINT or SIGTERM (on the main thread: ``capture_signals``), or
    after ``limit_max_requests``; a second signal (or ``force_exit``) cancels what is still
    running instead of waiting for it. ``started`` is true while connections are accepted. A
    server that cannot start logs why and raises ``SystemExit(3)``. ``sockets``: bound sockets
    to serve instead of the config's address (the server takes ownership of them).

    ``startup``, ``main_loop`` and ``shutdown`` are the three steps ``serve`` takes, for
    programs (and test helpers) that drive them one by one."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.started = False
        self.should_exit = False
        self.force_exit = False
        #: The listening servers, as asyncio's (``sockets``, ``close()``, ``wait_closed()``).
        self.servers: list[Listening] = []
        self.lifespan: Lifespan | None = None
        self.last_notified = 0.0
        self._captured_signals: list[int] = []
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._http: Any = None
        self._access: AccessRouting | None = None
        self._metrics: Metrics | None = None  # with --metrics, when this server serves them
        self._stopped: asyncio.Future[Any] | None = None
        self._bridge: Bridge | None = None
        self._heartbeat: Heartbeat | None = None
        self._socket_file: tuple[int, int] | None = None
        self._shutdown_done: asyncio.Future[None] | None = None
        # What this server tells systemd, when it is the process systemd started.
        self._systemd = systemd.Notifier() if not config.worker else None

    @functools.cached_property
    def limit_max_requests(self) -> int | None:
        """``--limit-max-requests`` with its jitter drawn: the requests this server takes."""
        return self.config.max_requests

    def run(self, sockets: list[socket.socket] | None = None) -> None:
        """Serves on a new event loop of the config's kind, until stopped."""
        loop = new_event_loop(self.config.loop)
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self.serve(sockets))
        finally:
            try:
                close_event_loop(loop)
            finally:
                asyncio.set_event_loop(None)

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        with self.capture_signals():
            await self._serve(sockets)

    async def _serve(self, sockets: list[socket.socket] | None) -> None:
        config = self.config
        _configure_logging(config)
        if config.log_config_problem is not None:
            logger.error("%s", config.log_config_problem)
            raise SystemExit(STARTUP_FAILURE)
        logger.info("Started server process [%d]", os.getpid())
        try:
            await self.startup(sockets)
            if not self.should_exit:
                await self.main_loop()
            if self.started:
                await self.shutdown(sockets)
            elif self.lifespan is not None:  # stopped during lifespan startup
                await self.lifespan.shutdown()
            logger.info("Finished server process [%d]", os.getpid())
        finally:
            self._close()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        """Loads the app, runs lifespan startup, binds (or takes ``sockets``) and serves."""
        config = self.config
        if sockets is not None and not sockets:
            raise ValueError("sockets: give at least one socket to serve")
        loop = self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        if self.should_exit:
            self._wake.set()
        starting = _starting(config, sockets)
        if starting is None:
            raise SystemExit(STARTUP_FAILURE)
        app, tls_files, socks = starting
        self._socket_file = None if sockets else bound_socket_file(config)
        metrics = self._start_bridge(loop, socks)
        self.lifespan = Lifespan(app, config.lifespan)
        try:
            await self.lifespan.startup()
        except LifespanFailure as exc:
            logger.error("%s", exc)
            close_all(socks)
            raise SystemExit(STARTUP_FAILURE) from None
        if self.should_exit:  # Ctrl-C during startup: stop without serving, as uvicorn
            close_all(socks)
            return
        if config.gc_freeze:
            _freeze_startup_objects()
        await self._start_core(app, tls_files, metrics, socks)
        self.servers = [Listening(socks)]
        if not config.worker:  # a worker's parent said where, once for all (as uvicorn)
            logger.info("ferrule running on %s (Press CTRL+C to quit)", describe(socks, config))
        if config.heartbeat_fd is not None:
            self._heartbeat = Heartbeat(
                loop, config.heartbeat_fd, config.timeout_worker_healthcheck
            )
        self.started = True
        if self._systemd is not None:
            self._systemd.send("READY=1", f"STATUS=Serving on {describe(socks, config)}")

    def _start_bridge(
        self, loop: asyncio.AbstractEventLoop, socks: list[socket.socket]
    ) -> tuple[Any, int] | None:
        """The bridge on ``loop``; returns what ``_count_metrics`` does. A metrics endpoint
        that cannot listen is a startup failure (``socks`` closed)."""
        global _serving_bridge
        try:
            metrics = self._count_metrics()
        except MetricsListenError as exc:
            logger.error("%s", exc)
            close_all(socks)
            raise SystemExit(STARTUP_FAILURE) from None
        # The GIL-wait metric is the trace's histograms.
        trace = self.config.trace_requests or metrics is not None
        try:
            self._bridge = Bridge(
                loop, budget=self.config.budget, trace=trace, mode=self.config.bridge_mode
            )
        except ValueError as exc:  # gated on a loop without a selector (uvloop)
            logger.error("--bridge-mode %s: %s", self.config.bridge_mode, exc)
            close_all(socks)
            raise SystemExit(STARTUP_FAILURE) from None
        if self.config.task_impl == "bridge":
            loop.set_task_factory(self._bridge.task_factory())
        if not BATCH_POLICY:
            logger.debug(
                "no SCHED_BATCH on %s: the I/O threads keep the default policy", sys.platform
            )
        _serving_bridge = self._bridge
        return metrics

    async def _start_core(
        self,
        app: Any,
        tls_files: Any,
        metrics: tuple[Any, int] | None,
        socks: list[socket.socket],
    ) -> None:
        """The server core serving duplicates of ``socks`` (and with ``--http3``, HTTP/3 beside
        the first TCP one): ``_stopped`` is done once it stops. On a failure, the reason is
        logged, ``socks`` closed and lifespan shut down before ``SystemExit(3)``."""
        assert self._bridge is not None and self.lifespan is not None
        config = self.config
        try:
            http = self._http = _http_server(
                self._bridge, app, config, self.lifespan.state, tls_files, metrics
            )
        except ValueError as exc:  # TLS material rustls refuses, an invalid --header
            logger.error("%s", exc)
            close_all(socks)
            await self.lifespan.shutdown()
            raise SystemExit(STARTUP_FAILURE) from None
        quic = None
        tcp = next((sock for sock in socks if sock.family != socket.AF_UNIX), None)
        if config.http3 and tls_files is not None and tcp is not None:
            try:
                quic = quic_socket(tcp)
                h3 = H3Server(http, tls_files)
            except (OSError, ValueError) as exc:
                logger.error("%s", exc)
                if quic is not None:
                    quic.close()
                close_all(socks)
                await self.lifespan.shutdown()
                raise SystemExit(STARTUP_FAILURE) from None
        self._access = AccessRouting(http, config)
        self._access.update()
        # The server core serves duplicates of the sockets; these stay for ``servers``.
        stopped = http.serve(
            [
                (
                    os.dup(sock.fileno()),
                    unix_path(sock, config) if sock.family == socket.AF_UNIX else None,
                )
                for sock in socks
            ]
        )
        if quic is not None and tcp is not None:
            # Stops with the TCP side (``shutdown`` is shared): done once both are.
            stopped = asyncio.gather(_until(stopped), _until(h3.serve(quic.detach())))
            # Each worker says so: its own socket joins the port's SO_REUSEPORT group here.
            host, port = tcp.getsockname()[:2]
            logger.info("ferrule serving HTTP/3 on udp %s:%d [%d]", host, port, os.getpid())
        self._stopped = asyncio.ensure_future(_until(stopped))

    def _count_metrics(self) -> tuple[Any, int] | None:
        """With ``--metrics``, the region and slot this server counts into: its supervisor's,
        if it is a worker of one, else a region of its own, whose endpoint it serves."""
        config = self.config
        if config.metrics_slot is not None:
            fd, slot = config.metrics_slot
            config.metrics_slot = None  # the descriptor is closed by now
            return worker_region(fd), slot
        if not config.metrics:
            return None
        metrics = Metrics(1)
        try:
            metrics.listen(config.metrics_address, config.metrics_port)
        except BaseException:
            metrics.close()
            raise
        self._metrics = metrics
        slot = metrics.claim()
        assert slot is not None
        return metrics.region, slot

    async def main_loop(self) -> None:
        """Serves until told to stop: ``should_exit``, a signal, or the server stopping itself
        (``--limit-max-requests``). Looks at ``should_exit`` every 0.1 s, as uvicorn does."""
        assert self._wake is not None and self._stopped is not None
        while not self.should_exit:
            await self._woken_or_stopped(timeout=0.1)
            if self._http.stopping:
                # The core stopped itself (--limit-max-requests): it accepts until these close.
                self._release_listeners()
            if self._access is not None:
                self._access.update()
            await self.on_tick()
            if self._systemd is not None:
                self._systemd.tick()  # the loop answers: the watchdog's ping
            if self._heartbeat is not None and not self._heartbeat.asked_replacement:
                if self._http.max_requests_reached:
                    logger.warning(
                        "Maximum request limit of %d exceeded. Serving until the parent "
                        "process's new worker does.",
                        self.limit_max_requests,
                    )
                    self._heartbeat.ask_replacement()
            if self._stopped.done():
                # The core stopped itself (--limit-max-requests, which it logged), or failed:
                # its failure is raised here.
                self._stopped.result()
                return

    async def on_tick(self) -> None:
        """uvicorn's ``callback_notify``, every ``timeout_notify`` seconds."""
        callback = self.config.callback_notify
        if callback is not None:
            now = time.monotonic()
            if now - self.last_notified > self.config.timeout_notify:
                self.last_notified = now
                await callback()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        """Stops accepting, lets requests and WebSockets in progress finish (at most
        ``timeout_graceful_shutdown``; a second signal or ``force_exit`` cancels them at once),
        then runs lifespan shutdown (not when forced)."""
        if self._shutdown_done is not None:  # by serve() and by its caller, or called twice
            await asyncio.shield(self._shutdown_done)
            return
        if self._stopped is None or self._bridge is None:
            return  # not serving
        if self._systemd is not None:
            self._systemd.send("STOPPING=1", "STATUS=Stopping")
        self._shutdown_done = asyncio.get_running_loop().create_future()
        try:
            await self._shut_down(sockets)
        finally:
            # The core's threads stop here, not when the interpreter exits: embedding code that
            # calls startup() and shutdown() itself never reaches serve()'s own close, and a
            # tokio thread still running at finalisation crashed the process now and then.
            self._close()
            self._shutdown_done.set_result(None)

    async def _shut_down(self, sockets: list[socket.socket] | None) -> None:
        assert self._stopped is not None and self._bridge is not None and self._http is not None
        logger.info("Shutting down")
        self._release_listeners()
        timeout = self.config.timeout_graceful_shutdown
        self._http.shutdown(0.0 if self.force_exit else timeout)
        # Idle connections close at once: the wait is announced only if a request or WebSocket
        # is still in progress after a moment (as uvicorn does).
        if not self.force_exit:
            await self._woken_or_stopped(timeout=0.1)
        if not self._stopped.done() and not self.force_exit and self._http.in_flight > 0:
            logger.info("Waiting for connections to close. (CTRL+C to force quit)")
        while not self._stopped.done() and not self.force_exit:
            await self._woken_or_stopped(timeout=None)
        if self.force_exit:
            self._http.shutdown(0.0)
        await self._stopped
        await _apps_finished(self._bridge, 0.0 if self.force_exit else timeout)
        self.started = False
        if self.lifespan is not None:
            if self.force_exit:
                await self.lifespan.cancel()
            else:
                await self.lifespan.shutdown()

    async def _woken_or_stopped(self, timeout: float | None) -> None:
        """Waits until a signal wakes the loop (``handle_exit``), the server core stops, or
        ``timeout`` seconds pass."""
        assert self._wake is not None and self._stopped is not None
        waker = asyncio.ensure_future(self._wake.wait())
        await asyncio.wait(
            {waker, self._stopped}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        waker.cancel()
        self._wake.clear()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """SIGINT and SIGTERM call ``handle_exit`` while serving (on the main thread only;
        elsewhere the program stops the server). The handlers there were before are put back
        after, and a signal received is then raised again for a handler the program had
        installed itself, so that it runs too."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {signum: signal.signal(signum, self.handle_exit) for signum in HANDLED_SIGNALS}
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)
        for signum in reversed(self._captured_signals):
            if previous[signum] not in (signal.SIG_DFL, signal.default_int_handler, None):
                signal.raise_signal(signum)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        """A stop signal: the first stops gracefully, the next forces the exit."""
        self._captured_signals.append(sig)
        if self.should_exit:
            self.force_exit = True
        else:
            self.should_exit = True
        if self._loop is not None and self._wake is not None:
            # Run between two bytecodes of the loop thread: set the event through the loop.
            with contextlib.suppress(RuntimeError):  # the loop is closed
                self._loop.call_soon_threadsafe(self._wake.set)

    def _release_listeners(self) -> None:
        """Closes this side's listening sockets (the core serves duplicates of them), and says
        so to the core: the kernel queues connections while any descriptor is open."""
        for server in self.servers:
            server.close()
        if self._http is not None:
            self._http.release_listeners()

    def _close(self) -> None:
        global _serving_bridge
        self.started = False
        # Every line of every request answered is out before the process can exit.
        flush_access_lines()
        for server in self.servers:
            server.close()
        if self._heartbeat is not None:
            self._heartbeat.stop()
            self._heartbeat = None
        if self._bridge is not None:
            if _serving_bridge is self._bridge:
                _serving_bridge = None
            # Tasks made from here on are asyncio's; those the bridge has go on being driven on
            # the loop's thread until the loop's own shutdown cancels them.
            loop = self._loop
            # The factory is a bound method of a TaskFactory.
            factory = getattr(loop.get_task_factory(), "__self__", None) if loop else None
            if isinstance(factory, TaskFactory):
                loop.set_task_factory(None)
            self._bridge.close()
            self._bridge = None
        remove_socket_file(self.config, self._socket_file)
        self._socket_file = None
        if self._metrics is not None:
            self._metrics.close()
            self._metrics = None


class Listening:
    """The listening sockets as ``Server.servers`` lists them, in the shape of ``asyncio.Server``
    (``sockets``, ``close()``, ``wait_closed()``, ``is_serving()``): the server core serves
    duplicates of them."""

    def __init__(self, socks: list[socket.socket]) -> None:
        self.sockets = list(socks)
        self._closed = False

    def is_serving(self) -> bool:
        return not self._closed

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            for sock in self.sockets:
                sock.close()

    async def wait_closed(self) -> None:
        return None


def _http_server(
    bridge: Bridge,
    app: Any,
    config: Config,
    state: dict[str, Any],
    tls_files: Any,
    metrics: tuple[Any, int] | None = None,
) -> Any:
    """The server core (Rust) for this app, reading its settings off ``config``."""
    return HttpServer(bridge, app, config, state=state, tls=tls_files, metrics=metrics)


def _starting(
    config: Config, socks: list[socket.socket] | None = None
) -> tuple[Any, tls.TlsFiles | None, list[socket.socket]] | None:
    """What serving needs first: the app, the TLS files, and the listening sockets (``socks``
    if given, else the config's); None, the reason logged, if one of them cannot be had."""
    try:
        app = config.loaded_app if config.loaded else config.load_app()
        if config.log_level_number <= TRACE:
            app = MessageLogger(app)
        tls_files = tls.load(config)
        if socks is None:
            socks = listening_sockets(config)
        else:
            for sock in socks:
                sock.listen(config.backlog)  # as asyncio's create_server: bound is enough
    except (AppLoadError, tls.TlsConfigError, OSError) as exc:
        logger.error("%s", exc)
        return None
    return app, tls_files, socks


async def _apps_finished(bridge: Bridge, timeout: float | None) -> None:
    """Waits for app coroutines still running once every connection has closed, as uvicorn
    waits for its request tasks: an app may go on after its response is whole (a2wsgi waits
    for its WSGI thread), and closing the bridge would cancel it, logged as an app error. At
    most the graceful-shutdown timeout, or 30 s without one (what the supervisor allows a
    worker before it kills it is that plus 5 s)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + (timeout if timeout is not None else 30.0)
    while bridge.in_flight and loop.time() < deadline:
        await asyncio.sleep(0.01)


async def _until(awaitable: Any) -> Any:
    return await awaitable
