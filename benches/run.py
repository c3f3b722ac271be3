"""Run the benchmark suite: every scenario against every server, one run, side by side.

    python benches/run.py                       # everything: ~15 minutes on a 2-core machine
    python benches/run.py --quick               # a ~1-minute smoke run: 1 repeat of 1 s, no oha
    python benches/run.py --scenarios hello,echo --servers ferrule-uvloop,granian
    python benches/run.py --ferrule-path DIR    # ferrule imported from DIR (a release wheel
                                                # unpacked with pip install --no-deps --target)

Each server is pinned to CPU 0 with taskset and wrk to CPU 1 (`wrk -t1 -c50 --latency`). All
servers of one app module run at once (idle ones cost nothing); for each scenario, each is
warmed up, then measured in `--repeats` rounds of one `--duration`-second run per server, so
the servers compared take turns within the same minute (this machine's speed drifts by tens of
percent over minutes). The table gives the median of each column over the repeats (errors and
non-2xx are summed). The HTTP/2 scenario
(h2-hello) is driven by h2load instead (`h2load -c10 -m10`, h2c with prior knowledge, each
run with its own `--warm-up-time`; p50/p99 from its per-request log), against the servers that
speak HTTP/2: ferrule and granian (`--http 2`); the others show '-'. Then, if oha is
installed (`cargo install oha`), an open-loop pass: every server is offered the same fixed rate
and oha reports latency corrected for coordinated omission. First of all, the Python-only
ceiling (benches/ceiling.py). A Markdown table and a PNG chart land in
benches/results/<timestamp>.{md,png}.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata
import json
import math
import os
import platform
import shlex
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

RESULTS_DIR = BENCH_DIR / "results"
MEASURE_ERRORS = (RuntimeError, ValueError, subprocess.TimeoutExpired)

# The benchmark's speed targets: (scenario, minimum ratio, the server it is measured against).
TARGETS = [
    ("hello", 2.0, "granian"),
    ("sleep3", 1.75, "granian"),
    ("task", 1.75, "granian"),
    ("stream", 2.0, "granian"),
    ("echo", 1.5, "uvicorn"),
    ("fastapi-async", 1.3, "granian"),
    ("anyio", 1.3, "granian"),
    ("fastapi-sync", 1.1, "granian"),
    ("hello", 0.6, "ferrule-rust"),
]


# Why a server has no cell in some rows, for the table note.
NOT_SERVED = "uvicorn speaks no HTTP/2; ferrule-rust is measured on hello only"


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
# The per-request trace's histograms (`--trace`, ferrule's `--trace-requests`).
TRACE_HISTOGRAMS = ("gil_wait", "first_drive", "resume_wait")


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
        return True

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
                with cpu_window(proc, scenario, args) as cpu:
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


# --- the report --------------------------------------------------------------------------


def sh(*argv: str) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True)
    except OSError:
        return "?"
    return (done.stdout or done.stderr).strip()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def machine_lines(load_before: str, build: str) -> list[str]:
    wrk = sh("wrk", "-v").splitlines()
    wrk_version = wrk[0].split()[1] if wrk and len(wrk[0].split()) > 1 else "?"
    h2load_version = sh("h2load", "--version").split()[-1:] or ["?"]
    versions = ", ".join(
        f"{name} {version(name)}"
        for name in ("uvicorn", "granian", "uvloop", "httptools", "fastapi", "anyio")
    )
    return [
        f"- Machine: {sh('nproc')} CPUs ({cpu_model()}), Linux {platform.release()}",
        f"- Load average (1/5/15 min) before: {load_before}; after: {loadavg()}",
        f"- Versions: Python {platform.python_version()}, {versions}, wrk {wrk_version},"
        f" h2load {h2load_version[0]}",
        f"- ferrule: {build}",
    ]


def loadavg() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def ratio(cells: dict, server: str, scenario: str, base: str) -> str:
    this, other = cells.get((server, scenario)), cells.get((base, scenario))
    if this is None or other is None or other.rps == 0:
        return "-"
    return f"{this.rps / other.rps:.2f}x"


def cpu_ratio(cells: dict, server: str, scenario: str, base: str) -> str:
    """How many times less CPU a request costs on `server` than on `base`."""
    this, other = cells.get((server, scenario)), cells.get((base, scenario))
    if this is None or other is None or not this.cpu_us:
        return "-"
    return f"{other.cpu_us / this.cpu_us:.2f}x"


def open_cells(result: OhaResult | None) -> str:
    """The two open-loop columns; failures are appended to p99 so they cannot be missed."""
    if result is None:
        return "- | -"
    trouble = ""
    if result.errors or result.non_2xx:
        trouble = f" ({result.errors} errors, {result.non_2xx} non-2xx)"
    return f"{ms(result.p50_ms)} | {ms(result.p99_ms)}{trouble}"


def ms(value: float) -> str:
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def markdown(
    cells: dict,
    open_loop: dict,
    ceiling: dict,
    servers: list[Server],
    scenarios: list[Scenario],
    args: argparse.Namespace,
    header: list[str],
    failures: list[str],
) -> str:
    out = [f"# ferrule benchmark, {time.strftime('%Y-%m-%d %H:%M:%S')}", ""]
    out += [f"- Command: `{shlex.join([Path(sys.executable).name, *sys.argv])}`", *header]
    warmup = f"{args.warmup} s warm-up per scenario, then" if args.warmup else "no warm-up,"
    out.append(
        f"- Method: server `taskset -c {SERVER_CPU}`; `taskset -c 1 wrk -t1 -c{args.connections}"
        f" -d{args.duration}s --latency`, {warmup} {args.repeats} repeat(s); median of each"
        " column, errors and non-2xx summed; x granian / x uvicorn compare requests/s. CPU"
        " us/req: the server's user + system CPU time (all its processes, from /proc) over the"
        " requests of the same run; CPU x granian: granian's CPU per request over this"
        " server's."
    )
    h2 = [s.name for s in scenarios if s.http == "2"]
    if h2:
        out.append(h2_method(", ".join(h2), args))
    rates = {name: r.rate for (_, name), r in open_loop.items()}
    if rates:
        listed = ", ".join(f"{name} {rate:,}" for name, rate in rates.items())
        out.append(
            f"- Open loop (the open p50/p99 columns): `oha -c{args.connections} -q RATE"
            f" -z{args.duration}s --latency-correction` (HTTP/2: `--http2 -c{H2LOAD_CLIENTS}"
            f" -p{H2LOAD_STREAMS}`) after a {args.warmup} s warm-up, RATE ="
            f" {args.open_loop_fraction:g} x the slowest server's req/s above: {listed}."
        )
    columns = (
        "| scenario | server | req/s | CPU us/req | p50 ms | p99 ms | errors | non-2xx"
        " | x granian | x uvicorn | CPU x granian"
    )
    align = "| --- | --- |" + " ---: |" * 9
    if open_loop:
        columns += " | open p50 ms | open p99 ms"
        align += " ---: | ---: |"
    out += ["", columns + " |", align]
    for scenario in scenarios:
        for server in servers:
            cell = cells.get((server.name, scenario.name))
            empty = 10 if open_loop else 8
            if not server.serves(scenario):
                out.append(f"| {scenario.name} | {server.name} | - |" + " - |" * empty)
                continue
            if cell is None:
                out.append(f"| {scenario.name} | {server.name} | failed |" + " |" * empty)
                continue
            opened = ""
            if open_loop:
                opened = f" {open_cells(open_loop.get((server.name, scenario.name)))} |"
            out.append(
                f"| {scenario.name} | {server.name} | {cell.rps:,.0f} | {fmt_us(cell.cpu_us)}"
                f" | {ms(cell.p50_ms)} | {ms(cell.p99_ms)} | {cell.errors} | {cell.non_2xx}"
                f" | {ratio(cells, server.name, scenario.name, 'granian')}"
                f" | {ratio(cells, server.name, scenario.name, 'uvicorn')}"
                f" | {cpu_ratio(cells, server.name, scenario.name, 'granian')} |{opened}"
            )
    if any(not server.serves(s) for server in servers for s in scenarios):
        out += ["", "-: the server does not serve that scenario (" + NOT_SERVED + ")."]
    if ceiling:
        out += [
            "",
            "Ceilings. Python-only: the app awaited in-process by"
            f" {args.connections} coroutines with a fake receive/send, no server"
            " (`benches/ceiling.py`, pinned to CPU 0). Rust-only route: the server `ferrule-rust`,"
            " ferrule answering /hello itself (`--rust-hello-route`), the HTTP stack alone; the"
            " percentage is ferrule's requests/s over it.",
            "",
            "| scenario | Python-only, asyncio calls/s | Python-only, uvloop calls/s"
            " | ferrule req/s / ceiling, same loop | Rust-only route |",
            "| --- | ---: | ---: | ---: | --- |",
        ]
        for scenario in scenarios:
            rust = rust_route_cell(cells, scenario.name)
            found = [ceiling.get(loop, {}).get(scenario.name) for loop in ("asyncio", "uvloop")]
            if None in found:
                out.append(f"| {scenario.name} | - | - | - | {rust} |")
                continue
            shares = []
            for loop, result in zip(("asyncio", "uvloop"), found, strict=True):
                cell = cells.get((f"ferrule-{loop}", scenario.name))
                if cell is not None:
                    shares.append(f"{loop} {cell.rps / result['calls_per_s']:.0%}")
            out.append(
                f"| {scenario.name} | {found[0]['calls_per_s']:,.0f}"
                f" | {found[1]['calls_per_s']:,.0f} | {', '.join(shares) or '-'} | {rust} |"
            )
    out += bridge_limit_lines(cells, ceiling)
    out += relay_lines(cells, servers, scenarios)
    target_lines = targets(cells)
    if target_lines:
        out += ["", "Speed targets (requests/s ratio of ferrule to the server named):", ""]
        out += target_lines
    if failures:
        out += ["", "Failures:", ""] + [f"- {f.splitlines()[0]}" for f in failures]
    return "\n".join(out) + "\n"


def h2_method(names: str, args: argparse.Namespace) -> str:
    warmup = f"--warm-up-time {args.warmup} " if args.warmup else ""
    return (
        f"- HTTP/2 ({names}): `taskset -c 1 h2load -c{H2LOAD_CLIENTS} -m{H2LOAD_STREAMS}"
        f" -D {args.duration} {warmup}--log-file FILE`, h2c with prior knowledge, no separate"
        " warm-up run; servers: ferrule (`--http auto`, its default) and granian (`--http 2`)."
        " h2load prints no percentiles: p50/p99 are computed from its per-request log (every"
        " response of the measured period, from the request's submission to the stream's"
        ' close); errors are its "errored" streams (timeouts included), non-2xx its 3xx-5xx.'
        f" {H2LOAD_CLIENTS * H2LOAD_STREAMS} requests in flight, against wrk's"
        f" {args.connections}: compare servers within the scenario, not across scenarios."
    )


def relay_lines(cells: dict, servers: list[Server], scenarios: list[Scenario]) -> list[str]:
    """The GIL-relay table: ferrule's bridge counters per request over the measured repeats."""
    rows = []
    traced = False
    for scenario in scenarios:
        for server in servers:
            cell = cells.get((server.name, scenario.name))
            if cell is None or cell.relay is None:
                continue
            r = cell.relay
            row = (
                f"| {scenario.name} | {server.name} | {r['gil_acquisitions']:.2f}"
                f" | {r['handoffs']:.2f} | {r['wakes']:.3f} | {r['drives']:.2f}"
                f" | {r['collisions']:.0f} |"
            )
            if "gil_wait_p50_us" in r:
                traced = True
                for name in TRACE_HISTOGRAMS:
                    row += f" {fmt_us(r[f'{name}_p50_us'])} / {fmt_us(r[f'{name}_p99_us'])} |"
            rows.append(row)
    if not rows:
        return []
    header = "| scenario | server | GIL acquisitions | handoffs | wakes | drives | collisions |"
    rule = "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
    if traced:
        header += " GIL wait p50 / p99 us | parse to first drive p50 / p99 us |"
        header += " resume wait p50 / p99 us |"
        rule += " ---: | ---: | ---: |"
        timings = (
            " The trace (`--trace`, ferrule's `--trace-requests`): GIL wait is a tokio thread"
            " asking for the GIL to start a request until it has it; parse to first drive is"
            " hyper handing over the parsed head until the app's first step (GIL wait, scope,"
            " calling the app and any handoff included); resume wait is a suspended coroutine"
            " becoming resumable (a native future resolved, a drive queued for the loop thread,"
            " a step rescheduled) until its next step (resp_wait). Percentiles are bucket upper"
            " bounds, at most 12.5% high; - where nothing was recorded."
        )
    else:
        timings = " Per-request timings: rerun with `--trace`."
    return [
        "",
        "GIL relay (ferrule's bridge counters, read from `--stats-route` before and after the"
        " repeats, per request as wrk counted them): GIL acquisitions (tokio thread attaching or"
        " loop-thread callback), handoffs of a drive to the loop thread, loop wake-ups, drives;"
        " task collisions in all." + timings,
        "",
        header,
        rule,
        *rows,
    ]


