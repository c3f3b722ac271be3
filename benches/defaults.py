"""The servers as deployed: the CPU a hello request costs each server started the way a new user
starts it, access log and all, and how much of ferrule's request its access line is.

    python3 benches/defaults.py                            # every row, 5 rounds of 5 s: ~6 minutes
    python3 benches/defaults.py --ferrule-path DIR         # ferrule imported from DIR first
    python3 benches/defaults.py --rounds 3 --seconds 5     # the "before" figure's run
    python3 benches/defaults.py --rounds 1 --seconds 2 --instructions 0   # a quick check
    python3 benches/defaults.py --servers ferrule,ferrule-no-access-log

GET /hello of benches/apps.py, one row per server and setting:

    ferrule                  ferrule apps:app --port P                  (access log on by default)
    uvicorn                  uvicorn apps:app --port P                  (access log on by default;
                                                                         uvloop and httptools, its
                                                                         picks when installed)
    granian                  granian --interface asgi apps:app --port P (no access log by default)
    granian-access-log       granian --interface asgi apps:app --port P --access-log
    ferrule-pipe, uvicorn-pipe, granian-access-log-pipe
                             the same, stdout (and stderr) a pipe read by another process
    ferrule-no-access-log    ferrule apps:app --port P --no-access-log  (the reference)
    ferrule-rust             the same with --rust-hello-route /hello: answered in Rust, the app
                             never called; granian's CPU over this row's is the most any
                             ferrule could reach on this machine
    ferrule-asyncio, uvicorn-plain, granian-asyncio
                             each as a plain `pip install` runs it: --loop asyncio (uvicorn
                             also --http h11), since uvloop is not there to be picked

Nothing else on the command lines: no --log-level, no --workers, and no --loop but in the last
three rows. Each server runs
as `python3 -m NAME ...` (what the `NAME` script runs) under `taskset -c 0`, in benches/, with
PYTHONUNBUFFERED=1, its stdout and stderr to a log file (harness.ServerProcess), or for the
-pipe rows to a pipe that `cat` on CPU 1 reads continuously and copies to the log file, as a
container runtime reads a container's stdout. The report's four sections:

    1. defaults                   ferrule, uvicorn, granian
    2. access logs on in all 3    ferrule, uvicorn, granian-access-log
    3. the same, stdout a pipe    ferrule-pipe, uvicorn-pipe, granian-access-log-pipe
    4. reference                  ferrule-no-access-log: (ferrule - this) / ferrule is the access
                                  line's share of a ferrule request's CPU; ferrule-rust: the limit
    5. a plain pip install        ferrule-asyncio, uvicorn-plain, granian-asyncio: each server as
                                  it runs without uvloop (uvicorn also without httptools)

Every row's server runs at once (idle ones cost nothing); wrk -t1 -c50 on CPU 1. After a
warm-up of each, each round runs every row once, one row further along each round, so all rows
see the same minutes of this noisy machine; the table gives the median over the rounds of the
server's CPU time (user + system, all its processes and threads) per request, with the spread
(min-max), and of requests/s. When the servers have stopped, each log's access lines are
counted: lines per request answered (the readiness probe, the warm-up and the rounds) is about
1 for a row that logs (fewer: lines dropped) and 0 for one that does not.

The goals (CPU per request): ferrule's defaults at least 1.5x granian's; with access logs on
in all three, ferrule at least 3x granian and 5x uvicorn; the access line at most 10% of a
ferrule request's CPU. Each goal gives the ratio of the medians and, beside it, the median of
the ratios round by round (two runs of one round share that minute of the machine). Last, with
the servers stopped, benches/instructions.sh counts ferrule's instructions per request with its
access log off and on (--instructions N requests, about two minutes): the access line's share
in a measure the machine's noise does not move.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import harness
from harness import (
    BENCH_DIR,
    CLIENT_CPU,
    PIPE_READER,
    SERVER_CPU,
    Server,
    ServerProcess,
    log,
    pick,
    run_wrk,
    scratch_dir,
    uptime,
    verdict,
    write_report,
)

APP = "apps:app"
PATH = "/hello"
ACCESS_LINE = b'"GET /hello HTTP/1.1"'  # in ferrule's, uvicorn's and granian's access lines
PEERS = ("uvicorn", "granian", "uvloop", "httptools")
ERRORS = (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired)


@dataclass(frozen=True)
class Row:
    name: str  # a name starting with "ferrule" gets --ferrule-path first (harness.pythonpath)
    args: str  # after `python3 -m`: "{app}" and "{port}" filled in
    logs: bool  # whether it writes an access line per request
    stdout: str = "file"  # or "pipe" (harness.ServerProcess)

    def server(self) -> Server:
        return Server(self.name, self.args)

    def typed(self) -> str:
        """The command as a user types it."""
        return self.args.replace("-m ", "", 1).format(app=APP, port="P")


FERRULE = "-m ferrule {app} --port {port}"
UVICORN = "-m uvicorn {app} --port {port}"
GRANIAN = "-m granian --interface asgi {app} --port {port}"
ROWS = [
    Row("ferrule", FERRULE, logs=True),
    Row("uvicorn", UVICORN, logs=True),
    Row("granian", GRANIAN, logs=False),
    Row("granian-access-log", GRANIAN + " --access-log", logs=True),
    Row("ferrule-pipe", FERRULE, logs=True, stdout="pipe"),
    Row("uvicorn-pipe", UVICORN, logs=True, stdout="pipe"),
    Row("granian-access-log-pipe", GRANIAN + " --access-log", logs=True, stdout="pipe"),
    Row("ferrule-no-access-log", FERRULE + " --no-access-log", logs=False),
    # The HTTP stack and the kernel alone: /hello answered in Rust, the app never called.
    Row("ferrule-rust", FERRULE + " --no-access-log --rust-hello-route /hello", logs=False),
    # What a plain `pip install` of each gives: no uvloop (and for uvicorn no httptools).
    Row("ferrule-asyncio", FERRULE + " --loop asyncio", logs=True),
    Row("uvicorn-plain", UVICORN + " --loop asyncio --http h11", logs=True),
    Row("granian-asyncio", GRANIAN + " --loop asyncio", logs=False),
]
ROWS_BY_NAME = {row.name: row for row in ROWS}

# (title, the rows, the ferrule row the others are compared with)
SECTIONS = [
    (
        "1. Defaults: each server with nothing but the app and the port; stdout a file",
        ("ferrule", "uvicorn", "granian"),
        "ferrule",
    ),
    (
        "2. Access logs on in all three (granian --access-log); stdout a file",
        ("ferrule", "uvicorn", "granian-access-log"),
        "ferrule",
    ),
    (
        "3. Access logs on in all three; stdout a pipe read by another process",
        ("ferrule-pipe", "uvicorn-pipe", "granian-access-log-pipe"),
        "ferrule-pipe",
    ),
    (
        "4. Reference: ferrule --no-access-log (what the access log costs is the difference),"
        " and the Rust-only route (what the HTTP stack and the kernel cost, no Python)",
        ("ferrule", "ferrule-no-access-log", "ferrule-rust"),
        "ferrule",
    ),
    (
        "5. A plain pip install of each (no uvloop; uvicorn without httptools): asyncio's loop",
        ("ferrule-asyncio", "uvicorn-plain", "granian-asyncio"),
        "ferrule-asyncio",
    ),
]


@dataclass
class Measured:
    row: Row
    runs: list[tuple[float, float]] = field(default_factory=list)  # req/s, CPU µs/req
    answered: int = 0  # requests answered: the readiness probe, the warm-up, the rounds
    errors: int = 0  # wrk's socket errors and non-2xx responses
    lines: int | None = None  # access lines in its log, counted once it stopped
    argv: list[str] = field(default_factory=list)


def measure(rows: list[Row], args) -> tuple[dict[str, Measured], list[str]]:
    """Start every row's server, warm each up, run the rounds turn about; then stop them all
    and count each log's access lines."""
    failures: list[str] = []
    results = {row.name: Measured(row) for row in rows}
    procs: dict[str, ServerProcess] = {}
    stopped: dict[str, ServerProcess] = {}

    def attempt(row: Row, step) -> bool:
        """step(proc, measured, args); on an error, note it and stop the row's server."""
        try:
            step(procs[row.name], results[row.name], args)
            return True
        except ERRORS as exc:
            failures.append(f"{row.name}: {exc}\n{procs[row.name].log_tail(8)}")
            stopped[row.name] = procs.pop(row.name)
            stopped[row.name].stop()
            return False

    with scratch_dir() as tmp:
        try:
            for row in rows:
                log(f"{row.name}: starting, warming up")
                proc = ServerProcess(row.server(), APP, Path(tmp), stdout=row.stdout)
                procs[row.name] = proc
                results[row.name].argv = proc.argv
                attempt(row, start)
            live = [row for row in rows if row.name in procs]
            for i in range(args.rounds if live else 0):
                for row in live[i % len(live) :] + live[: i % len(live)]:
                    if row.name in procs and attempt(row, run_once):
                        rps, cpu_us = results[row.name].runs[-1]
                        done = f"{rps:,.0f} req/s, {cpu_us:,.1f} µs/req"
                        log(f"round {i + 1}/{args.rounds} {row.name}: {done}")
        finally:
            for name, proc in procs.items():
                proc.stop()
                stopped[name] = proc
        for name, proc in stopped.items():  # stopped: every line is in the file
            results[name].lines = count_lines(proc.log_path)
    return results, failures


