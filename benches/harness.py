"""What run.py, report.py, stress.py and ws_bench.py share: the servers, the scenarios, starting a
server, running the load generators (wrk for HTTP/1.1, h2load for HTTP/2, oha for the open loop)."""

from __future__ import annotations

import contextlib
import http.client
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
SERVER_CPU = "0"  # the server process (and all its threads) is pinned here
CLIENT_CPU = "1"  # wrk, h2load and oha are pinned here

# Where the ferrule servers import ferrule from (--ferrule-path), ahead of the installed one:
# e.g. a release wheel unpacked with `pip install --no-deps --target DIR WHEEL`.
ferrule_path: Path | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    module: str  # the module under benches/ that holds `app`
    path: str
    method: str = "GET"
    body_size: int = 0  # bytes sent in the request body (POST scenarios)
    title: str = ""
    http: str = "1"  # "2": HTTP/2 (h2c with prior knowledge), driven by h2load instead of wrk


SCENARIOS = [
    Scenario("hello", "apps", "/hello", title="hello world"),
    Scenario("sleep3", "apps", "/sleep", title="asyncio.sleep(0) x3"),
    Scenario("task", "apps", "/task", title="create task + await"),
    Scenario("anyio", "apps", "/anyio", title="anyio task group"),
    Scenario("fastapi-async", "fastapi_app", "/async", title="FastAPI async def"),
    Scenario("fastapi-sync", "fastapi_app", "/sync", title="FastAPI def (thread pool)"),
    Scenario("stream", "apps", "/stream", title="stream 256 x 1 KiB"),
    Scenario("echo", "apps", "/echo", "POST", 10 * 1024, title="POST 10 KiB echo"),
    Scenario("h2-hello", "apps", "/hello", title="hello world, HTTP/2", http="2"),
]
SCENARIOS_BY_NAME = {s.name: s for s in SCENARIOS}


@dataclass(frozen=True)
class Server:
    name: str
    # Run with this Python; "{app}", "{port}" and "{http}" (the scenario's HTTP version, "1"
    # or "2") are filled in.
    command: str
    only: tuple[str, ...] | None = None  # the scenarios it serves, if not all
    http: tuple[str, ...] = ("1",)  # the HTTP versions it speaks
    # Appended to the command for HTTP/2 only: for a server whose HTTP/2 is a switch rather
    # than a version to name, so its HTTP/1.1 runs keep the plain HTTP/1.1 setup.
    http2_flags: str = ""
    # It busy-polls while idle: run.py keeps it stopped (SIGSTOP) outside its own runs, or it
    # would take the server core from the others of its group.
    spins_idle: bool = False

    def serves(self, scenario: Scenario) -> bool:
        return scenario.http in self.http and (self.only is None or scenario.name in self.only)

    def argv(self, app: str, port: int, http: str = "1") -> list[str]:
        command = self.command
        if http == "2" and self.http2_flags:
            command += " " + self.http2_flags
        return [sys.executable, *command.format(app=app, port=port, http=http).split()]


# ferrule answers its bridge counters as JSON on this path, from Rust (`--stats-route`): read
# before and after each measurement for the GIL-relay figures.
STATS_PATH = "/__ferrule_stats"
STATS = f" --stats-route {STATS_PATH}"