def fmt_us(value: float) -> str:
    if math.isnan(value):
        return "-"
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}"


def bridge_limit_lines(cells: dict, ceiling: dict) -> list[str]:
    """hello against a bridge that cost nothing: the Rust-only route's CPU per request plus the
    app's own time (the Python-only ceiling), over what each ferrule loop spends a request."""
    rust = cells.get(("ferrule-rust", "hello"))
    if rust is None or not rust.cpu_us:
        return []
    lines = []
    for loop in ("asyncio", "uvloop"):
        app = ceiling.get(loop, {}).get("hello")
        cell = cells.get((f"ferrule-{loop}", "hello"))
        if app is None or cell is None or not cell.cpu_us:
            continue
        limit = rust.cpu_us + 1e6 / app["calls_per_s"]
        lines.append(
            f"- ferrule-{loop}: {fmt_us(rust.cpu_us)} us (Rust-only route) +"
            f" {fmt_us(1e6 / app['calls_per_s'])} us (the app alone) = {fmt_us(limit)} us"
            f" against {fmt_us(cell.cpu_us)} us a request: {limit / cell.cpu_us:.0%} of the limit"
        )
    if not lines:
        return []
    return ["", "hello against the perfect-bridge limit (CPU per request):", "", *lines]


def rust_route_cell(cells: dict, scenario: str) -> str:
    """The Rust-only route's requests/s and each ferrule loop's share of it, or '-'."""
    rust = cells.get(("ferrule-rust", scenario))
    if rust is None or not rust.rps:
        return "-"
    shares = [
        f"{loop} {cells[name, scenario].rps / rust.rps:.0%}"
        for loop, name in (("asyncio", "ferrule-asyncio"), ("uvloop", "ferrule-uvloop"))
        if (name, scenario) in cells
    ]
    return f"{rust.rps:,.0f} req/s" + (f" ({', '.join(shares)})" if shares else "")