def start(proc: ServerProcess, m: Measured, args) -> None:
    """Wait for the server (one GET of PATH answered), then warm it up."""
    proc.wait_ready(PATH)
    m.answered += 1
    if args.warmup:
        m.answered += run_wrk(proc.url(PATH), args.warmup, args.connections).requests


def run_once(proc: ServerProcess, m: Measured, args) -> None:
    """One wrk run: requests/s and the server's CPU µs per request."""
    before = proc.cpu_seconds()
    result = run_wrk(proc.url(PATH), args.seconds, args.connections)
    if result.requests == 0:
        raise RuntimeError("0 requests: the server stopped answering")
    m.runs.append((result.rps, (proc.cpu_seconds() - before) * 1e6 / result.requests))
    m.answered += result.requests
    m.errors += result.errors + result.non_2xx


def count_lines(path: Path) -> int:
    """The access lines of PATH in a log, read in chunks (a run's log is tens of MB)."""
    count, carry = 0, b""
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            data = carry + chunk
            count += data.count(ACCESS_LINE)
            carry = data[-(len(ACCESS_LINE) - 1) :]  # too short to hold a whole match
    return count


# --- the report ---------------------------------------------------------------------------


def cpu(m: Measured | None) -> float | None:
    return statistics.median(us for _, us in m.runs) if m and m.runs else None


