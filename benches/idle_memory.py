"""Memory per idle connection: how much a server's RSS grows for each open keep-alive
connection (and each open WebSocket), and whether it comes back when they close.

    python3 benches/idle_memory.py                             # 10,000 connections, 1,000 sockets
    python3 benches/idle_memory.py --servers ferrule-asyncio,uvicorn --connections 2000

For each server in turn (one process, pinned as in ``run.py``): RSS (VmRSS) once it serves;
then N connections are opened, each sends one GET /hello and reads the answer, and all stay
open: RSS again; then M WebSockets are opened on ``/ws`` (accepted, one echo each) and stay
open: RSS again; then everything closes: RSS after 2 s. Printed as a Markdown table, KiB per
connection or socket. The client is this process on 127.0.0.1; its descriptor limit (and the
servers', which inherit it) is raised to the hard limit first.
"""

from __future__ import annotations

import argparse
import base64
import os
import resource
import socket
import tempfile
import time
from pathlib import Path

import harness

REQUEST = b"GET /hello HTTP/1.1\r\nHost: bench\r\n\r\n"


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def read_response(sock: socket.socket) -> None:
    """Reads one response whose body length is given by Content-Length."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("connection closed before the response head")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("connection closed in the response body")
        body += chunk


def open_connections(port: int, count: int) -> list[socket.socket]:
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(REQUEST)
        read_response(sock)
        sockets.append(sock)
    return sockets


def masked_text(payload: bytes) -> bytes:
    key = os.urandom(4)
    masked = bytes(byte ^ key[i % 4] for i, byte in enumerate(payload))
    return bytes([0x81, 0x80 | len(payload)]) + key + masked


def open_websockets(port: int, count: int) -> list[socket.socket]:
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        key = base64.b64encode(os.urandom(16))
        sock.sendall(
            b"GET /ws HTTP/1.1\r\nHost: bench\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + key + b"\r\n\r\n"
        )
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                raise RuntimeError("closed during the WebSocket handshake")
            data += chunk
        if not data.startswith(b"HTTP/1.1 101"):
            raise RuntimeError(f"WebSocket refused: {data[:80]!r}")
        rest = data.partition(b"\r\n\r\n")[2]
        sock.sendall(masked_text(b"hi"))
        while len(rest) < 4:  # the echo: a 4-byte frame
            rest += sock.recv(4096)
        sockets.append(sock)
    return sockets


def measure(server: harness.Server, connections: int, websockets: int, log_dir: Path) -> dict:
    with harness.serving(server, "apps:app", "/hello", log_dir) as proc:
        pid = proc.proc.pid
        time.sleep(0.5)
        base = rss_kib(pid)
        held = open_connections(proc.port, connections)
        time.sleep(1.0)
        with_connections = rss_kib(pid)
        sockets = open_websockets(proc.port, websockets) if websockets else []
        time.sleep(1.0)
        with_sockets = rss_kib(pid)
        for sock in held + sockets:
            sock.close()
        time.sleep(2.0)
        after = rss_kib(pid)
    return {
        "base": base,
        "per_connection": (with_connections - base) / connections,
        "per_websocket": (with_sockets - with_connections) / websockets if websockets else 0.0,
        "after": after,
        "peak": with_sockets,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", default="ferrule-asyncio,ferrule-uvloop,uvicorn,granian")
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--websockets", type=int, default=1_000)
    parser.add_argument(
        "--ferrule-path", type=Path, help="import ferrule from DIR (a release wheel unpacked)"
    )
    args = parser.parse_args()
    harness.ferrule_path = args.ferrule_path
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    needed = args.connections + args.websockets + 200
    if hard < needed:
        raise SystemExit(f"the descriptor limit ({hard}) is under the {needed} needed")
    servers = harness.pick(args.servers, harness.SERVERS_BY_NAME, "server")
    print(
        f"load: {os.getloadavg()[0]:.2f}; {args.connections} connections, {args.websockets} sockets"
    )
    print()
    print("| server | RSS before | KiB/connection | KiB/WebSocket | RSS open | RSS after close |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as logs:
        for server in servers:
            try:
                row = measure(server, args.connections, args.websockets, Path(logs))
            except (OSError, RuntimeError) as exc:
                print(f"| {server.name} | failed: {type(exc).__name__}: {exc} | | | | |")
                continue
            print(
                f"| {server.name} | {row['base'] / 1024:.1f} MiB | {row['per_connection']:.1f} "
                f"| {row['per_websocket']:.1f} | {row['peak'] / 1024:.1f} MiB "
                f"| {row['after'] / 1024:.1f} MiB |",
                flush=True,
            )


if __name__ == "__main__":
    main()
