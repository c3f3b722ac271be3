"""The WebSocket benchmark: messages/s and the server's CPU time per message.

    python benches/ws_bench.py                                  # every scenario and server
    python benches/ws_bench.py --servers ferrule --scenarios echo --repeats 5
    python benches/ws_bench.py --ferrule-path DIR               # a release wheel unpacked there
    python benches/ws_bench.py --client python                  # the `websockets` clients
    python benches/ws_bench.py --instructions 2000              # ferrule under callgrind instead

Scenarios (`benches/ws_apps.py`), each with permessage-deflate off and on (the client offers it
or not; a server that declines it is marked):
  echo          --clients clients, each sending a 1 KiB JSON-like text and awaiting its echo
                (--in-flight K: K texts sent and not yet echoed at any time, native client)
  broadcast-16  one server-side broadcaster sending 1 KiB texts to 16 clients
  broadcast-64  the same to 64 clients

Servers: ferrule (asyncio and uvloop), uvicorn (`--ws websockets`), granian (`--ws`) and, when it
is installed (`pip install hypercorn`), hypercorn. The server is pinned to CPU 0 and the clients
to CPU 1, as in run.py. The clients (--client) are by default `ferrule-wsload`, a Rust load
generator on one thread (crates/ferrule-wsload: tokio and yawc, which implements the client side
of permessage-deflate), built on first use with `cargo build --release -p ferrule-wsload`; the
report gives its CPU share next to the server's, to show which side is the bottleneck.
`--client python` runs the `websockets` library on one asyncio loop instead, which saturates
near 48k messages/s, below what a fast server does.

An echo counts once (one message in, one out); a broadcast once per client that received it.
The server's CPU time per message is the user + system time of its whole process group, from
/proc, over the messages counted in the same window. Each figure is the median over --repeats
windows of --duration seconds, the servers and the compression settings taking turns. A
Markdown table and a PNG chart land in benches/results/ws-<timestamp>.{md,png}.

--instructions N runs ferrule (asyncio loop) under callgrind instead and prints the user-space
instructions per echo (16 clients, N messages after a warm-up), off and on: steadier than time
on a noisy machine, as benches/instructions.sh is for HTTP.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import platform
import re
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import harness
from harness import BENCH_DIR, CLIENT_CPU, SERVER_CPU, Server, ServerProcess, scratch_dir
from report import cpu_model, loadavg, version
from websockets.asyncio.client import connect

APP = "ws_apps:app"
MESSAGES = 64  # per client: more than the largest deflate window holds (see ferrule-wsload)
REPO = BENCH_DIR.parent
WSLOAD = REPO / "target" / "release" / "ferrule-wsload"
RESULTS_DIR = BENCH_DIR / "results"
# The targets: (scenario, deflate offered, minimum ratio of ferrule's messages/s, against whom).
TARGETS = [
    ("echo", False, 2.0, "granian"),
    ("broadcast-16", False, 2.0, "granian"),
    ("broadcast-64", False, 2.0, "granian"),
    ("echo", True, 2.0, "uvicorn"),
    ("broadcast-16", True, 2.0, "uvicorn"),
    ("broadcast-64", True, 2.0, "uvicorn"),
]
# Compression may cost at most this share of the uncompressed messages/s.
DEFLATE_COST = 0.35


def json_like(seq: int) -> str:
    """A 1 KiB JSON-like text; messages differ, as a feed's would."""
    rows = ",".join(
        f'{{"id":{seq * 100 + i},"user":"user-{(seq * 7 + i) % 997}","score":{(seq + i) * 3.25},'
        f'"online":{"true" if (seq + i) % 3 else "false"}}}'
        for i in range(16)
    )
    return f'{{"seq":{seq},"rows":[{rows}]}}'.ljust(1024)[:1024]


