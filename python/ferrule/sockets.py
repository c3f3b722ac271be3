"""The listening sockets: bound (TCP or Unix) or inherited (from a parent process, from systemd),
how they are named in the log, and removing a Unix socket file on exit."""

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
    inherited_fds: list[int]


def describe(socks: list[socket.socket], config: Address) -> str:
    """The sockets as the log names them, with commas between."""
    return ", ".join(_describe_one(sock, config) for sock in socks)


def _describe_one(sock: socket.socket, config: Address) -> str:
    if sock.family == socket.AF_UNIX:
        return f"unix socket {unix_path(sock, config)}"
    host, port = sock.getsockname()[:2]
    if sock.family == socket.AF_INET6:
        host = f"[{host}]"
    scheme = "https" if config.ssl_certfile else "http"
    return f"{scheme}://{host}:{port}"


def unix_path(sock: socket.socket, config: Address) -> str:
    """Where a Unix socket is bound: ``uds`` if this process bound it, else its own name (one
    systemd or a parent process passed)."""
    if config.uds and config.fd is None:
        return config.uds
    name = sock.getsockname()
    return name if isinstance(name, str) else name.decode(errors="replace")


def close_all(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()


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


def listening_sockets(config: Address) -> list[socket.socket]:
    """The sockets to serve, bound and listening: those a supervisor being upgraded handed
    over, a worker's from its supervisor, those systemd passed (socket activation, unless
    ``fd`` or ``uds`` says otherwise), the inherited ``fd``, a Unix socket, or TCP."""
    handed = upgrade.inherited_fds()
    activated: list[tuple[int, str]] = []
    if not handed and config.fd is None and not config.uds:
        activated = systemd.listen_fds()
    if handed:
        # From the supervisor this one replaces (SIGUSR2): its sockets, whatever the settings.
        socks = [socket.socket(fileno=fd) for fd in handed]
    elif config.inherited_fds:
        # A worker's: duplicates, as for ``fd``.
        socks = [socket.socket(fileno=os.dup(fd)) for fd in config.inherited_fds]
    elif activated:
        # As systemd's own servers do: the unit's sockets, whatever --host and --port say.
        # Duplicates, so that the descriptors systemd passed stay as they were.
        socks = [socket.socket(fileno=os.dup(fd)) for fd, _ in activated]
    else:
        socks = [_configured_socket(config)]
    for sock in socks:
        sock.listen(config.backlog)
        sock.setblocking(False)
    return socks


def _configured_socket(config: Address) -> socket.socket:
    """The socket the settings name: ``fd``, ``uds``, or ``host`` and ``port``; bound."""
    if config.fd is not None:
        # A duplicate: the descriptor stays the caller's, open after the server is done with
        # it, as uvicorn leaves it. listen() again, as asyncio's servers do: it may not be yet.
        return socket.socket(fileno=os.dup(config.fd))
    if config.uds:
        if os.path.exists(config.uds):
            os.unlink(config.uds)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.bind(config.uds)
            os.chmod(config.uds, 0o666)
        except OSError:
            sock.close()
            raise
        return sock
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
    return sock
