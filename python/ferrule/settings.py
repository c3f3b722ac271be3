"""Every server setting, once: its name, default, help, command-line form and checks.

The command line (``ferrule.__main__``), ``ferrule.Config``, ``--help``, the worker processes'
configuration and ``docs/settings.md`` are all made from ``SETTINGS``. Adding a setting means
adding it here and using it where it acts (``config.NAME`` in Python, a field of the Rust
``Settings`` struct for the server core); nothing else lists it.

``scripts/settings_doc.py`` writes ``docs/settings.md`` from it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ferrule import checks
from ferrule._logging import LOG_LEVELS
from ferrule.checks import (
    BRIDGE_MODES,
    DEFAULT_HEAD_SIZE,
    HTTP_CHOICES,
    INTERFACE_CHOICES,
    LIFESPANS,
    LOOPS,
    SSL_CIPHERS,
    SSL_VERSIONS,
    TASK_IMPLS,
    WS_CHOICES,
    as_list,
)
from ferrule.interface import INTERFACES

#: The groups, in the order ``--help`` and ``docs/settings.md`` show them.
GROUPS = {
    "binding": "Binding",
    "app": "The application",
    "workers": "Workers and reload",
    "limits": "Timeouts and limits",
    "logging": "Logging",
    "proxies": "Proxies and response headers",
    "compression": "Response compression",
    "static": "Static files",
    "tls": "TLS",
    "websockets": "WebSockets",
    "http": "HTTP versions",
    "metrics": "Metrics",
    "diagnostics": "Diagnostics (for the benchmark suite)",
}

Form = Literal["value", "switch", "flag", "list"]


def boolean(text: str) -> bool:
    """A BOOLEAN option's value, spelled as uvicorn's (click's) accept it."""
    value = text.strip().lower()
    if value in ("1", "true", "t", "yes", "y", "on"):
        return True
    if value in ("0", "false", "f", "no", "n", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a valid boolean")


@dataclass(frozen=True)
class Setting:
    """One setting. ``name`` is the ``Config`` attribute and ``run()`` keyword; its option on
    the command line is ``--name-with-dashes`` (``flag`` when it differs)."""

    name: str
    group: str
    default: Any
    help: str
    #: How the command line gives it: ``value`` (``--x V``), ``switch`` (``--x``/``--no-x``),
    #: ``flag`` (``--x`` sets it true), ``list`` (``--x V``, repeatable).
    form: Form = "value"
    #: Parses one command-line value.
    type: Callable[[str], Any] = str
    choices: Sequence[str] | None = None
    metavar: str | None = None
    #: The default as ``--help`` and the docs say it, when ``default`` alone would not tell.
    default_text: str | None = None
    #: Normalises a value given to ``Config`` (CLI or Python) or raises ``ValueError`` saying why.
    check: Callable[[Any], Any] | None = None
    #: The option's name when it is not ``--`` + ``name`` with dashes.
    flag: str | None = None
    #: Whether uvicorn has this option, with this name and meaning.
    uvicorn: bool = True
    #: Whether worker processes take the parent's value (else each resolves its own).
    inherit: bool = True
    #: Left out of ``--help`` and the docs: the benchmark suite's hooks.
    hidden: bool = False
    #: Set only from Python (no command-line option).
    python_only: bool = False

    @property
    def option(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    def default_value(self) -> Any:
        """A fresh copy of the default (a list default is never shared between configs)."""
        return list(self.default) if isinstance(self.default, list) else self.default

    def describe_default(self) -> str:
        if self.default_text is not None:
            return self.default_text
        if self.default is None:
            return "none"
        if isinstance(self.default, bool):
            return "on" if self.default else "off"
        if self.default == []:
            return "none"
        return str(self.default)


class SettingError(ValueError):
    """A value a setting cannot take. ``str()`` names the setting as Python does
    (``workers: must be at least 1``); the command line names its option instead."""

    def __init__(self, setting: Setting, problem: str) -> None:
        super().__init__(f"{setting.name}: {problem}")
        self.setting = setting
        self.problem = problem


#: Where the key password may be given instead of ``--ssl-keyfile-password``, out of sight of
#: ``ps``.
KEY_PASSWORD_ENV = "FERRULE_SSL_KEYFILE_PASSWORD"

SETTINGS: tuple[Setting, ...] = (
    # Binding
    Setting("host", "binding", "127.0.0.1", "Bind to this address.", metavar="HOST"),
    Setting("port", "binding", 8000, "Bind to this port; 0 picks a free one.", type=int),
    Setting("uds", "binding", None, "Bind to this Unix domain socket instead.", metavar="PATH"),
    Setting(
        "fd",
        "binding",
        None,
        "Serve the listening socket inherited as this file descriptor (from a process "
        "manager). Under systemd's socket activation none is needed: the socket systemd "
        "passes is found and served by itself.",
        type=int,
    ),
    Setting(
        "backlog",
        "binding",
        2048,
        "The listening socket's queue of connections not yet accepted.",
        type=int,
    ),
    # The application
    Setting(
        "app_dir",
        "app",
        ".",
        "Put this directory first on sys.path before importing the app.",
        metavar="DIR",
        default_text="the current directory",
    ),
    Setting(
        "factory",
        "app",
        False,
        "APP names a factory: call it with no arguments to get the app.",
        form="flag",
    ),
    Setting(
        "interface",
        "app",
        "auto",
        "How to call the app: asgi3, asgi2 (app(scope) returns the instance awaited with "
        "receive and send), wsgi (through a2wsgi) or auto (asgi2 for a class or a plain "
        "function of the scope alone, else asgi3).",
        choices=INTERFACES,
        check=checks.choice(INTERFACE_CHOICES),
    ),
    Setting(
        "lifespan",
        "app",
        "auto",
        "Run the app's lifespan protocol: on (a failure stops the server), off, or auto (on, "
        "but an app that does not support it is served anyway).",
        choices=tuple(LIFESPANS),
        check=checks.choice(LIFESPANS),
    ),
    Setting("root_path", "app", "", "The ASGI root_path: where the app is mounted behind a proxy."),
    Setting(
        "env_file",
        "app",
        None,
        "Load environment variables from this file before importing the app (needs "
        "python-dotenv); variables already set win.",
        metavar="FILE",
        inherit=False,  # the workers inherit the environment it set
    ),
    Setting(
        "loop",
        "app",
        "auto",
        "The event loop: asyncio, uvloop, or auto (uvloop when installed); uvicorn's zuvloop "
        "means uvloop and none asyncio.",
        choices=tuple(LOOPS),
        check=checks.choice(LOOPS),
    ),
    Setting(
        "bridge_mode",
        "app",
        "loop-only",
        "How the app's coroutines are stepped: loop-only (on the event loop's thread, requests "
        "handed to it in batches by the I/O thread) or gated (asyncio's selector loop only: the "
        "I/O thread steps a request itself while the loop's thread waits in select, one thread "
        "hop less at low load, more CPU per request under load).",
        choices=tuple(BRIDGE_MODES),
        check=checks.choice(BRIDGE_MODES),
        uvicorn=False,
    ),
    Setting(
        "task_impl",
        "app",
        "asyncio",
        "Who steps the tasks the app creates (create_task, task groups, gather): asyncio, its "
        "own Task; or bridge, ferrule's core, as it steps each request's coroutine (still "
        "Task objects; a cancelled one goes back to Task).",
        choices=tuple(TASK_IMPLS),
        check=checks.choice(TASK_IMPLS),
        uvicorn=False,
    ),
    Setting(
        "reset_contextvars",
        "app",
        False,
        "Start each request and WebSocket from an empty contextvars context instead of a "
        "copy of the server's.",
        form="flag",
    ),
    Setting(
        "gc_freeze",
        "app",
        True,
        "Once the app has started (lifespan startup done), collect garbage once and move what "
        "is left out of the collector's way (gc.freeze()): collections while serving then "
        "walk only what requests made.",
        form="switch",
        uvicorn=False,
    ),
    Setting(
        "gc_threshold",
        "app",
        2000,
        "Before the app is imported, raise the collector's generation-0 threshold to this "
        "where the interpreter's is lower (gc.set_threshold; 2000 is CPython 3.13's default, "
        "700 before it), so requests that wait on a database do not set off a collection every "
        "few dozen requests; 0 leaves the interpreter's.",
        type=int,
        metavar="N",
        check=checks.at_least(0),
        uvicorn=False,
    ),
    # Workers and reload
    Setting(
        "workers",
        "workers",
        None,
        "Number of worker processes (not with --reload).",
        type=int,
        default_text="$WEB_CONCURRENCY if set, else 1",
        check=checks.at_least(1),
        inherit=False,
    ),
    Setting(
        "timeout_worker_healthcheck",
        "workers",
        30.0,
        "With --workers, replace a worker whose event loop has not run for this many seconds "
        "(an app blocking it); 0: never.",
        type=float,
        metavar="SECONDS",
        check=checks.seconds_or_zero,
    ),
    Setting(
        "limit_max_requests",
        "workers",
        None,
        "Stop after this many requests (with --workers or --reload, the worker is replaced).",
        type=int,
        metavar="N",
        check=checks.at_least(1),
    ),
    Setting(
        "limit_max_requests_jitter",
        "workers",
        0,
        "Add 0 to N, drawn per worker, to --limit-max-requests, so that workers do not all "
        "restart at once.",
        type=int,
        metavar="N",
        check=checks.at_least(0),
    ),
    Setting(
        "workers_max_rss",
        "workers",
        None,
        "Replace a worker whose resident memory passes this many MiB, its replacement "
        "serving before it stops (also with one worker).",
        type=int,
        metavar="MiB",
        check=checks.at_least(1),
        uvicorn=False,
        inherit=False,
    ),
    Setting(
        "workers_lifetime",
        "workers",
        None,
        "Replace a worker after it has run this many seconds, plus up to a tenth more drawn "
        "per worker, its replacement serving before it stops (also with one worker).",
        type=int,
        metavar="SECONDS",
        check=checks.at_least(1),
        uvicorn=False,
        inherit=False,
    ),
    Setting(
        "reload",
        "workers",
        False,
        "Restart the server when a watched file changes (for development).",
        form="flag",
        inherit=False,
    ),
    Setting(
        "reload_dirs",
        "workers",
        [],
        "Watch this directory (repeatable).",
        form="list",
        flag="--reload-dir",
        metavar="DIR",
        default_text="the current directory",
        check=checks.directories,
        inherit=False,
    ),
    Setting(
        "reload_includes",
        "workers",
        [],
        "Also watch the files matching this glob (repeatable), besides '*.py'.",
        form="list",
        flag="--reload-include",
        metavar="GLOB",
        check=as_list,
        inherit=False,
    ),
    Setting(
        "reload_excludes",
        "workers",
        [],
        "Do not watch the files and directories matching this glob (repeatable), besides "
        "'.*', '.py[cod]', '.sw.*' and '~*'.",
        form="list",
        flag="--reload-exclude",
        metavar="GLOB",
        check=as_list,
        inherit=False,
    ),
    Setting(
        "reload_delay",
        "workers",
        0.25,
        "Seconds between two looks at the watched files.",
        type=float,
        metavar="SECONDS",
        check=checks.reload_delay,
        inherit=False,
    ),
    # Timeouts and limits
    Setting(
        "timeout_keep_alive",
        "limits",
        5.0,
        "Close a connection idle this many seconds: HTTP/1.1 between requests, HTTP/2 with no "
        "stream in progress (GOAWAY); a silent HTTP/2 peer is PINGed.",
        type=float,
        metavar="SECONDS",
    ),
    Setting(
        "timeout_graceful_shutdown",
        "limits",
        None,
        "On shutdown, give requests and WebSockets in progress this many seconds to finish, "
        "then cancel them.",
        type=float,
        metavar="SECONDS",
        default_text="wait for them",
    ),
    Setting(
        "limit_concurrency",
        "limits",
        None,
        "Answer 503 to a request that arrives while this many are in progress.",
        type=int,
        metavar="N",
    ),
    Setting(
        "limit_request_body",
        "limits",
        None,
        "The largest request body in bytes: past it, 413.",
        type=int,
        metavar="BYTES",
        uvicorn=False,
    ),
    Setting(
        "h11_max_incomplete_event_size",
        "limits",
        None,
        "The largest request line and headers in all, in bytes, whichever HTTP version: 431 "
        "past it (414 for a long request line).",
        type=int,
        metavar="BYTES",
        default_text=str(DEFAULT_HEAD_SIZE),
        check=checks.head_size,
    ),
    Setting(
        "max_connections",
        "limits",
        None,
        "Open connections per worker; accepting waits for one to close past it.",
        type=int,
        metavar="N",
        default_text="what the open-file limit allows, raised to its hard limit",
        check=checks.at_least(1),
        uvicorn=False,
    ),
    # Logging
    Setting(
        "log_level",
        "logging",
        "info",
        "The server's log level.",
        choices=tuple(LOG_LEVELS),
        check=checks.log_level,
    ),
    Setting(
        "access_log",
        "logging",
        True,
        "Log a line per request (logger 'ferrule.access', on stdout by default).",
        form="switch",
    ),
    Setting(
        "access_log_format",
        "logging",
        None,
        "The access line in gunicorn's atoms, such as '%(h)s %(l)s %(u)s %(t)s \"%(r)s\" "
        '%(s)s %(b)s "%(f)s" "%(a)s"\' (see docs/operations.md, "Access log", for every '
        "atom); %(c)s is a WebSocket's close code. A '%' is written '%%'.",
        metavar="FORMAT",
        default_text="uvicorn's line, 'CLIENT - \"GET /path HTTP/1.1\" 200 OK'",
        check=checks.access_log_format,
        uvicorn=False,
    ),
    Setting(
        "log_format",
        "logging",
        "text",
        "How log lines are written: text (uvicorn's lines) or json (one JSON object a line, "
        "for log aggregators: an access line's time, client, method, path, query, HTTP "
        "version, status, bytes, duration, user agent and referer; the server's own lines' "
        "time, level, logger, message and traceback). Through a --log-config, the access "
        "record carries the same fields as attributes either way.",
        choices=("text", "json"),
        check=checks.choice({"text": "text", "json": "json"}),
        uvicorn=False,
    ),
    Setting(
        "access_log_headers",
        "logging",
        [],
        "Comma-separated request headers each JSON access line also gives, under "
        '"headers" (--log-format json); through a --log-config, the access record\'s '
        "headers attribute.",
        metavar="NAMES",
        check=checks.header_names,
        uvicorn=False,
    ),
    Setting(
        "access_log_buffer",
        "logging",
        4 * 1024 * 1024,
        "Bytes of access lines held while standard output is not being read (a stalled "
        "log collector, a full pipe); past it, lines are dropped and counted, and one line "
        "says how many once writing resumes. Requests are served meanwhile.",
        type=int,
        metavar="BYTES",
        default_text="4194304 (4 MiB: some 40,000 lines, a second or two of a worker's busiest)",
        check=checks.at_least(4096),
        uvicorn=False,
    ),
    Setting(
        "use_colors",
        "logging",
        None,
        "Colour the log's level names and status codes.",
        form="switch",
        default_text="on each stream (stdout for access lines, stderr for the rest) that is a "
        "terminal",
    ),
    Setting(
        "log_config",
        "logging",
        None,
        "Logging configuration: a .json or .yaml file (dictConfig), else an .ini file "
        "(fileConfig); from Python also a dictConfig dict.",
        metavar="FILE",
    ),
    # Proxies and response headers
    Setting(
        "proxy_headers",
        "proxies",
        True,
        "Take the client's address and scheme from X-Forwarded-For and X-Forwarded-Proto, "
        "when the peer is one of --forwarded-allow-ips.",
        form="switch",
    ),
    Setting(
        "forwarded_allow_ips",
        "proxies",
        None,
        "Comma-separated addresses or networks of the proxies whose X-Forwarded-* headers (and "
        "PROXY protocol headers) are trusted, or '*'.",
        metavar="IPS",
        default_text="$FORWARDED_ALLOW_IPS if set, else 127.0.0.1,::1",
    ),
    Setting(
        "proxy_protocol",
        "proxies",
        "off",
        "Read HAProxy's PROXY protocol header (v1, v2, or auto for either) at the start of each "
        "connection, before TLS, and take the scope's client and server from it. Accepted only "
        "from --forwarded-allow-ips (on a Unix socket, only with '*'); a connection from "
        "elsewhere, or without a valid header within --timeout-keep-alive, is closed and logged.",
        choices=tuple(checks.PROXY_PROTOCOLS),
        check=checks.choice(checks.PROXY_PROTOCOLS),
        uvicorn=False,
    ),
    Setting(
        "server_header",
        "proxies",
        True,
        "Send 'server: ferrule' with every response.",
        form="switch",
    ),
    Setting(
        "date_header",
        "proxies",
        True,
        "Send a 'date' header with every response.",
        form="switch",
    ),
    Setting(
        "headers",
        "proxies",
        [],
        "A header to send with every response (repeatable).",
        form="list",
        flag="--header",
        type=checks.header,
        metavar="NAME:VALUE",
        check=checks.headers,
    ),
    # Response compression
    Setting(
        "compress",
        "compression",
        None,
        "Compress responses with these codings, in the server's order of preference, each "
        "optionally at a level: zstd (1-19, default 3), br (0-11, default 4), gzip (1-9, "
        "default 6); e.g. 'zstd,br,gzip:9'. The coding is chosen by the request's "
        "Accept-Encoding; the work is done off the event loop's thread, and a streamed body is "
        "compressed and flushed chunk by chunk. Off when not given.",
        metavar="CODINGS",
        check=checks.compress,
        uvicorn=False,
    ),
    Setting(
        "compress_min_size",
        "compression",
        500,
        "Bodies shorter than this many bytes are sent as they are (by their Content-Length, or "
        "their length when sent in one message; a streamed body of unknown length is "
        "compressed), unless the client refuses the uncompressed form (identity;q=0).",
        type=int,
        metavar="BYTES",
        check=checks.at_least(0),
        uvicorn=False,
    ),
    Setting(
        "compress_types",
        "compression",
        list(checks.DEFAULT_COMPRESS_TYPES),
        "Comma-separated media types to compress: type/subtype, type/* (any subtype), "
        "type/*+suffix (as application/*+json) or */*. Responses without a Content-Type, with "
        "a Content-Encoding of their own, or with Cache-Control: no-transform are never "
        "compressed.",
        metavar="TYPES",
        default_text=", ".join(checks.DEFAULT_COMPRESS_TYPES),
        check=checks.compress_types,
        uvicorn=False,
    ),
    # Static files
    Setting(
        "static_path_mount",
        "static",
        [],
        "A directory whose files are served, without entering Python, under the "
        "--static-path-route at the same position (repeatable). Symbolic links that lead out "
        "of it, '..', NUL and backslashes in paths are refused.",
        form="list",
        metavar="DIR",
        check=checks.directories,
        uvicorn=False,
    ),
    Setting(
        "static_path_route",
        "static",
        ["/static"],
        "The URL prefix of the --static-path-mount at the same position (repeatable).",
        form="list",
        metavar="ROUTE",
        check=checks.routes,
        default_text="/static",
        uvicorn=False,
    ),
    Setting(
        "static_path_dir_to_file",
        "static",
        None,
        "The file served for a request that names a directory (as index.html); without it a "
        "directory is not found.",
        metavar="FILE",
        uvicorn=False,
    ),
    Setting(
        "static_path_expires",
        "static",
        86400,
        "Cache-Control: public, max-age=SECONDS on static files; 0 sends none.",
        type=int,
        metavar="SECONDS",
        check=checks.at_least(0),
        uvicorn=False,
    ),
    Setting(
        "static_path_precompressed",
        "static",
        False,
        "Send NAME.br, NAME.zst or NAME.gz in place of NAME when it is there and the client "
        "accepts its coding (brotli first when it weighs them alike).",
        form="switch",
        uvicorn=False,
    ),
    Setting(
        "static_path_fallthrough",
        "static",
        False,
        "Hand a request for a file that is not in the mount to the app (which can then answer "
        "its own 404 page), instead of answering 404.",
        form="switch",
        uvicorn=False,
    ),
    # TLS
    Setting("ssl_certfile", "tls", None, "The certificate chain (PEM).", metavar="FILE"),
    Setting("ssl_keyfile", "tls", None, "The private key (PEM).", metavar="FILE"),
    Setting(
        "ssl_keyfile_password",
        "tls",
        None,
        f"The password of an encrypted key file (or set {KEY_PASSWORD_ENV}, which ps does "
        "not show).",
        metavar="PASSWORD",
    ),
    Setting(
        "ssl_ca_certs",
        "tls",
        None,
        "CA certificates (PEM) to check client certificates with.",
        metavar="FILE",
    ),
    Setting(
        "ssl_cert_reqs",
        "tls",
        0,
        "Client certificates: 0 not asked for, 1 optional, 2 required (as ssl.CERT_*).",
        type=int,
        choices=(0, 1, 2),
    ),
    Setting(
        "ssl_version",
        "tls",
        SSL_VERSIONS[0],
        f"Accepted for uvicorn's command lines as {SSL_VERSIONS[0]} (ssl.PROTOCOL_TLS_SERVER) "
        f"or {SSL_VERSIONS[1]} (ssl.PROTOCOL_TLS) only: rustls negotiates TLS 1.3 or 1.2 "
        "itself.",
        type=int,
        metavar="INT",
        check=checks.ssl_version,
    ),
    Setting(
        "ssl_ciphers",
        "tls",
        None,
        f"Accepted for uvicorn's command lines as {SSL_CIPHERS} only: rustls uses its own "
        "cipher suites (AES-GCM and ChaCha20-Poly1305).",
        metavar="TEXT",
        check=checks.ssl_ciphers,
    ),
    # WebSockets
    Setting(
        "ws",
        "websockets",
        "auto",
        "WebSockets: auto (on) or none; uvicorn's websockets, websockets-sansio and wsproto "
        "mean auto.",
        choices=tuple(WS_CHOICES),
        check=checks.protocol(WS_CHOICES),
    ),
    Setting(
        "ws_max_size",
        "websockets",
        16 * 1024 * 1024,
        "The largest WebSocket message in bytes (once inflated, with permessage-deflate): past "
        "it, the socket closes with 1009.",
        type=int,
        metavar="BYTES",
    ),
    Setting(
        "ws_max_queue",
        "websockets",
        32,
        "Client messages queued for the app before the socket stops being read.",
        type=int,
        metavar="N",
        check=checks.at_least(1),
    ),
    Setting(
        "ws_ping_interval",
        "websockets",
        20.0,
        "Seconds between the server's pings on each WebSocket; 0: none.",
        type=float,
        metavar="SECONDS",
    ),
    Setting(
        "ws_ping_timeout",
        "websockets",
        20.0,
        "Seconds a ping may go unanswered before the socket closes with 1011; 0: forever.",
        type=float,
        metavar="SECONDS",
    ),
    Setting(
        "ws_per_message_deflate",
        "websockets",
        True,
        "Agree to permessage-deflate (RFC 7692) with WebSocket clients that offer it: messages "
        "both ways are compressed; --ws-max-size applies to the inflated size. false: decline it "
        "(clients fall back to uncompressed frames).",
        type=boolean,
        metavar="BOOLEAN",
    ),
    # HTTP versions
    Setting(
        "http",
        "http",
        "auto",
        "HTTP versions: auto (HTTP/1.1, HTTP/2 by prior knowledge, and by ALPN over TLS), 1 or "
        "2; uvicorn's h11 and httptools mean 1, its zttp auto.",
        choices=tuple(HTTP_CHOICES),
        check=checks.protocol(HTTP_CHOICES, class_names=tuple(checks.UVICORN_HTTP)),
    ),
    Setting(
        "http2",
        "http",
        False,
        "uvicorn's switch for HTTP/2, which --http auto and 2 serve anyway; refused with --http 1.",
        form="flag",
    ),
    Setting(
        "http2_max_concurrent_streams",
        "http",
        200,
        "The HTTP/2 streams (requests) one connection may have open at once, announced to the "
        "client in SETTINGS_MAX_CONCURRENT_STREAMS; a stream past it is refused. Also the app "
        "calls one connection may run at once: a stream reset while its app runs counts until "
        "the app returns, and a request past the limit waits for one to end.",
        type=int,
        metavar="N",
        check=checks.at_least(1),
        uvicorn=False,
    ),
    Setting(
        "http3",
        "http",
        False,
        "Also serve HTTP/3 (QUIC) on UDP at the TLS listener's host and port, with its "
        "certificate (needs --ssl-certfile and --ssl-keyfile); HTTP/1.1 and HTTP/2 responses "
        "over TLS then advertise it with Alt-Svc (docs/http3.md).",
        form="flag",
        uvicorn=False,
    ),
    Setting(
        "metrics",
        "metrics",
        False,
        "Serve Prometheus metrics (requests, durations, GIL waits, connections, workers) at "
        "/metrics on their own address, summed over all workers (docs/operations.md#metrics).",
        form="switch",
        uvicorn=False,
    ),
    Setting(
        "metrics_address",
        "metrics",
        "127.0.0.1",
        "With --metrics, the address the metrics endpoint listens on.",
        metavar="HOST",
        uvicorn=False,
    ),
    Setting(
        "metrics_port",
        "metrics",
        9090,
        "With --metrics, the port the metrics endpoint listens on (0 picks a free one).",
        type=int,
        metavar="PORT",
        check=checks.port,
        uvicorn=False,
    ),
    # Set from Python only, for programs embedding the server
    Setting(
        "callback_notify",
        "app",
        None,
        "An async function the server awaits every timeout_notify seconds while it serves.",
        python_only=True,
        inherit=False,
    ),
    Setting(
        "timeout_notify",
        "app",
        30,
        "Seconds between two calls of callback_notify.",
        python_only=True,
        inherit=False,
    ),
    Setting(
        "ssl_context_factory",
        "tls",
        None,
        "uvicorn's hook for an ssl.SSLContext: refused, as ferrule's TLS (rustls) cannot use "
        "one; give the certificate and key files.",
        python_only=True,
        check=checks.refused_ssl_context_factory,
        inherit=False,
    ),
    # Diagnostics: the benchmark suite's hooks, answered from Rust without the app.
    Setting(
        "rust_hello_route",
        "diagnostics",
        None,
        "Answer this path 'Hello, world!' from Rust alone: the HTTP stack's ceiling.",
        metavar="PATH",
        hidden=True,
        uvicorn=False,
    ),
    Setting(
        "stats_route",
        "diagnostics",
        None,
        "Answer this path with the bridge's counters as JSON.",
        metavar="PATH",
        hidden=True,
        uvicorn=False,
    ),
    Setting(
        "trace_requests",
        "diagnostics",
        False,
        "Add latency histograms (GIL wait, parse to first drive, resume wait) to the stats "
        "route: a clock read per event.",
        form="flag",
        hidden=True,
        uvicorn=False,
    ),
    Setting(
        "budget",
        "diagnostics",
        128,
        "Steps the bridge drives a coroutine before yielding to the event loop.",
        type=int,
        hidden=True,
        python_only=True,
        uvicorn=False,
    ),
)

BY_NAME = {setting.name: setting for setting in SETTINGS}
