"""The database benchmark, in one command: servers on the six test types of the TechEmpower
Framework Benchmarks (json, plaintext, db, queries, fortunes, updates; implemented here from
their public rules) against a real PostgreSQL.

    python3 benches/db/run.py --quick        # a smoke run, about 3 minutes: 1 round of 1 s
    python3 benches/db/run.py                # 5 rounds of 5 s: about half an hour
    python3 benches/db/run.py --apps raw --tests db,queries --servers ferrule,granian
    python3 benches/db/run.py --access-log   # every server writing its access lines, as deployed
    python3 benches/db/run.py --loop asyncio # asyncio's own loop everywhere instead of uvloop

It installs what is missing (the Python packages of benches/requirements.txt, wrk, PostgreSQL),
starts a throwaway PostgreSQL (postgres.py) pinned to CPU 1, then for each app (raw_app.py: plain
ASGI on asyncpg; fastapi_app.py: FastAPI on SQLAlchemy's asyncio engine) starts every server on
uvloop (or `--loop asyncio`) with one worker, pinned to CPU 0 (servers.py), and checks each one's
answer to every test (checks.py), failing loudly with the server's log. For each test, each server
is warmed up, then measured in `--rounds` rounds of `--duration` seconds, the servers taking turns
within each round, with `wrk -t1 -c64` pinned to CPU 1 (/queries and /updates with ?queries=20); the
server's CPU time (user + system, all its processes) over the run divided by the requests is its CPU
a request. In each round the app alone (alone.py, pinned to CPU 0 too) is measured on the same test:
a server's overhead is its CPU a request less the app alone's. The table gives medians over the
rounds. Then a shorter second pass: requests/s with two workers, nothing pinned, `wrk -t2 -c64`. The
report lands in benches/results/db-<time>.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

DB_DIR = Path(__file__).resolve().parent
BENCHES = DB_DIR.parent
sys.path.insert(0, str(BENCHES))  # harness, report and the db package

import harness  # noqa: E402
from harness import (  # noqa: E402
    CLIENT_CPU,
    Server,
    ServerProcess,
    WrkResult,
    log,
    parse_wrk,
    wrk_argv,
)
from report import loadavg, machine_lines, version  # noqa: E402

from db import checks, contention, postgres, servers, tables  # noqa: E402
from db.tables import ALONE, Sample, Samples  # noqa: E402

APPS = {
    "raw": ("db.raw_app:app", "raw ASGI + asyncpg"),
    "fastapi": ("db.fastapi_app:app", "FastAPI + SQLAlchemy (asyncio, asyncpg)"),
}
CONNECTIONS = 64
RESULTS_DIR = BENCHES / "results"
MEASURE_ERRORS = (RuntimeError, ValueError, OSError, subprocess.TimeoutExpired)
DSN_VARIABLE = "FERRULE_BENCH_DSN"

# The module each needed package is imported as, for the check of what is missing.
NEEDED_MODULES = ("asyncpg", "sqlalchemy", "greenlet", "jinja2", "orjson", "fastapi", "uvloop")
NEEDED_MODULES += ("granian", "uvicorn", "httptools")


def ensure_installed() -> None:
    """Installs benches/requirements.txt if a package is missing, and wrk if it is."""
    missing = [m for m in NEEDED_MODULES if importlib.util.find_spec(m) is None]
    if missing:
        log(f"missing {', '.join(missing)}: pip install -r benches/requirements.txt")
        requirements = str(BENCHES / "requirements.txt")
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "-r", requirements], check=True
        )
    if shutil.which("wrk") is None:
        log("wrk missing: apt-get install wrk")
        subprocess.run(["apt-get", "update"], check=True, stdout=subprocess.DEVNULL)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "install", "-y", "wrk"], check=True, env=env)


def wrk(url: str, seconds: int, pinned: bool) -> WrkResult:
    """harness's wrk run (one thread, pinned to the client core), or unpinned with two threads
    for the two-worker pass."""
    if pinned:
        return harness.run_wrk(url, seconds, CONNECTIONS)
    argv = wrk_argv(url, seconds, CONNECTIONS, None)
    assert argv[:3] == ["taskset", "-c", CLIENT_CPU], argv
    argv = ["-t2" if arg == "-t1" else arg for arg in argv[3:]]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr or done.stdout}")
    return parse_wrk(done.stdout)


def run_alone(app: str, test: checks.Test, seconds: int, gc_threshold: int, loop: str) -> Sample:
    """One round of the app alone on `test`, in its own process pinned to the server core."""
    argv = [sys.executable, str(DB_DIR / "alone.py"), "--app", app, "--paths", test.path]
    argv += ["--loop", loop]
    argv += ["--seconds", str(seconds), "--warmup", str(min(1.0, seconds / 2))]
    argv += ["--gc-threshold", str(gc_threshold)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 120)
    if done.returncode != 0:
        raise RuntimeError(f"alone.py failed ({done.returncode}):\n{done.stderr[-3000:]}")
    result = json.loads(done.stdout)[test.path]
    return Sample(result["cpu_us_per_call"], result["calls_per_s"], others=result["others"])


@dataclass
class Sitting:
    """What the passes share: the options, the scratch directory and what they measured."""

    args: argparse.Namespace
    tmp: Path
    one: Samples = field(default_factory=dict)  # one worker, pinned
    two: Samples = field(default_factory=dict)  # two workers
    failures: list[str] = field(default_factory=list)
    retried: int = 0  # runs measured again because other processes took the server core


class Pass:
    """One app's servers, all running at once (idle ones cost nothing), measured test by test
    with the servers taking turns within each round: this machine's speed drifts from minute
    to minute, and turns keep the servers compared within the same minute."""

    def __init__(self, app: str, sitting: Sitting, pinned: bool) -> None:
        self.app, self.sitting, self.pinned = app, sitting, pinned
        self.samples = sitting.one if pinned else sitting.two
        self.procs: dict[str, ServerProcess] = {}
        self.bad: set[tuple[str, str]] = set()  # (server, test) that failed

    def fail(self, server: str, test: str, what: str, proc: ServerProcess | None) -> None:
        """Records a failure and shouts it, with the server's last log lines."""
        tail = proc.log_tail(15) if proc is not None else ""
        workers = "one worker" if self.pinned else "two workers"
        text = f"{server} ({workers}) with {self.app}, {test}: {what}\n{tail}".rstrip()
        self.sitting.failures.append(text)
        log(f"\n*** FAILED: {text}\n")
        self.bad.add((server, test))

    def start(self, chosen: list[Server], tests: list[checks.Test]) -> None:
        for server in chosen:
            mine = [t for t in tests if servers.serves(server, t.name)]
            if not mine:
                continue
            log(f"{server.name}: starting with {self.app}")
            proc = ServerProcess(server, self.app, self.sitting.tmp)
            try:
                proc.wait_ready(mine[0].path)
            except MEASURE_ERRORS as exc:
                proc.stop()
                for test in mine:
                    self.fail(server.name, test.name, f"did not start: {exc}", None)
                continue
            self.procs[server.name] = proc
            for test in mine:
                try:
                    checks.check(proc.port, test, rust_only=server.name == tables.RUST_ONLY)
                except (checks.CheckFailed, *MEASURE_ERRORS) as exc:
                    self.fail(server.name, test.name, f"wrong answer: {exc}", proc)

    def live(self, chosen: list[Server], test: checks.Test) -> list[tuple[str, ServerProcess]]:
        return [
            (s.name, self.procs[s.name])
            for s in chosen
            if s.name in self.procs
            and (s.name, test.name) not in self.bad
            and servers.serves(s, test.name)
        ]

    def uncontended(self, run: Callable[[], Sample]) -> Sample:
        """`run`, again (up to --retries times) while other processes took more than
        contention.LIMIT of the server core: the last try is kept whatever it saw."""
        for attempt in range(self.sitting.args.retries + 1):
            sample = run()
            if sample.others <= contention.LIMIT or attempt == self.sitting.args.retries:
                return sample
            log(f"  contended: other processes took {sample.others:.0%} of the server core")
            self.sitting.retried += 1
            time.sleep(1)
        raise AssertionError("unreachable")

    def server_run(self, proc: ServerProcess, path: str, duration: int) -> Sample:
        busy = contention.Busy(int(harness.SERVER_CPU)) if self.pinned else None
        before = proc.cpu_seconds()
        result = wrk(proc.url(path), duration, self.pinned)
        cpu = proc.cpu_seconds() - before
        if proc.proc.poll() is not None:
            raise RuntimeError("the server exited")
        cpu_us = cpu / result.requests * 1e6 if result.requests else float("nan")
        others = busy.others(cpu) if busy is not None else 0.0
        return Sample(cpu_us, result.rps, result.errors, result.non_2xx, others)

    def measure(self, chosen: list[Server], test: checks.Test) -> None:
        """Warm-up, then the rounds: one worker pinned with the app alone in each round, or
        two workers unpinned without it."""
        args, pinned = self.sitting.args, self.pinned
        for name, proc in self.live(chosen, test):
            if args.warmup:
                try:
                    wrk(proc.url(test.path), args.warmup, pinned)
                except MEASURE_ERRORS as exc:
                    self.fail(name, test.name, f"warm-up: {exc}", proc)
        rounds = args.rounds if pinned else args.worker_rounds
        duration = args.duration if pinned else args.worker_duration
        for round_ in range(rounds):
            live = self.live(chosen, test)
            # Each round starts with the next server, so none always runs first or last.
            shift = round_ % len(live) if live else 0
            for name, proc in live[shift:] + live[:shift]:
                log(f"{self.app} {test.name} round {round_ + 1}/{rounds}: {name}")
                try:
                    sample = self.uncontended(partial(self.server_run, proc, test.path, duration))
                except MEASURE_ERRORS as exc:
                    self.fail(name, test.name, f"measuring: {exc}", proc)
                    continue
                log(f"  {sample.rps:,.0f} req/s, {sample.cpu_us:,.1f} us a request{note(sample)}")
                self.samples.setdefault((self.app, name, test.name), []).append(sample)
            if pinned and (ALONE, test.name) not in self.bad:
                log(f"{self.app} {test.name} round {round_ + 1}/{rounds}: the app alone")
                try:
                    sample = self.uncontended(
                        partial(
                            run_alone, self.app, test, duration, args.alone_gc_threshold, args.loop
                        )
                    )
                except (*MEASURE_ERRORS, KeyError) as exc:
                    self.fail(ALONE, test.name, str(exc), None)
                    continue
                log(f"  {sample.rps:,.0f} calls/s, {sample.cpu_us:,.1f} us a call{note(sample)}")
                self.samples.setdefault((self.app, ALONE, test.name), []).append(sample)

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.stop()
        self.procs.clear()


