"""The app alone: an app of this folder called in-process, with no server, the limit no server
can beat on one core.

    FERRULE_BENCH_DSN=postgresql://... python3 benches/db/alone.py --app db.raw_app:app \\
        --paths /json,/db [--seconds 2] [--loop uvloop|asyncio] [--concurrency 64]

The process pins itself to the server core (CPU 0, as run.py pins the servers), runs the app's
lifespan startup, moves what it made out of the collector's way (gc.freeze(), as ferrule does by
default; --no-gc-freeze to not), checks that each path answers 200, then for each path calls the
app from `--concurrency` coroutines at once (as that many connections would), each call with a
fake ``receive`` and a ``send`` that keeps nothing (benches/ceiling.py's pattern), for a warm-up
and then `--seconds`. The app waits on the database, so what it costs is the process's CPU time
over the window (user + system, time.process_time) divided by the calls, not wall time. Prints
one JSON object: {path: {"calls_per_s": .., "cpu_us_per_call": .., "calls": .., "others": ..}},
"others" being the share of the core that other processes took in the window (contention.py).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import importlib
import json
import os
import sys
import time
from pathlib import Path

BENCHES = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BENCHES))  # harness, ceiling and the db package

from ceiling import discard, make_receive  # noqa: E402
from harness import SERVER_CPU  # noqa: E402

from db.contention import Busy  # noqa: E402


def make_scope(target: str) -> dict:
    path, _, query = target.partition("?")
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(b"host", b"127.0.0.1:8000"), (b"user-agent", b"alone")],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }


class Lifespan:
    """The app's lifespan protocol, driven as a server drives it."""

    def __init__(self, app) -> None:
        self.app = app
        self.inbox: asyncio.Queue = asyncio.Queue()
        self.outbox: asyncio.Queue = asyncio.Queue()
        self.task: asyncio.Task | None = None

    async def send(self, message: dict) -> None:
        await self.outbox.put(message)

    async def startup(self) -> None:
        scope = {"type": "lifespan", "asgi": {"version": "3.0", "spec_version": "2.0"}}
        scope["state"] = {}
        self.task = asyncio.create_task(self.app(scope, self.inbox.get, self.send))
        await self.inbox.put({"type": "lifespan.startup"})
        reply = await self.outbox.get()
        if reply["type"] != "lifespan.startup.complete":
            raise RuntimeError(f"lifespan startup failed: {reply}")

    async def shutdown(self) -> None:
        await self.inbox.put({"type": "lifespan.shutdown"})
        await self.outbox.get()
        await self.task


async def check(app, target: str) -> None:
    sent: list[dict] = []

    async def record(message: dict) -> None:
        sent.append(message)

    await app(make_scope(target), make_receive(b""), record)
    status = sent[0].get("status") if sent else None
    if status != 200:
        raise RuntimeError(f"{target}: the app answered {status}, not 200: {sent[-1:]}")


async def measure(app, target: str, seconds: float, warmup: float, concurrency: int) -> dict:
    scope = make_scope(target)
    calls = 0
    deadline = 0.0

    async def client() -> None:
        nonlocal calls
        while time.perf_counter() < deadline:
            await app(dict(scope), make_receive(b""), discard)
            calls += 1

    if warmup > 0:
        deadline = time.perf_counter() + warmup
        await asyncio.gather(*(client() for _ in range(concurrency)))
    calls = 0
    busy = Busy(min(os.sched_getaffinity(0)))  # the core the process is pinned to
    cpu_start, start = time.process_time(), time.perf_counter()
    deadline = start + seconds
    await asyncio.gather(*(client() for _ in range(concurrency)))
    cpu, elapsed = time.process_time() - cpu_start, time.perf_counter() - start
    return {
        "calls_per_s": calls / elapsed,
        "cpu_us_per_call": cpu / calls * 1e6 if calls else float("nan"),
        "calls": calls,
        "others": busy.others(cpu),  # the share of the core other processes took meanwhile
    }


async def run(app_ref: str, targets: list[str], args) -> dict:
    # As ferrule does before importing the app: one 1 MiB block freed makes glibc's malloc
    # raise its mmap threshold, or asyncio's transport maps a fresh 256 KiB buffer at every
    # read and the app alone on --loop asyncio costs more a call than the app under ferrule.
    block = bytearray(1 << 20)
    del block
    module, _, attribute = app_ref.partition(":")
    app = getattr(importlib.import_module(module), attribute or "app")
    lifespan = Lifespan(app)
    await lifespan.startup()
    if args.gc_threshold:
        # As a server that raises the collector's young threshold would: the app alone must
        # run with whatever collector settings the servers compared give the app.
        gc.set_threshold(args.gc_threshold, *gc.get_threshold()[1:])
    if args.gc_freeze:
        # What ferrule does by default once the app has started: without it, the collector
        # walks the framework's objects again and again, and the app alone costs more a call
        # than the app under ferrule.
        gc.collect()
        gc.freeze()
    try:
        results = {}
        for target in targets:
            await check(app, target)
            results[target] = await measure(
                app, target, args.seconds, args.warmup, args.concurrency
            )
        return results
    finally:
        await lifespan.shutdown()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--app", default="db.raw_app:app", help="module:attribute")
    p.add_argument("--paths", default="/json,/db", help="comma-separated, with query strings")
    p.add_argument("--seconds", type=float, default=2.0, help="measured, per path")
    p.add_argument("--warmup", type=float, default=0.5, help="seconds before each path's")
    p.add_argument("--loop", choices=["uvloop", "asyncio"], default="uvloop")
    p.add_argument("--concurrency", type=int, default=64, help="coroutines calling the app")
    p.add_argument(
        "--gc-freeze",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="gc.freeze() after the lifespan startup (default: on)",
    )
    p.add_argument(
        "--gc-threshold", type=int, default=0, help="the young generation's (default: Python's)"
    )
    p.add_argument("--cpu", default=SERVER_CPU, help="the CPUs to pin to (default: 0)")
    args = p.parse_args()
    os.sched_setaffinity(0, {int(c) for c in args.cpu.split(",")})
    if args.loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    else:
        factory = asyncio.new_event_loop
    targets = [t for t in args.paths.split(",") if t]
    with asyncio.Runner(loop_factory=factory) as runner:
        json.dump(runner.run(run(args.app, targets, args)), sys.stdout)
    print()


if __name__ == "__main__":
    main()
