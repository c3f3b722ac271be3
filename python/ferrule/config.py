"""Server options (named as uvicorn names them) and loading the app from an import string."""

from __future__ import annotations

import importlib
import logging
import os
import random
import ssl
import sys
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from ferrule.interface import INTERFACES, Interface, InterfaceError, adapt

#: The exit status of a server that failed before it served (the app would not load, the
#: socket would not bind, lifespan startup failed...), uvicorn's: a supervisor (ferrule's own,
#: or systemd with ``RestartPreventExitStatus=3``) should not restart it, as the next try
#: would fail the same way.
STARTUP_FAILURE = 3

LOG_LEVELS = {
    "critical": logging.CRITICAL,
    "error": logging.ERROR,
    "warning": logging.WARNING,
    "info": logging.INFO,
    "debug": logging.DEBUG,
    "trace": 5,
}

#: The request line and headers allowed in all (``h11_max_incomplete_event_size``), by default
#: and at least: 64 KiB is more than any browser sends; hyper's read buffer, twice the limit,
#: cannot be under 8 KiB.
DEFAULT_HEAD_SIZE = 64 * 1024
MIN_HEAD_SIZE = 4096

#: uvicorn's ``--http`` implementations (h11, httptools) speak HTTP/1.1 only: ``1`` here.
HTTP_CHOICES = {"auto": "auto", "1": "1", "2": "2", "h11": "1", "httptools": "1"}
#: uvicorn's ``--ws`` implementations all mean WebSockets on: ``auto`` here.
WS_CHOICES = {
    "auto": "auto",
    "none": "none",
    "websockets": "auto",
    "websockets-sansio": "auto",
    "wsproto": "auto",
}

#: uvicorn's ``--ssl-version`` values that ask for what rustls does: the highest version both
#: ends speak (TLS 1.2 or 1.3). uvicorn's default is ``PROTOCOL_TLS_SERVER``.
SSL_VERSIONS = (int(ssl.PROTOCOL_TLS_SERVER), int(ssl.PROTOCOL_TLS))
#: uvicorn's old default ``--ssl-ciphers``; no value (OpenSSL's defaults) is its new one.
SSL_CIPHERS = "TLSv1"
TLS_VERSIONS_SPOKEN = (
    "ferrule's TLS (rustls) negotiates TLS 1.3 or 1.2, whichever is the highest the client "
    "speaks, and cannot be held to one version"
)
TLS_CIPHERS_USED = (
    "ferrule's TLS (rustls) uses its own cipher suites, which cannot be chosen: for TLS 1.3 "
    "AES-256-GCM, AES-128-GCM and ChaCha20-Poly1305; for TLS 1.2 the same with ECDHE (RSA or "
    "ECDSA keys)"
)

#: Where the key password may be given instead of ``--ssl-keyfile-password``, out of sight of
#: ``ps``: the supervisor hands it to its workers this way.
KEY_PASSWORD_ENV = "FERRULE_SSL_KEYFILE_PASSWORD"


#: uvicorn's ``--forwarded-allow-ips`` when ``$FORWARDED_ALLOW_IPS`` is not set: a proxy on
#: the same host, over IPv4 or IPv6.
DEFAULT_FORWARDED_ALLOW_IPS = "127.0.0.1,::1"


class AppLoadError(Exception):
    """The app could not be imported or made: the message says why, for the user."""


