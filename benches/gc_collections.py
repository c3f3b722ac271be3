"""Garbage collections per request: whether the objects a request leaves behind make Python's
collector run while serving (a gen-0 collection walks the young objects, a full one every
object of the process, all under the GIL on the loop's thread).

    python3 benches/gc_collections.py                        # every scenario, ferrule and granian
    python3 benches/gc_collections.py --scenarios task,fastapi-async --seconds 10

Each server serves ``gc_counting.py`` (the scenario's app, and ``/__gc``: the collections of
each generation so far) pinned as in ``run.py``; after a warm-up, ``wrk -c50`` runs for the
given seconds; the collections it caused are the difference of two reads of ``/__gc``. Printed
as a Markdown table, collections per 10,000 requests. A server's worker is one process here, so
its counts are the app's."""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import urllib.request
from pathlib import Path

import harness

SCENARIOS = "hello,task,anyio,fastapi-async,fastapi-sync"
SERVERS = "ferrule-uvloop,ferrule-asyncio,granian"


def gc_state(proc: harness.ServerProcess) -> dict:
    with urllib.request.urlopen(proc.url("/__gc"), timeout=5) as answer:
        return json.loads(answer.read())


def measure(server: harness.Server, scenario: harness.Scenario, args, log_dir: Path) -> str:
    os.environ["GC_COUNTING_APP"] = f"{scenario.module}:app"
    with harness.serving(server, "gc_counting:app", scenario.path, log_dir) as proc:
        script = harness.wrk_script(scenario, log_dir)
        url = proc.url(scenario.path)
        harness.run_wrk(url, args.warmup, args.connections, script)
        before = gc_state(proc)
        result = harness.run_wrk(url, args.seconds, args.connections, script)
        after = gc_state(proc)
    requests = max(result.requests, 1)
    per = [
        (a - b) * 10_000 / requests
        for a, b in zip(after["collections"], before["collections"], strict=True)
    ]
    cells = " | ".join(f"{value:.2f}" for value in per)
    return f"| {scenario.name} | {server.name} | {requests:,} | {cells} | {after['count']} |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenarios", default=SCENARIOS, help=f"comma list (default {SCENARIOS})")
    parser.add_argument("--servers", default=SERVERS, help=f"comma list (default {SERVERS})")
    parser.add_argument("--seconds", type=int, default=5, help="measured seconds (default 5)")
    parser.add_argument("--warmup", type=int, default=2, help="warm-up seconds (default 2)")
    parser.add_argument("--connections", type=int, default=50, help="wrk -c (default 50)")
    parser.add_argument("--ferrule-path", type=Path, help="import ferrule from this directory")
    args = parser.parse_args()
    harness.ferrule_path = args.ferrule_path
    scenarios = harness.pick(args.scenarios, harness.SCENARIOS_BY_NAME, "scenario")
    servers = harness.pick(args.servers, harness.SERVERS_BY_NAME, "server")
    print(f"ferrule: {harness.ferrule_build()}")
    print(f"wrk -t1 -c{args.connections} -d{args.seconds}s after {args.warmup} s of warm-up\n")
    print(
        "| scenario | server | requests | gen 0 / 10k req | gen 1 / 10k req "
        "| gen 2 / 10k req | `gc.get_count()` after |"
    )
    print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
    with tempfile.TemporaryDirectory(prefix="ferrule-gc-") as log_dir:
        for scenario in scenarios:
            for server in servers:
                if server.serves(scenario):
                    print(measure(server, scenario, args, Path(log_dir)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