def per_request(m: Measured) -> str:
    """Access lines per request answered, flagged when it is not what the row should log."""
    if m.lines is None or not m.answered:
        return "-"
    ratio = m.lines / m.answered
    flag = ""
    if m.row.logs and not 0.98 <= ratio <= 1.02:
        flag = " (lines dropped)" if ratio < 1 else " (too many)"
    elif not m.row.logs and m.lines:
        flag = " (logs after all)"
    return f"{ratio:.3f} ({m.lines:,} / {m.answered:,}){flag}"


def section_table(names: tuple[str, ...], base: str, results: dict[str, Measured]) -> list[str]:
    base_cpu = cpu(results.get(base))
    lines = [
        f"| row | stdout | req/s | CPU µs/req (min-max) | x {base}'s CPU"
        " | access lines / request |",
        "|---|---|--:|--:|--:|--:|",
    ]
    for name in names:
        m = results.get(name)
        if m is None:
            lines.append(f"| {name} | - | not run | - | - | - |")
            continue
        stdout = "pipe (cat)" if m.row.stdout == "pipe" else "file"
        if not m.runs:
            lines.append(f"| {name} | {stdout} | failed | - | - | {per_request(m)} |")
            continue
        us = sorted(u for _, u in m.runs)
        rps = statistics.median(r for r, _ in m.runs)
        errors = f" ({m.errors:,} errors)" if m.errors else ""
        times = f"{cpu(m) / base_cpu:.2f}x" if base_cpu else "-"
        lines.append(
            f"| {name} | {stdout} | {rps:,.0f}{errors} | {cpu(m):,.1f} ({us[0]:,.1f}-{us[-1]:,.1f})"
            f" | {times} | {per_request(m)} |"
        )
    return lines


def per_round(a: str, b: str, results, of, form) -> str:
    """`of(a's CPU, b's CPU)` round by round, as `form` writes it: the machine's speed drifts
    from one minute to the next, and the two runs of one round share their minute."""
    ma, mb = results.get(a), results.get(b)
    if len(ma.runs) != len(mb.runs) or len(ma.runs) < 2:  # a row that failed has fewer
        return ""
    values = sorted(of(x, y) for (_, x), (_, y) in zip(ma.runs, mb.runs, strict=True))
    middle = statistics.median(values)
    return f"; round by round {form(middle)} ({form(values[0])} to {form(values[-1])})"


def _ratio(peer: float, ferrule: float) -> float:
    return peer / ferrule


def _share(logged: float, quiet: float) -> float:
    return (logged - quiet) / logged


