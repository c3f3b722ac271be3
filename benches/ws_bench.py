"""The WebSocket benchmark: messages/s and the server's CPU time per message.

    python benches/ws_bench.py                                  # every scenario and server
    python benches/ws_bench.py --servers ferrule --scenarios echo --repeats 5
    python benches/ws_bench.py --ferrule-path DIR               # a release wheel unpacked there
    python benches/ws_bench.py --instructions 2000              # ferrule under callgrind instead

Scenarios (`benches/ws_apps.py`), each with permessage-deflate off and on (the client offers it
or not; a server that declines it is marked):
  echo          --clients clients, each sending a 1 KiB JSON-like text and awaiting its echo
  broadcast-16  one server-side broadcaster sending 1 KiB texts to 16 clients
  broadcast-64  the same to 64 clients

The server is pinned to CPU 0 and the clients to CPU 1, as in run.py. The clients are the
`websockets` library on one asyncio loop, so on a fast server they are the bottleneck of
messages/s: the figure to compare is the server's CPU time per message (user + system time of
its whole process group, from /proc, over the messages counted in the same window), which does
not depend on how fast the clients are. An echo counts once (one message in, one out); a
broadcast once per client that received it. Each figure is the median over --repeats windows of
--duration seconds, the servers and the compression settings taking turns.

--instructions N runs ferrule (asyncio loop) under callgrind instead and prints the user-space
instructions per echo (16 clients, N messages after a warm-up), off and on: steadier than time
on a noisy machine, as benches/instructions.sh is for HTTP.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
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
from harness import Server, ServerProcess, scratch_dir
from websockets.asyncio.client import connect

APP = "ws_apps:app"
MESSAGES = 16


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
]
SCENARIOS = {"echo": None, "broadcast-16": 16, "broadcast-64": 64}


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


@dataclass
class Window:
    messages_per_s: float
    cpu_us_per_message: float
    deflate: bool


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
        start, cpu_start, t_start = count[0], group_cpu_seconds(pgid), time.monotonic()
        await asyncio.sleep(duration)
        end, cpu_end, t_end = count[0], group_cpu_seconds(pgid), time.monotonic()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    messages = max(end - start, 1)
    return Window(
        messages_per_s=messages / (t_end - t_start),
        cpu_us_per_message=(cpu_end - cpu_start) / messages * 1e6,
        deflate=all(agreed) and bool(agreed),
    )


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--servers", default=",".join(s.name for s in SERVERS))
    parser.add_argument("--scenarios", default=",".join(SCENARIOS))
    parser.add_argument("--clients", type=int, default=16, help="echo clients")
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ferrule-path", type=Path)
    parser.add_argument("--instructions", type=int, metavar="N")
    args = parser.parse_args()
    harness.ferrule_path = args.ferrule_path
    if args.instructions:
        instructions(args.instructions)
        return
    os.sched_setaffinity(0, {int(harness.CLIENT_CPU)})
    servers = harness.pick(args.servers, {s.name: s for s in SERVERS}, "server")
    scenarios = [name for name in args.scenarios.split(",") if name]
    rows = []
    with scratch_dir() as log_name:
        logs = Path(log_name)
        procs = [ServerProcess(server, APP, logs) for server in servers]
        try:
            for proc in procs:
                proc.wait_ready("/")
            for scenario in scenarios:
                results: dict[tuple[str, bool], list[Window]] = {}
                for _ in range(args.repeats):
                    for proc in procs:
                        for compress in (False, True):
                            url = f"ws://127.0.0.1:{proc.port}"
                            window = asyncio.run(
                                run_window(
                                    url,
                                    scenario,
                                    args.clients,
                                    compress,
                                    args.warmup,
                                    args.duration,
                                    proc.proc.pid,
                                )
                            )
                            results.setdefault((proc.server.name, compress), []).append(window)
                for (name, compress), windows in results.items():
                    rows.append(
                        (
                            scenario,
                            name,
                            deflate_label(compress, windows[0].deflate),
                            statistics.median(w.messages_per_s for w in windows),
                            statistics.median(w.cpu_us_per_message for w in windows),
                        )
                    )
        finally:
            for proc in procs:
                proc.stop()
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average after: {load}; {args.repeats} x {args.duration} s windows")
    print("| scenario | server | deflate | messages/s | server CPU µs/message |")
    print("| --- | --- | --- | ---: | ---: |")
    for scenario, name, deflate, rate, cpu in rows:
        print(f"| {scenario} | {name} | {deflate} | {rate:,.0f} | {cpu:.1f} |")


if __name__ == "__main__":
    main()