# ferrule runs with its default `--http auto` (HTTP/1.1 and h2c with prior knowledge) for every
# scenario. granian gets `--http 1` or `--http 2`: its `--http auto` takes h2c too, but served it
# markedly slower in a spot check (granian 2.8.7). uvicorn-zttp likewise gets `--http2` for the
# HTTP/2 scenarios only: with it, every connection first goes through a layer that sniffs for
# the h2c preface.
SERVERS = [
    Server(
        "ferrule-asyncio",
        "-m ferrule {app} --port {port} --loop asyncio --no-access-log" + STATS,
        http=("1", "2"),
    ),
    Server(
        "ferrule-uvloop",
        "-m ferrule {app} --port {port} --loop uvloop --no-access-log" + STATS,
        http=("1", "2"),
    ),
    # The HTTP stack alone: /hello answered in Rust, the app never called (other paths are not).
    Server(
        "ferrule-rust",
        "-m ferrule {app} --port {port} --loop asyncio --no-access-log --rust-hello-route /hello",
        only=("hello",),
    ),
    Server(
        "uvicorn",
        "-m uvicorn {app} --port {port} --loop uvloop --http httptools"
        " --no-access-log --log-level warning",
    ),
    Server(
        "granian",
        "-m granian {app} --port {port} --interface asgi --workers 1 --http {http}"
        " --log-level warning",
        http=("1", "2"),
    ),
    # uvicorn on zttp, its Zig HTTP parser (`pip install zttp`), the only one it serves HTTP/2
    # with (h2c with prior knowledge once `--http2` is given).
    Server(
        "uvicorn-zttp",
        "-m uvicorn {app} --port {port} --loop uvloop --http zttp"
        " --no-access-log --log-level warning",
        http=("1", "2"),
        http2_flags="--http2",
    ),
    # FastPySGI 0.6: C on libuv and llhttp, driving asyncio's loop for ASGI apps. `python -m
    # fastpysgi` returns at once (the module has no __main__ block), so its console entry point
    # is called with -c (code without spaces: the command is split on them). Its ASGI mode
    # busy-polls, a core's worth of CPU while idle. It is left out of `stream`: after the first
    # body chunk of a response with more_body it logs "client state cannot equ CS_RESP_SEND",
    # sends nothing more and leaves the connection open, so the response never ends.
    Server(
        "fastpysgi",
        "-c __import__('fastpysgi').run_from_cli() {app} --host 127.0.0.1 -p {port} -l 4",
        only=("hello", "sleep3", "task", "anyio", "fastapi-async", "fastapi-sync", "echo"),
        spins_idle=True,
    ),
]
SERVERS_BY_NAME = {s.name: s for s in SERVERS}


def pick(names: str, known: dict, what: str) -> list:
    """Turn "a,b" into the matching objects of `known`, in the order given."""
    chosen = []
    for name in filter(None, (n.strip() for n in names.split(","))):
        if name not in known:
            sys.exit(f"unknown {what} {name!r}; choose from: {', '.join(known)}")
        chosen.append(known[name])
    return chosen


def pythonpath(server: Server) -> str:
    parts = [str(BENCH_DIR)]
    if ferrule_path is not None and server.name.startswith("ferrule"):
        parts.insert(0, str(ferrule_path))
    return os.pathsep.join(parts)


def ferrule_build() -> str:
    """Which ferrule the ferrule servers import: version, release or dev build, file, date."""
    env = dict(os.environ, PYTHONPATH=str(ferrule_path or ""))
    code = "import ferrule, ferrule._ferrule as m; print(ferrule.__version__); print(m.__file__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        return f"not importable: {done.stderr.strip().splitlines()[-1:]}"
    version, extension = done.stdout.split()
    try:
        sections = subprocess.run(
            ["readelf", "-S", "--wide", extension], capture_output=True, text=True
        ).stdout
        kind = "dev build, with debug info" if " .debug_info" in sections else "release build"
    except OSError:
        kind = "build kind unknown (no readelf)"
    stat = Path(extension).stat()
    built = time.strftime("%Y-%m-%d %H:%M", time.localtime(stat.st_mtime))
    return f"{version} ({kind}; {extension}, {stat.st_size / 1e6:.1f} MB, file dated {built})"


def group_cpu_seconds(pgid: int) -> float:
    """User + system CPU time of every process in group `pgid` (a server and its workers)."""
    ticks = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[2]) == pgid:
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# stdout="pipe": the process that reads a server's stdout pipe and copies it to its log file,
# as a container runtime's log reader does; on CLIENT_CPU, so it takes no time from the server.
PIPE_READER = ["taskset", "-c", CLIENT_CPU, "cat"]


