"""The soak: a million mixed requests on one ferrule worker, then a check that nothing leaked.

    python3 benches/soak.py                      # 1,000,000 requests, --loop asyncio, -c50
    python3 benches/soak.py --loop uvloop --requests 200000 --connections 100

One server (``soak_app:app``, one worker, no access log) pinned to CPU 0; on CPU 1:

* ``wrk -t1 -cN`` rotating through GET /hello, GET /task (creates asyncio tasks and awaits
  them), GET /stream (64 x 1 KiB, chunked) and POST /echo (4 KiB); every answer must be 200;
* one thread sending GET /error on a keep-alive connection: the app raises, the server must
  answer 500 (expected, counted apart) and log the traceback;
* two threads of client-aborted requests, each in turn: GET /slow reset right after the response
  head; GET /slow closed after 8 KiB of the body; POST /upload with 1 KiB of an 8 KiB body,
  then closed.

The load runs until the app has counted ``--requests`` requests (its /_stats route; the request
count is the app's, warm-up excluded). The server's RSS (VmRSS) and open file descriptors
(/proc/PID/fd) are sampled after a warm-up (baseline), when the app has counted the
``--mark``-th request, every progress line, and at the end once the load has stopped and the
connections have closed.

Exit status 1 unless all of these hold:

* unexpected 5xx = 0: a 5xx on a wrk route or on an aborted request's response head (the
  /error 500s are expected; any other status from /error is counted as unexpected too);
* wrk non-2xx = 0 and wrk socket errors = 0;
* task collisions = 0: the bridge's ``collisions`` counter (read by the app) and the
  "Cannot enter into task" tracebacks in the server log;
* no traceback in the server log other than the expected /error ones (and ClientDisconnected);
* every request the app started has finished (none hangs);
* RSS growth from the mark to the end < 20 MB;
* open file descriptors at the end == the baseline.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import harness
from harness import (
    CLIENT_CPU,
    SERVERS_BY_NAME,
    ServerProcess,
    parse_wrk,
    scratch_dir,
    serving,
    write_script,
    wrk_argv,
)
from soak_app import EXPECTED_ERROR
from stress import DISCONNECT, TRACEBACK, traceback_exceptions

MAX_RSS_GROWTH_MB = 20.0
WARMUP_SECONDS = 3
PROGRESS_SECONDS = 10
POLL_SECONDS = 0.2  # how often the app's count is read while the load runs
SETTLE_SECONDS = 20  # how long to wait for connections to close and fds to come back
ABORT_THREADS = 2  # threads sending client-aborted requests (one sends /error)
ABORT_PAUSE = 0.001  # between two aborted requests of one thread
COLLISION = "Cannot enter into task"
EXPECTED_LINE = f"RuntimeError: {EXPECTED_ERROR}"

# The wrk side: pre-formatted requests in turn; every status is counted in Lua and printed by
# done() as "soak-status CODE COUNT" lines, so 5xx can be told from other non-2xx.
WRK_SCRIPT = """\
local body = string.rep("x", 4096)
local requests = {}
local i = 0
request = function()
  i = i % #requests + 1
  return requests[i]
end

local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args)
  statuses = {}
  -- Formatted here, not when the script loads: only now does wrk.headers hold the Host.
  requests = {
    wrk.format("GET", "/hello"),
    wrk.format("GET", "/task"),
    wrk.format("GET", "/stream"),
    wrk.format("POST", "/echo", {["Content-Type"] = "application/octet-stream"}, body),
  }
end
function response(status, headers, body)
  statuses[status] = (statuses[status] or 0) + 1
end
function done(summary, latency, requests)
  for _, t in ipairs(threads) do
    for status, n in pairs(t:get("statuses")) do
      io.write(string.format("soak-status %d %d\\n", status, n))
    end
  end