def note(sample: Sample) -> str:
    """The progress line's note of a run's errors and of the server core's contention."""
    others = f", others took {sample.others:.0%} of the core" if sample.others > 0.02 else ""
    return tables.trouble_of(sample) + others


def one_app(app: str, chosen: list[Server], tests: list[checks.Test], sitting, pinned: bool):
    measured = Pass(app, sitting, pinned)
    try:
        measured.start(chosen, tests)
        for test in tests:
            measured.measure(chosen, test)
    finally:
        measured.stop()


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="1 round of 1 s, for a smoke run")
    p.add_argument("--servers", default=",".join(servers.ONE_WORKER), help="comma-separated")
    p.add_argument("--tests", default=",".join(checks.TESTS_BY_NAME), help="comma-separated")
    p.add_argument("--apps", default=",".join(APPS), help="comma-separated: raw, fastapi")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--duration", type=int, default=5, help="seconds a run")
    p.add_argument("--warmup", type=int, default=2, help="seconds of warm-up a server and test")
    p.add_argument("--worker-rounds", type=int, default=2, help="of the two-worker pass")
    p.add_argument("--worker-duration", type=int, default=3, help="seconds, two-worker pass")
    p.add_argument(
        "--retries", type=int, default=2, help="extra tries of a run whose core was contended"
    )
    p.add_argument(
        "--alone-gc-threshold",
        type=int,
        default=2000,
        help="the app alone's young-generation GC threshold (0: Python's own); default 2000, "
        "what ferrule's --gc-threshold sets, so that the limit is no easier than ferrule",
    )
    p.add_argument("--no-workers", action="store_true", help="skip the two-worker pass")
    p.add_argument(
        "--loop",
        choices=("uvloop", "asyncio"),
        default="uvloop",
        help="every server's event loop, and the app alone's (default uvloop)",
    )
    p.add_argument(
        "--access-log",
        action="store_true",
        help="every server writes its access lines (to its log file), as users run them",
    )
    p.add_argument("--out", type=Path, default=RESULTS_DIR, help="where the report goes")
    args = p.parse_args()
    if args.quick:
        args.rounds, args.duration, args.warmup = 1, 1, 1
        args.worker_rounds, args.worker_duration = 1, 1
    return args


