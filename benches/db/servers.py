"""The servers the database benchmark compares, each on uvloop: ferrule, granian and uvicorn, as
benches/harness.py runs them, with one worker (pinned to the server core) or two (unpinned).

Not run by itself: run.py starts them through harness.ServerProcess.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator

import harness
from harness import SERVERS_BY_NAME, Server

# harness's command lines, made to agree on what this suite compares: uvloop everywhere, one
# worker, no access log (granian's is off by default; said anyway, as uvicorn's and ferrule's).
FERRULE = dataclasses.replace(SERVERS_BY_NAME["ferrule-uvloop"], name="ferrule", http=("1",))
GRANIAN = dataclasses.replace(
    SERVERS_BY_NAME["granian"],
    command=SERVERS_BY_NAME["granian"].command + " --loop uvloop --no-access-log",
    http=("1",),
)
UVICORN = SERVERS_BY_NAME["uvicorn"]  # --loop uvloop --http httptools --no-access-log
for _server in (FERRULE, GRANIAN, UVICORN):
    assert "uvloop" in _server.command, _server

# ferrule answering the plaintext path from Rust, the app never called: the floor of what an
# HTTP/1.1 server costs a request on this machine (its text is "Hello, world!").
RUST_ONLY = dataclasses.replace(
    FERRULE,
    name="ferrule-rust",
    command=FERRULE.command + " --rust-hello-route /plaintext",
    only=("plaintext",),
)

ONE_WORKER = {s.name: s for s in (FERRULE, GRANIAN, UVICORN, RUST_ONLY)}
COMPARED = ("ferrule", "granian", "uvicorn")  # the columns of the report, in order


def on_loop(server: Server, loop: str) -> Server:
    """The server on `loop` (uvloop or asyncio) instead of uvloop."""
    return dataclasses.replace(
        server, command=server.command.replace("--loop uvloop", f"--loop {loop}")
    )


def with_access_log(server: Server) -> Server:
    """The server writing an access line a request, as users run it: ferrule's default,
    granian's --access-log, uvicorn's default; each at log level info, which the lines take."""
    command = server.command.replace(" --no-access-log", "")
    command = command.replace("--log-level warning", "--log-level info")
    if server.name.startswith("granian"):
        command += " --access-log"
    return dataclasses.replace(server, command=command)


def two_workers(server: Server) -> Server:
    """The server with two worker processes instead of one."""
    command = server.command.replace(" --workers 1", "")
    return dataclasses.replace(server, command=command + " --workers 2")


def serves(server: Server, test: str) -> bool:
    return server.only is None or test in server.only


@contextlib.contextmanager
def unpinned() -> Iterator[None]:
    """harness.ServerProcess pins each server to harness.SERVER_CPU when started: within the
    block, to every CPU this process may use, for the two-worker pass."""
    saved = harness.SERVER_CPU
    harness.SERVER_CPU = ",".join(str(cpu) for cpu in sorted(os.sched_getaffinity(0)))
    try:
        yield
    finally:
        harness.SERVER_CPU = saved