SERVERS = [
    Server("ferrule", "-m ferrule {app} --port {port} --loop asyncio --no-access-log"),
    Server("ferrule-uvloop", "-m ferrule {app} --port {port} --loop uvloop --no-access-log"),
    Server(
        "uvicorn",
        "-m uvicorn {app} --port {port} --loop uvloop --ws websockets --no-access-log"
        " --log-level warning",
    ),
    Server(
        "granian",
        "-m granian {app} --port {port} --interface asgi --workers 1 --ws --log-level warning",
    ),
    Server(
        "hypercorn",
        "-m hypercorn {app} --bind 127.0.0.1:{port} --worker-class uvloop --workers 1"
        " --log-level warning",
    ),
]
# The module each server needs, to leave out one that is not installed.
MODULES = {"uvicorn": "uvicorn", "granian": "granian", "hypercorn": "hypercorn"}
SCENARIOS = {"echo": None, "broadcast-16": 16, "broadcast-64": 64}


@dataclass
class Window:
    messages_per_s: float
    cpu_us_per_message: float
    deflate: bool
    # The server's CPU time over the window's wall time (1.0: one core busy throughout).
    server_busy: float = float("nan")
    # The load generator's, the same way (native client only).
    client_busy: float = float("nan")


async def run_window(
    url: str, scenario: str, clients: int, compress: bool, warmup: float, duration: float, pgid: int
) -> Window:
    count = [0]
    agreed: list[bool] = []
    compression = "deflate" if compress else None
    audience = SCENARIOS[scenario]

    async def echo_client(index: int) -> None:
        messages = [json_like(index * MESSAGES + i) for i in range(MESSAGES)]
        async with connect(
            url + "/echo", compression=compression, ping_interval=None, proxy=None
        ) as ws:
            agreed.append(bool(ws.protocol.extensions))
            i = 0
            while True:
                await ws.send(messages[i % MESSAGES])
                await ws.recv()
                count[0] += 1
                i += 1

    async def listener() -> None:
        async with connect(
            url + "/broadcast", compression=compression, ping_interval=None, proxy=None
        ) as ws:
            agreed.append(bool(ws.protocol.extensions))
            while True:
                await ws.recv()
                count[0] += 1

    n = audience or clients
    tasks = [
        asyncio.ensure_future(echo_client(i) if audience is None else listener()) for i in range(n)
    ]
    try:
        await asyncio.sleep(warmup)
        for task in tasks:
            if task.done():
                task.result()  # raises what stopped a client
        start, cpu_start, t_start = count[0], harness.group_cpu_seconds(pgid), time.monotonic()
        await asyncio.sleep(duration)
        end, cpu_end, t_end = count[0], harness.group_cpu_seconds(pgid), time.monotonic()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    messages = max(end - start, 1)
    return Window(
        messages_per_s=messages / (t_end - t_start),
        cpu_us_per_message=(cpu_end - cpu_start) / messages * 1e6,
        deflate=all(agreed) and bool(agreed),
        server_busy=(cpu_end - cpu_start) / (t_end - t_start),
    )