def targets(cells: dict) -> list[str]:
    lines = [
        "| scenario | target | ferrule-asyncio | ferrule-uvloop | met |",
        "| --- | --- | ---: | ---: | --- |",
    ]
    for scenario, minimum, base in TARGETS:
        ratios = []
        for name in ("ferrule-asyncio", "ferrule-uvloop"):
            this, other = cells.get((name, scenario)), cells.get((base, scenario))
            ratios.append(this.rps / other.rps if this and other and other.rps else None)
        if all(r is None for r in ratios):
            continue
        shown = [f"{r:.2f}x" if r is not None else "-" for r in ratios]
        met = "yes" if max(r for r in ratios if r is not None) >= minimum else "no"
        lines.append(f"| {scenario} | >= {minimum}x {base} | {shown[0]} | {shown[1]} | {met} |")
    return lines if len(lines) > 2 else []


def bar_label(value: float, unit: str, served: bool) -> str:
    if not served:
        return "-"
    return f"{value:,.0f}" if unit == "req/s" else f"{value:.2f}"


def chart(
    cells: dict, ceiling: dict, servers: list[Server], scenarios: list[Scenario], path: Path
) -> None:
    """One row per scenario: requests/s on the left, p99 on the right, a bar per server."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    palette = ["#1f77b4", "#17becf", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b"]
    every = [s.name for s in SERVERS]  # a server keeps its colour whichever ones are run
    names = [s.name for s in servers]
    colors = [palette[every.index(n) % len(palette)] for n in names]
    height = 1.1 + 1.15 * len(scenarios) * max(1, len(names) / 4)
    fig, axes = plt.subplots(len(scenarios), 2, figsize=(11, height), squeeze=False)
    for row, scenario in enumerate(scenarios):
        rps = [cells[n, scenario.name].rps if (n, scenario.name) in cells else 0 for n in names]
        p99 = [cells[n, scenario.name].p99_ms if (n, scenario.name) in cells else 0 for n in names]
        served = [s.serves(scenario) for s in servers]
        for col, (values, unit) in enumerate(((rps, "req/s"), (p99, "p99 ms"))):
            ax = axes[row][col]
            bars = ax.barh(names, values, color=colors)
            ax.invert_yaxis()
            ax.set_xlim(0, max(values + [1]) * 1.25)
            labels = [bar_label(v, unit, ok) for v, ok in zip(values, served, strict=True)]
            ax.bar_label(bars, labels=labels, padding=3, fontsize=8)
            ax.tick_params(labelsize=8)
            ax.spines[["top", "right"]].set_visible(False)
            title = f"{scenario.title or scenario.name}: {unit}"
            if col == 0 and scenario.name in ceiling.get("asyncio", {}):
                best = ceiling["asyncio"][scenario.name]["calls_per_s"]
                title += f"  (Python-only ceiling, asyncio: {best:,.0f}/s)"
            if col == 1:
                client = "h2load" if scenario.http == "2" else "wrk"
                title += f", {client} (lower is better)"
            ax.set_title(title, fontsize=9, loc="left")
            if col == 1:
                ax.set_yticklabels([])
    subtitle = "server on 1 core, wrk -c50"
    if any(s.http == "2" for s in scenarios):
        subtitle += f"; HTTP/2: h2load -c{H2LOAD_CLIENTS} -m{H2LOAD_STREAMS}"
    fig.suptitle(f"ferrule benchmark {path.stem}: {subtitle}", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- main --------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="ferrule vs uvicorn vs granian, server on CPU 0 and wrk (h2load for"
        " HTTP/2) on CPU 1.",
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
    if cells:
        chart(cells, ceiling, servers, scenarios, png_path)
        text += f"\n![requests/s and p99 per scenario and server]({png_path.name})\n"
    md_path.write_text(text)
    print(text)
    for failure in failures:
        sys.stderr.write(f"FAILED: {failure}\n")
    sys.stderr.write(f"wrote {md_path}" + (f" and {png_path}\n" if cells else "\n"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
