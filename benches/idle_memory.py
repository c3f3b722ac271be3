"""Memory per idle connection: how much a server's RSS grows for each open keep-alive
connection (and each open WebSocket), and whether it comes back when they close.

    python3 benches/idle_memory.py                             # 10,000 connections, 1,000 sockets
    python3 benches/idle_memory.py --servers ferrule-asyncio,uvicorn --connections 2000

For each server in turn (one process, pinned as in ``run.py``): RSS (VmRSS) once it serves;
then N connections are opened, each sends one GET /hello and reads the answer, and all stay
open: RSS again once they have been idle for ``IDLE`` seconds (ferrule gives an HTTP/1.1
connection's buffers back after a second without a request); then they close: RSS 2 s later.
Then, on a fresh server process, M WebSockets are opened on ``/ws`` (accepted, one echo each)
and stay open: RSS before and after. Printed as a Markdown table, KiB per connection or socket.
With ``--deflate`` the WebSockets offer permessage-deflate as browsers do
(``permessage-deflate; client_max_window_bits``) and their one echo is a 1 KiB JSON-like text,
compressed both ways: each socket then holds the server's compressor and decompressor. The
client is this process on 127.0.0.1; its descriptor limit (and the servers', which inherit it)
is raised to the hard limit first.
"""

from __future__ import annotations

import argparse
import base64
import os
import resource
import socket
import tempfile
import time
import zlib
from pathlib import Path

import harness

REQUEST = b"GET /hello HTTP/1.1\r\nHost: bench\r\n\r\n"
#: How long the connections have been idle when the RSS is read with them open.
IDLE = 2.0
DEFLATE_OFFER = b"Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"
JSON_LIKE = (
    "["
    + ",".join(
        f'{{"id":{i},"user":"user-{i * 7}","online":{str(i % 3 == 0).lower()}}}' for i in range(40)
    )
    + "]"
)[:1024].encode()


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


def masked_frame(payload: bytes, rsv1: bool = False) -> bytes:
    """A final text frame as a client sends it (masked), of up to 64 KiB."""
    key = os.urandom(4)
    masked = bytes(byte ^ key[i % 4] for i, byte in enumerate(payload))
    first = 0xC1 if rsv1 else 0x81
    if len(payload) < 126:
        return bytes([first, 0x80 | len(payload)]) + key + masked
    return bytes([first, 0x80 | 126]) + len(payload).to_bytes(2, "big") + key + masked


def read_frame(sock: socket.socket, rest: bytes) -> bytes:
    """Reads one unmasked frame of up to 64 KiB (`rest`: bytes already read); returns what
    follows it."""

    def need(count: int) -> None:
        nonlocal rest
        while len(rest) < count:
            chunk = sock.recv(65536)
            if not chunk:
                raise RuntimeError("closed before the echo")
            rest += chunk

    need(2)
    length, head = rest[1] & 0x7F, 2
    if length == 126:
        need(4)
        length, head = int.from_bytes(rest[2:4], "big"), 4
    need(head + length)
    return rest[head + length :]


def open_websockets(port: int, count: int, deflate: bool) -> list[socket.socket]:
    sockets = []
    for _ in range(count):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        key = base64.b64encode(os.urandom(16))
        sock.sendall(
            b"GET /ws HTTP/1.1\r\nHost: bench\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: "
            + key
            + b"\r\n"
            + (DEFLATE_OFFER if deflate else b"")
            + b"\r\n"
        )
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                raise RuntimeError("closed during the WebSocket handshake")
            data += chunk
        if not data.startswith(b"HTTP/1.1 101"):
            raise RuntimeError(f"WebSocket refused: {data[:80]!r}")
        head, _, rest = data.partition(b"\r\n\r\n")
        if deflate:
            if b"permessage-deflate" not in head.lower():
                raise RuntimeError(f"permessage-deflate declined: {head!r}")
            # A 9-bit window: within whatever client_max_window_bits the server answers.
            compressor = zlib.compressobj(wbits=-9)
            payload = compressor.compress(JSON_LIKE) + compressor.flush(zlib.Z_SYNC_FLUSH)
            sock.sendall(masked_frame(payload[:-4], rsv1=True))
        else:
            sock.sendall(masked_frame(b"hi"))
        read_frame(sock, rest)
        sockets.append(sock)
    return sockets


def measure(
    server: harness.Server, connections: int, websockets: int, deflate: bool, log_dir: Path
) -> dict:
    """Connections and WebSockets each on a fresh server: measured on one, the sockets' figure
    moved with what the server did with the connections' memory meanwhile (it even went
    negative)."""
    with harness.serving(server, "apps:app", "/hello", log_dir) as proc:
        pid = proc.proc.pid
        time.sleep(0.5)
        base = rss_kib(pid)
        held = open_connections(proc.port, connections)
        time.sleep(IDLE)
        with_connections = rss_kib(pid)
        for sock in held:
            sock.close()
        time.sleep(2.0)
        after = rss_kib(pid)
    per_websocket = 0.0
    if websockets:
        with harness.serving(server, "apps:app", "/hello", log_dir) as proc:
            pid = proc.proc.pid
            time.sleep(0.5)
            before_sockets = rss_kib(pid)
            sockets = open_websockets(proc.port, websockets, deflate)
            time.sleep(1.0)
            per_websocket = (rss_kib(pid) - before_sockets) / websockets
            for sock in sockets:
                sock.close()
    return {
        "base": base,
        "per_connection": (with_connections - base) / connections,
        "per_websocket": per_websocket,
        "after": after,
        "peak": with_connections,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", default="ferrule-asyncio,ferrule-uvloop,uvicorn,granian")
    parser.add_argument("--connections", type=int, default=10_000)
    parser.add_argument("--websockets", type=int, default=1_000)
    parser.add_argument("--deflate", action="store_true", help="offer permessage-deflate")
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
        f"load: {os.getloadavg()[0]:.2f}; {args.connections} connections, {args.websockets}"
        f" sockets, permessage-deflate {'offered' if args.deflate else 'not offered'}"
    )
    print()
    print(
        "| server | RSS before | KiB/connection | KiB/WebSocket | RSS with connections"
        " | RSS after they close |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as logs:
        for server in servers:
            try:
                row = measure(server, args.connections, args.websockets, args.deflate, Path(logs))
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