end
"""
WRK_ROUTES = "GET /hello, GET /task, GET /stream, POST /echo (4 KiB)"


# --- the server process -------------------------------------------------------------------


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def app_stats(port: int) -> dict:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", "/_stats")
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


def app_count(stats: dict, since: dict) -> int:
    """Requests the app started since the `since` snapshot."""
    return sum(stats["started"].values()) - sum(since["started"].values())


def in_flight(stats: dict) -> int:
    return sum(stats["started"].values()) - sum(stats["finished"].values())


def collisions(stats: dict) -> int | None:
    return None if stats["bridge"] is None else stats["bridge"]["collisions"]


@dataclass
class Sample:
    requests: int
    rss_mb: float
    fds: int


def settle(proc: ServerProcess, since: dict) -> tuple[dict, Sample]:
    """Wait until no request is in the app and the fd count holds still (the idle state), then
    sample it. The /_stats connection is closed before each fd count."""
    deadline = time.monotonic() + SETTLE_SECONDS
    previous = None
    while True:
        stats = app_stats(proc.port)
        time.sleep(0.5)
        fds = open_fds(proc.proc.pid)
        idle = in_flight(stats) == 0 and fds == previous
        if idle or time.monotonic() > deadline:
            return stats, Sample(app_count(stats, since), rss_mb(proc.proc.pid), fds)
        previous = fds


# --- the Python clients: /error and the aborted requests ----------------------------------


@dataclass
class ClientCounts:
    sent: Counter = field(default_factory=Counter)  # by kind
    statuses: Counter = field(default_factory=Counter)  # (kind, status)
    errors: Counter = field(default_factory=Counter)  # (kind, exception type name)


def error_client(port: int, stop: threading.Event, counts: ClientCounts) -> None:
    """GET /error on one keep-alive connection, again and again; each answer should be 500."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    while not stop.is_set():
        try:
            conn.request("GET", "/error")
            counts.sent["error"] += 1
            response = conn.getresponse()
            response.read()
            counts.statuses["error", response.status] += 1
        except (OSError, http.client.HTTPException) as exc:
            counts.errors["error", type(exc).__name__] += 1
            conn.close()
    conn.close()


def read_until(sock: socket.socket, size: int, marker: bytes = b"") -> bytes:
    """Read until `marker` has arrived (if given) and at least `size` bytes, or EOF."""
    data = b""
    while (marker and marker not in data) or len(data) < size:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    return data


def status_of(head: bytes) -> int:
    parts = head.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def abort_slow(sock: socket.socket, body_bytes: int, reset: bool) -> int:
    """GET /slow, read the head and `body_bytes` of the body, then hang up (RST if `reset`)."""
    sock.sendall(b"GET /slow HTTP/1.1\r\nHost: soak\r\n\r\n")
    data = read_until(sock, 0, b"\r\n\r\n")
    if body_bytes:
        read_until(sock, len(data) + body_bytes)
    if reset:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return status_of(data)


def abort_upload(sock: socket.socket) -> int:
    """POST /upload announcing 8 KiB, send 1 KiB, give the app a moment to start, hang up."""
    head = b"POST /upload HTTP/1.1\r\nHost: soak\r\nContent-Length: 8192\r\n"
    sock.sendall(head + b"Content-Type: application/octet-stream\r\n\r\n" + b"x" * 1024)
    time.sleep(0.002)
    return 0  # no answer expected


ABORTS = [
    ("abort-head", lambda sock: abort_slow(sock, 0, reset=True)),
    ("abort-body", lambda sock: abort_slow(sock, 8192, reset=False)),
    ("abort-upload", abort_upload),
]


def abort_client(port: int, stop: threading.Event, counts: ClientCounts) -> None:
    """Client-aborted requests, one connection each, the ABORTS in turn."""
    i = 0
    while not stop.is_set():
        kind, abort = ABORTS[i % len(ABORTS)]
        i += 1
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
                counts.sent[kind] += 1
                status = abort(sock)
            if status:
                counts.statuses[kind, status] += 1
        except OSError as exc:
            counts.errors[kind, type(exc).__name__] += 1
        time.sleep(ABORT_PAUSE)


# --- the load: wrk plus the two client threads ---------------------------------------------