@dataclass
class Config:
    app: Any
    host: str = "127.0.0.1"
    port: int = 8000
    uds: str | None = None
    fd: int | None = None
    # Worker processes; None: $WEB_CONCURRENCY if set (as uvicorn), else 1.
    workers: int | None = None
    # uvicorn's --timeout-worker-healthcheck: with workers, one whose event loop has not run
    # for this many seconds (an app blocking it) is replaced; 0: never. uvicorn's check is
    # answered by a thread, so only a dead process fails it; ferrule's comes from the event
    # loop, so it also catches an app blocking it. Hence gunicorn's worker timeout as the
    # default, not uvicorn's 5 s: an `async def` that blocks for 10 s is bad, but killing its
    # worker and every request in it would be worse than what uvicorn does.
    timeout_worker_healthcheck: float = 30.0
    # A worker's end of the pipe its event loop writes heartbeats on (Supervisor passes it).
    heartbeat_fd: int | None = None
    # This process is a worker of a supervisor or reloader, which logs the running line.
    worker: bool = False
    # uvicorn's --reload: a parent process restarts the worker when a watched file changes.
    reload: bool = False
    # Watched directories (default: the current one) ...
    reload_dirs: list[str] | str | None = None
    # ... and in them, the files matching an include glob and no exclude glob (added to
    # uvicorn's defaults, "*.py" and ".*", ".py[cod]", ".sw.*", "~*"; see server.WatchedFiles).
    reload_includes: list[str] | str | None = None
    reload_excludes: list[str] | str | None = None
    # Seconds between two looks at the files.
    reload_delay: float = 0.25
    loop: Literal["auto", "asyncio", "uvloop"] = "auto"
    app_dir: str | None = "."
    factory: bool = False
    # uvicorn's --interface: how the app is called. ASGI2 and WSGI apps are adapted to ASGI3
    # when loaded; "auto" tells ASGI2 from ASGI3 (see ferrule.interface.detect). After
    # load_app, the interface the app is served as.
    interface: Interface = "auto"
    lifespan: Literal["auto", "on", "off"] = "auto"
    root_path: str = ""
    timeout_keep_alive: float = 5.0
    timeout_graceful_shutdown: float | None = None
    limit_concurrency: int | None = None
    limit_request_body: int | None = None
    # uvicorn's --h11-max-incomplete-event-size: here the limit on a request's line and headers
    # in all, past which the client gets 431 (414 for a long line); None is 64 KiB.
    h11_max_incomplete_event_size: int | None = None
    max_connections: int | None = None
    backlog: int = 2048
    log_level: str | int | None = "info"
    access_log: bool = True
    # uvicorn's --use-colors: colour the level names (and access lines' status) of ferrule's
    # default log format; None: on each stream (access lines on stdout, the rest on stderr)
    # that is a terminal.
    use_colors: bool | None = None
    proxy_headers: bool = True
    server_header: bool = True
    date_header: bool = True
    # uvicorn's --limit-max-requests: a worker stops (and is replaced) after this many requests.
    limit_max_requests: int | None = None
    # Up to this many more, drawn per process, so workers do not all restart at once.
    limit_max_requests_jitter: int = 0
    # uvicorn's --log-config: a dictConfig dict, or a .json, .yaml/.yml or fileConfig .ini file.
    log_config: str | dict[str, Any] | None = None
    # uvicorn's --env-file: variables loaded (python-dotenv) before the app is imported.
    env_file: str | None = None
    # Added to every response, as uvicorn's --header: (name, value) pairs or "Name:Value".
    headers: list[tuple[str, str]] | list[str] | None = None
    # uvicorn's --forwarded-allow-ips: the peers whose proxy headers are obeyed, a list or
    # "a,b"; None: $FORWARDED_ALLOW_IPS if set (as uvicorn), else "127.0.0.1,::1".
    forwarded_allow_ips: str | list[str] | None = None
    rust_hello_route: str | None = None
    stats_route: str | None = None
    trace_requests: bool = False
    # HTTP versions: auto, 1 or 2; uvicorn's h11 and httptools are taken for 1.
    http: str = "auto"
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_keyfile_password: str | None = None
    ssl_ca_certs: str | None = None
    ssl_cert_reqs: int = 0
    # uvicorn's --ssl-version and --ssl-ciphers: rustls picks both itself, so only the values
    # that ask for what it does are accepted (SSL_VERSIONS, SSL_CIPHERS or None).
    ssl_version: int = int(ssl.PROTOCOL_TLS_SERVER)
    ssl_ciphers: str | None = None
    # WebSockets: auto (on) or none; uvicorn's implementation names are taken for auto.
    ws: str = "auto"
    ws_max_size: int = 16 * 1024 * 1024
    ws_max_queue: int = 32
    # uvicorn's --http2: HTTP/2 on, which ferrule's --http auto is anyway.
    http2: bool = False
    # uvicorn's --ws-per-message-deflate: accepted, but ferrule never compresses WebSocket
    # frames (the extension is not negotiated, so clients offering it send plain frames).
    ws_per_message_deflate: bool = True
    # uvicorn's defaults; None or 0 turns pings (or their timeout) off.
    ws_ping_interval: float | None = 20.0
    ws_ping_timeout: float | None = 20.0
    # uvicorn's --reset-contextvars: each request (and WebSocket) starts from an empty
    # contextvars context instead of a copy of the one the server started in.
    reset_contextvars: bool = False
    budget: int = 128
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.workers is None:
            self.workers = workers_from_environment()
        if self.workers < 1:
            raise ValueError("workers must be at least 1")
        if self.forwarded_allow_ips is None:
            self.forwarded_allow_ips = forwarded_allow_ips_from_environment()
        if not 0 <= self.timeout_worker_healthcheck < float("inf"):
            raise ValueError(
                "timeout_worker_healthcheck must be 0 (no health check) or more seconds, not "
                f"{self.timeout_worker_healthcheck}"
            )
        if self.limit_max_requests is not None and self.limit_max_requests < 1:
            raise ValueError("limit_max_requests must be at least 1")
        if self.limit_max_requests_jitter < 0:
            raise ValueError("limit_max_requests_jitter must be at least 0")
        if self.ws_max_queue < 1:
            raise ValueError("ws_max_queue must be at least 1")
        if self.max_head_size < MIN_HEAD_SIZE:
            raise ValueError(
                f"h11_max_incomplete_event_size must be at least {MIN_HEAD_SIZE} bytes, not "
                f"{self.max_head_size}"
            )
        if self.loop not in ("auto", "asyncio", "uvloop"):
            raise ValueError(f"loop must be auto, asyncio or uvloop, not {self.loop!r}")
        if self.http not in HTTP_CHOICES:
            raise ValueError(f"http must be one of {', '.join(HTTP_CHOICES)}, not {self.http!r}")
        self.http = HTTP_CHOICES[self.http]
        if self.http2 and self.http == "1":
            raise ValueError("http2: HTTP/2 cannot be on with http 1 (HTTP/1.1 only)")
        if self.ws not in WS_CHOICES:
            raise ValueError(f"ws must be one of {', '.join(WS_CHOICES)}, not {self.ws!r}")
        self.ws = WS_CHOICES[self.ws]
        if self.interface not in INTERFACES:
            raise ValueError(
                f"interface must be one of {', '.join(INTERFACES)}, not {self.interface!r}"
            )
        if self.lifespan not in ("auto", "on", "off"):
            raise ValueError(f"lifespan must be auto, on or off, not {self.lifespan!r}")
        if self.ssl_version not in SSL_VERSIONS:
            raise ValueError(
                f"ssl_version {self.ssl_version}: {TLS_VERSIONS_SPOKEN}; leave --ssl-version "
                f"out, or give {SSL_VERSIONS[0]} (ssl.PROTOCOL_TLS_SERVER, uvicorn's default) or "
                f"{SSL_VERSIONS[1]} (ssl.PROTOCOL_TLS), which mean just that"
            )
        if self.ssl_ciphers not in (None, SSL_CIPHERS):
            raise ValueError(
                f"ssl_ciphers {self.ssl_ciphers!r}: {TLS_CIPHERS_USED}; leave --ssl-ciphers out "
                f"(uvicorn's old default, {SSL_CIPHERS}, is taken to mean the same)"
            )
        if not 0 < self.reload_delay < float("inf"):
            raise ValueError(f"reload_delay must be more than 0 seconds, not {self.reload_delay}")
        self.reload_dirs = as_list(self.reload_dirs)
        self.reload_includes = as_list(self.reload_includes)
        self.reload_excludes = as_list(self.reload_excludes)
        for directory in self.reload_dirs:
            if not os.path.isdir(directory):
                raise ValueError(f"reload_dirs: {directory!r} is not a directory")
        self.headers = [parse_header(h) if isinstance(h, str) else h for h in self.headers or []]

    @property
    def log_level_number(self) -> int:
        if self.log_level is None:
            return logging.INFO
        if isinstance(self.log_level, int):
            return self.log_level
        try:
            return LOG_LEVELS[self.log_level.lower()]
        except KeyError:
            raise ValueError(f"unknown log level {self.log_level!r}") from None

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
    def websockets(self) -> bool:
        """Whether WebSockets are served: as uvicorn, a WSGI app has none (a2wsgi would close
        each at once)."""
        return self.ws == "auto" and self.interface != "wsgi"

    @cached_property
    def max_requests(self) -> int | None:
        """``limit_max_requests`` plus its jitter, drawn once (per process, as each has its own
        ``Config``), so that workers do not all restart at once."""
        limit = self.limit_max_requests
        if limit is not None and self.limit_max_requests_jitter:
            limit += random.randint(0, self.limit_max_requests_jitter)
        return limit

    @property
    def trusted_proxies(self) -> list[str]:
        ips = self.forwarded_allow_ips
        if ips is None:
            ips = forwarded_allow_ips_from_environment()
        if isinstance(ips, str):
            return [ip.strip() for ip in ips.split(",") if ip.strip()]
        return list(ips)

    def load_app(self) -> Any:
        """The ASGI3 app to serve: the object itself, or imported from ``module:attribute``,
        called first if a factory, then adapted to ASGI3 if an ASGI2 or WSGI app."""
        if self.app_dir is not None:
            sys.path.insert(0, self.app_dir)
        app = import_from_string(self.app) if isinstance(self.app, str) else self.app
        if self.factory:
            try:
                app = app()
            except TypeError as exc:
                raise AppLoadError(f"Error loading ASGI app factory: {exc}") from exc
        if not callable(app):
            raise AppLoadError(f"Error loading ASGI app: {self.app!r} is not callable.")
        try:
            app, self.interface = adapt(app, self.interface)
        except InterfaceError as exc:
            raise AppLoadError(str(exc)) from None
        return app


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
        raise ValueError(
            f"workers: WEB_CONCURRENCY must be a number of worker processes, not {value!r}"
        )
    return workers


