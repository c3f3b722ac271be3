"""``Config``: the settings of ``ferrule.settings`` as attributes, and loading the app."""

from __future__ import annotations

import gc
import importlib
import inspect
import logging
import os
import random
import socket
import sys
import traceback
from typing import Any

from ferrule._logging import LOG_LEVELS, apply_log_config
from ferrule.checks import DEFAULT_HEAD_SIZE, as_list, parse_header
from ferrule.interface import InterfaceError, adapt
from ferrule.settings import BY_NAME, KEY_PASSWORD_ENV, SETTINGS, SettingError
from ferrule.sockets import listening_sockets

__all__ = [
    "KEY_PASSWORD_ENV",
    "STARTUP_FAILURE",
    "AppLoadError",
    "Config",
    "SettingError",
    "as_list",
    "parse_header",
]

#: The exit status of a server that failed before it served (the app would not load, the
#: socket would not bind, lifespan startup failed...), uvicorn's: a supervisor (ferrule's own,
#: or systemd with ``RestartPreventExitStatus=3``) should not restart it, as the next try
#: would fail the same way.
STARTUP_FAILURE = 3

#: uvicorn's ``--forwarded-allow-ips`` when ``$FORWARDED_ALLOW_IPS`` is not set: a proxy on
#: the same host, over IPv4 or IPv6.
DEFAULT_FORWARDED_ALLOW_IPS = "127.0.0.1,::1"


logger = logging.getLogger("ferrule.error")


class AppLoadError(Exception):
    """The app could not be imported or made: the message says why, for the user."""


