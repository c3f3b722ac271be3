"""Response compression: ferrule's --compress against Starlette's GZipMiddleware.

    python3 benches/compress.py --ferrule-path DIR          # every row but uvicorn: ~4 minutes
    python3 benches/compress.py --rows ferrule-mw,ferrule-gzip6,granian-mw --rounds 3
    python3 benches/compress.py --seconds 3 --rounds 1       # a quick check that it all runs

One FastAPI endpoint answering ~22 KB of JSON (benches/compress_app.py), with one row per
server x app x option:

    ferrule-mw       ferrule, the app wrapped in GZipMiddleware (its default level, 9)
    ferrule-gzipN    ferrule --compress gzip:N, the plain app (N from --gzip-levels)
    ferrule-br       ferrule --compress br:LEVEL, the plain app
    ferrule-zstd     ferrule --compress zstd:LEVEL, the plain app
    ferrule-plain    ferrule, the plain app, no compression: the floor
    granian-mw       granian, the middleware app
    uvicorn-mw       uvicorn, the middleware app (only when asked for with --rows)

Every row's server runs at once, pinned to CPU 0 (idle ones cost nothing); wrk on CPU 1 sends
`Accept-Encoding: <the row's coding>` (gzip for the middleware and the floor). After a warm-up,
each round runs every row once, one row further along each round, so all rows see the same
minutes of this noisy machine; the table gives medians over the rounds and the spread of the
CPU time. CPU is the server's user + system time, all its processes and threads, per request.
Body bytes are counted from one request per row (raw, not decoded; the decoded body is checked
against the JSON). The issue's targets: ferrule --compress gzip uses at least 2x less CPU per
request than the middleware on ferrule and than the middleware on granian, and sends a body
within 10% of the middleware's size.
"""

from __future__ import annotations

import argparse
import gzip
import http.client
import inspect
import json
import os
import shlex
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import harness
from compress_app import ITEMS  # the JSON every row must answer
from harness import (
    BENCH_DIR,
    SERVERS_BY_NAME,
    Server,
    ServerProcess,
    log,
    run_wrk,
    scratch_dir,
    uptime,
    verdict,
    write_report,
)
from starlette.middleware.gzip import GZipMiddleware

PATH = "/items"
GZIPPED, PLAIN = "compress_app:gzipped", "compress_app:plain"  # with and without GZipMiddleware
MW, GRANIAN_MW = "ferrule-mw", "granian-mw"  # the two baselines of the ratio columns
JSON_BYTES = len(json.dumps(ITEMS, separators=(",", ":")))  # as FastAPI sends it
ERRORS = (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired)


# The compresslevel GZipMiddleware runs at when not given one (compress_app gives none).
MW_LEVEL = inspect.signature(GZipMiddleware).parameters["compresslevel"].default


@dataclass(frozen=True)
class Row:
    name: str
    server: str  # a server of harness.SERVERS
    app: str  # GZIPPED or PLAIN
    compress: str = ""  # ferrule's --compress, if any
    coding: str = "gzip"  # sent in Accept-Encoding
    expect: str | None = "gzip"  # the Content-Encoding the response must have


@dataclass
class Measured:
    row: Row
    runs: list[tuple[float, float, float]] = field(default_factory=list)  # req/s, µs, B/resp
    errors: int = 0
    body_bytes: int | None = None
    note: str = ""


def make_rows(args) -> list[Row]:
    ferrule = f"ferrule-{args.loop}"  # harness's ferrule-uvloop or ferrule-asyncio
    return [
        Row(MW, ferrule, GZIPPED),
        *(Row(f"ferrule-gzip{n}", ferrule, PLAIN, f"gzip:{n}") for n in args.gzip_levels),
        Row("ferrule-br", ferrule, PLAIN, f"br:{args.br_level}", "br", "br"),
        Row("ferrule-zstd", ferrule, PLAIN, f"zstd:{args.zstd_level}", "zstd", "zstd"),
        Row("ferrule-plain", ferrule, PLAIN, expect=None),
        Row(GRANIAN_MW, "granian", GZIPPED),
        Row("uvicorn-mw", "uvicorn", GZIPPED),
    ]


def server_for(row: Row) -> Server:
    base = SERVERS_BY_NAME[row.server]
    extra = f" --compress {row.compress}" if row.compress else ""
    # The name keeps its "ferrule" prefix: harness.pythonpath puts --ferrule-path first for it.
    return Server(row.name, base.command + extra)


def has_compress() -> bool:
    env = dict(os.environ, PYTHONPATH=str(harness.ferrule_path or ""))
    argv = [sys.executable, "-m", "ferrule", "--help"]
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    return "--compress" in done.stdout