def forwarded_allow_ips_from_environment() -> str:
    """uvicorn's default for ``--forwarded-allow-ips``: ``$FORWARDED_ALLOW_IPS`` when set (even
    empty: no proxy is trusted), else the IPv4 and IPv6 loopback addresses."""
    return os.environ.get("FORWARDED_ALLOW_IPS", DEFAULT_FORWARDED_ALLOW_IPS)


def as_list(value: list[str] | str | None) -> list[str]:
    """An option given as one string, a list of them, or nothing, as a list."""
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


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
            raise
        raise AppLoadError(
            f'Error loading ASGI app. Could not import module "{module_name}".'
        ) from exc
    obj: Any = module
    try:
        for attr in attrs.split("."):
            obj = getattr(obj, attr)
    except AttributeError as exc:
        raise AppLoadError(
            f'Error loading ASGI app. Attribute "{attrs}" not found in module "{module_name}".'
        ) from exc
    return obj


def parse_header(text: str) -> tuple[str, str]:
    """``"Name: value"`` as ``("Name", "value")`` (uvicorn's ``--header`` form)."""
    name, colon, value = text.partition(":")
    if not colon or not name.strip():
        raise ValueError(f"a header must be NAME:VALUE, not {text!r}")
    return name.strip(), value.strip()