class ServerProcess:
    """One server serving `module:app` over HTTP version `http`, pinned to SERVER_CPU, in its
    own process group. Its stdout and stderr go to `log_path`: written there by the server
    (stdout="file"), or (stdout="pipe") into a pipe that a separate process (PIPE_READER)
    reads continuously and copies to `log_path`."""

    def __init__(
        self, server: Server, app: str, log_dir: Path, http: str = "1", *, stdout: str = "file"
    ) -> None:
        if stdout not in ("file", "pipe"):
            raise ValueError(f"stdout must be 'file' or 'pipe', not {stdout!r}")
        self.server = server
        self.http = http
        self.port = free_port()
        suffix = "" if http == "1" else f"-http{http}"
        self.log_path = log_dir / f"{server.name}-{app.replace(':', '-')}{suffix}.log"
        self.argv = ["taskset", "-c", SERVER_CPU, *server.argv(app, self.port, http)]
        env = dict(os.environ, PYTHONPATH=pythonpath(server), PYTHONUNBUFFERED="1")
        self.log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.paused = False
        self.reader: subprocess.Popen | None = None
        out = self.log
        if stdout == "pipe":
            self.reader = subprocess.Popen(PIPE_READER, stdin=subprocess.PIPE, stdout=self.log)
            out = self.reader.stdin
        try:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=BENCH_DIR,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group, so stop() reaches its workers
            )
        finally:
            if self.reader is not None:
                # The server holds the write end now: the reader sees EOF when it exits.
                self.reader.stdin.close()

    def wait_ready(self, probe_path: str, timeout: float = 30.0) -> None:
        """Poll the port until it accepts, then until one GET of `probe_path` answers."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.server.name} exited early:\n{self.log_tail()}")
            try:
                if self.answers(probe_path):
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"{self.server.name} not ready after {timeout}s:\n{self.log_tail()}")

    def answers(self, path: str) -> bool:
        """Whether the port accepts and one GET of `path`, in the server's HTTP version, gets
        a response (of any status)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=1):
            pass
        if self.http == "2":
            return h2_answers(self.url(path))
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
        try:
            conn.request("GET", path)
            conn.getresponse().read()
        finally:
            conn.close()
        return True

    def pause(self) -> None:
        """Stops every process of the server (SIGSTOP) until resume(): one that spins while
        idle then takes no CPU from the server being measured."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.paused:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGCONT)
            self.paused = False

    def stop(self) -> None:
        self.resume()  # a stopped process would hold SIGTERM until continued
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        if self.reader is not None:  # it ends at EOF, once the server's workers are gone too
            try:
                self.reader.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.reader.kill()
                self.reader.wait()
        self.log.close()

    def log_tail(self, lines: int = 20) -> str:
        self.log.flush()
        if self.reader is not None and self.proc.poll() is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.reader.wait(timeout=5)  # until it has copied the server's last lines
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def cpu_seconds(self) -> float:
        """The CPU time the server (all its processes) has used so far."""
        return group_cpu_seconds(self.proc.pid)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def bridge_counters(self) -> dict[str, int] | None:
        """ferrule's bridge counters (``--stats-route``), or None for other servers."""
        if STATS_PATH not in self.server.command:
            return None
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
        try:
            conn.request("GET", STATS_PATH)
            return json.loads(conn.getresponse().read())
        finally:
            conn.close()


@contextlib.contextmanager
def serving(
    server: Server, app: str, probe_path: str, log_dir: Path, http: str = "1"
) -> Iterator[ServerProcess]:
    proc = ServerProcess(server, app, log_dir, http)
    try:
        proc.wait_ready(probe_path)
        yield proc
    finally:
        proc.stop()


# --- wrk ---------------------------------------------------------------------------------


@dataclass
class WrkResult:
    requests: int
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int  # socket errors: connect + read + write + timeout
    non_2xx: int  # wrk's "Non-2xx or 3xx responses"
    bytes_read: float = 0.0  # wrk's "N MB read": every response, headers and body, as received


_UNIT_MS = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3, "h": 3600e3}


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m|h)", text)
    if m is None:
        raise ValueError(f"unreadable wrk latency {text!r}")
    return float(m.group(1)) * _UNIT_MS[m.group(2)]


def parse_wrk(out: str) -> WrkResult:
    def find(pattern: str, default: str | None = None) -> str:
        m = re.search(pattern, out)
        if m is None:
            if default is None:
                raise ValueError(f"no {pattern!r} in wrk output:\n{out}")
            return default
        return m.group(1)

    errors = 0
    m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    if m:
        errors = sum(int(g) for g in m.groups())
    return WrkResult(
        requests=int(find(r"(\d+) requests in")),
        rps=float(find(r"Requests/sec:\s+([\d.]+)")),
        p50_ms=_ms(find(r"(?m)^\s+50%\s+(\S+)\s*$")),  # the "Latency Distribution" lines
        p99_ms=_ms(find(r"(?m)^\s+99%\s+(\S+)\s*$")),
        errors=errors,
        non_2xx=int(find(r"Non-2xx or 3xx responses: (\d+)", "0")),
        bytes_read=_bytes(find(r"requests in \S+, ([\d.]+[KMGT]?B) read", "0B")),
    )


