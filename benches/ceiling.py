"""The Python-only ceiling: each scenario's app called in-process, with no server at all.

The app is awaited in a loop by 50 coroutines at once (as 50 connections would drive it), each
call with a fake ``receive`` (which hands over the request body once) and a ``send`` that does
nothing. The result is what the Python side of a request costs with no HTTP parsing, no socket
and no server bookkeeping: no server can answer that scenario faster on one core.

    python benches/ceiling.py [--scenarios hello,echo] [--seconds 2] [--loop asyncio|uvloop]

prints one JSON object: {scenario: {"calls_per_s": ..., "us_per_call": ...}}.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import sys
import time

from harness import SCENARIOS, SCENARIOS_BY_NAME, Scenario, pick


def make_scope(scenario: Scenario) -> dict:
    headers = [(b"host", b"127.0.0.1:8000"), (b"user-agent", b"ceiling")]
    if scenario.body_size:
        headers.append((b"content-length", str(scenario.body_size).encode()))
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": scenario.method,
        "scheme": "http",
        "path": scenario.path,
        "raw_path": scenario.path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8000),
        "state": {},
    }


def make_receive(body: bytes):
    sent = False

    async def receive() -> dict:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


async def discard(message: dict) -> None:
    pass


async def check(app, scenario: Scenario) -> None:
    """Call the app once, recording what it sends: it must answer 200 with a body."""
    sent: list[dict] = []

    async def record(message: dict) -> None:
        sent.append(message)

    body = b"x" * scenario.body_size
    await app(make_scope(scenario), make_receive(body), record)
    status = sent[0].get("status") if sent else None
    if status != 200:
        raise RuntimeError(f"{scenario.name}: the app answered {status}, not 200")


async def measure(scenario: Scenario, seconds: float, concurrency: int) -> dict:
    """Call the app from `concurrency` coroutines at once for `seconds`, as many connections
    would: a handler that suspends lets the others run, and the loop's per-iteration cost is
    shared by every ready coroutine, as in a server."""
    app = importlib.import_module(scenario.module).app
    await check(app, scenario)
    scope = make_scope(scenario)
    body = b"x" * scenario.body_size
    calls = 0
    deadline = 0.0

    async def client() -> None:
        nonlocal calls
        while time.perf_counter() < deadline:
            await app(dict(scope), make_receive(body), discard)
            calls += 1

    deadline = time.perf_counter() + min(seconds, 0.5)  # warm-up
    await asyncio.gather(*(client() for _ in range(concurrency)))
    calls = 0
    start = time.perf_counter()
    deadline = start + seconds
    await asyncio.gather(*(client() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    return {"calls_per_s": calls / elapsed, "us_per_call": elapsed / calls * 1e6}


def run(scenarios: list[Scenario], seconds: float, loop: str, concurrency: int) -> dict:
    if loop == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    else:
        factory = asyncio.new_event_loop
    results = {}
    for scenario in scenarios:
        with asyncio.Runner(loop_factory=factory) as runner:
            results[scenario.name] = runner.run(measure(scenario, seconds, concurrency))
    return results


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenarios", default=",".join(s.name for s in SCENARIOS))
    p.add_argument("--seconds", type=float, default=2.0, help="per scenario (default 2)")
    p.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio")
    p.add_argument("--concurrency", type=int, default=50, help="coroutines calling the app")
    args = p.parse_args()
    scenarios = pick(args.scenarios, SCENARIOS_BY_NAME, "scenario")
    json.dump(run(scenarios, args.seconds, args.loop, args.concurrency), sys.stdout)
    print()


if __name__ == "__main__":
    main()