def main() -> None:
    args = parse_args()
    chosen = harness.pick(args.servers, servers.ONE_WORKER, "server")
    chosen = [servers.on_loop(server, args.loop) for server in chosen]
    if args.access_log:
        chosen = [servers.with_access_log(server) for server in chosen]
    tests = harness.pick(args.tests, checks.TESTS_BY_NAME, "test")
    apps = [APPS[name][0] for name in harness.pick(args.apps, {a: a for a in APPS}, "app")]
    ensure_installed()
    postgres.exit_on_sigterm()
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    uptime_before, build = harness.sitting()  # sitting() says the uptime line on stderr
    load_before = loadavg()
    with postgres.running() as pg, harness.scratch_dir() as tmp_name:
        os.environ[DSN_VARIABLE] = pg.dsn  # the servers and alone.py inherit it
        pg_version = pg.psql(postgres.DATABASE, "SHOW server_version").strip()
        sitting = Sitting(args, Path(tmp_name))
        for app in apps:
            one_app(app, chosen, tests, sitting, pinned=True)
        if not args.no_workers:
            twos = [servers.two_workers(s) for s in chosen if s.name in servers.COMPARED]
            with servers.unpinned():
                for app in apps:
                    one_app(app, twos, tests, sitting, pinned=False)
    uptime_after = harness.uptime()
    log(f"uptime: {uptime_after}")
    lines = header(args, started, load_before, build, uptime_before, uptime_after, pg_version)
    lines.append(
        f"- Contention: {sitting.retried} run(s) measured again because other processes took"
        f" more than {contention.LIMIT:.0%} of the server core; a cell marked * kept a run"
        " that still saw more (after --retries tries)."
    )
    lines.append("")
    compared = [s.name for s in chosen if s.name in servers.COMPARED]
    for name, (app, title) in APPS.items():
        if app in apps:
            test_names = [t.name for t in tests]
            lines += tables.app_section(
                sitting.one, sitting.two, app, f"{name}: {title}", test_names, compared
            )
    failures = sitting.failures
    if failures:
        lines += ["## Failures", "", *(f"- {f}".replace("\n", "\n  ") for f in failures), ""]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    harness.write_report(args.out, f"db-{stamp}.md", lines)
    if failures:
        sys.exit(f"{len(failures)} failures: see the report's last section")