_UNIT_BYTES = {"B": 1, "KB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40}


def _bytes(text: str) -> float:
    """wrk's "12.34MB" (binary units, rounded to 2 decimals) in bytes."""
    m = re.fullmatch(r"([\d.]+)([KMGT]?B)", text)
    if m is None:
        raise ValueError(f"unreadable wrk byte count {text!r}")
    return float(m.group(1)) * _UNIT_BYTES[m.group(2)]


def post_script(body_size: int) -> str:
    return (
        'wrk.method = "POST"\n'
        f'wrk.body = string.rep("x", {body_size})\n'
        'wrk.headers["Content-Type"] = "application/octet-stream"\n'
    )


def rotate_script(paths: list[str]) -> str:
    """A wrk script that sends GETs to `paths` in turn."""
    listed = ", ".join(f'"{p}"' for p in paths)
    return (
        f"local paths = {{{listed}}}\n"
        "local i = 0\n"
        "request = function()\n"
        "  i = i % #paths + 1\n"
        "  return wrk.format(nil, paths[i])\n"
        "end\n"
    )


def wrk_argv(
    url: str,
    seconds: int,
    connections: int,
    script: Path | None,
    headers: Sequence[str] = (),
) -> list[str]:
    """`headers`: "Name: value" lines added to every request (wrk -H)."""
    argv = ["taskset", "-c", CLIENT_CPU, "wrk", "-t1", f"-c{connections}", f"-d{seconds}s"]
    argv += ["--latency", "--timeout", "5s"]
    for header in headers:
        argv += ["-H", header]
    if script is not None:
        argv += ["-s", str(script)]
    return [*argv, url]


def run_wrk(
    url: str,
    seconds: int,
    connections: int,
    script: Path | None = None,
    headers: Sequence[str] = (),
) -> WrkResult:
    argv = wrk_argv(url, seconds, connections, script, headers)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 60)
    if done.returncode != 0:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr or done.stdout}")
    try:
        return parse_wrk(done.stdout)
    except ValueError as exc:
        raise ValueError(f"{exc}\n--- wrk output ---\n{done.stdout}{done.stderr}") from None


def wrk_script(scenario: Scenario, directory: Path) -> Path | None:
    """The wrk script a scenario needs (a POST with its body), or None for a plain GET."""
    if scenario.method != "POST":
        return None
    return write_script(directory, f"post-{scenario.name}.lua", post_script(scenario.body_size))


def write_script(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    return path


# --- h2load (HTTP/2) ---------------------------------------------------------------------

H2LOAD_CLIENTS = 10  # h2load -c: connections
H2LOAD_STREAMS = 10  # h2load -m: streams in flight on each connection


@dataclass
class H2loadResult:
    """What WrkResult holds, from h2load: its summary, and the latency percentiles computed
    from its per-request log (--log-file), h2load itself printing only min/max/mean/sd."""

    requests: int  # succeeded: responses received, whatever their status
    rps: float
    p50_ms: float  # over the responses received in the measured period (not the warm-up)
    p99_ms: float
    errors: int  # "errored": streams that never got a whole response, timeouts included
    non_2xx: int  # 3xx + 4xx + 5xx from the "status codes" line


def h2load_argv(url: str, seconds: int, warmup: int, log_file: Path) -> list[str]:
    argv = ["taskset", "-c", CLIENT_CPU, "h2load", "-c", str(H2LOAD_CLIENTS)]
    argv += ["-m", str(H2LOAD_STREAMS), "-D", str(seconds)]
    if warmup:
        argv += ["--warm-up-time", str(warmup)]
    return [*argv, "--log-file", str(log_file), url]


def run_h2load(url: str, seconds: int, warmup: int, log_dir: Path) -> H2loadResult:
    """HTTP/2 over cleartext (h2c with prior knowledge, h2load's default for http:// URLs):
    a warm-up of `warmup` seconds on the same connections, then `seconds` measured."""
    log_file = log_dir / "h2load-requests.tsv"
    log_file.unlink(missing_ok=True)  # h2load appends to it
    argv = h2load_argv(url, seconds, warmup, log_file)
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + warmup + 60)
    if done.returncode != 0:
        raise RuntimeError(f"h2load failed ({done.returncode}): {done.stderr or done.stdout}")
    log = log_file.read_text() if log_file.exists() else ""
    try:
        return parse_h2load(done.stdout, log)
    except ValueError as exc:
        raise ValueError(f"{exc}\n--- h2load output ---\n{done.stdout}{done.stderr}") from None


def parse_h2load(out: str, log: str) -> H2loadResult:
    """h2load's summary `out`, and its --log-file `log`: one line per request closed in the
    measured period, "start (us since epoch) TAB status (-1: failed) TAB duration (us)"."""
    rps = re.search(r"finished in \S+, ([\d.]+) req/s", out)
    counts = re.search(
        r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded, \d+ failed,"
        r" (\d+) errored, \d+ timeout",
        out,
    )
    codes = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, (\d+) 5xx", out)
    if rps is None or counts is None or codes is None:
        raise ValueError("no req/s, requests or status codes line in h2load output")
    latencies_us = sorted(
        int(fields[2])
        for fields in (line.split("\t") for line in log.splitlines())
        if len(fields) == 3 and fields[1] != "-1"
    )
    return H2loadResult(
        requests=int(counts.group(1)),
        rps=float(rps.group(1)),
        p50_ms=percentile(latencies_us, 0.50) / 1e3,
        p99_ms=percentile(latencies_us, 0.99) / 1e3,
        errors=int(counts.group(2)),
        non_2xx=sum(int(n) for n in codes.groups()[1:]),
    )