class Config:
    """The server's settings (``ferrule.settings.SETTINGS``, each an attribute and a keyword,
    uvicorn's names) and the app: an ASGI app or a ``"module:attribute"`` string. A value the
    server cannot use raises ``ValueError`` naming the setting."""

    app: Any
    #: This process is a worker of a supervisor or reloader, which logs the running line.
    worker: bool
    #: A worker's end of the pipe its event loop writes heartbeats on (``Supervisor``'s).
    heartbeat_fd: int | None
    #: The listening sockets a worker inherits from its supervisor or reloader.
    inherited_fds: list[int]
    #: A worker's metrics region (an inherited file) and its slot in it (``ferrule.metrics``).
    metrics_slot: tuple[int, int] | None
    #: The supervisor's metrics (``ferrule.metrics.Metrics``), which its workers count into.
    metrics_owner: Any

    def __init__(self, app: Any, **options: Any) -> None:
        for name in options:
            if name not in BY_NAME:
                raise TypeError(f"Config() got an unexpected keyword argument {name!r}")
        self.app = app
        self.loaded = False
        self.loaded_app: Any = None
        self.worker = False
        self.heartbeat_fd = None
        self.inherited_fds = []
        self.metrics_slot = None
        self.metrics_owner = None
        for setting in SETTINGS:
            value = options[setting.name] if setting.name in options else setting.default_value()
            if setting.check is not None:
                try:
                    value = setting.check(value)
                except ValueError as exc:
                    raise SettingError(setting, str(exc)) from None
            setattr(self, setting.name, value)
        if self.workers is None:
            self.workers = workers_from_environment()
        if self.forwarded_allow_ips is None:
            self.forwarded_allow_ips = forwarded_allow_ips_from_environment()
        if self.http2 and self.http == "1":
            problem = "HTTP/2 cannot be on with http 1 (HTTP/1.1 only)"
            raise SettingError(BY_NAME["http2"], problem)
        if self.http3 and not (self.ssl_certfile and self.ssl_keyfile):
            problem = "HTTP/3 needs TLS: give ssl_certfile and ssl_keyfile"
            raise SettingError(BY_NAME["http3"], problem)
        if self.http3 and self.uds:
            raise SettingError(BY_NAME["http3"], "HTTP/3 is served on UDP, not on a Unix socket")
        if self.log_format == "json" and self.access_log_format is not None:
            problem = "a JSON access line has every field already: give one or the other"
            raise SettingError(BY_NAME["access_log_format"], problem)
        routes, mounts = self.static_path_route, self.static_path_mount
        if mounts and len(routes) != len(mounts):
            problem = (
                f"{len(mounts)} mounts need as many routes (--static-path-route for each "
                f"--static-path-mount, in the same order), not {len(routes)}"
            )
            raise SettingError(BY_NAME["static_path_route"], problem)
        self._max_requests: int | None = None
        # Applied now, as uvicorn's Config does: handlers a program or a test then adds to the
        # uvicorn loggers are not swept away when the server starts. A broken one stops the
        # server at startup (exit 3), where it is logged.
        self.log_config_problem: str | None = None
        if self.log_config is not None:
            try:
                apply_log_config(self.log_config)
            except ValueError as exc:
                self.log_config_problem = str(exc)

    def __getattr__(self, name: str) -> Any:
        # Reached only for a name that is no setting; declared so that the settings, set from
        # the table in __init__, read as attributes to a type checker.
        raise AttributeError(f"'Config' object has no attribute {name!r}")

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{s.name}={getattr(self, s.name)!r}"
            for s in SETTINGS
            if getattr(self, s.name) != s.default and s.name != "ssl_keyfile_password"
        )
        return f"Config(app={self.app!r}{', ' if shown else ''}{shown})"

    @property
    def is_ssl(self) -> bool:
        return bool(self.ssl_certfile or self.ssl_keyfile)

    @property
    def use_subprocess(self) -> bool:
        """Whether a parent process supervises workers (``--reload``, ``--workers``, or a
        worker recycling option)."""
        return bool(self.reload or self.workers > 1 or self.recycles_workers)

    @property
    def max_requests_stops(self) -> bool:
        """Whether the server stops itself after ``max_requests``: not a supervisor's worker,
        which asks to be replaced instead (its successor serves before it stops)."""
        return self.heartbeat_fd is None

    @property
    def recycles_workers(self) -> bool:
        """Whether a worker is replaced past a memory or age limit, which takes a parent
        process even for one worker."""
        return self.workers_max_rss is not None or self.workers_lifetime is not None

    @property
    def should_reload(self) -> bool:
        return isinstance(self.app, str) and self.reload

    def load(self) -> None:
        """uvicorn's ``Config.load``: loads the app now (``loaded_app``) rather than when the
        server starts; the server then serves that object."""
        self.loaded_app = self.load_app()
        self.loaded = True

    def bind_socket(self) -> socket.socket:
        """The listening socket of this config's address, bound now (inheritable, as a parent
        process shares it with its workers), for ``Server.serve(sockets=[...])``."""
        sock = listening_sockets(self)[0]
        sock.set_inheritable(True)
        return sock

    def inherited(self) -> dict[str, Any]:
        """The settings a worker process takes from its parent, by name, as JSON-ready data."""
        return {s.name: getattr(self, s.name) for s in SETTINGS if s.inherit}

    @property
    def log_level_number(self) -> int:
        if self.log_level is None:
            return logging.INFO
        if isinstance(self.log_level, int):
            return self.log_level
        return LOG_LEVELS[self.log_level]

    @property
    def connection_limit(self) -> int:
        """``max_connections``, or what the descriptor limit allows (raised to its hard limit)."""
        if self.max_connections is not None:
            return self.max_connections
        return max(64, raise_descriptor_limit() - 64)

    @property
    def max_head_size(self) -> int:
        """The request head limit the server enforces (``h11_max_incomplete_event_size``)."""
        size = self.h11_max_incomplete_event_size
        return DEFAULT_HEAD_SIZE if size is None else size

    @property
    def trusted_proxies(self) -> list[str]:
        ips = self.forwarded_allow_ips
        if ips is None:
            ips = forwarded_allow_ips_from_environment()
        if isinstance(ips, str):
            return [ip.strip() for ip in ips.split(",") if ip.strip()]
        return list(ips)

    @property
    def compression(self) -> tuple[list[tuple[str, int]], int, list[str]] | None:
        """``compress``, ``compress_min_size`` and ``compress_types`` as the server core reads
        them: ``None`` when compression is off, else the codings as (name, level) pairs."""
        if not self.compress:
            return None
        codings = [item.split(":") for item in self.compress.split(",")]
        pairs = [(name, int(level)) for name, level in codings]
        return pairs, self.compress_min_size, self.compress_types

    @property
    def static_files(self) -> tuple[list[tuple[str, str]], str | None, int, bool, bool] | None:
        """The ``static_path_*`` settings as the server core reads them: ``None`` when no
        directory is mounted, else the (route, directory) pairs, the directory file, the
        max-age, and the precompressed and fall-through switches."""
        if not self.static_path_mount:
            return None
        return (
            list(zip(self.static_path_route, self.static_path_mount, strict=True)),
            self.static_path_dir_to_file,
            self.static_path_expires,
            self.static_path_precompressed,
            self.static_path_fallthrough,
        )

    @property
    def websockets(self) -> bool:
        """Whether WebSockets are served: as uvicorn, a WSGI app has none (a2wsgi would close
        each at once)."""
        return self.ws == "auto" and self.interface != "wsgi"

    @property
    def max_requests(self) -> int | None:
        """``limit_max_requests`` plus its jitter, drawn once per process."""
        if self.limit_max_requests is None:
            return None
        if self._max_requests is None:
            jitter = random.randint(0, self.limit_max_requests_jitter)
            self._max_requests = self.limit_max_requests + jitter
        return self._max_requests

    def load_app(self) -> Any:
        """The ASGI3 app to serve: the object itself, or imported from ``module:attribute``,
        called first if a factory, then adapted to ASGI3 if an ASGI2 or WSGI app."""
        _raise_gc_threshold(self.gc_threshold)
        _raise_malloc_mmap_threshold()
        if self.app_dir is not None:
            sys.path.insert(0, self.app_dir)
        app = import_from_string(self.app) if isinstance(self.app, str) else self.app
        if self.factory:
            try:
                app = app()
            except TypeError as exc:
                raise AppLoadError(f"Error loading ASGI app factory: {exc}") from exc
        elif takes_no_arguments(app):
            # An ASGI app takes (scope, receive, send): one that takes nothing is a factory.
            logger.warning(
                "ASGI app factory detected. Using it, but please consider setting the --factory "
                "flag explicitly."
            )
            app = app()
        if not callable(app):
            raise AppLoadError(f"Error loading ASGI app: {self.app!r} is not callable.")
        try:
            app, self.interface = adapt(app, self.interface)
        except InterfaceError as exc:
            raise AppLoadError(str(exc)) from None
        return app


