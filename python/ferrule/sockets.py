"""The listening socket: bound (TCP or Unix) or inherited from a parent process, how it is
named in the log, and removing a Unix socket file on exit."""

from __future__ import annotations

import os
import socket
import stat
from typing import Protocol

from ferrule import systemd, upgrade


class Address(Protocol):
    """What of a ``Config`` says where to listen: its address settings, by name."""

    host: str | None
    port: int
    uds: str | None
    fd: int | None
    backlog: int
    ssl_certfile: str | None


def describe(sock: socket.socket, config: Address) -> str:
    if sock.family == socket.AF_UNIX:
        return f"unix socket {config.uds or sock.getsockname()}"
    host, port = sock.getsockname()[:2]
    if sock.family == socket.AF_INET6:
        host = f"[{host}]"
    scheme = "https" if config.ssl_certfile else "http"
    return f"{scheme}://{host}:{port}"


def bound_socket_file(config: Address) -> tuple[int, int] | None:
    """(device, inode) of the Unix socket file ``listening_socket`` just bound at ``uds``
    (not one inherited with ``fd``): this process removes it on exit, as uvicorn does."""
    if not config.uds or config.fd is not None:
        return None
    try:
        found = os.stat(config.uds)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def remove_socket_file(config: Address, identity: tuple[int, int] | None) -> None:
    """Remove the socket file at ``uds`` if it is still the one this process bound (not a
    file put in its place since, by another server or by hand)."""
    if identity is None or config.uds is None:
        return
    try:
        found = os.lstat(config.uds)
        if stat.S_ISSOCK(found.st_mode) and (found.st_dev, found.st_ino) == identity:
            os.unlink(config.uds)
    except OSError:  # gone already, or not ours to remove
        pass


def quic_socket(tcp: socket.socket) -> socket.socket:
    """The UDP socket HTTP/3 is served on: at ``tcp``'s address and port. SO_REUSEPORT lets
    each worker bind its own, and the kernel then hashes each client's address and port to
    one of them, so a QUIC connection's datagrams all reach the worker that holds its state (a
    socket bound once and inherited would hand each datagram to whichever worker reads first)."""
    address = tcp.getsockname()
    sock = socket.socket(tcp.family, socket.SOCK_DGRAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise OSError(
            exc.errno,
            f"error while attempting to bind HTTP/3 on udp {address[0]}:{address[1]}: "
            f"{exc.strerror.lower() if exc.strerror else exc}",
        ) from None
    sock.setblocking(False)
    return sock


def listening_socket(config: Address) -> socket.socket:
    """The socket to serve: inherited (``fd``), passed by systemd (socket activation, unless
    ``fd`` or ``uds`` says otherwise), a Unix socket, or TCP; bound and listening."""
    handed = upgrade.inherited_fd()
    activated: list[tuple[int, str]] = []
    if handed is None and config.fd is None and not config.uds:
        activated = systemd.listen_fds()
    if len(activated) > 1:
        names = ", ".join(f"{fd} ({name})" for fd, name in activated)
        raise OSError(
            f"systemd passed {len(activated)} sockets, {names}: ferrule serves one; "
            "name it with --fd"
        )
    if handed is not None:
        # From the supervisor this one replaces (SIGUSR2): its socket, whatever the settings.
        sock = socket.socket(fileno=handed)
    elif activated:
        # As systemd's own servers do: the unit's socket, whatever --host and --port say. A
        # duplicate, so that the descriptor systemd passed stays as it was.
        sock = socket.socket(fileno=os.dup(activated[0][0]))
    elif config.fd is not None:
        # A duplicate: the descriptor stays the caller's, open after the server is done with
        # it, as uvicorn leaves it. listen() again, as asyncio's servers do: it may not be yet.
        sock = socket.socket(fileno=os.dup(config.fd))
    elif config.uds:
        if os.path.exists(config.uds):
            os.unlink(config.uds)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(config.uds)
            os.chmod(config.uds, 0o666)
        except OSError:
            sock.close()
            raise
    else:
        # No host (uvicorn's Config(host=None)): every IPv4 address.
        host = "0.0.0.0" if config.host is None else config.host
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, config.port))
        except OSError as exc:
            sock.close()
            raise OSError(
                exc.errno,
                f"error while attempting to bind on address ({config.host!r}, {config.port}): "
                f"{exc.strerror.lower() if exc.strerror else exc}",
            ) from None
    sock.listen(config.backlog)
    sock.setblocking(False)
    return sock