@dataclass
class LoadResult:
    wrk: harness.WrkResult
    wrk_statuses: Counter
    clients: ClientCounts


class Load:
    """wrk and the client threads against one server, from start until stop()."""

    def __init__(self, proc: ServerProcess, script: Path, connections: int, seconds: int):
        argv = wrk_argv(proc.url("/"), seconds, connections, script)
        self.wrk = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.stopping = threading.Event()
        clients = [error_client] + [abort_client] * ABORT_THREADS
        self.counts = [ClientCounts() for _ in clients]  # one each: no shared increments
        self.threads = [
            threading.Thread(target=client, args=(proc.port, self.stopping, counts))
            for client, counts in zip(clients, self.counts, strict=True)
        ]
        for thread in self.threads:
            thread.start()

    def stop(self) -> LoadResult:
        """Stop wrk early with SIGINT (it still prints its summary) and the client threads."""
        if self.wrk.poll() is None:
            self.wrk.send_signal(signal.SIGINT)
        out, err = self.wrk.communicate(timeout=60)
        self.stopping.set()
        for thread in self.threads:
            thread.join()
        if self.wrk.returncode != 0:
            raise RuntimeError(f"wrk failed ({self.wrk.returncode}): {err or out}")
        statuses = Counter()
        for line in out.splitlines():
            if line.startswith("soak-status "):
                _, status, n = line.split()
                statuses[int(status)] += int(n)
        total = ClientCounts()
        for counts in self.counts:
            total.sent += counts.sent
            total.statuses += counts.statuses
            total.errors += counts.errors
        return LoadResult(parse_wrk(out), statuses, total)


# --- the server log ------------------------------------------------------------------------


@dataclass
class LogSummary:
    expected: int  # tracebacks of /error
    disconnects: int  # ClientDisconnected tracebacks
    collisions: int  # "Cannot enter into task" tracebacks
    others: list[str]  # the exception line of every other traceback
    first_other: str  # the full text of the first other traceback
    lines: Counter  # every log line that is not part of a traceback, level and message


def read_log(path: Path) -> LogSummary:
    text = path.read_text(errors="replace")
    exceptions = traceback_exceptions(text)
    others = [
        e
        for e in exceptions
        if e != EXPECTED_LINE and not e.startswith(DISCONNECT) and COLLISION not in e
    ]
    first_other = ""
    if others:
        for block in text.split(TRACEBACK)[1:]:
            if others[0] in block:
                first_other = TRACEBACK + block.split(others[0])[0] + others[0]
                break
    lines = Counter(
        line.strip() for line in text.splitlines() if line[:1].isupper() and ":" in line[:9]
    )
    return LogSummary(
        expected=exceptions.count(EXPECTED_LINE),
        disconnects=sum(e.startswith(DISCONNECT) for e in exceptions),
        collisions=sum(COLLISION in e for e in exceptions),
        others=others,
        first_other=first_other,
        lines=lines,
    )


# --- the run -------------------------------------------------------------------------------


@dataclass
class Soak:
    """Everything one soak measured."""

    since: dict  # the app's counters after the warm-up
    baseline: Sample  # idle, after the warm-up
    mark: Sample | None = None  # when the app had counted the --mark-th request
    samples: list[Sample] = field(default_factory=list)
    stats: dict = field(default_factory=dict)  # the app's counters at the end, idle again
    end: Sample | None = None
    load: LoadResult | None = None
    seconds: float = 0.0


def warm_up(proc: ServerProcess, script: Path, connections: int) -> None:
    load = Load(proc, script, connections, WARMUP_SECONDS + 60)
    time.sleep(WARMUP_SECONDS)
    load.stop()


def sample(proc: ServerProcess, requests: int) -> Sample:
    return Sample(requests, rss_mb(proc.proc.pid), open_fds(proc.proc.pid))