def settings_signature(*first: str, leaving: tuple[str, ...] = ()) -> inspect.Signature:
    """A signature naming ``first`` (positional) and then every setting with its default, for
    ``inspect`` and ``help()`` of the functions that take the settings as ``**options``. The
    settings ``leaving`` are left out, as uvicorn's signature has no such parameter (they are
    accepted all the same)."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    parameters = [inspect.Parameter(name, kind) for name in first]
    parameters += [
        inspect.Parameter(s.name, kind, default=s.default)
        for s in SETTINGS
        if s.name not in leaving
    ]
    return inspect.Signature(parameters)


#: ``app_dir`` is a parameter of uvicorn's ``run()`` only.
Config.__init__.__signature__ = settings_signature(  # type: ignore[attr-defined]
    "self", "app", leaving=("app_dir",)
)


def takes_no_arguments(obj: Any) -> bool:
    """Whether ``obj`` can be called with no arguments, as a factory can and an app cannot."""
    try:
        inspect.signature(obj).bind()
    except TypeError:  # arguments needed
        return False
    except ValueError:  # no signature to look at (some builtins): not a factory we can tell
        return False
    return True


def workers_from_environment() -> int:
    """uvicorn's default for ``--workers``: ``$WEB_CONCURRENCY`` (as Heroku and others set
    it) when set and not empty, else 1."""
    value = os.environ.get("WEB_CONCURRENCY", "").strip()
    if not value:
        return 1
    try:
        workers = int(value)
    except ValueError:
        workers = 0
    if workers < 1:
        problem = f"WEB_CONCURRENCY must be a number of worker processes, not {value!r}"
        raise SettingError(BY_NAME["workers"], problem)
    return workers


def forwarded_allow_ips_from_environment() -> str:
    """uvicorn's default for ``--forwarded-allow-ips``: ``$FORWARDED_ALLOW_IPS`` when set (even
    empty: no proxy is trusted), else the IPv4 and IPv6 loopback addresses."""
    return os.environ.get("FORWARDED_ALLOW_IPS", DEFAULT_FORWARDED_ALLOW_IPS)


def raise_descriptor_limit() -> int:
    """Raises this process's open-file limit to its hard limit; returns the new soft limit."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        hard = max(soft, 65536)
    if soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return min(soft, 65536)


