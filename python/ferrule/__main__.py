"""``ferrule APP`` / ``python -m ferrule APP``: uvicorn's option names where the option exists."""

from __future__ import annotations

import argparse
import os
import platform
import sys

from ferrule.config import (
    HTTP_CHOICES,
    KEY_PASSWORD_ENV,
    LOG_LEVELS,
    SSL_CIPHERS,
    SSL_VERSIONS,
    WS_CHOICES,
    Config,
    parse_header,
)
from ferrule.interface import INTERFACES


def version_line() -> str:
    """What ``--version`` prints, in uvicorn's shape."""
    from ferrule import __version__

    python = f"{platform.python_implementation()} {platform.python_version()}"
    return f"ferrule {__version__} with {python} on {platform.system()}"


def boolean(text: str) -> bool:
    """A BOOLEAN option's value, spelled as uvicorn's (click's) accept it."""
    value = text.strip().lower()
    if value in ("1", "true", "t", "yes", "y", "on"):
        return True
    if value in ("0", "false", "f", "no", "n", "off"):
        return False
    raise argparse.ArgumentTypeError(f"{text!r} is not a valid boolean")


def header(text: str) -> tuple[str, str]:
    try:
        return parse_header(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ferrule", description="Serve an ASGI app with ferrule (a Rust-driven ASGI server)."
    )
    p.add_argument("app", help='the ASGI app as "module:attribute"')
    p.add_argument("--version", action="version", version=version_line())
    p.add_argument("--host", default="127.0.0.1", help="bind to this host (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8000, help="bind to this port (0: any free one)")
    p.add_argument("--uds", help="bind to this Unix domain socket instead")
    p.add_argument(
        "--fd",
        type=int,
        help="serve the listening socket inherited as this file descriptor (systemd socket "
        "activation, a process manager)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="number of worker processes (default: $WEB_CONCURRENCY if set, else 1; not with "
        "--reload)",
    )
    p.add_argument(
        "--timeout-worker-healthcheck",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="with --workers, replace a worker whose event loop has not run for this long (an "
        "app blocking it); default 30, 0: never",
    )
    p.add_argument("--heartbeat-fd", type=int, help=argparse.SUPPRESS)  # a worker's, to its parent
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)  # the parent logs
    p.add_argument(
        "--reload", action="store_true", help="restart the server when a watched file changes"
    )
    p.add_argument(
        "--reload-dir",
        action="append",
        dest="reload_dirs",
        metavar="DIR",
        help="watch this directory (repeatable; default: the current directory)",
    )
    p.add_argument(
        "--reload-include",
        action="append",
        dest="reload_includes",
        metavar="GLOB",
        help="also watch the files matching this glob (repeatable; besides '*.py')",
    )
    p.add_argument(
        "--reload-exclude",
        action="append",
        dest="reload_excludes",
        metavar="GLOB",
        help="do not watch the files and directories matching this glob (repeatable; "
        "besides '.*', '.py[cod]', '.sw.*', '~*')",
    )
    p.add_argument(
        "--reload-delay",
        type=float,
        default=0.25,
        metavar="SECONDS",
        help="seconds between two looks at the watched files (default 0.25)",
    )
    p.add_argument("--loop", choices=["auto", "asyncio", "uvloop"], default="auto")
    p.add_argument("--app-dir", default=".", help="put this directory first on sys.path")
    p.add_argument("--factory", action="store_true", help="APP is a factory returning the app")
    p.add_argument("--lifespan", choices=["auto", "on", "off"], default="auto")
    p.add_argument(
        "--interface",
        choices=list(INTERFACES),
        default="auto",
        help="how to call the app: asgi3, asgi2 (app(scope) returns the instance awaited with "
        "receive and send), wsgi (with a2wsgi) or auto (asgi2 for a class or a plain function "
        "of the scope alone, else asgi3; default)",
    )
    p.add_argument("--root-path", default="", help="the ASGI root_path of the app")
    p.add_argument(
        "--timeout-keep-alive",
        type=float,
        default=5.0,
        help="close a connection idle this many seconds: HTTP/1.1 between requests, HTTP/2 "
        "with no stream in progress (GOAWAY); a silent HTTP/2 peer is PINGed (default 5)",
    )
    p.add_argument("--timeout-graceful-shutdown", type=float, default=None)
    p.add_argument("--limit-concurrency", type=int, default=None)
    p.add_argument(
        "--limit-request-body", type=int, default=None, help="largest request body (bytes): 413"
    )
    p.add_argument(
        "--h11-max-incomplete-event-size",
        type=int,
        default=None,
        help="largest request line plus headers (bytes): 431 past it (default 65536)",
    )
    p.add_argument(
        "--max-connections",
        type=int,
        default=None,
        help="open connections per worker (default: what the descriptor limit allows)",
    )
    p.add_argument("--backlog", type=int, default=2048)
    p.add_argument("--log-level", choices=list(LOG_LEVELS), default="info")
    p.add_argument("--access-log", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument(
        "--use-colors",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="colour the log's level names and status codes (default: on each stream, stdout for "
        "access lines and stderr for the rest, that is a terminal)",
    )
    p.add_argument("--proxy-headers", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument(
        "--server-header",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="send 'server: ferrule' with every response (default: on)",
    )
    p.add_argument(
        "--limit-max-requests",
        type=int,
        default=None,
        metavar="N",
        help="stop after N requests (with --workers, the worker is replaced)",
    )
    p.add_argument(
        "--limit-max-requests-jitter",
        type=int,
        default=0,
        metavar="N",
        help="add 0 to N (drawn per worker) to --limit-max-requests, to stagger restarts",
    )
    p.add_argument(
        "--log-config",
        metavar="FILE",
        help="logging configuration: .json or .yaml (dictConfig), else an .ini (fileConfig)",
    )
    p.add_argument(
        "--env-file",
        metavar="FILE",
        help="environment variables to load before importing the app (needs python-dotenv)",
    )
    p.add_argument(
        "--date-header",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="send a 'date' header with every response (default: on)",
    )
    p.add_argument(
        "--header",
        action="append",
        dest="headers",
        metavar="NAME:VALUE",
        type=header,
        help="a header to send with every response (repeatable)",
    )
    p.add_argument(
        "--forwarded-allow-ips",
        default=None,
        metavar="IPS",
        help="comma-separated addresses of the proxies whose X-Forwarded-For/-Proto headers are "
        "trusted, or '*' (default: $FORWARDED_ALLOW_IPS if set, else 127.0.0.1,::1)",
    )
    p.add_argument(
        "--http",
        choices=list(HTTP_CHOICES),
        default="auto",
        help="HTTP versions: auto (HTTP/1.1, h2c with prior knowledge, ALPN over TLS), 1 or 2; "
        "uvicorn's h11 and httptools mean 1 (HTTP/1.1 only)",
    )
    p.add_argument(
        "--http2",
        action="store_true",
        help="uvicorn's switch for HTTP/2, which --http auto (the default) and 2 serve anyway; "
        "refused with --http 1",
    )
    p.add_argument(
        "--ws",
        choices=list(WS_CHOICES),
        default="auto",
        help="WebSockets: auto (on) or none; uvicorn's websockets, websockets-sansio and wsproto "
        "mean auto",
    )
    p.add_argument(
        "--ws-per-message-deflate",
        type=boolean,
        default=True,
        metavar="BOOLEAN",
        help="uvicorn's option, accepted either way: ferrule never negotiates permessage-deflate, "
        "so WebSocket frames go uncompressed (clients offering it fall back)",
    )
    p.add_argument(
        "--ws-max-size",
        type=int,
        default=16 * 1024 * 1024,
        help="largest WebSocket message in bytes (default 16 MiB): past it, close 1009",
    )
    p.add_argument(
        "--ws-max-queue",
        type=int,
        default=32,
        help="client messages queued for the app before the socket stops being read (default 32)",
    )
    p.add_argument(
        "--ws-ping-interval",
        type=float,
        default=20.0,
        help="seconds between the server's pings on each WebSocket (default 20; 0: none)",
    )
    p.add_argument(
        "--ws-ping-timeout",
        type=float,
        default=20.0,
        help="seconds a ping may go unanswered before the socket closes with 1011 (default 20)",
    )
    p.add_argument(
        "--reset-contextvars",
        action="store_true",
        help="start each request from an empty contextvars context, not the server's",
    )
    p.add_argument("--ssl-certfile", help="TLS: the certificate chain (PEM)")
    p.add_argument("--ssl-keyfile", help="TLS: the private key (PEM)")
    p.add_argument(
        "--ssl-keyfile-password",
        help=f"TLS: the password of an encrypted key file (or set {KEY_PASSWORD_ENV}, which ps "
        "does not show)",
    )
    p.add_argument("--ssl-ca-certs", help="TLS: CA certificates (PEM) to check client certificates")
    p.add_argument(
        "--ssl-cert-reqs",
        type=int,
        choices=[0, 1, 2],
        default=0,
        help="client certificates: 0 not asked, 1 optional, 2 required (as ssl.CERT_*)",
    )
    p.add_argument(
        "--ssl-version",
        type=int,
        default=SSL_VERSIONS[0],
        metavar="INT",
        help=f"TLS: accepted for uvicorn's command lines, as {SSL_VERSIONS[0]} (its default, "
        f"ssl.PROTOCOL_TLS_SERVER) or {SSL_VERSIONS[1]} (ssl.PROTOCOL_TLS) only: rustls "
        "negotiates TLS 1.3 or 1.2 itself",
    )
    p.add_argument(
        "--ssl-ciphers",
        metavar="TEXT",
        help=f"TLS: accepted for uvicorn's command lines, as {SSL_CIPHERS} only: rustls uses its "
        "own cipher suites (AES-GCM and ChaCha20-Poly1305)",
    )
    # The benchmark suite's ceiling: PATH answered by the server alone, in Rust (benches/).
    p.add_argument("--rust-hello-route", default=None, metavar="PATH", help=argparse.SUPPRESS)
    # The benchmark's GIL-relay figures: PATH answers the bridge counters as JSON, from Rust.
    p.add_argument("--stats-route", default=None, metavar="PATH", help=argparse.SUPPRESS)
    # ... and, with it, the per-request trace's latency histograms (gil_wait, first_drive,
    # resume_wait): a clock read per event, so off unless asked for.
    p.add_argument("--trace-requests", action="store_true", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> None:
    cli = parser()
    args = vars(cli.parse_args(argv))
    app = args.pop("app")
    # Taken out of the environment before the app is imported: the app has no use for it.
    from_env = os.environ.pop(KEY_PASSWORD_ENV, None)
    if args["ssl_keyfile_password"] is None:
        args["ssl_keyfile_password"] = from_env
    try:
        # Values argparse lets through but the server refuses (``--workers 0``): a usage
        # error naming the option, exit 2, as for any other bad option.
        Config(app=app, **args)
    except ValueError as exc:
        cli.error(str(exc))
    from ferrule.server import run

    sys.exit(run(app, **args))


if __name__ == "__main__":
    main()
