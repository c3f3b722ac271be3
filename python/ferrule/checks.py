"""The settings table's checks, and the values its choices accept.

Each check normalises one value or raises ``ValueError`` saying what is wrong with it; the caller
(``ferrule.settings``) names the setting.
"""

from __future__ import annotations

import argparse
import os
import ssl
from collections.abc import Callable
from typing import Any

from ferrule._ferrule import COMPRESS_LEVELS, HTTP_VERSIONS, MIN_HEAD_SIZE, check_compress_types
from ferrule._logging import LOG_LEVELS
from ferrule.interface import INTERFACES


def at_least(low: int) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value is not None and value < low:
            raise ValueError(f"must be at least {low}, not {value}")
        return value

    return check


def choice(aliases: dict[str, str]) -> Callable[[Any], Any]:
    def check(value: Any) -> Any:
        if value not in aliases:
            raise ValueError(f"must be one of {', '.join(aliases)}, not {value!r}")
        return aliases[value]

    return check


def protocol(aliases: dict[str, str], class_names: tuple[str, ...] = ()) -> Callable[[Any], Any]:
    """A choice, or one of uvicorn's protocol classes (``Config(http=H11Protocol)``), taken for
    the first of ``class_names`` its name holds (``h11`` in ``H11Protocol``), else ``auto``."""
    choose = choice(aliases)

    def check(value: Any) -> Any:
        if isinstance(value, str):
            return choose(value)
        if isinstance(value, type):
            name = value.__name__.lower()
            return choose(next((alias for alias in class_names if alias in name), "auto"))
        raise ValueError(f"must be one of {', '.join(aliases)} or a protocol class, not {value!r}")

    return check


def refused_ssl_context_factory(value: Any) -> None:
    if value is not None:
        raise ValueError(
            "ferrule's TLS is rustls, which cannot use an ssl.SSLContext: give ssl_certfile and "
            "ssl_keyfile (and ssl_ca_certs, ssl_cert_reqs) instead"
        )


def port(value: int) -> int:
    if not 0 <= value <= 65535:
        raise ValueError(f"must be a port number, 0 to 65535, not {value}")
    return value


def seconds_or_zero(value: float) -> float:
    if not 0 <= value < float("inf"):
        raise ValueError(f"must be 0 (no health check) or more seconds, not {value}")
    return value


def reload_delay(value: float) -> float:
    if not 0 < value < float("inf"):
        raise ValueError(f"must be more than 0 seconds, not {value}")
    return value


def log_level(value: str | int | None) -> str | int | None:
    if value is None or isinstance(value, int):
        return value
    if not isinstance(value, str) or value.lower() not in LOG_LEVELS:
        raise ValueError(f"must be one of {', '.join(LOG_LEVELS)} or a number, not {value!r}")
    return value.lower()


