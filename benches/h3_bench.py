"""The `h3-hello` scenario: `/hello` over HTTP/3, ferrule against hypercorn's HTTP/3 (aioquic),
with ferrule's own HTTP/2 over TLS beside it, in one run.

    python3 benches/h3_bench.py                   # 3 repeats of 5 s, ~3 minutes
    python3 benches/h3_bench.py --repeats 1 --duration 2
    python3 benches/h3_bench.py --ferrule-path DIR   # ferrule imported from DIR (a release
                                                     # wheel unpacked with pip --target)

The load generator is `ferrule-h3load` (crates/ferrule-h3load, quinn + h3, built with
`cargo build --release -p ferrule-h3load`; a closed loop as h2load's: `-c10 -m10`, 10
connections of 10 requests in flight each). HTTP/2 is h2load's (`-c10 -m10`, TLS with ALPN
h2). Each server is pinned to CPU 0 and the client to CPU 1; the servers take turns within each
repeat. Besides requests/s (medians), the server's CPU time per request (user + system, from
/proc, over the measured seconds) is given: steadier than requests/s on a noisy machine. A
Markdown table lands in benches/results/h3-<timestamp>.md.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import harness

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
H3LOAD = ROOT / "target" / "release" / "ferrule-h3load"
SERVER_CPU, CLIENT_CPU = "0", "1"
CLIENTS, STREAMS = 10, 10


@dataclass
class Server:
    name: str
    protocol: str  # "h3" or "h2"
    argv: list[str]


def servers(port: int, certs: Path) -> list[Server]:
    cert, key = str(certs / "server.pem"), str(certs / "server.key")
    py = sys.executable
    ferrule = [py, "-m", "ferrule", "apps:app", "--port", str(port), "--loop", "uvloop"]
    ferrule += ["--no-access-log", "--ssl-certfile", cert, "--ssl-keyfile", key, "--http3"]
    ferrule += ["--log-level", "warning"]
    hyper_port = port + 1
    hypercorn = [py, "-m", "hypercorn", "apps:app", "-k", "uvloop", "--log-level", "warning"]
    hypercorn += ["--bind", f"127.0.0.1:{hyper_port}", "--quic-bind", f"127.0.0.1:{hyper_port}"]
    hypercorn += ["--certfile", cert, "--keyfile", key]
    return [
        Server("ferrule (uvloop)", "h3", ferrule),
        Server("hypercorn (uvloop)", "h3", hypercorn),
        Server("ferrule (uvloop)", "h2", ferrule),
    ]


def port_of(server: Server, port: int) -> int:
    return port + 1 if server.name.startswith("hypercorn") else port


def h3load(port: int, certs: Path, seconds: float, warmup: float) -> dict:
    argv = ["taskset", "-c", CLIENT_CPU, str(H3LOAD), "-c", str(CLIENTS), "-m", str(STREAMS)]
    argv += ["-D", str(seconds), "--warm-up", str(warmup), "--ca", str(certs / "ca.pem")]
    argv += [f"https://127.0.0.1:{port}/hello"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + warmup + 60)
    if done.returncode != 0:
        raise RuntimeError(f"h3load failed: {done.stderr}{done.stdout}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def h2load(port: int, seconds: float, warmup: float) -> dict:
    argv = ["taskset", "-c", CLIENT_CPU, "h2load", "-c", str(CLIENTS), "-m", str(STREAMS)]
    argv += ["-D", str(int(seconds)), "--warm-up-time", str(int(warmup))]
    argv += [f"https://127.0.0.1:{port}/hello"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + warmup + 60)
    out = done.stdout
    rps = next(line for line in out.splitlines() if line.startswith("finished in"))
    reqs = next(line for line in out.splitlines() if line.startswith("requests:"))
    succeeded = int(reqs.split("succeeded")[0].split(",")[-1].strip().split()[0])
    errored = int(reqs.split(" errored")[0].split(",")[-1].strip())
    return {
        "rps": float(rps.split(",")[1].split()[0]),
        "requests": succeeded,
        "errors": errored,
        "seconds": seconds,
    }


def start(server: Server, tmp: Path, ferrule_path: str | None) -> subprocess.Popen:
    env = os.environ.copy()
    env["PYTHONPATH"] = str(BENCH_DIR)
    if ferrule_path and server.name.startswith("ferrule"):
        env["PYTHONPATH"] = os.pathsep.join([ferrule_path, str(BENCH_DIR)])
    log = open(tmp / f"{server.name.split()[0]}.log", "ab")  # noqa: SIM115 - kept for the process
    return subprocess.Popen(
        ["taskset", "-c", SERVER_CPU, *server.argv],
        cwd=BENCH_DIR,
        env=env,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )


def wait_ready(port: int, certs: Path, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if h3load(port, certs, 0.3, 0.2)["requests"] > 0:
                return
        except (RuntimeError, json.JSONDecodeError, subprocess.TimeoutExpired):
            pass
        time.sleep(0.3)
    raise RuntimeError(f"no HTTP/3 answer on port {port} within {timeout}s")


def ferrule_build(path: str | None) -> str:
    """Which ferrule build is measured: the directory given, or the one this Python imports."""
    if path:
        return f"imported from {path}"
    spec = importlib.util.find_spec("ferrule")
    return f"imported from {spec.origin if spec else '?'} (check its build profile)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--port", type=int, default=28443)
    parser.add_argument("--ferrule-path", help="import ferrule from this directory")
    args = parser.parse_args()
    if not H3LOAD.exists():
        sys.exit(f"{H3LOAD} not found: cargo build --release -p ferrule-h3load")
    if shutil.which("h2load") is None:
        sys.exit("h2load not found (apt-get install nghttp2-client)")
    sys.path.insert(0, str(ROOT / "tests"))
    from support.certs import make_certs

    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"h3-bench-{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    make_certs(tmp)
    load_before = Path("/proc/loadavg").read_text().split()[:3]
    runs = servers(args.port, tmp)
    procs = {}
    try:
        for server in runs:
            if server.argv not in [r.argv for r in runs[: runs.index(server)]]:
                procs[server.name] = start(server, tmp, args.ferrule_path)
        for server in runs:
            wait_ready(port_of(server, args.port), tmp)
        results: dict[tuple[str, str], list[dict]] = {}
        for repeat in range(args.repeats):
            for server in runs:
                pid = procs[server.name].pid
                port = port_of(server, args.port)
                before = harness.group_cpu_seconds(pid)
                if server.protocol == "h3":
                    result = h3load(port, tmp, args.duration, args.warmup)
                else:
                    result = h2load(port, args.duration, args.warmup)
                # The server's CPU over the whole run, warm-up included: per request of it.
                cpu = harness.group_cpu_seconds(pid) - before
                total = result["requests"] * (1 + args.warmup / args.duration)
                result["server_cpu_us"] = 1e6 * cpu / total if total else float("nan")
                results.setdefault((server.name, server.protocol), []).append(result)
                print(repeat, server.name, server.protocol, json.dumps(result), flush=True)
    finally:
        for proc in procs.values():
            proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
    load_after = Path("/proc/loadavg").read_text().split()[:3]
    lines = [
        f"# h3-hello, {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}",
        "",
        f"Command: `python3 benches/h3_bench.py --repeats {args.repeats} --duration "
        f"{args.duration} --warmup {args.warmup}"
        f"{' --ferrule-path DIR' if args.ferrule_path else ''}`; load average before "
        f"{' '.join(load_before)}, after {' '.join(load_after)}.",
        f"ferrule: {ferrule_build(args.ferrule_path)}; hypercorn "
        f"{importlib.metadata.version('hypercorn')}, aioquic "
        f"{importlib.metadata.version('aioquic')}; {sys.version.split()[0]}.",
        f"Server on CPU {SERVER_CPU}, client on CPU {CLIENT_CPU}; h3load / h2load -c{CLIENTS} "
        f"-m{STREAMS}; medians of {args.repeats} runs of {args.duration} s after "
        f"{args.warmup} s of warm-up.",
        "",
        "| server | protocol | requests/s | server CPU per request | client CPU | errors |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for (name, protocol), runs_of in results.items():
        rps = statistics.median(r["rps"] for r in runs_of)
        cpu = statistics.median(r["server_cpu_us"] for r in runs_of)
        errors = sum(r.get("errors", 0) + r.get("non_2xx", 0) for r in runs_of)
        label = "HTTP/3" if protocol == "h3" else "HTTP/2 (TLS)"
        client = [r["client_cpu_s"] / r["seconds"] for r in runs_of if "client_cpu_s" in r]
        busy = f"{statistics.median(client):.0%}" if client else "-"
        lines.append(f"| {name} | {label} | {rps:,.0f} | {cpu:,.0f} us | {busy} | {errors} |")
    lines += [
        "",
        "Server CPU per request: the server processes' user + system time over the run (warm-up",
        "included) over its requests. Client CPU: h3load's own, as a share of one CPU (h2load",
        "reports none).",
    ]
    report = "\n".join(lines) + "\n"
    out = BENCH_DIR / "results" / f"h3-{time.strftime('%Y%m%d-%H%M%S')}.md"
    out.write_text(report)
    print(report)
    print(f"written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