def ratio_goal(what: str, peer: str, ferrule: str, goal: float, results) -> str:
    """`peer`'s CPU per request / `ferrule`'s, against `goal`."""
    p, f = cpu(results.get(peer)), cpu(results.get(ferrule))
    if not p or not f:
        return f"- {what}: not measured ({peer} or {ferrule} missing)"
    r = _ratio(p, f)
    rounds = per_round(peer, ferrule, results, _ratio, lambda r: f"{r:.2f}x")
    return (
        f"- {what}: {peer} {p:,.1f} µs / {ferrule} {f:,.1f} µs = {r:.2f}x,"
        f" goal >= {goal:g}x {verdict(r >= goal)}{rounds}"
    )


def share_goal(what: str, ferrule: str, results) -> str:
    """The access line's share of `ferrule`'s CPU per request: against --no-access-log."""
    quiet_row = "ferrule-no-access-log"
    f, quiet = cpu(results.get(ferrule)), cpu(results.get(quiet_row))
    if not f or not quiet:
        return f"- {what}: not measured ({ferrule} or ferrule-no-access-log missing)"
    share = _share(f, quiet)
    rounds = per_round(ferrule, quiet_row, results, _share, lambda r: f"{r:.1%}")
    return (
        f"- {what}: ({ferrule} {f:,.1f} µs - ferrule-no-access-log {quiet:,.1f} µs)"
        f" / {f:,.1f} µs = {share:.1%}, goal <= 10% {verdict(share <= 0.10)}{rounds}"
    )


