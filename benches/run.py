"""Run the benchmark suite: every scenario against every server, one run, side by side.

    python benches/run.py                       # everything: ~15 minutes on a 2-core machine
    python benches/run.py --quick               # a ~1-minute smoke run: 1 repeat of 1 s, no oha
    python benches/run.py --scenarios hello,echo --servers ferrule-uvloop,granian
    python benches/run.py --ferrule-path DIR    # ferrule imported from DIR (a release wheel
                                                # unpacked with pip install --no-deps --target)

The servers (`SERVERS` in benches/harness.py, which gives each one's command line): ferrule on
asyncio and on uvloop and its Rust-only route, uvicorn on httptools and on zttp, granian and
FastPySGI. Each is pinned to CPU 0 with taskset and wrk to CPU 1 (`wrk -t1 -c50 --latency`).
All servers of one app module run at once (idle ones cost nothing; fastpysgi, which busy-polls
while idle, is kept stopped, SIGSTOP, outside its own runs); for each scenario, each is warmed
up, then measured in `--repeats` rounds of one `--duration`-second run per server, so the
servers compared take turns within the same minute (this machine's speed drifts by tens of
percent over minutes). The table gives the median of each column over the repeats (errors and
non-2xx are summed). The HTTP/2 scenario (h2-hello) is driven by h2load instead (`h2load
-c10 -m10`, h2c with prior knowledge, each run with its own `--warm-up-time`; p50/p99 from its
per-request log), against the servers that speak HTTP/2: ferrule, granian (`--http 2`) and
uvicorn-zttp (`--http zttp --http2`); the others show '-'. Then, if oha is installed (`cargo
install oha`), an open-loop pass: every server is offered the same fixed rate and oha reports
latency corrected for coordinated omission. First of all, the Python-only ceiling
(benches/ceiling.py). A Markdown table and a PNG chart land in
benches/results/<timestamp>.{md,png}.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import harness
from harness import (
    BENCH_DIR,
    H2LOAD_CLIENTS,
    H2LOAD_STREAMS,
    SCENARIOS,
    SCENARIOS_BY_NAME,
    SERVER_CPU,
    SERVERS,
    SERVERS_BY_NAME,
    STATS_PATH,
    H2loadResult,
    OhaResult,
    Scenario,
    Server,
    ServerProcess,
    WrkResult,
    oha_path,
    pick,
    run_h2load,
    run_oha,
    run_wrk,
    scratch_dir,
    wrk_script,
)
from report import TRACE_HISTOGRAMS, chart, loadavg, machine_lines, markdown

RESULTS_DIR = BENCH_DIR / "results"
MEASURE_ERRORS = (RuntimeError, ValueError, subprocess.TimeoutExpired)


@dataclass
class Cell:
    """One scenario on one server: the median over the repeats."""

    rps: float
    # The server's CPU time (user + system, all its processes) per request: steadier than
    # requests/s, which the load generator's own core caps near the top.
    cpu_us: float
    p50_ms: float
    p99_ms: float
    errors: int
    non_2xx: int
    # ferrule only: bridge counter deltas per request over the repeats (GIL acquisitions,
    # handoffs to the loop thread, loop wake-ups, drives) and the collisions seen.
    relay: dict[str, float] | None = None


RELAY_COUNTERS = ("gil_acquisitions", "handoffs", "wakes", "drives")


def relay_per_request(before: dict | None, after: dict | None, requests: int) -> dict | None:
    """Counter deltas per request between two readings of ferrule's bridge counters, and with
    `--trace` the p50/p99 in microseconds of each trace histogram between them."""
    if before is None or after is None or requests <= 0:
        return None
    relay = {name: (after[name] - before[name]) / requests for name in RELAY_COUNTERS}
    relay["collisions"] = after["collisions"] - before["collisions"]
    if "trace" in before and "trace" in after:
        bounds = after["trace"]["bucket_upper_ns"]
        for name in TRACE_HISTOGRAMS:
            pairs = zip(before["trace"][name], after["trace"][name], strict=True)
            counts = [b - a for a, b in pairs]
            for q in (50, 99):
                relay[f"{name}_p{q}_us"] = histogram_percentile(bounds, counts, q / 100) / 1000
    return relay


def histogram_percentile(bounds: list[int], counts: list[int], q: float) -> float:
    """The upper bound (ns) of the bucket holding the q-quantile, or NaN with no counts. The
    buckets are at most 12.5% wide, so this overstates by at most that much."""
    total = sum(counts)
    if not total:
        return float("nan")
    seen = 0
    for bound, count in zip(bounds, counts, strict=True):
        seen += count
        if seen >= q * total:
            return bound
    return bounds[-1]


class Progress:
    """One status line, rewritten in place on a terminal, one line per update otherwise."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.start = time.monotonic()
        self.tty = sys.stderr.isatty()

    def show(self, text: str) -> None:
        elapsed = time.monotonic() - self.start
        left = ""
        if self.done:
            left = f", ~{fmt_duration(elapsed / self.done * (self.total - self.done))} left"
        line = f"[{self.done}/{self.total} {fmt_duration(elapsed)}{left}] {text}"
        if self.tty:
            sys.stderr.write("\r\033[K" + line[:150])
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def step(self, text: str) -> None:
        self.done += 1
        self.show(text)

    def finish(self) -> None:
        if self.tty:
            sys.stderr.write("\n")