def percentile(ordered: list[int], fraction: float) -> float:
    """Nearest rank: the smallest value at or above `fraction` of `ordered`; 0 if empty."""
    if not ordered:
        return 0.0
    return float(ordered[max(0, math.ceil(fraction * len(ordered)) - 1)])


def h2_answers(url: str) -> bool:
    """Whether one HTTP/2 GET of `url` (h2c with prior knowledge) gets a response."""
    try:
        done = subprocess.run(
            ["h2load", "-n", "1", "-c", "1", url], capture_output=True, text=True, timeout=10
        )
    except subprocess.TimeoutExpired:
        return False
    return re.search(r"\b1 succeeded", done.stdout) is not None


# --- oha (open loop) ----------------------------------------------------------------------


@dataclass
class OhaResult:
    rate: int  # requests/s offered
    achieved: float  # requests/s completed
    p50_ms: float
    p99_ms: float
    errors: int
    non_2xx: int


def oha_path() -> str | None:
    return shutil.which("oha") or shutil.which(str(Path.home() / ".cargo/bin/oha"))


def oha_concurrency(scenario: Scenario, connections: int) -> list[str]:
    """oha's -c for HTTP/1.1; for HTTP/2, h2load's connections and streams per connection."""
    if scenario.http == "2":
        return ["--http2", "-c", str(H2LOAD_CLIENTS), "-p", str(H2LOAD_STREAMS)]
    return ["-c", str(connections)]


def run_oha(url: str, seconds: int, connections: int, rate: int, scenario: Scenario) -> OhaResult:
    """Open loop: `rate` requests/s whatever the server does, latency measured from the time
    each request was due (--latency-correction), so a stalled server is not hidden."""
    argv = ["taskset", "-c", CLIENT_CPU, oha_path() or "oha", "-z", f"{seconds}s"]
    argv += oha_concurrency(scenario, connections)
    argv += ["-q", str(rate), "--latency-correction", "--no-tui"]
    argv += ["--output-format", "json"]
    if scenario.method != "GET":
        argv += ["-m", scenario.method, "-T", "application/octet-stream"]
        argv += ["-d", "x" * scenario.body_size]
    done = subprocess.run([*argv, url], capture_output=True, text=True, timeout=seconds + 60)
    if done.returncode != 0:
        raise RuntimeError(f"oha failed ({done.returncode}): {done.stderr[-2000:]}")
    try:
        data = json.loads(done.stdout)
        percentiles = data["latencyPercentiles"]
        return OhaResult(
            rate=rate,
            achieved=data["summary"]["requestsPerSec"],
            p50_ms=(percentiles["p50"] or 0.0) * 1e3,
            p99_ms=(percentiles["p99"] or 0.0) * 1e3,
            errors=sum(
                n for what, n in data["errorDistribution"].items() if "deadline" not in what
            ),
            non_2xx=sum(n for code, n in data["statusCodeDistribution"].items() if code[0] != "2"),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"unreadable oha output ({exc}): {done.stdout[:2000]}") from None


def scratch_dir() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="ferrule-bench-")


def uptime() -> str:
    """``uptime``'s line: the load a measurement was made under."""
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def sitting() -> tuple[str, str]:
    """The load before a sitting and the ferrule build it measures, each said on stderr with
    a warning where it makes the numbers doubtful (a busy machine, a dev build)."""
    load_before = uptime()
    log(f"uptime: {load_before}")
    if os.getloadavg()[0] > 0.5:
        log("warning: the machine is busy: the numbers will be noisy")
    build = ferrule_build()
    if "dev build" in build:
        log(f"warning: ferrule is a {build}: its numbers will be low (use --ferrule-path)")
    return load_before, build


def log(text: str) -> None:
    """A progress line on stderr (stdout is the report's)."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def verdict(ok: bool) -> str:
    """A target's mark in a report."""
    return "(met)" if ok else "(MISSED)"


def write_report(out: Path, name: str, lines: list[str]) -> None:
    """Writes a report's Markdown to ``out/name`` and prints it."""
    text = "\n".join(lines) + "\n"
    out.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(text)
    print(text)
    log(f"wrote {out / name}")