def import_from_string(import_string: str) -> Any:
    module_name, _, attrs = import_string.partition(":")
    if not module_name or not attrs:
        raise AppLoadError(
            f'Error loading ASGI app. Import string "{import_string}" must be in format '
            '"<module>:<attribute>".'
        )
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name and not module_name.startswith(f"{exc.name}."):
            raise AppLoadError(_import_failed(module_name, exc)) from exc
        raise AppLoadError(
            f'Error loading ASGI app. Could not import module "{module_name}".'
        ) from exc
    except Exception as exc:
        # The app's own error (a syntax error, a missing setting): a startup failure (exit 3,
        # which stops a supervisor's respawns), its traceback in one log record.
        raise AppLoadError(_import_failed(module_name, exc)) from exc
    obj: Any = module
    try:
        for attr in attrs.split("."):
            obj = getattr(obj, attr)
    except AttributeError as exc:
        raise AppLoadError(
            f'Error loading ASGI app. Attribute "{attrs}" not found in module "{module_name}".'
        ) from exc
    return obj


def _import_failed(module_name: str, exc: BaseException) -> str:
    trace = "".join(traceback.format_exception(exc)).rstrip()
    return f'Error loading ASGI app. Importing module "{module_name}" raised:\n{trace}'


def _raise_gc_threshold(threshold: int) -> None:
    """Raises the collector's generation-0 threshold to ``threshold`` (0: leave it) where it is
    lower. Requests suspended on a database live across collections, and the interpreter's
    count of young objects climbs with each batch of requests the loop starts: at 700 (before
    3.13) a collection came every 36 requests on a one-query app, about 19,000 instructions a
    request; at 3.13's 2000, far fewer. Called before the app is imported, so an app imported
    by name that sets its own at import keeps it."""
    current = gc.get_threshold()
    if threshold and current[0] < threshold:
        gc.set_threshold(threshold, *current[1:])


def _raise_malloc_mmap_threshold() -> None:
    """Frees one 1 MiB block, which makes glibc's malloc raise its mmap threshold to 1 MiB
    (and its trim threshold to 2 MiB): its own rule for a freed block larger than the
    threshold. asyncio's socket transport reads into a new 256 KiB buffer at each read, which
    at the default 128 KiB threshold is mapped, shrunk (mremap) and unmapped every time: on
    asyncpg over asyncio, 3 system calls and 4 page faults a request, 125 against 89 us of
    CPU. A process often gets the raise by chance from some earlier free; this makes it sure.
    Elsewhere than glibc it is one allocation and nothing more."""
    block = bytearray(1 << 20)
    del block
