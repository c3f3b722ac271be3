"""The report: the Markdown table and the PNG chart made from run.py's measured results."""

from __future__ import annotations

import argparse
import importlib.metadata
import math
import os
import platform
import shlex
import subprocess
import sys
import time
from pathlib import Path

from harness import (
    H2LOAD_CLIENTS,
    H2LOAD_STREAMS,
    SERVER_CPU,
    SERVERS,
    OhaResult,
    Scenario,
    Server,
)

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
NOT_SERVED = (
    "uvicorn on httptools and fastpysgi speak no HTTP/2; ferrule-rust is measured on hello only;"
    " fastpysgi never ends a streamed response (benches/harness.py)"
)

# The packages whose versions a report names: the peers and what the apps run on.
VERSIONED = ("uvicorn", "granian", "uvloop", "httptools", "zttp", "fastpysgi", "fastapi", "anyio")

# The per-request trace's histograms (`--trace`, ferrule's `--trace-requests`).
TRACE_HISTOGRAMS = ("gil_wait", "first_drive", "resume_wait")


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
    versions = ", ".join(f"{name} {version(name)}" for name in VERSIONED)
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
        " warm-up run; servers: ferrule (`--http auto`, its default), granian (`--http 2`) and"
        " uvicorn-zttp (`--http zttp --http2`)."
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

    palette = ["#1f77b4", "#17becf", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"]
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
