"""Static files: ferrule's --static-path-mount against granian's, Starlette's StaticFiles and nginx.

    python3 benches/static_files.py --ferrule-path DIR          # 4 servers x 3 sizes: ~6 minutes
    python3 benches/static_files.py --servers ferrule,nginx --sizes 1k,10m --rounds 3
    python3 benches/static_files.py --seconds 2 --rounds 1       # a quick check that it all runs

One file per size (--sizes; 1k, 100k, 10m: KiB and MiB) of deterministic pseudo-random bytes,
`file-SIZE.bin` (application/octet-stream, so no server compresses it), made once in a temp
directory and served at /static/ by every server:

    ferrule      --static-path-mount DIR --static-path-route /static: from Rust, before the app
                 (benches/apps.py's, never called)
    granian      the same options (granian's own), --interface asgi --workers 1, the same app
    starlette    Starlette's StaticFiles mounted at /static (benches/static_app.py), under uvicorn
    nginx        worker_processes 1, sendfile on, tcp_nopush on, `location /static/ { alias DIR/; }`

A row is a (server, size) pair. Every server runs at once, pinned to CPU 0 (idle ones cost
nothing); wrk -t1 on CPU 1, -c50 (--connections), -c10 for files of 1 MiB and more
(--large-connections). Each row's response is checked once (status 200, Content-Length the
file's size, the body the file's bytes), then warmed up; each round runs every row once, one row
further along each round, so all rows see the same minutes of this noisy machine; the table
gives medians over the rounds and the spread of the CPU time. CPU is the server's user + system
time, all its processes and threads, per request. The issue's targets: ferrule's CPU per request
within 1.3x of nginx's on one core, and ahead of granian (less CPU per request), at every size.
"""

from __future__ import annotations

import argparse
import http.client
import os
import random
import re
import shlex
import shutil
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

import harness
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

ROUTE = "/static"
SERVERS = ("ferrule", "granian", "starlette", "nginx")
# The harness servers whose commands ferrule, granian and starlette start from.
HARNESS_SERVERS = ("ferrule-uvloop", "granian", "uvicorn")
UNITS = {"k": 1024, "m": 1024**2}
LARGE = 1024**2  # files of this size and more get --large-connections
NGINX_RATIO = 1.3  # the target: ferrule's CPU per request at most this many times nginx's
ERRORS = (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired)
NGINX_CONF = """worker_processes 1;
error_log {prefix}error.log;
pid {prefix}nginx.pid;
events {{}}
http {{
    access_log off;
    sendfile on;
    tcp_nopush on;
    types {{ application/octet-stream bin; }}
    default_type application/octet-stream;
    server {{
        listen 127.0.0.1:{port};
        location {route}/ {{ alias {root}/; }}
    }}
}}
"""


@dataclass(frozen=True)
class Nginx(Server):
    """nginx itself (no Python), its config written for the port it is given."""

    root: Path = Path()
    prefix: Path = Path()

    def argv(self, app: str, port: int, http: str = "1") -> list[str]:
        prefix = f"{self.prefix}/"
        conf = self.prefix / "nginx.conf"
        conf.write_text(NGINX_CONF.format(prefix=prefix, port=port, route=ROUTE, root=self.root))
        error_log = f"{prefix}error.log"  # -e: before the config is read, too
        return [nginx_path(), "-c", str(conf), "-p", prefix, "-e", error_log, "-g", "daemon off;"]


@dataclass(frozen=True)
class Row:
    server: str
    label: str  # as given in --sizes: 1k, 10m
    size: int
    connections: int  # wrk -c

    @property
    def name(self) -> str:
        return f"{self.server} {self.label}"

    @property
    def path(self) -> str:
        return f"{ROUTE}/file-{self.label}.bin"


@dataclass
class Measured:
    row: Row
    runs: list[tuple[float, float]] = field(default_factory=list)  # req/s, CPU µs/req
    errors: int = 0


def nginx_path() -> str:
    return shutil.which("nginx", path=f"{os.environ.get('PATH', '')}:/usr/sbin") or "nginx"


