"""What the C allocator does with the buffer asyncio's socket transport reads into: ``GET /``
reads 50 short messages with ``sock.recv(256 KiB)``, as the transport does, and answers JSON with
the page faults the process took meanwhile (``/proc/self/stat``, minor faults). Each read makes a
256 KiB buffer and shrinks it to what came. If the allocator maps each one afresh (and shrinks it
with mremap, and unmaps it), every read faults its first page in; from the heap, none do."""

from __future__ import annotations

import json
import socket
from pathlib import Path

ROUNDS = 50
READ_SIZE = 256 * 1024  # asyncio's selector transport's max_size


def minor_faults() -> int:
    return int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[7])


async def app(scope, receive, send):
    if scope["type"] != "http":
        return
    left, right = socket.socketpair()
    with left, right:
        before = minor_faults()
        for _ in range(ROUNDS):
            left.sendall(b"y" * 100)
            right.recv(READ_SIZE)
        faults = minor_faults() - before
    body = json.dumps({"faults": faults, "rounds": ROUNDS}).encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": body})