def run_soak(proc: ServerProcess, script: Path, args: argparse.Namespace, mark: int) -> Soak:
    """Warm up, then load the server until the app has counted args.requests, then let it
    settle."""
    warm_up(proc, script, args.connections)
    since, baseline = settle(proc, {"started": {}})
    baseline.requests = 0
    run = Soak(since, baseline, samples=[baseline])
    print(f"baseline after warm-up: rss {baseline.rss_mb:.1f} MB, fds {baseline.fds}", flush=True)
    load = Load(proc, script, args.connections, 24 * 3600)
    start = time.monotonic()
    next_progress = start + PROGRESS_SECONDS
    try:
        while True:
            time.sleep(POLL_SECONDS)
            if proc.proc.poll() is not None:
                raise RuntimeError(f"the server exited:\n{proc.log_tail()}")
            stats = app_stats(proc.port)
            count = app_count(stats, since)
            now = time.monotonic()
            if run.mark is None and count >= mark:
                run.mark = sample(proc, count)
                run.samples.append(run.mark)
                print(f"  mark: request {count:,}: rss {run.mark.rss_mb:.1f} MB", flush=True)
            if now >= next_progress or count >= args.requests:
                run.samples.append(latest := sample(proc, count))
                print(
                    f"  {count:>10,} requests ({count / (now - start):,.0f}/s),"
                    f" rss {latest.rss_mb:.1f} MB, fds {latest.fds},"
                    f" in the app {in_flight(stats)}, collisions {collisions(stats)}",
                    flush=True,
                )
                next_progress = now + PROGRESS_SECONDS
            if count >= args.requests:
                break
    finally:
        run.load = load.stop()
    run.seconds = time.monotonic() - start
    run.stats, run.end = settle(proc, since)
    run.samples.append(run.end)
    return run


def joined(counts: Counter, fmt=lambda key, n: f"{key} {n:,}") -> str:
    return ", ".join(fmt(key, n) for key, n in sorted(counts.items())) or "0"