def parse_size(label: str) -> int:
    unit = UNITS.get(label[-1].lower(), 1)
    return int(label[:-1] if unit > 1 else label) * unit


def human(size: int) -> str:
    for unit, name in ((1024**2, "MiB"), (1024, "KiB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} B"


def make_files(root: Path, labels: list[str]) -> dict[str, bytes]:
    """One file-LABEL.bin of deterministic pseudo-random bytes per size, readable by nginx's
    worker (which drops to nobody when started as root)."""
    root.parent.chmod(0o755)
    root.mkdir(mode=0o755)
    files = {label: random.Random(label).randbytes(parse_size(label)) for label in labels}
    for label, data in files.items():
        (root / f"file-{label}.bin").write_bytes(data)
    return files


def make_servers(root: Path, prefix: Path) -> dict[str, tuple[Server, str]]:
    """Each server, and the app (module:attribute) it is started with."""
    mount = f" --static-path-mount {root} --static-path-route {ROUTE}"
    ferrule, granian, uvicorn = (SERVERS_BY_NAME[n].command for n in HARNESS_SERVERS)
    # The name keeps its "ferrule" prefix: harness.pythonpath puts --ferrule-path first for it.
    return {
        "ferrule": (Server("ferrule", ferrule + mount), "apps:app"),
        "granian": (Server("granian", granian + mount), "apps:app"),
        "starlette": (Server("starlette", uvicorn), "static_app:app"),
        "nginx": (Nginx("nginx", "", root=root, prefix=prefix), "-"),
    }


def has_static() -> bool:
    env = dict(os.environ, PYTHONPATH=str(harness.ferrule_path or ""))
    done = subprocess.run([sys.executable, "-m", "ferrule", "--help"], capture_output=True, env=env)
    return b"--static-path-mount" in done.stdout


def probe(proc: ServerProcess, row: Row, data: bytes) -> str:
    """One GET of the row's file: raises unless it is 200 with the file's bytes and length (a
    note, not a failure, when it sends no Content-Length: granian 2.8.9's are chunked)."""
    conn = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=30)
    try:
        conn.request("GET", row.path)
        response = conn.getresponse()
        body = response.read()
    finally:
        conn.close()
    length, coding = response.getheader("Content-Length"), response.getheader("Content-Encoding")
    if response.status != 200:
        raise ValueError(f"status {response.status}")
    if length not in (None, str(row.size)) or coding:
        raise ValueError(f"Content-Length {length} (not {row.size}), Content-Encoding {coding}")
    if body != data:
        raise ValueError(f"the body ({len(body):,} bytes) is not the file")
    chunked = response.getheader("Transfer-Encoding") == "chunked"
    return "" if length else f"no Content-Length{' (chunked)' if chunked else ''}"


def run_once(proc: ServerProcess, m: Measured, seconds: int) -> None:
    """One wrk run: requests/s and the server's CPU µs per request."""
    before = proc.cpu_seconds()
    result = run_wrk(proc.url(m.row.path), seconds, m.row.connections)
    if result.requests == 0:
        raise RuntimeError("0 requests: the server stopped answering")
    m.runs.append((result.rps, (proc.cpu_seconds() - before) * 1e6 / result.requests))
    m.errors += result.errors + result.non_2xx


def measure(rows: list[Row], args, notes: list[str], failures: list[str]) -> dict[str, Measured]:
    """Make the files, start every server, check and warm up each row, then the rounds."""
    results = {row.name: Measured(row) for row in rows}
    procs: dict[str, ServerProcess] = {}
    live: list[Row] = []  # the rows still measured

    def attempt(row: Row, step, *step_args) -> bool:
        """step(*step_args), noting what it returns; on an error, note it and drop the row (all
        its server's if the server has died)."""
        try:
            if isinstance(note := step(*step_args), str) and note:
                notes.append(f"{row.name}: {note}")
            return True
        except ERRORS as exc:
            proc = procs[row.server]
            failures.append("\n".join(filter(None, [f"{row.name}: {exc}", proc.log_tail(8)])))
            dead = proc.proc.poll() is not None
            live[:] = [r for r in live if r != row and not (dead and r.server == row.server)]
            return False

    with scratch_dir() as tmp:
        root = Path(tmp) / "static"
        files = make_files(root, list(dict.fromkeys(row.label for row in rows)))
        os.environ["FERRULE_BENCH_STATIC_DIR"] = str(root)  # static_app's, in the servers' env
        servers = make_servers(root, Path(tmp))
        try:
            for name in dict.fromkeys(row.server for row in rows):
                log(f"{name}: starting")
                procs[name] = ServerProcess(*servers[name], Path(tmp))
                try:
                    procs[name].wait_ready(rows[0].path)
                except ERRORS as exc:
                    failures.append(f"{name}: {exc}")  # the log's tail is in exc
                    procs.pop(name).stop()
            live += [row for row in rows if row.server in procs]
            for row in list(live):
                if row not in live:  # its server died on an earlier row
                    continue
                log(f"{row.name}: checking the response, warming up")
                proc = procs[row.server]
                if attempt(row, probe, proc, row, files[row.label]) and args.warmup:
                    attempt(row, run_wrk, proc.url(row.path), args.warmup, row.connections)
            for i in range(args.rounds if live else 0):
                for row in live[i % len(live) :] + live[: i % len(live)]:
                    m = results[row.name]
                    if row in live and attempt(row, run_once, procs[row.server], m, args.seconds):
                        done = f"{m.runs[-1][0]:,.0f} req/s, {m.runs[-1][1]:,.0f} µs/req"
                        log(f"round {i + 1}/{args.rounds} {row.name}: {done}")
        finally:
            for proc in procs.values():
                proc.stop()
    return results


def cpu(m: Measured | None) -> float | None:
    return statistics.median(r[1] for r in m.runs) if m and m.runs else None


def rps(m: Measured | None) -> float | None:
    return statistics.median(r[0] for r in m.runs) if m and m.runs else None


def ratio(this: float | None, base: float | None) -> str:
    return f"{this / base:.2f}x" if this and base else "-"


def table(results: dict[str, Measured]) -> list[str]:
    lines = [
        "| server | size | req/s | CPU µs/req (min-max) | MB/s | CPU x nginx | CPU x granian |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    for m in results.values():
        row = m.row
        if not m.runs:
            lines.append(f"| {row.server} | {human(row.size)} | - | - | - | - | - |")
            continue
        nginx, granian = (cpu(results.get(f"{s} {row.label}")) for s in ("nginx", "granian"))
        us = sorted(r[1] for r in m.runs)
        errors = f" ({m.errors} errors)" if m.errors else ""
        lines.append(
            f"| {row.server} | {human(row.size)} | {rps(m):,.0f}{errors} | {cpu(m):,.0f}"
            f" ({us[0]:,.0f}-{us[-1]:,.0f}) | {rps(m) * row.size / 1e6:,.0f}"
            f" | {ratio(cpu(m), nginx)} | {ratio(cpu(m), granian)} |"
        )
    return lines


def targets(results: dict[str, Measured], labels: list[str]) -> list[str]:
    """The issue's two targets, for each size ferrule was measured at."""
    lines = []
    for label in labels:
        ferrule, granian, nginx = (results.get(f"{s} {label}") for s in SERVERS[:2] + ("nginx",))
        if not cpu(ferrule):
            continue
        checks = []
        if cpu(nginx):
            ok = cpu(ferrule) <= NGINX_RATIO * cpu(nginx)
            checks.append(f"CPU {ratio(cpu(ferrule), cpu(nginx))} nginx's {verdict(ok)}")
        if cpu(granian):
            ok = cpu(ferrule) < cpu(granian)
            faster = ratio(rps(ferrule), rps(granian))
            cpu_x = ratio(cpu(ferrule), cpu(granian))
            checks.append(f"CPU {cpu_x} granian's (req/s {faster} granian's) {verdict(ok)}")
        lines.append(f"- {human(parse_size(label))}: " + ("; ".join(checks) or "no baseline"))
    return lines


def versions() -> str:
    """The other servers' versions."""
    try:
        nginx = subprocess.run([nginx_path(), "-v"], capture_output=True, text=True).stderr
    except OSError:
        nginx = "nginx not installed"
    python = ", ".join(f"{name} {version(name)}" for name in ("granian", "starlette", "uvicorn"))
    return f"{python}, {nginx.strip()}"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--servers", default=",".join(SERVERS), help="comma list (default: all four)")
    p.add_argument("--sizes", default="1k,100k,10m", help="k: KiB, m: MiB (default 1k,100k,10m)")
    p.add_argument("--seconds", type=int, default=5, help="seconds per run (default 5)")
    p.add_argument("--rounds", type=int, default=5, help="runs per row, turn about (default 5)")
    p.add_argument("--warmup", type=int, default=2, help="warm-up seconds per row (default 2)")
    p.add_argument("--connections", type=int, default=50, help="wrk -c (default 50)")
    p.add_argument("--large-connections", type=int, default=10, help="wrk -c from 1 MiB (10)")
    p.add_argument("--ferrule-path", type=Path, help="import ferrule from this directory")
    p.add_argument("--out", type=Path, default=BENCH_DIR / "results", help="for static_files.md")
    args = p.parse_args(argv)
    args.servers = [s for s in args.servers.split(",") if s]
    args.sizes = [s for s in args.sizes.split(",") if s]
    if unknown := [s for s in args.servers if s not in SERVERS]:
        p.error(f"unknown servers {unknown}; choose from: {', '.join(SERVERS)}")
    if bad := [s for s in args.sizes if not re.fullmatch(r"\d+[kKmM]?", s)]:
        p.error(f"unreadable sizes {bad} (write them as 1k, 100k, 10m)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    harness.ferrule_path = args.ferrule_path
    failures: list[str] = []
    if "ferrule" in args.servers and not has_static():
        failures.append("this ferrule has no --static-path-mount: its rows were skipped")
        args.servers.remove("ferrule")
    rows = []
    for label in args.sizes:
        size = parse_size(label)
        connections = args.connections if size < LARGE else args.large_connections
        rows += [Row(server, label, size, connections) for server in args.servers]
    load_before, build = harness.sitting()
    notes: list[str] = []
    results = measure(rows, args, notes, failures)
    lines = [
        "# ferrule static files",
        "",
        f"- Command: `{shlex.join([Path(sys.executable).name, *sys.argv])}`",
        f"- Uptime before: {load_before}",
        f"- Uptime after: {uptime()}",
        f"- ferrule: {build}",
        f"- Others: {versions()}",
        f"- GET {ROUTE}/file-SIZE.bin: deterministic pseudo-random bytes (application/octet-stream,"
        " nothing compressed); each row's response checked once (200, Content-Length, the bytes)",
        "- ferrule and granian: --static-path-mount, their app (benches/apps.py) never called;"
        " starlette: StaticFiles under uvicorn (uvloop, httptools); nginx: worker_processes 1,"
        " sendfile on, tcp_nopush on",
        f"- {args.rounds} round(s) x {args.seconds} s per row, turn about, after {args.warmup} s"
        f" of warm-up; wrk -t1 -c{args.connections} (-c{args.large_connections} for files of"
        f" 1 MiB and more) on CPU {harness.CLIENT_CPU}, servers on CPU {harness.SERVER_CPU};"
        " medians over the rounds",
        "- MB/s: file bytes (10^6) per second; CPU x nginx, CPU x granian: this row's CPU per"
        " request / theirs for the same file (below 1: less CPU)",
        "",
        *table(results),
        "",
        f"Targets (ferrule's CPU per request within {NGINX_RATIO}x of nginx's, and below"
        " granian's):",
        "",
        *(targets(results, args.sizes) or ["- no ferrule row measured"]),
    ]
    if notes or failures:
        lines += ["", "Notes and failures:", "", *(f"- {f}" for f in notes + failures)]
    write_report(args.out, "static_files.md", lines)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
