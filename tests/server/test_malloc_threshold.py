"""The server makes glibc's malloc keep the buffers asyncio's socket transport reads into
(256 KiB, shrunk to what came) on its heap, rather than mapping, shrinking and unmapping one at
every read (``malloc_app``)."""

from __future__ import annotations

import sys

import pytest
from support.serverutil import running_server

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="/proc/self/stat")


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_read_buffers_come_from_the_heap(loop: str) -> None:
    """Rule: 50 reads with ``sock.recv(256 KiB)`` in the app fault in fewer than 25 pages in
    all: after the first, the buffers reuse heap memory. Broken (seen on the build before the
    server's warm-up allocation): 100 faults, 2 a read, each buffer mapped afresh; on asyncpg
    over asyncio that cost 3 system calls and 4 page faults a request."""
    with running_server("malloc_app:app", "--loop", loop) as server:
        answer = server.get("/").json()
    assert answer["faults"] < answer["rounds"] // 2, answer