def decode(body: bytes, coding: str | None) -> bytes:
    if coding in (None, "identity"):
        return body
    if coding == "gzip":
        return gzip.decompress(body)
    if coding == "br":
        import brotli  # pip install brotli

        return brotli.decompress(body)
    if coding == "zstd":
        import zstandard  # pip install zstandard

        return zstandard.ZstdDecompressor().decompressobj().decompress(body)
    raise ValueError(f"unknown Content-Encoding {coding!r}")


def probe(proc: ServerProcess, row: Row) -> tuple[int, str]:
    """One request as wrk sends it: the raw body's size, and what is wrong with it, if any."""
    conn = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=10)
    try:
        conn.request("GET", PATH, headers={"Accept-Encoding": row.coding})
        response = conn.getresponse()
        body = response.read()  # chunked framing undone, the content coding left as sent
    finally:
        conn.close()
    coding = response.getheader("Content-Encoding")
    if response.status != 200:
        return len(body), f"status {response.status}"
    if coding != row.expect:
        return len(body), f"Content-Encoding {coding}, not {row.expect}"
    try:
        if json.loads(decode(body, coding)) != ITEMS:
            return len(body), "the decoded body is not the app's JSON"
    except ImportError as exc:
        return len(body), f"not decoded ({exc.name} missing)"
    return len(body), ""


def measure(rows: list[Row], args) -> tuple[dict[str, Measured], list[str]]:
    """Start every row's server, probe and warm each up, then the rounds, turn about."""
    failures: list[str] = []
    results = {row.name: Measured(row) for row in rows}
    procs: dict[str, ServerProcess] = {}

    def attempt(row: Row, step) -> bool:
        """step(proc, measured, args); on an error, note it and stop the row's server."""
        try:
            step(procs[row.name], results[row.name], args)
            return True
        except ERRORS as exc:
            tail = "" if step is start else f"\n{procs[row.name].log_tail(8)}"  # start's has it
            failures.append(f"{row.name}: {exc}{tail}")
            procs.pop(row.name).stop()
            return False

    with scratch_dir() as tmp:
        try:
            for row in rows:
                log(f"{row.name}: starting, probing, warming up")
                procs[row.name] = ServerProcess(server_for(row), row.app, Path(tmp))
                if attempt(row, start) and results[row.name].note:
                    failures.append(f"{row.name}: {results[row.name].note}")
            live = [row for row in rows if row.name in procs]
            for i in range(args.rounds if live else 0):
                for row in live[i % len(live) :] + live[: i % len(live)]:
                    if row.name in procs and attempt(row, run_once):
                        rps, cpu_us, _ = results[row.name].runs[-1]
                        done = f"{rps:,.0f} req/s, {cpu_us:,.0f} µs/req"
                        log(f"round {i + 1}/{args.rounds} {row.name}: {done}")
        finally:
            for proc in procs.values():
                proc.stop()
    return results, failures


def start(proc: ServerProcess, m: Measured, args) -> None:
    """Wait for the server, probe its response, warm it up."""
    proc.wait_ready(PATH)
    m.body_bytes, m.note = probe(proc, m.row)
    if args.warmup:
        run_wrk(proc.url(PATH), args.warmup, args.connections, headers=accept(m.row))


def accept(row: Row) -> list[str]:
    return [f"Accept-Encoding: {row.coding}"]


def run_once(proc: ServerProcess, m: Measured, args) -> None:
    """One wrk run: requests/s, the server's CPU µs per request, bytes read per response."""
    before = proc.cpu_seconds()
    result = run_wrk(proc.url(PATH), args.seconds, args.connections, headers=accept(m.row))
    if result.requests == 0:
        raise RuntimeError("0 requests: the server stopped answering")
    cpu_us = (proc.cpu_seconds() - before) * 1e6 / result.requests
    m.runs.append((result.rps, cpu_us, result.bytes_read / result.requests))
    m.errors += result.errors + result.non_2xx


def cpu(m: Measured | None) -> float | None:
    return statistics.median(r[1] for r in m.runs) if m and m.runs else None


def times(base: float | None, this: float | None) -> str:
    return f"{base / this:.2f}x" if base and this else "-"