def fmt_duration(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"


def closed_loop(
    scenario: Scenario, url: str, tmp: Path, args
) -> Callable[[int], WrkResult | H2loadResult]:
    """A closed-loop run of `url` for so many seconds: wrk, or h2load for HTTP/2 (with
    `args.warmup` seconds of warm-up in every run: h2load measures fresh connections)."""
    if scenario.http == "2":
        return lambda seconds: run_h2load(url, seconds, args.warmup, tmp)
    script = wrk_script(scenario, tmp)
    return lambda seconds: run_wrk(url, seconds, args.connections, script)


class Group:
    """Every server serving one app module over one HTTP version, all running at once (idle
    ones cost nothing), so each scenario's servers are measured turn about within the same
    minute: on a machine whose speed drifts by tens of percent from one minute to the next,
    measuring one server's whole column before the next one's skewed the ratios."""

    def __init__(self, app: str, http: str, tmp: Path, failures: list[str]) -> None:
        self.app, self.http, self.tmp, self.failures = app, http, tmp, failures
        self.procs: dict[str, ServerProcess] = {}

    def start(self, server: Server, probe_path: str, progress: Progress) -> bool:
        progress.show(f"{server.name}: starting with {self.app}, HTTP/{self.http}")
        proc = ServerProcess(server, self.app, self.tmp, self.http)
        try:
            proc.wait_ready(probe_path)
        except MEASURE_ERRORS as exc:
            proc.stop()
            self.failures.append(f"{server.name} on {self.app}: {exc}")
            return False
        self.procs[server.name] = proc
        if server.spins_idle:
            proc.pause()
        return True

    @contextlib.contextmanager
    def turn(self, server: Server) -> Iterator[ServerProcess]:
        """The server's process, running for the block: one that spins while idle is stopped
        again after it, so it takes no CPU from the others' runs."""
        proc = self.procs[server.name]
        proc.resume()
        try:
            yield proc
        finally:
            if server.spins_idle:
                proc.pause()

    def failed(self, server: Server, scenario: Scenario, exc: Exception, probe_path: str, progress):
        """Records the failure and restarts the server for the scenarios left, so one stalled
        server does not take the rest of its column with it."""
        proc = self.procs.pop(server.name)
        self.failures.append(f"{server.name} {scenario.name}: {exc}\n{proc.log_tail(8)}")
        progress.show(f"{server.name} {scenario.name} FAILED")
        proc.stop()
        self.start(server, probe_path, progress)

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.stop()
        self.procs.clear()


def each_scenario(
    servers: list[Server],
    scenarios: list[Scenario],
    measure: Callable[[Group, Scenario, list[Server]], None],
    progress: Progress,
) -> list[str]:
    """For each app module and HTTP version, start every server that serves any of its
    scenarios, then `measure` each scenario with the servers that serve it and are up.
    Returns the failures."""
    failures: list[str] = []
    groups = list(dict.fromkeys((s.module, s.http) for s in scenarios))
    with scratch_dir() as tmp_name:
        for module, http in groups:
            mine = [s for s in scenarios if (s.module, s.http) == (module, http)]
            group = Group(f"{module}:app", http, Path(tmp_name), failures)
            try:
                for server in servers:
                    served = [s for s in mine if server.serves(s)]
                    if served:
                        group.start(server, served[0].path, progress)
                for scenario in mine:
                    # A server that did not start is in `failures` already.
                    live = [s for s in servers if s.serves(scenario) and s.name in group.procs]
                    measure(group, scenario, live)
            finally:
                group.stop()
    return failures


@dataclass
class CpuWindow:
    seconds: float = 0.0


@contextlib.contextmanager
def cpu_window(proc: ServerProcess, scenario: Scenario, args) -> Iterator[CpuWindow]:
    """The server's CPU time over one measured run. h2load warms up inside the run and counts
    only the requests after it, so for HTTP/2 the window opens when its warm-up ends."""
    window = CpuWindow()
    start = [proc.cpu_seconds()]
    timer = None
    if scenario.http == "2" and args.warmup:
        timer = threading.Timer(args.warmup, lambda: start.__setitem__(0, proc.cpu_seconds()))
        timer.start()
    try:
        yield window
    finally:
        if timer is not None:
            timer.join()
        window.seconds = proc.cpu_seconds() - start[0]


def measure_closed_loop(
    group: Group, scenario: Scenario, servers: list[Server], args, progress
) -> dict[str, Cell]:
    """Closed loop: a warm-up of each server, then the repeats in rounds, one run of each
    server per round, starting one server further along each round (so no server always goes
    first); the median of each column."""
    procs = group.procs
    runs: dict[str, list] = {s.name: [] for s in servers}
    before = {}
    for server in servers:
        proc = procs[server.name]
        if args.warmup and scenario.http == "1":  # h2load warms up inside each run
            progress.show(f"{server.name} {scenario.name}: warm-up {args.warmup}s")
            with group.turn(server):
                closed_loop(scenario, proc.url(scenario.path), group.tmp, args)(args.warmup)
        before[server.name] = proc.bridge_counters()
    live = list(servers)
    for i in range(args.repeats):
        order = live[i % len(live) :] + live[: i % len(live)] if live else []
        for server in order:
            if server.name not in runs:
                continue  # failed earlier in this scenario
            progress.show(f"{server.name} {scenario.name}: repeat {i + 1}/{args.repeats}")
            proc = procs[server.name]
            try:
                with group.turn(server), cpu_window(proc, scenario, args) as cpu:
                    result = closed_loop(scenario, proc.url(scenario.path), group.tmp, args)(
                        args.duration
                    )
                if result.requests == 0:
                    raise RuntimeError(
                        f"0 requests in {args.duration} s: the server stopped answering"
                    )
            except MEASURE_ERRORS as exc:
                del runs[server.name]
                progress.done += args.repeats - i
                group.failed(server, scenario, exc, scenario.path, progress)
                continue
            runs[server.name].append((result, cpu.seconds * 1e6 / result.requests))
            progress.step(f"{server.name} {scenario.name}: {result.rps:,.0f} req/s")
    cells = {}
    for name, measured in runs.items():
        results = [r for r, _ in measured]
        counted = sum(r.requests for r in results)
        cells[name] = Cell(
            rps=statistics.median(r.rps for r in results),
            cpu_us=statistics.median(cpu_us for _, cpu_us in measured),
            p50_ms=statistics.median(r.p50_ms for r in results),
            p99_ms=statistics.median(r.p99_ms for r in results),
            errors=sum(r.errors for r in results),
            non_2xx=sum(r.non_2xx for r in results),
            relay=relay_per_request(before[name], procs[name].bridge_counters(), counted),
        )
    return cells


def open_loop_rates(cells: dict, scenarios: list[Scenario], fraction: float) -> dict[str, int]:
    """Per scenario: `fraction` of the slowest server's closed-loop requests/s, so every
    server is offered the same load and every one can keep up with it."""
    rates = {}
    for scenario in scenarios:
        measured = [c.rps for (_, name), c in cells.items() if name == scenario.name and c.rps]
        if measured:
            rates[scenario.name] = max(1, round(min(measured) * fraction))
    return rates


def run_servers(servers: list[Server], scenarios: list[Scenario], args) -> tuple[dict, dict, list]:
    """Every (server, scenario): closed loop with wrk, then (if oha is there) open loop."""
    cells: dict[tuple[str, str], Cell] = {}
    open_loop: dict[tuple[str, str], OhaResult] = {}
    with_oha = args.open_loop and oha_path() is not None
    per_cell = args.repeats + (1 if with_oha else 0)
    cell_count = sum(server.serves(s) for server in servers for s in scenarios)
    progress = Progress(cell_count * per_cell)

    def closed(group: Group, scenario: Scenario, live: list[Server]) -> None:
        for name, cell in measure_closed_loop(group, scenario, live, args, progress).items():
            cells[name, scenario.name] = cell

    failures = each_scenario(servers, scenarios, closed, progress)
    if with_oha:
        rates = open_loop_rates(cells, scenarios, args.open_loop_fraction)

        def opened(group: Group, scenario: Scenario, live: list[Server]) -> None:
            for server in live:
                if scenario.name not in rates:
                    progress.step(f"{server.name} {scenario.name}: no rate, skipped")
                    continue
                rate = rates[scenario.name]
                progress.show(f"{server.name} {scenario.name}: open loop at {rate:,} req/s")
                url = group.procs[server.name].url(scenario.path)
                try:
                    with group.turn(server):
                        if args.warmup:
                            run_oha(url, args.warmup, args.connections, rate, scenario)
                        result = run_oha(url, args.duration, args.connections, rate, scenario)
                except MEASURE_ERRORS as exc:
                    progress.done += 1
                    group.failed(server, scenario, exc, scenario.path, progress)
                    continue
                open_loop[server.name, scenario.name] = result
                progress.step(
                    f"{server.name} {scenario.name}: open-loop p99 {result.p99_ms:.2f} ms"
                )

        failures += each_scenario(servers, scenarios, opened, progress)
    elif args.open_loop:
        failures.append("oha not found (cargo install oha): open-loop latency skipped")
    progress.finish()
    return cells, open_loop, failures


def run_ceiling(scenarios: list[Scenario], seconds: float, connections: int) -> dict:
    """The Python-only ceiling, on each loop, in a subprocess pinned like a server."""
    results = {}
    for loop in ("asyncio", "uvloop"):
        sys.stderr.write(f"ceiling: {loop}, {len(scenarios)} scenarios x {seconds:g}s\n")
        argv = ["taskset", "-c", SERVER_CPU, sys.executable, str(BENCH_DIR / "ceiling.py")]
        argv += ["--scenarios", ",".join(s.name for s in scenarios), "--seconds", str(seconds)]
        argv += ["--loop", loop, "--concurrency", str(connections)]
        done = subprocess.run(argv, capture_output=True, text=True, cwd=BENCH_DIR)
        if done.returncode != 0:
            raise RuntimeError(f"ceiling on {loop} failed:\n{done.stderr}")
        results[loop] = json.loads(done.stdout)
    return results


# --- main --------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="ferrule vs uvicorn (httptools and zttp), granian and FastPySGI, server on"
        " CPU 0 and wrk (h2load for HTTP/2) on CPU 1.",
        epilog="scenarios: "
        + ", ".join(s.name for s in SCENARIOS)
        + "; servers: "
        + ", ".join(s.name for s in SERVERS),
    )
    p.add_argument("--scenarios", default=",".join(s.name for s in SCENARIOS), help="comma list")
    p.add_argument("--servers", default=",".join(s.name for s in SERVERS), help="comma list")
    p.add_argument("--duration", type=int, default=5, help="seconds per repeat (default 5)")
    p.add_argument("--repeats", type=int, default=3, help="repeats per scenario (default 3)")
    p.add_argument("--warmup", type=int, default=2, help="warm-up seconds (default 2)")
    p.add_argument(
        "--connections",
        type=int,
        default=50,
        help=f"wrk and oha -c (default 50); HTTP/2: always -c{H2LOAD_CLIENTS} -m{H2LOAD_STREAMS}",
    )
    p.add_argument(
        "--ceiling-seconds", type=float, default=2.0, help="per scenario and loop (default 2)"
    )
    p.add_argument(
        "--open-loop",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the open-loop latency pass with oha (default: on, off with --quick)",
    )
    p.add_argument(
        "--open-loop-fraction",
        type=float,
        default=0.5,
        help="open-loop rate: this fraction of the slowest server's req/s (default 0.5)",
    )
    p.add_argument("--no-ceiling", action="store_true", help="skip the Python-only ceiling")
    p.add_argument(
        "--trace",
        action="store_true",
        help="ferrule with --trace-requests: p50/p99 of GIL wait, first drive, resume wait",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="smoke run: 1 repeat of 1 s, no warm-up, no open loop (about a minute)",
    )
    p.add_argument(
        "--ferrule-path",
        type=Path,
        help="import ferrule from this directory (e.g. a release wheel unpacked there)",
    )
    p.add_argument("--out", type=Path, default=RESULTS_DIR, help="where the .md and .png go")
    args = p.parse_args(argv)
    if args.quick:
        args.duration, args.repeats, args.warmup, args.ceiling_seconds = 1, 1, 0, 0.2
    if args.open_loop is None:
        args.open_loop = not args.quick
    return args


