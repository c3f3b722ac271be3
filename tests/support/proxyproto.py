"""PROXY protocol headers made by hand, and the request sent behind them, for
``tests/http/test_proxy_protocol.py`` and ``tests/hostile/test_proxy_protocol_hostile.py``.

The scope app (``tests/apps/scope_app.py``) answers ``repr`` of the scope: :func:`scope_of`
reads it back.
"""

from __future__ import annotations

import ast
import socket
import struct

REQUEST = b"GET /scope HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\r\n"
V2_SIGNATURE = b"\r\n\r\n\x00\r\nQUIT\n"
V2_PROXY = 0x21  # version 2, command PROXY
V2_LOCAL = 0x20  # version 2, command LOCAL
V2_TCP4 = 0x11  # AF_INET, SOCK_STREAM
#: The header's addresses: documentation networks, never the socket's own.
SOURCE = ("203.0.113.7", 45678)
DESTINATION = ("192.0.2.1", 8443)


def v1_line(src: tuple[str, int] = SOURCE, dst: tuple[str, int] = DESTINATION) -> bytes:
    """A v1 (text) header for TCP over IPv4."""
    return f"PROXY TCP4 {src[0]} {dst[0]} {src[1]} {dst[1]}\r\n".encode()


def v2_header(
    command: int = V2_PROXY,
    src: tuple[str, int] = SOURCE,
    dst: tuple[str, int] = DESTINATION,
    *,
    signature: bytes = V2_SIGNATURE,
    length: int | None = None,
) -> bytes:
    """A v2 (binary) header for TCP over IPv4: signature, version/command, family, big-endian
    length (``length`` overrides the true 12), source and destination addresses, then ports."""
    addresses = socket.inet_aton(src[0]) + socket.inet_aton(dst[0])
    addresses += struct.pack("!HH", src[1], dst[1])
    declared = len(addresses) if length is None else length
    return signature + struct.pack("!BBH", command, V2_TCP4, declared) + addresses


def scope_of(received: bytes) -> dict:
    """The scope the app answered (``repr`` of a dict after a 200's head)."""
    assert received.startswith(b"HTTP/1.1 200"), received[:300]
    return ast.literal_eval(received.split(b"\r\n\r\n", 1)[1].decode())