def header(args, started, load_before, build, uptime_before, uptime_after, pg_version) -> list[str]:
    command = shlex.join(["python3", "benches/db/run.py", *sys.argv[1:]])
    threshold = args.alone_gc_threshold or "Python's default"
    packages = ", ".join(f"{p} {version(p)}" for p in ("asyncpg", "SQLAlchemy", "Jinja2", "orjson"))
    lines = [
        "# Servers against PostgreSQL: the six test types",
        "",
        f"- Run: `{command}`, started {started}",
        f"- uptime at the start: {uptime_before}",
        f"- uptime at the end: {uptime_after}",
        *machine_lines(load_before, build),
        f"- Database side: PostgreSQL {pg_version} (fsync, synchronous_commit and"
        f" full_page_writes off), {packages}",
        f"- Method: each server on {args.loop} with one worker pinned to CPU {harness.SERVER_CPU};"
        f" `wrk -t1 -c{CONNECTIONS}` and PostgreSQL pinned to CPU {CLIENT_CPU}; /queries and"
        f" /updates with ?queries={checks.QUERIES}; {args.warmup} s of warm-up per server and"
        f" test, then {args.rounds} round(s) of {args.duration} s, the servers taking turns within"
        " each round; CPU a request = the server's CPU time (user + system, all its processes)"
        " over a run ÷ its requests; the app alone = the app called in-process by"
        f" {CONNECTIONS} coroutines on {args.loop}, pinned to CPU {harness.SERVER_CPU}, with the"
        " collector frozen after startup (as ferrule does) and its young threshold at"
        f" {threshold}, its process's"
        " CPU time ÷ calls, measured in every round; a server's overhead = its CPU a request"
        " less the app alone's. Medians over the rounds.",
        f"- Two-worker pass: `--workers 2`, nothing pinned, `wrk -t2 -c{CONNECTIONS}`,"
        f" {args.worker_rounds} round(s) of {args.worker_duration} s after the same warm-up.",
        "- The load average counts runnable processes: in a run it includes the database's"
        f" backends ({CONNECTIONS} a server at most, all on CPU {CLIENT_CPU}), so it stays high"
        " for minutes after one.",
        "- Errors: a cell's note counts wrk's socket errors and non-2xx responses over its runs;"
        " cells without a note had none.",
        "- Servers:",
    ]
    for server in servers.ONE_WORKER.values():
        server = servers.on_loop(server, args.loop)
        if args.access_log:
            server = servers.with_access_log(server)
        lines.append(f"  - {server.name}: `python3 {server.command}`")
    return lines


if __name__ == "__main__":
    main()