def drop_h2_without_h2load(scenarios: list[Scenario]) -> tuple[list[Scenario], list[str]]:
    """The scenarios that can run, and why the HTTP/2 ones cannot if h2load is missing."""
    h2 = [s.name for s in scenarios if s.http == "2"]
    if not h2 or shutil.which("h2load"):
        return scenarios, []
    why = f"h2load not found (apt-get install nghttp2-client): {', '.join(h2)} skipped"
    sys.stderr.write(f"warning: {why}\n")
    return [s for s in scenarios if s.http != "2"], [why]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    scenarios = pick(args.scenarios, SCENARIOS_BY_NAME, "scenario")
    servers = pick(args.servers, SERVERS_BY_NAME, "server")
    if args.trace:
        servers = [
            dataclasses.replace(s, command=s.command + " --trace-requests")
            if STATS_PATH in s.command
            else s
            for s in servers
        ]
    scenarios, skipped = drop_h2_without_h2load(scenarios)
    harness.ferrule_path = args.ferrule_path
    build = harness.ferrule_build()
    if "dev build" in build:
        sys.stderr.write(f"warning: ferrule is a {build}: its numbers will be low\n")
    if (os.cpu_count() or 1) < 2:
        sys.stderr.write("warning: fewer than 2 CPUs; server and wrk will share one\n")
    load_before = loadavg()
    if os.getloadavg()[0] > 0.5:
        sys.stderr.write(f"warning: load average {load_before}: the numbers will be noisy\n")

    ceiling, ceiling_failures = {}, []
    if not args.no_ceiling:
        try:
            ceiling = run_ceiling(scenarios, args.ceiling_seconds, args.connections)
        except RuntimeError as exc:
            ceiling_failures.append(str(exc))
    cells, open_loop, failures = run_servers(servers, scenarios, args)
    failures = skipped + ceiling_failures + failures

    stamp = time.strftime("%Y%m%d-%H%M%S")
    args.out.mkdir(parents=True, exist_ok=True)
    md_path, png_path = args.out / f"{stamp}.md", args.out / f"{stamp}.png"
    text = markdown(
        cells,
        open_loop,
        ceiling,
        servers,
        scenarios,
        args,
        machine_lines(load_before, build),
        failures,
    )
    # The table first: a chart that cannot be drawn (no matplotlib) must not lose the numbers.
    md_path.write_text(text)
    drawn = False
    if cells:
        try:
            chart(cells, ceiling, servers, scenarios, png_path)
            drawn = True
        except ImportError:
            sys.stderr.write("no chart: matplotlib is not installed (pip install matplotlib)\n")
    if drawn:
        text += f"\n![requests/s and p99 per scenario and server]({png_path.name})\n"
        md_path.write_text(text)
    print(text)
    for failure in failures:
        sys.stderr.write(f"FAILED: {failure}\n")
    sys.stderr.write(f"wrote {md_path}" + (f" and {png_path}\n" if drawn else "\n"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
