"""The collision stress: a tiny GIL switch interval and a mix of handlers, for ferrule.

    python benches/stress.py                    # ferrule on asyncio then on uvloop, 20 s each
    python benches/stress.py --duration 5 --servers ferrule-uvloop

The server serves ``stress_app:app`` (the benchmark app, imported after
``sys.setswitchinterval(1e-4)``), pinned to CPU 0; ``wrk -t1 -c100`` on CPU 1 sends GETs that
rotate through CPU-bound handlers (about 1 ms of pure Python holding the GIL), task-creating
handlers, anyio task groups and sleep(0) handlers. It prints requests, non-2xx and socket errors.

ferrule reports nothing about task collisions over HTTP yet; a collision (two tasks of one loop
entered at once) makes asyncio raise inside the handler, which the server answers with a 500, so
it shows up in non-2xx, and as a traceback in the server's log (counted too; the
ClientDisconnected tracebacks of requests still in flight when wrk hangs up at the end are
counted apart). Exit status 1 if any server had a non-2xx, an error or another traceback.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import harness
from harness import (
    SERVERS,
    SERVERS_BY_NAME,
    pick,
    rotate_script,
    run_wrk,
    scratch_dir,
    serving,
    write_script,
)

TRACEBACK = "Traceback (most recent call last):"
DISCONNECT = "ferrule.ClientDisconnected"
MIX = ["/cpu", "/task", "/anyio", "/cpu", "/sleep", "/task", "/cpu", "/anyio", "/hello"]


def traceback_exceptions(log: str) -> list[str]:
    """The exception line that ends each traceback in a server log."""
    found = []
    for block in log.split(TRACEBACK)[1:]:
        lines = block.splitlines()[1:]
        found.append(next((x for x in lines if x and not x[0].isspace()), "?"))
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--servers",
        default="ferrule-asyncio,ferrule-uvloop",
        help="comma list of: " + ", ".join(s.name for s in SERVERS),
    )
    p.add_argument("--duration", type=int, default=20, help="seconds per server (default 20)")
    p.add_argument("--connections", type=int, default=100, help="wrk -c (default 100)")
    p.add_argument(
        "--ferrule-path",
        type=Path,
        help="import ferrule from this directory (e.g. a release wheel unpacked there)",
    )
    args = p.parse_args(argv)
    servers = pick(args.servers, SERVERS_BY_NAME, "server")
    harness.ferrule_path = args.ferrule_path

    print(f"collision stress: switch interval 1e-4 s, wrk -t1 -c{args.connections}", end="")
    print(f" -d{args.duration}s, request mix {' '.join(MIX)}")
    print(f"ferrule {harness.ferrule_build()}")
    print("task collisions: not reported by ferrule yet; one would answer 500 (counted in non-2xx)")
    failed = False
    with scratch_dir() as tmp:
        tmp = Path(tmp)
        script = write_script(tmp, "mix.lua", rotate_script(MIX))
        for server in servers:
            print(f"{server.name}: running {args.duration}s ...", flush=True)
            try:
                with serving(server, "stress_app:app", "/hello", tmp) as proc:
                    result = run_wrk(proc.url("/"), args.duration, args.connections, script)
                log = proc.log_path.read_text(errors="replace")
            except (RuntimeError, ValueError) as exc:
                print(f"{server.name}: FAILED: {exc}")
                failed = True
                continue
            exceptions = traceback_exceptions(log)
            disconnects = sum(e.startswith(DISCONNECT) for e in exceptions)
            others = [e for e in exceptions if not e.startswith(DISCONNECT)]
            bad = result.non_2xx + result.errors + len(others)
            failed = failed or bad > 0
            print(
                f"{server.name}: {result.requests:,} requests ({result.rps:,.0f}/s),"
                f" non-2xx {result.non_2xx}, errors {result.errors},"
                f" p99 {result.p99_ms:.1f} ms; server log: {len(others)} tracebacks"
                f" (+{disconnects} ClientDisconnected as wrk hung up): {'FAIL' if bad else 'OK'}"
            )
            for exception in dict.fromkeys(others):
                print(f"  {others.count(exception)} x {exception}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