def instructions(args) -> list[str]:
    """ferrule's user-space instructions per hello request with the access log off and on
    (benches/instructions.sh, callgrind): unlike CPU time, the same from one minute to the next,
    so the access line's share it gives does not drift with the machine."""
    if not args.instructions:
        return ["not measured (--instructions 0)"]
    missing = [tool for tool in ("valgrind", "h2load") if shutil.which(tool) is None]
    if missing:
        return [f"not measured ({', '.join(missing)} not installed)"]
    script = BENCH_DIR / "instructions.sh"
    where = ["--ferrule-path", str(args.ferrule_path)] if args.ferrule_path else []
    counts = {}
    for label, options in (("off", ""), ("on", "--access-log")):
        command = ["bash", str(script), *where, "uvloop", PATH, str(args.instructions)]
        log(f"instructions, access log {label}: {shlex.join(command)}")
        done = subprocess.run(
            command,
            env={**os.environ, "FERRULE_ARGS": options},
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        found = re.search(r"(\d+) Ir/request", done.stdout)
        if not found:
            return [f"not measured (instructions.sh failed: {done.stderr.strip()[-300:]})"]
        counts[label] = int(found.group(1))
    off, on = counts["off"], counts["on"]
    share = _share(on, off)
    return [
        f"`FERRULE_ARGS=OPTION benches/instructions.sh uvloop {PATH} {args.instructions}`"
        " (--ferrule-path as above), ferrule's own process, user space:",
        "",
        f"- `--no-access-log`: {off:,} instructions a request",
        f"- `--access-log` (the default): {on:,} instructions a request",
        f"- the access line's share: ({on:,} - {off:,}) / {on:,} = {share:.1%},"
        f" goal <= 10% {verdict(share <= 0.10)}",
    ]


def limit(results: dict[str, Measured]) -> list[str]:
    """What the defaults goal is measured against: granian over the Rust-only route."""
    p, rust = cpu(results.get("granian")), cpu(results.get("ferrule-rust"))
    if not p or not rust:
        return []
    rounds = per_round("granian", "ferrule-rust", results, _ratio, lambda r: f"{r:.2f}x")
    return [
        f"- the limit: granian {p:,.1f} µs / ferrule-rust {rust:,.1f} µs ="
        f" {_ratio(p, rust):.2f}x{rounds}:"
        " what ferrule's defaults would reach if Python and the bridge cost nothing",
    ]


def goals(results: dict[str, Measured]) -> list[str]:
    return [
        ratio_goal("defaults: ferrule at least 1.5x granian", "granian", "ferrule", 1.5, results),
        *limit(results),
        ratio_goal(
            "access logs on in all three: ferrule at least 3x granian",
            "granian-access-log",
            "ferrule",
            3,
            results,
        ),
        ratio_goal(
            "access logs on in all three: ferrule at least 5x uvicorn",
            "uvicorn",
            "ferrule",
            5,
            results,
        ),
        share_goal("the access line's share of a ferrule request's CPU", "ferrule", results),
        "",
        "The same goals with stdout a pipe (section 3):",
        "",
        ratio_goal(
            "pipe: ferrule at least 3x granian",
            "granian-access-log-pipe",
            "ferrule-pipe",
            3,
            results,
        ),
        ratio_goal("pipe: ferrule at least 5x uvicorn", "uvicorn-pipe", "ferrule-pipe", 5, results),
        share_goal("pipe: the access line's share", "ferrule-pipe", results),
    ]


def shown(argv: list[str]) -> str:
    """A server's argv as a shell line: the interpreter by its name, the port as P."""
    words = [Path(w).name if w == sys.executable else w for w in argv]
    if "--port" in words:
        words[words.index("--port") + 1] = "P"
    return shlex.join(words)


def commands(results: dict[str, Measured]) -> list[str]:
    lines = []
    for name, m in results.items():
        if m.row.stdout == "pipe":
            run = f"{shown(m.argv)} 2>&1 | {shlex.join(PIPE_READER)} > {name}.log"
        else:
            run = f"{shown(m.argv)} > {name}.log 2>&1"
        lines.append(f"- {name}: `{m.row.typed()}`, run as `{run}`")
    return lines


def versions() -> str:
    found = []
    for name in PEERS:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name} not installed")
    wrk = subprocess.run(["wrk", "-v"], capture_output=True, text=True)
    found.append((wrk.stdout or wrk.stderr).split("[")[0].strip() or "wrk ?")
    found.append(f"Python {sys.version.split()[0]}")
    return ", ".join(found)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="rows: " + ", ".join(ROWS_BY_NAME)
    )
    p.add_argument("--servers", default=",".join(ROWS_BY_NAME), help="comma list of rows (all)")
    p.add_argument("--seconds", type=int, default=5, help="seconds per run (default 5)")
    p.add_argument("--rounds", type=int, default=5, help="runs per row, turn about (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="warm-up seconds per row (default 2)")
    p.add_argument("--connections", type=int, default=50, help="wrk -c (default 50)")
    p.add_argument("--ferrule-path", type=Path, help="import ferrule from this directory")
    p.add_argument(
        "--instructions",
        type=int,
        default=2000,
        metavar="N",
        help="hello requests counted under callgrind after the rounds (default 2000; 0: skip)",
    )
    p.add_argument("--out", type=Path, default=BENCH_DIR / "results", help="for defaults-*.md")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    harness.ferrule_path = args.ferrule_path
    rows = pick(args.servers, ROWS_BY_NAME, "row")
    stamp = time.strftime("%Y%m%d-%H%M%S")
    load_before, build = harness.sitting()
    results, failures = measure(rows, args)
    lines = [
        "# The servers as deployed: defaults and access logs",
        "",
        f"- Command: `{shlex.join([Path(sys.executable).name, *sys.argv])}`",
        f"- Uptime before: {load_before}",
        f"- Uptime after: {uptime()}",
        f"- ferrule: {build}",
        f"- Peers: {versions()}",
        f"- GET {PATH} of benches/apps.py; {args.rounds} round(s) x {args.seconds} s per row,"
        f" turn about, after {args.warmup} s of warm-up; wrk -t1 -c{args.connections} on CPU"
        f" {CLIENT_CPU}, servers on CPU {SERVER_CPU}, all running at once; medians over the"
        " rounds",
        "- CPU µs/req: the server's user + system time, all its processes and threads, per"
        " request wrk counted; x ferrule's CPU: this row's CPU per request / the section's"
        " ferrule row's",
        '- access lines / request: lines holding `"GET /hello HTTP/1.1"` in the server\'s'
        " stdout and stderr, counted after it stopped, over every request it answered (probe,"
        " warm-up, rounds); about 1 where a row logs (a little over: wrk does not count the"
        f" up to {args.connections} requests in flight when a run ends), 0 where it does not",
        "",
        "Commands (python3 is the running interpreter; in benches/, PYTHONPATH=benches"
        " (--ferrule-path's directory first for ferrule), PYTHONUNBUFFERED=1; P a free port):",
        "",
        *commands(results),
    ]
    for title, names, base in SECTIONS:
        picked = tuple(n for n in names if n in results)
        if picked:
            lines += ["", f"## {title}", "", *section_table(picked, base, results)]
    lines += ["", "## Goals (CPU per request)", "", *goals(results)]
    lines += ["", "## The access line in instructions", "", *instructions(args)]
    if failures:
        lines += ["", "Failures:", "", *(f"- {f}" for f in failures)]
    write_report(args.out, f"defaults-{stamp}.md", lines)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