def access_log_format(value: str | None) -> str | None:
    """The format as the server core will parse it (one parser: the core's)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValueError(f"must be a string of atoms such as '%(h)s %(r)s', not {value!r}")
    from ferrule._ferrule import check_access_log_format

    check_access_log_format(value)
    return value


def header_names(value: list[str] | str | None) -> list[str]:
    """Request header names, lowercase, as ``"a, b"`` or a list."""
    if not value:
        return []
    names = [name.lower() for name in comma_separated(value) if name]
    for name in names:
        if not name.isascii() or not all(c.isalnum() or c in "!#$%&'*+-.^_`|~" for c in name):
            raise ValueError(f"not a header name: {name!r}")
    return names


def as_list(value: list[str] | str | None) -> list[str]:
    """An option given as one string, a list of them, or nothing, as a list."""
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def comma_separated(value: list[str] | str) -> list[str]:
    """An option given as ``"a, b"`` or as a list, as its stripped items."""
    return [item.strip() for item in (value.split(",") if isinstance(value, str) else value)]


def compress(value: list[str] | str | None) -> str | None:
    """``--compress``'s codings, each with its level, in the server's order of preference:
    given as ``"zstd,gzip:9"`` or a list of such items; ``None`` is off. Normalised to
    ``"zstd:3,gzip:9"``."""
    if value is None:
        return None
    chosen: dict[str, int] = {}
    for item in comma_separated(value):
        name, colon, level_text = item.partition(":")
        if name not in COMPRESS_LEVELS:
            known = ", ".join(COMPRESS_LEVELS)
            raise ValueError(f"{name!r} is not a coding this server compresses with ({known})")
        if name in chosen:
            raise ValueError(f"{name!r} is given twice")
        low, high, default = COMPRESS_LEVELS[name]
        try:
            level = int(level_text) if colon else default
        except ValueError:
            level = None
        if level is None or not low <= level <= high:
            raise ValueError(f"{name}'s level must be {low} to {high}, not {level_text!r}")
        chosen[name] = level
    return ",".join(f"{name}:{level}" for name, level in chosen.items())


#: ``--compress-types``' default: text, and the structured text formats web apps send.
DEFAULT_COMPRESS_TYPES = (
    "text/*",
    "application/json",
    "application/*+json",
    "application/javascript",
    "application/xml",
    "application/*+xml",
    "image/svg+xml",
    "application/wasm",
)


def compress_types(value: list[str] | str) -> list[str]:
    types = comma_separated(value)
    check_compress_types(types)
    return types


def routes(value: list[str] | str) -> list[str]:
    routes = as_list(value)
    for route in routes:
        if not route.startswith("/"):
            raise ValueError(f"a route is a URL path beginning with '/', not {route!r}")
    return routes


def directories(value: list[str] | str | None) -> list[str]:
    directories = as_list(value)
    for directory in directories:
        if not os.path.isdir(directory):
            raise ValueError(f"{directory!r} is not a directory")
    return directories


def parse_header(text: str) -> tuple[str, str]:
    """``"Name: value"`` as ``("Name", "value")`` (uvicorn's ``--header`` form)."""
    name, colon, value = text.partition(":")
    if not colon or not name.strip():
        raise ValueError(f"a header must be NAME:VALUE, not {text!r}")
    return name.strip(), value.strip()


def header(text: str) -> tuple[str, str]:
    try:
        return parse_header(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def headers(value: Any) -> list[tuple[str, str]]:
    return [parse_header(h) if isinstance(h, str) else tuple(h) for h in value or []]


#: uvicorn's ``--ssl-version`` values that ask for what rustls does: the highest version both
#: ends speak (TLS 1.2 or 1.3). uvicorn's default is ``PROTOCOL_TLS_SERVER``.
SSL_VERSIONS = (int(ssl.PROTOCOL_TLS_SERVER), int(ssl.PROTOCOL_TLS))
#: uvicorn's old default ``--ssl-ciphers``; no value (OpenSSL's defaults) is its new one.
SSL_CIPHERS = "TLSv1"


def ssl_version(value: int) -> int:
    if value not in SSL_VERSIONS:
        raise ValueError(
            f"{value}: ferrule's TLS (rustls) negotiates TLS 1.3 or 1.2, whichever "
            "is the highest the client speaks, and cannot be held to one version; leave "
            f"--ssl-version out, or give {SSL_VERSIONS[0]} (ssl.PROTOCOL_TLS_SERVER, uvicorn's "
            f"default) or {SSL_VERSIONS[1]} (ssl.PROTOCOL_TLS), which mean just that"
        )
    return value


def ssl_ciphers(value: str | None) -> str | None:
    if value not in (None, SSL_CIPHERS):
        raise ValueError(
            f"{value!r}: ferrule's TLS (rustls) uses its own cipher suites, which "
            "cannot be chosen: for TLS 1.3 AES-256-GCM, AES-128-GCM and ChaCha20-Poly1305; for "
            "TLS 1.2 the same with ECDHE (RSA or ECDSA keys); leave --ssl-ciphers out "
            f"(uvicorn's old default, {SSL_CIPHERS}, is taken to mean the same)"
        )
    return value


#: The request line and headers allowed in all, by default and at least: 64 KiB is more than
#: any browser sends; hyper's read buffer, twice the limit, cannot be under 8 KiB.
DEFAULT_HEAD_SIZE = 64 * 1024


def head_size(value: int | None) -> int | None:
    if value is not None and value < MIN_HEAD_SIZE:
        raise ValueError(f"must be at least {MIN_HEAD_SIZE} bytes, not {value}")
    return value


#: uvicorn's ``--http`` implementations and the version each is taken for: h11 and httptools
#: speak HTTP/1.1 only; zttp HTTP/1.1 and HTTP/2, as ``auto`` does.
UVICORN_HTTP = {"h11": "1", "httptools": "1", "zttp": "auto"}


def aliases_of(values: tuple[str, ...], aliases: dict[str, str]) -> dict[str, str]:
    """Each of ``values`` as itself, then ``aliases``; raises ``ValueError`` for an alias of a
    value not in ``values``, so that no choice is listed that the server core refuses."""
    strays = {name: value for name, value in aliases.items() if value not in values}
    if strays:
        raise ValueError(f"aliases of values not in {values}: {strays}")
    return {**{value: value for value in values}, **aliases}


#: ``--http``'s choices: the versions the server core takes, then uvicorn's names for them.
HTTP_CHOICES = aliases_of(HTTP_VERSIONS, UVICORN_HTTP)
#: uvicorn's ``--ws`` implementations all mean WebSockets on: ``auto`` here.
WS_CHOICES = {
    "auto": "auto",
    "none": "none",
    "websockets": "auto",
    "websockets-sansio": "auto",
    "wsproto": "auto",
}
#: uvicorn's ``zuvloop`` is a uvloop; its ``none`` leaves asyncio's default loop.
LOOPS = {
    "auto": "auto",
    "asyncio": "asyncio",
    "uvloop": "uvloop",
    "zuvloop": "uvloop",
    "none": "asyncio",
}
LIFESPANS = {"auto": "auto", "on": "on", "off": "off"}
#: ``--bridge-mode`` (``docs/design.md``, "Two modes").
BRIDGE_MODES = {"loop-only": "loop-only", "gated": "gated"}
#: Who steps the app's own tasks: ferrule's bridge (its task factory) or asyncio's ``Task``.
TASK_IMPLS = {"asyncio": "asyncio", "bridge": "bridge"}
PROXY_PROTOCOLS = {"off": "off", "v1": "v1", "v2": "v2", "auto": "auto"}
INTERFACE_CHOICES = {name: name for name in INTERFACES}