def table(results: dict[str, Measured]) -> list[str]:
    mw_cpu, granian_cpu = cpu(results.get(MW)), cpu(results.get(GRANIAN_MW))
    mw_bytes = results[MW].body_bytes if MW in results else None
    lines = [
        "| row | compression | req/s | CPU µs/req (min-max) | body B | vs mw body"
        " | wire B/resp | CPU x ferrule-mw | CPU x granian-mw |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for name, m in results.items():
        row = m.row
        how = f"--compress {row.compress}" if row.compress else "none (plain app)"
        if row.app == GZIPPED:
            how = f"GZipMiddleware level {MW_LEVEL}"
        size = "-" if m.body_bytes is None else f"{m.body_bytes:,}"
        if m.note:
            size += f" ({m.note})"
        vs = f"{m.body_bytes / mw_bytes - 1:+.1%}" if mw_bytes and m.body_bytes else "-"
        if not m.runs:
            lines.append(f"| {name} | {how} | - | - | {size} | {vs} | - | - | - |")
            continue
        us = sorted(r[1] for r in m.runs)
        rps = statistics.median(r[0] for r in m.runs)
        wire = statistics.median(r[2] for r in m.runs)
        errors = f" ({m.errors} errors)" if m.errors else ""
        lines.append(
            f"| {name} | {how} | {rps:,.0f}{errors} | {cpu(m):,.0f}"
            f" ({us[0]:,.0f}-{us[-1]:,.0f}) | {size} | {vs} | {wire:,.0f}"
            f" | {times(mw_cpu, cpu(m))} | {times(granian_cpu, cpu(m))} |"
        )
    return lines


def targets(results: dict[str, Measured]) -> list[str]:
    """The issue's three targets, for each ferrule --compress gzip row."""
    mw, granian = results.get(MW), results.get(GRANIAN_MW)
    lines = []
    for m in results.values():
        if not m.row.compress.startswith("gzip") or not m.runs:
            continue
        checks = []
        for what, base in (("ferrule-mw", mw), ("granian-mw", granian)):
            if cpu(base):
                ok = cpu(base) / cpu(m) >= 2
                checks.append(f"CPU {times(cpu(base), cpu(m))} lower than {what} {verdict(ok)}")
        if mw and mw.body_bytes and m.body_bytes:
            change = m.body_bytes / mw.body_bytes - 1
            checks.append(f"body {change:+.1%} vs ferrule-mw {verdict(abs(change) <= 0.10)}")
        lines.append(f"- {m.row.name}: " + "; ".join(checks))
    return lines


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", help="comma list of rows (default: all but uvicorn-mw)")
    p.add_argument("--seconds", type=int, default=5, help="seconds per run (default 5)")
    p.add_argument("--rounds", type=int, default=5, help="runs per row, turn about (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="warm-up seconds per row (default 2)")
    p.add_argument("--connections", type=int, default=50, help="wrk -c (default 50)")
    p.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop", help="ferrule's")
    p.add_argument("--gzip-levels", default="6,9", help="one ferrule-gzipN row each (6,9)")
    p.add_argument("--br-level", type=int, default=4, help="ferrule-br's level (default 4)")
    p.add_argument("--zstd-level", type=int, default=3, help="ferrule-zstd's level (default 3)")
    p.add_argument("--ferrule-path", type=Path, help="import ferrule from this directory")
    p.add_argument("--out", type=Path, default=BENCH_DIR / "results", help="where compress.md goes")
    args = p.parse_args(argv)
    args.gzip_levels = [int(n) for n in args.gzip_levels.split(",") if n]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    harness.ferrule_path = args.ferrule_path
    rows = {row.name: row for row in make_rows(args)}
    names = args.rows.split(",") if args.rows else [n for n in rows if n != "uvicorn-mw"]
    unknown = [n for n in names if n not in rows]
    if unknown:
        sys.exit(f"unknown rows {unknown}; choose from: {', '.join(rows)}")
    chosen = [rows[n] for n in names]
    notes = []
    if not has_compress():
        notes.append("this ferrule has no --compress: its rows were skipped")
        chosen = [row for row in chosen if not row.compress]
    load_before, build = harness.sitting()
    results, failures = measure(chosen, args)
    lines = [
        "# ferrule response compression",
        "",
        f"- Command: `{shlex.join([Path(sys.executable).name, *sys.argv])}`",
        f"- Uptime before: {load_before}",
        f"- Uptime after: {uptime()}",
        f"- ferrule: {build}",
        f"- GET {PATH}: FastAPI, {JSON_BYTES:,} bytes of JSON; middleware rows:"
        f" GZipMiddleware(minimum_size=500), compresslevel {MW_LEVEL} (its default)",
        f"- {args.rounds} round(s) x {args.seconds} s per row, turn about, after {args.warmup} s"
        f" of warm-up; wrk -t1 -c{args.connections} on CPU {harness.CLIENT_CPU}, servers on"
        f" CPU {harness.SERVER_CPU}; ferrule --loop {args.loop}; medians over the rounds",
        "- body B: one response's body as sent (not decoded); wire B/resp: all wrk read"
        " (headers included) per request; CPU x: that baseline's CPU per request / this row's",
        "",
        *table(results),
        "",
        "Targets (CPU at least 2x less than the middleware on ferrule and on granian; body within"
        " 10% of the middleware's):",
        "",
        *(targets(results) or ["- no ferrule --compress gzip row measured"]),
    ]
    if notes or failures:
        lines += ["", "Notes and failures:", "", *(f"- {f}" for f in notes + failures)]
    write_report(args.out, "compress.md", lines)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