def report(args: argparse.Namespace, mark: int, run: Soak, log: LogSummary) -> bool:
    """Print the figures and the verdicts; return True if every criterion holds."""
    started = Counter(run.stats["started"]) - Counter(run.since["started"])
    seen = Counter(run.stats["seen"]) - Counter(run.since["seen"])
    load, clients, end = run.load, run.load.clients, run.end
    at_mark = run.mark or run.baseline
    wrk_5xx = sum(n for status, n in load.wrk_statuses.items() if status >= 500)
    client_5xx = sum(
        n for (kind, status), n in clients.statuses.items() if kind != "error" and status >= 500
    )
    expected_500 = clients.statuses["error", 500]
    odd_error_statuses = sum(
        n for (kind, status), n in clients.statuses.items() if kind == "error" and status != 500
    )
    unexpected_5xx = wrk_5xx + client_5xx
    bridge_collisions = collisions(run.stats)
    peak = max(run.samples, key=lambda s: s.rss_mb)
    growth = end.rss_mb - at_mark.rss_mb
    total = sum(started.values())

    print()
    print(f"requests (counted by the app, warm-up excluded): {total:,} in {run.seconds:.0f} s")
    print(f"  by route: {joined(started)}")
    print(f"  the app saw: {joined(seen)}")
    print(
        f"wrk: {load.wrk.requests:,} responses ({load.wrk.rps:,.0f}/s,"
        f" p99 {load.wrk.p99_ms:.1f} ms), statuses {joined(load.wrk_statuses)};"
        f" non-2xx {load.wrk.non_2xx}, socket errors {load.wrk.errors}"
    )
    print(
        f"python clients: sent {joined(clients.sent)}; statuses"
        f" {joined(clients.statuses, lambda key, n: f'{key[0]} {key[1]}: {n:,}')};"
        f" client errors {joined(clients.errors, lambda key, n: f'{key[0]} {key[1]}: {n:,}')}"
    )
    print(
        f"5xx: {expected_500:,} expected (/error), {unexpected_5xx} unexpected"
        f" (wrk {wrk_5xx}, aborted requests {client_5xx});"
        f" /error answered other than 500: {odd_error_statuses}"
    )
    counter = "n/a (bridge not found)" if bridge_collisions is None else bridge_collisions
    print(f"task collisions: bridge counter {counter}, log {log.collisions}")
    print(
        f"server log (whole life, warm-up included): {log.expected:,} expected /error"
        f" tracebacks (the app counted {run.stats['started'].get('/error', 0):,} /error),"
        f" {log.disconnects:,} ClientDisconnected, {len(log.others)} others"
    )
    for exception in dict.fromkeys(log.others):
        print(f"  {log.others.count(exception)} x {exception}")
    if log.first_other:
        print("  first of them:\n    " + log.first_other.strip().replace("\n", "\n    "))
    for line, n in log.lines.most_common():
        if not line.startswith("INFO:") or n > 1:
            print(f"  log line x {n:,}: {line}")
    print(
        f"RSS: baseline {run.baseline.rss_mb:.1f} MB, at request {at_mark.requests:,}"
        f" {at_mark.rss_mb:.1f} MB, peak {peak.rss_mb:.1f} MB (request {peak.requests:,}),"
        f" end {end.rss_mb:.1f} MB: growth from the mark {growth:+.1f} MB"
    )
    print(
        f"open fds: baseline {run.baseline.fds}, at the mark {at_mark.fds},"
        f" peak {max(s.fds for s in run.samples)}, end {end.fds}"
    )

    rss_check = f"RSS growth from request {mark:,} < {MAX_RSS_GROWTH_MB:.0f} MB"
    checks = [
        (f"requests >= {args.requests:,}", total >= args.requests),
        ("unexpected 5xx == 0", unexpected_5xx == 0 and odd_error_statuses == 0),
        ("wrk non-2xx == 0", load.wrk.non_2xx == 0),
        ("wrk socket errors == 0", load.wrk.errors == 0),
        ("task collisions == 0", not bridge_collisions and log.collisions == 0),
        ("no unexpected traceback", not log.others),
        ("no request left in the app", in_flight(run.stats) == 0),
        (rss_check, run.mark is not None and growth < MAX_RSS_GROWTH_MB),
        ("open fds back to baseline", end.fds == run.baseline.fds),
    ]
    print()
    for name, ok in checks:
        print(f"  {'PASS' if ok else 'FAIL'}  {name}")
    return all(ok for _, ok in checks)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=1_000_000, help="default 1,000,000")
    p.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio")
    p.add_argument("--connections", type=int, default=50, help="wrk -c (default 50)")
    p.add_argument(
        "--mark",
        type=int,
        default=100_000,
        help="RSS growth is measured from this request on (default 100,000; a tenth of"
        " --requests if that is smaller)",
    )
    p.add_argument(
        "--ferrule-path",
        type=Path,
        help="import ferrule from this directory (e.g. a release wheel unpacked there)",
    )
    args = p.parse_args(argv)
    harness.ferrule_path = args.ferrule_path
    mark = args.mark if args.mark < args.requests else args.requests // 10
    server = SERVERS_BY_NAME[f"ferrule-{args.loop}"]
    os.sched_setaffinity(0, {int(CLIENT_CPU)})  # the client threads, next to wrk

    print(f"soak: {args.requests:,} requests on one worker, {server.name}, RSS mark {mark:,}")
    print(f"  wrk -t1 -c{args.connections}: {WRK_ROUTES}")
    print("  python threads: GET /error (expects 500); aborted GET /slow and POST /upload")
    print(f"ferrule {harness.ferrule_build()}")
    with scratch_dir() as tmp:
        tmp = Path(tmp)
        script = write_script(tmp, "soak.lua", WRK_SCRIPT)
        with serving(server, "soak_app:app", "/hello", tmp) as proc:
            print(f"server pid {proc.proc.pid}; warm-up {WARMUP_SECONDS} s", flush=True)
            run = run_soak(proc, script, args, mark)
        ok = report(args, mark, run, read_log(proc.log_path))
    print(f"\nsoak: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
