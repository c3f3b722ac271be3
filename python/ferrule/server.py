"""Running the server: one process (`serve`), or (`--workers`, `--reload`) a parent process
that supervises workers (`ferrule.supervisor`)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
from typing import Any

from ferrule import tls
from ferrule._bridge import new_event_loop
from ferrule._ferrule import Bridge, HttpServer
from ferrule._logging import apply_log_config, configure_logging
from ferrule.config import (
    STARTUP_FAILURE,
    AppLoadError,
    Config,
    forwarded_allow_ips_from_environment,
    workers_from_environment,
)
from ferrule.interface import InterfaceError, wsgi_middleware
from ferrule.lifespan import Lifespan, LifespanFailure
from ferrule.sockets import bound_socket_file, describe, listening_socket, remove_socket_file
from ferrule.supervisor import Reloader, Supervisor

logger = logging.getLogger("ferrule.error")


def run(app: Any, **options: Any) -> int:
    """Serve ``app`` (an ASGI app or a ``"module:attribute"`` string) until stopped by a signal.

    Options are uvicorn's, as keywords: ``host``, ``port``, ``uds``, ``workers``, ``loop``,
    ``lifespan``, ``root_path``, ``timeout_keep_alive``, ``timeout_graceful_shutdown``, ... .
    Returns the exit status: 0 after a clean shutdown, ``STARTUP_FAILURE`` (3, as uvicorn)
    if it could not start.
    """
    config = Config(app=app, **options)
    try:
        if config.log_config is not None:
            apply_log_config(config.log_config)
        if config.env_file is not None:
            load_env_file(config.env_file)
            if options.get("workers") is None:  # as uvicorn, the file may set it
                config.workers = workers_from_environment()
            if options.get("forwarded_allow_ips") is None:  # and this one
                config.forwarded_allow_ips = forwarded_allow_ips_from_environment()
        if config.interface == "wsgi":  # before any worker fails on it, again and again
            wsgi_middleware()
    except (ValueError, InterfaceError) as exc:
        configure_logging(config.log_level_number, config.use_colors)
        logger.error("%s", exc)
        return STARTUP_FAILURE
    configure_logging(config.log_level_number, config.use_colors)
    reload_options = config.reload_dirs or config.reload_includes or config.reload_excludes
    if reload_options and not config.reload:
        logger.warning("The reload options have no effect without reload (--reload).")
    if config.reload or config.workers > 1:
        if not isinstance(config.app, str):
            logger.error(
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
            return Reloader(config).run()
        return Supervisor(config).run()
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
    """Serve in this process: load the app (before the loop, as uvicorn), run lifespan, serve
    until SIGINT or SIGTERM."""
    starting = _starting(config)
    if starting is None:
        return STARTUP_FAILURE
    app, tls_files, sock = starting
    socket_file = bound_socket_file(config)
    loop = new_event_loop(config.loop)
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(_serve(config, app, sock, tls_files))
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        asyncio.set_event_loop(None)
        loop.close()
        remove_socket_file(config, socket_file)


# The bridge of the server running in this process, for counters() (None when not serving).
_serving_bridge: Bridge | None = None


def counters() -> dict[str, int] | None:
    """The coroutine bridge's counters (``ferrule.COUNTERS``: drives, GIL acquisitions, thread
    handoffs, task collisions...) of the server running in this process, or None if none is.
    For benchmarks and soak tests: an app can report them on a route of its own."""
    bridge = _serving_bridge
    return None if bridge is None else bridge.counters()


class Server:
    """uvicorn's ``Server``, for a program that runs its own event loop: ``await
    Server(Config(app, port=...)).serve()`` serves on that loop, next to the program's own
    tasks, until ``should_exit`` is set (or SIGINT/SIGTERM, when serving on the main thread;
    the handlers in place before are put back after). ``force_exit`` stops without the
    graceful wait. ``started`` is true while connections are accepted. A server that cannot
    start logs why and raises ``SystemExit(3)``, as uvicorn's does. ``sockets``: one bound
    socket to serve instead of the config's address (the server takes ownership of it)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.started = False
        self.should_exit = False
        self.force_exit = False

    def run(self, sockets: list[socket.socket] | None = None) -> None:
        """Serves on a new event loop of the config's kind, until stopped."""
        loop = new_event_loop(self.config.loop)
        try:
            loop.run_until_complete(self.serve(sockets))
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        config = self.config
        configure_logging(config.log_level_number, config.use_colors)
        if sockets is not None and len(sockets) != 1:
            raise ValueError("ferrule serves one socket: give a list of one")
        starting = _starting(config, sockets[0] if sockets else None)
        if starting is None:
            raise SystemExit(STARTUP_FAILURE)
        app, tls_files, sock = starting
        socket_file = None if sockets else bound_socket_file(config)
        stop = asyncio.Event()
        watcher = asyncio.ensure_future(self._watch(stop))
        try:
            status = await _serve(config, app, sock, tls_files, stop, self)
        finally:
            watcher.cancel()
            self.started = False
            remove_socket_file(config, socket_file)
        if status:
            raise SystemExit(status)

    async def _watch(self, stop: asyncio.Event) -> None:
        while not (self.should_exit or self.force_exit):
            await asyncio.sleep(0.1)
        stop.set()