def native_window(
    port: int,
    scenario: str,
    clients: int,
    compress: bool,
    warmup: float,
    duration: float,
    pgid: int,
    in_flight: int = 1,
) -> Window:
    """One window of ferrule-wsload against the server; the server's CPU is read when the
    generator says its window starts and ends."""
    audience = SCENARIOS[scenario]
    argv = [str(WSLOAD), "--addr", f"127.0.0.1:{port}"]
    argv += ["--mode", "echo" if audience is None else "receive", "--clients"]
    argv += [str(audience or clients), "--warmup", str(warmup), "--duration", str(duration)]
    argv += ["--deflate"] if compress else []
    argv += ["--in-flight", str(in_flight)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    events: dict[str, dict] = {}
    cpu: dict[str, float] = {}
    try:
        for line in proc.stdout:
            event = json.loads(line)
            events[event["event"]] = event
            cpu[event["event"]] = harness.group_cpu_seconds(pgid)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if proc.returncode != 0 or "end" not in events:
        raise RuntimeError(f"ferrule-wsload failed ({proc.returncode}): {proc.stderr.read()}")
    end = events["end"]
    messages, seconds = max(end["messages"], 1), end["seconds"]
    server_cpu = cpu["end"] - cpu["start"]
    return Window(
        messages_per_s=messages / seconds,
        cpu_us_per_message=server_cpu / messages * 1e6,
        deflate=events["connected"]["deflate"],
        server_busy=server_cpu / seconds,
        client_busy=end["cpu_seconds"] / seconds,
    )


SPIN = """
import time
wall, cpu = time.monotonic(), time.process_time()
while time.monotonic() - wall < 1.0:
    pass
print((time.process_time() - cpu) / (time.monotonic() - wall))
"""


def core_share(cpu: str) -> float:
    """The share of CPU `cpu` a busy loop pinned there gets for a second: below 100% when
    other work (other users of a shared machine) runs there too, which caps the server."""
    done = subprocess.run(
        ["taskset", "-c", cpu, sys.executable, "-c", SPIN], capture_output=True, text=True
    )
    return float(done.stdout) if done.returncode == 0 else float("nan")


def build_wsload() -> None:
    """Builds the native load generator if it is not built yet (a release build: the bench's
    clients must cost little)."""
    if WSLOAD.exists():
        return
    sys.stderr.write("building ferrule-wsload: cargo build --release -p ferrule-wsload\n")
    subprocess.run(["cargo", "build", "--release", "-p", "ferrule-wsload"], cwd=REPO, check=True)


async def echo_messages(url: str, compress: bool, total: int, clients: int = 16) -> None:
    """`total` echoes spread over `clients` sockets."""
    compression = "deflate" if compress else None

    async def client(index: int, count: int) -> None:
        async with connect(
            url + "/echo", compression=compression, ping_interval=None, proxy=None
        ) as ws:
            assert bool(ws.protocol.extensions) == compress
            for i in range(count):
                await ws.send(json_like(index * MESSAGES + i % MESSAGES))
                await ws.recv()

    await asyncio.gather(*(client(i, total // clients) for i in range(clients)))


def instructions(total: int) -> None:
    """Instructions per echo of ferrule under callgrind, deflate off and on."""
    for compress in (False, True):
        port = harness.free_port()
        out = Path(tempfile.mkdtemp(prefix="ferrule-ws-callgrind-")) / "callgrind.out"
        env = dict(os.environ, PYTHONPATH=harness.pythonpath(SERVERS[0]))
        server = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable]
            + ["-m", "ferrule", APP, "--port", str(port), "--loop", "asyncio", "--no-access-log"],
            cwd=harness.BENCH_DIR,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 180
            while True:
                with contextlib.suppress(OSError):
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5).read()
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError("ferrule under callgrind did not start")
                time.sleep(1)
            url = f"ws://127.0.0.1:{port}"
            asyncio.run(echo_messages(url, compress, 320))
            subprocess.run(["callgrind_control", "-z", str(server.pid)], capture_output=True)
            asyncio.run(echo_messages(url, compress, total))
            subprocess.run(["callgrind_control", "-d", str(server.pid)], capture_output=True)
            annotated = subprocess.run(
                ["callgrind_annotate", f"{out}.1"], capture_output=True, text=True
            ).stdout
            match = re.search(r"([\d,]+) \(100.0%\)\s+PROGRAM TOTALS", annotated) or re.search(
                r"([\d,]+)\s+PROGRAM TOTALS", annotated
            )
            assert match, annotated[:2000]
            per = int(match.group(1).replace(",", "")) // total
            label = "on" if compress else "off"
            print(f"echo, deflate {label}: {per:,} Ir/message ({out}.1)")
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=60)


def deflate_label(offered: bool, agreed: bool) -> str:
    if not offered:
        return "off"
    return "on" if agreed else "declined"


@dataclass
class Cell:
    """One scenario on one server with compression offered or not: medians over the repeats."""

    deflate: str
    messages_per_s: float
    cpu_us_per_message: float
    server_busy: float
    client_busy: float


def median_cell(compress: bool, windows: list[Window]) -> Cell:
    return Cell(
        deflate=deflate_label(compress, windows[0].deflate),
        messages_per_s=statistics.median(w.messages_per_s for w in windows),
        cpu_us_per_message=statistics.median(w.cpu_us_per_message for w in windows),
        server_busy=statistics.median(w.server_busy for w in windows),
        client_busy=statistics.median(w.client_busy for w in windows),
    )


def measure(
    servers: list[Server], scenarios: list[str], args: argparse.Namespace
) -> dict[tuple[str, str, bool], Cell]:
    """Every (scenario, server, compression) cell, the servers taking turns within a repeat."""
    cells = {}
    with scratch_dir() as log_name:
        logs = Path(log_name)
        procs = [ServerProcess(server, APP, logs) for server in servers]
        try:
            for proc in procs:
                proc.wait_ready("/")
            for scenario in scenarios:
                results: dict[tuple[str, bool], list[Window]] = {}
                for repeat in range(args.repeats):
                    for proc in procs:
                        for compress in (False, True):
                            sys.stderr.write(
                                f"{scenario} {proc.server.name} deflate"
                                f" {'on' if compress else 'off'} ({repeat + 1}/{args.repeats})\n"
                            )
                            run = (args.clients, compress, args.warmup, args.duration)
                            if args.client == "native":
                                window = native_window(
                                    proc.port, scenario, *run, proc.proc.pid, args.in_flight
                                )
                            else:
                                url = f"ws://127.0.0.1:{proc.port}"
                                window = asyncio.run(run_window(url, scenario, *run, proc.proc.pid))
                            results.setdefault((proc.server.name, compress), []).append(window)
                for (name, compress), windows in results.items():
                    cells[scenario, name, compress] = median_cell(compress, windows)
        finally:
            for proc in procs:
                proc.stop()
    return cells


def percent(value: float) -> str:
    return "-" if value != value else f"{value:.0%}"


def ratio(cells: dict, scenario: str, name: str, compress: bool, base: str) -> str:
    this, other = cells.get((scenario, name, compress)), cells.get((scenario, base, compress))
    if this is None or other is None or not other.messages_per_s:
        return "-"
    return f"{this.messages_per_s / other.messages_per_s:.2f}x"


def verdict(passed: list[bool | None], ferrules: list[str]) -> str:
    """Whether every ferrule measured met a target, or which of them did."""
    measured = [(name, ok) for name, ok in zip(ferrules, passed, strict=True) if ok is not None]
    if all(ok for _, ok in measured):
        return "yes"
    met = [name for name, ok in measured if ok]
    return f"{', '.join(met)} only" if met else "no"


def target_lines(cells: dict, ferrules: list[str]) -> list[str]:
    """The targets, met by every ferrule measured (each loop), by some, or by none."""
    lines = [
        "| scenario | deflate | target | " + " | ".join(ferrules) + " | met |",
        "| --- | --- | --- |" + " ---: |" * len(ferrules) + " --- |",
    ]
    for scenario, compress, minimum, base in TARGETS:
        other = cells.get((scenario, base, compress))
        if other is None:
            continue
        found = [cells.get((scenario, name, compress)) for name in ferrules]
        ratios = [c.messages_per_s / other.messages_per_s if c else None for c in found]
        if all(r is None for r in ratios):
            continue
        shown = " | ".join(f"{r:.2f}x" if r is not None else "-" for r in ratios)
        met = verdict([r >= minimum if r is not None else None for r in ratios], ferrules)
        label = "on" if compress else "off"
        lines.append(f"| {scenario} | {label} | >= {minimum}x {base} | {shown} | {met} |")
    scenarios = dict.fromkeys(key[0] for key in cells)
    for scenario in scenarios:
        shares = []
        for name in ferrules:
            off, on = cells.get((scenario, name, False)), cells.get((scenario, name, True))
            if off and on and off.messages_per_s:
                shares.append(1 - on.messages_per_s / off.messages_per_s)
            else:
                shares.append(None)
        if all(s is None for s in shares):
            continue
        shown = " | ".join(f"costs {s:.0%}" if s is not None else "-" for s in shares)
        met = verdict([s <= DEFLATE_COST if s is not None else None for s in shares], ferrules)
        lines.append(
            f"| {scenario} | on vs off | compression costs <= {DEFLATE_COST:.0%} of messages/s"
            f" | {shown} | {met} |"
        )
    return lines if len(lines) > 2 else []


def markdown(
    cells: dict,
    servers: list[Server],
    scenarios: list[str],
    args,
    load_before: str,
    shares: tuple[float, float],
) -> str:
    client = (
        "`ferrule-wsload` (Rust: tokio current-thread runtime, yawc; one thread)"
        if args.client == "native"
        else "the `websockets` library on one asyncio loop"
    )
    versions = ", ".join(
        f"{name} {version(name)}" for name in ("uvicorn", "granian", "hypercorn", "websockets")
    )
    out = [
        f"# ferrule WebSocket benchmark, {time.strftime('%Y-%m-%d %H:%M:%S')}",
        "",
        f"- Command: `{shlex.join([Path(sys.executable).name, *sys.argv])}`",
        f"- Machine: {os.cpu_count()} CPUs ({cpu_model()}), Linux {platform.release()}",
        f"- Load average (1/5/15 min) before: {load_before}; after: {loadavg()}",
        f"- A busy loop pinned to CPU {SERVER_CPU} got {percent(shares[0])} of it before the run"
        f" and {percent(shares[1])} after: what the server could get at most (the machine is"
        " shared)",
        f"- Versions: Python {platform.python_version()}, {versions}",
        f"- ferrule: {harness.ferrule_build()}",
        f"- Method: server `taskset -c {SERVER_CPU}`, clients on CPU {CLIENT_CPU}: {client}."
        f" echo: {args.clients} clients, each sending 1 KiB JSON-like texts and awaiting their"
        f" echoes, {args.in_flight} at a time (each counted once); broadcast-N: one server-side"
        " broadcaster sending 1 KiB JSON-like texts to N clients (counted once per client)."
        " Deflate on: the clients offer `permessage-deflate; client_max_window_bits`. Each cell"
        f" is the median of {args.repeats} windows of {args.duration} s after {args.warmup} s"
        " warm-up, servers and compression taking turns. Server CPU: user + system time of its"
        " process group over the window, per message and as a share of one core; client CPU"
        " likewise.",
        "",
        "| scenario | server | deflate | messages/s | server CPU µs/message | server CPU"
        " | client CPU | x granian | x uvicorn |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for scenario in scenarios:
        for server in servers:
            for compress in (False, True):
                cell = cells.get((scenario, server.name, compress))
                if cell is None:
                    continue
                out.append(
                    f"| {scenario} | {server.name} | {cell.deflate} | {cell.messages_per_s:,.0f}"
                    f" | {cell.cpu_us_per_message:.1f} | {percent(cell.server_busy)}"
                    f" | {percent(cell.client_busy)}"
                    f" | {ratio(cells, scenario, server.name, compress, 'granian')}"
                    f" | {ratio(cells, scenario, server.name, compress, 'uvicorn')} |"
                )
    out += [
        "",
        "x granian / x uvicorn compare messages/s with the same compression offered (a server"
        " that declines it sends plain frames).",
    ]
    targets = target_lines(cells, [s.name for s in servers if s.name.startswith("ferrule")])
    if targets:
        out += ["", "Targets:", "", *targets]
    return "\n".join(out) + "\n"


def chart(cells: dict, servers: list[Server], scenarios: list[str], path: Path) -> None:
    """One row per scenario: messages/s on the left, server CPU µs/message on the right, a
    pair of bars (deflate off, on) per server."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [s.name for s in servers]
    fig, axes = plt.subplots(
        len(scenarios), 2, figsize=(11, 1.2 + 0.5 * len(names) * len(scenarios)), squeeze=False
    )
    for row, scenario in enumerate(scenarios):
        for col, (field, unit) in enumerate(
            (("messages_per_s", "messages/s"), ("cpu_us_per_message", "server CPU µs/message"))
        ):
            ax = axes[row][col]
            for offset, compress, color in ((-0.2, False, "#1f77b4"), (0.2, True, "#ff7f0e")):
                found = [cells.get((scenario, n, compress)) for n in names]
                values = [getattr(c, field) if c else 0 for c in found]
                labels = [
                    ("{:,.0f}" if col == 0 else "{:.1f}").format(v)
                    + (" (declined)" if c and c.deflate == "declined" else "")
                    for v, c in zip(values, found, strict=True)
                ]
                bars = ax.barh(
                    [i + offset for i in range(len(names))],
                    values,
                    height=0.4,
                    color=color,
                    label="deflate on" if compress else "deflate off",
                )
                ax.bar_label(bars, labels=labels, padding=3, fontsize=7)
            ax.set_yticks(range(len(names)), names if col == 0 else [""] * len(names))
            ax.invert_yaxis()
            ax.set_xlim(0, ax.get_xlim()[1] * 1.25)
            ax.tick_params(labelsize=8)
            ax.spines[["top", "right"]].set_visible(False)
            better = "higher" if col == 0 else "lower"
            ax.set_title(f"{scenario}: {unit} ({better} is better)", fontsize=9, loc="left")
            if row == 0 and col == 0:
                ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"ferrule WebSocket benchmark {path.stem}: server on 1 core", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", default=",".join(s.name for s in SERVERS))
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--clients", type=int, default=16, help="echo clients")
    parser.add_argument("--client", choices=("native", "python"), default="native")
    parser.add_argument(
        "--in-flight",
        type=int,
        default=1,
        help="echo messages each native client keeps sent and not yet echoed",
    )
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ferrule-path", type=Path)
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="where the .md and .png go")
    parser.add_argument("--instructions", type=int, metavar="N")
    args = parser.parse_args()
    harness.ferrule_path = args.ferrule_path
    if args.instructions:
        instructions(args.instructions)
        return
    if args.client == "native":
        build_wsload()
    servers = harness.pick(args.servers, {s.name: s for s in SERVERS}, "server")
    missing = [s.name for s in servers if s.name in MODULES and not find_module(MODULES[s.name])]
    for name in missing:
        sys.stderr.write(f"skipping {name}: not installed\n")
    servers = [s for s in servers if s.name not in missing]
    scenarios = [name for name in args.scenarios.split(",") if name]
    for name in scenarios:
        if name not in SCENARIOS:
            sys.exit(f"unknown scenario {name!r}; choose from: {', '.join(SCENARIOS)}")
    os.sched_setaffinity(0, {int(CLIENT_CPU)})
    load_before, share_before = loadavg(), core_share(SERVER_CPU)
    cells = measure(servers, scenarios, args)
    shares = (share_before, core_share(SERVER_CPU))
    stamp = time.strftime("%Y%m%d-%H%M%S")
    args.out.mkdir(parents=True, exist_ok=True)
    md_path, png_path = args.out / f"ws-{stamp}.md", args.out / f"ws-{stamp}.png"
    text = markdown(cells, servers, scenarios, args, load_before, shares)
    chart(cells, servers, scenarios, png_path)
    text += f"\n![messages/s and server CPU per message]({png_path.name})\n"
    md_path.write_text(text)
    print(text)
    sys.stderr.write(f"wrote {md_path} and {png_path}\n")


def find_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


if __name__ == "__main__":
    main()