def _starting(
    config: Config, sock: socket.socket | None = None
) -> tuple[Any, tls.TlsFiles | None, socket.socket] | None:
    """What serving needs first: the app, the TLS files, and the listening socket (``sock``
    if given, else the config's); None, the reason logged, if one of them cannot be had."""
    try:
        app = config.load_app()
        tls_files = tls.load(config)
        if sock is None:
            sock = listening_socket(config)
        else:
            sock.listen(config.backlog)  # as asyncio's create_server: bound is enough
    except (AppLoadError, tls.TlsConfigError, OSError) as exc:
        logger.error("%s", exc)
        return None
    return app, tls_files, sock


async def _serve(
    config: Config,
    app: Any,
    sock: socket.socket,
    tls_files: tls.TlsFiles | None,
    stop: asyncio.Event | None = None,
    embedded: Server | None = None,
) -> int:
    """Serves until ``stop`` is set, or SIGINT/SIGTERM. ``embedded``: the ``Server`` of a
    program's own loop, told when the server has started and whether to force the exit."""
    global _serving_bridge
    loop = asyncio.get_running_loop()
    bridge = _serving_bridge = Bridge(loop, budget=config.budget, trace=config.trace_requests)
    heartbeat: Heartbeat | None = None
    signals: _StopSignals | None = None
    try:
        lifespan = Lifespan(app, config.lifespan)
        try:
            await lifespan.startup()
        except LifespanFailure as exc:
            logger.error("%s", exc)
            sock.close()
            return STARTUP_FAILURE
        stop = stop or asyncio.Event()
        signals = _StopSignals(loop, stop)
        try:
            server = HttpServer(bridge, app, config, state=lifespan.state, tls=tls_files)
        except ValueError as exc:  # TLS material rustls refuses, an invalid --header
            logger.error("%s", exc)
            sock.close()
            await lifespan.shutdown()
            return STARTUP_FAILURE
        where = describe(sock, config)
        if sock.family == socket.AF_UNIX:
            stopped = server.serve_unix(sock.detach(), config.uds)
        else:
            stopped = server.serve_tcp(sock.detach())
        if not config.worker:  # a worker's parent said where, once for all (as uvicorn)
            logger.info("ferrule running on %s (Press CTRL+C to quit)", where)
        if embedded is not None:
            embedded.started = True
        if config.heartbeat_fd is not None:
            heartbeat = Heartbeat(loop, config.heartbeat_fd, config.timeout_worker_healthcheck)
        signalled = asyncio.ensure_future(stop.wait())
        serving = asyncio.ensure_future(_until(stopped))
        await asyncio.wait({signalled, serving}, return_when=asyncio.FIRST_COMPLETED)
        if serving.done() and not signalled.done():
            # Only --limit-max-requests stops the server by itself (or a failure, raised here).
            signalled.cancel()
            serving.result()
            logger.warning(
                "Maximum request limit of %d exceeded. Terminating process.",
                config.max_requests,
            )
        else:
            logger.info("Shutting down")
            forced = embedded is not None and embedded.force_exit
            server.shutdown(0.0 if forced else config.timeout_graceful_shutdown)
        await serving
        await _apps_finished(bridge, config.timeout_graceful_shutdown)
        signals.restore()  # a signal during lifespan shutdown is the program's again
        await lifespan.shutdown()
        logger.info("Finished server process [%d]", os.getpid())
        return 0
    finally:
        if signals is not None:
            signals.restore()
        if heartbeat is not None:
            heartbeat.stop()
        _serving_bridge = None
        bridge.close()


class _StopSignals:
    """SIGINT and SIGTERM set ``stop`` while serving, where the loop can take signals (the main
    thread); ``restore`` puts back the Python-level handlers there were before."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, loop: asyncio.AbstractEventLoop, stop: asyncio.Event) -> None:
        self.loop = loop
        self.previous = {signum: signal.getsignal(signum) for signum in self.SIGNALS}
        self.installed: list[int] = []
        for signum in self.SIGNALS:
            try:
                loop.add_signal_handler(signum, stop.set)
            except (RuntimeError, ValueError):  # not the main thread: the program's to stop us
                break
            self.installed.append(signum)

    def restore(self) -> None:
        for signum in self.installed:
            self.loop.remove_signal_handler(signum)
            previous = self.previous[signum]
            if previous is not None:
                signal.signal(signum, previous)
        self.installed = []


class Heartbeat:
    """A worker's sign of life to its supervisor: a byte written on an inherited pipe by the
    event loop itself, every second or so. An app that blocks the loop (``time.sleep`` in an
    ``async def``) stops them, which a thread beating instead would not."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, timeout: float) -> None:
        self.loop = loop
        self.fd = fd
        # Several beats per timeout, so one late tick is not a missed check.
        self.interval = min(1.0, timeout / 4) if timeout else 1.0
        os.set_blocking(fd, False)
        os.set_inheritable(fd, False)  # not to the app's own subprocesses
        self.handle: asyncio.TimerHandle | None = None
        self._beat()

    def _beat(self) -> None:
        try:
            os.write(self.fd, b".")
        except BlockingIOError:  # the pipe is full: the supervisor has beats to read
            pass
        except OSError:  # the supervisor is gone
            return
        self.handle = self.loop.call_later(self.interval, self._beat)

    def stop(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
        os.close(self.fd)


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
