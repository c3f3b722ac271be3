"""How many writes a burst of small sends costs: 512 body chunks of 100 bytes sent without
yielding (HTTP/1.1, chunked and with a Content-Length) and 200 WebSocket texts sent the same way,
counted as the TCP segments the client received (Linux ``TCP_INFO``; the server sets
``TCP_NODELAY``, so a segment is about a write).

The counts depend on when the tokio thread polls the body or the socket's task relative to the
app, which load on the machine changes: they are this benchmark's figures, not the test suite's
assertions (the tests check the bytes and the order). The servers run on CPU 0, the client on
CPU 1, as in the other benchmarks; the report gives each case's median and maximum over
``--runs`` runs, with the bound a quiet machine keeps (12 segments for the body, 30 for the
messages, on asyncio).

    python3 benches/write_batching.py                  # 20 runs of each case
    python3 benches/write_batching.py --ferrule-path DIR --runs 50
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import harness

TESTS_DIR = harness.BENCH_DIR.parent / "tests"
sys.path[:0] = [str(TESTS_DIR), str(TESTS_DIR / "apps")]

from support.h1raw import data_segments_in, request_bytes  # noqa: E402
from support.serverutil import ServerProcess, running_server  # noqa: E402
from support.wsutil import OP_TEXT, raw_handshake  # noqa: E402

BODY_BOUND = 12
MESSAGES_BOUND = 30


@contextlib.contextmanager
def pinned_server(app: str, loop: str) -> Iterator[ServerProcess]:
    """The tests' server on the server's CPU (it inherits this process's affinity when it
    starts), this process, the client, on the client's CPU once it serves."""
    os.sched_setaffinity(0, {int(harness.SERVER_CPU)})
    try:
        with running_server(app, "--loop", loop) as srv:
            os.sched_setaffinity(0, {int(harness.CLIENT_CPU)})
            yield srv
    finally:
        os.sched_setaffinity(0, range(os.cpu_count() or 1))


def body_segments(loop: str, length: bool, runs: int) -> list[int]:
    query = "n=512&length=1" if length else "n=512"
    counts = []
    with pinned_server("streaming_app:app", loop) as srv:
        for _ in range(runs):
            with srv.raw() as conn:
                before = data_segments_in(conn.sock)
                conn.send(request_bytes("GET", f"/small?{query}", host=f"127.0.0.1:{srv.port}"))
                response = conn.read_response()
                counts.append(data_segments_in(conn.sock) - before)
            assert response.status == 200 and len(response.body) == 512 * 100, response
    return counts


def message_segments(loop: str, runs: int) -> list[int]:
    counts = []
    with pinned_server("ws_app:app", loop) as srv:
        for _ in range(runs):
            ws = raw_handshake(srv, "/burst?n=200")
            try:
                assert ws.response.status == 101, ws.response
                before = data_segments_in(ws.conn.sock)
                ws.send_frame(OP_TEXT, b"go")
                texts = [ws.read_frame().payload for _ in range(200)]
                counts.append(data_segments_in(ws.conn.sock) - before)
            finally:
                ws.conn.close()
            assert texts == [str(i).encode() for i in range(200)]
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--loops", default="asyncio,uvloop")
    parser.add_argument("--ferrule-path", type=Path, help="import ferrule from DIR first")
    parser.add_argument("--out", type=Path, default=harness.BENCH_DIR / "results")
    args = parser.parse_args()
    if args.ferrule_path:
        os.environ["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(args.ferrule_path), os.environ.get("PYTHONPATH")])
        )
    started = harness.uptime()
    rows = []
    for loop in filter(None, args.loops.split(",")):
        cases = [
            ("body, chunked", BODY_BOUND, body_segments, (loop, False, args.runs)),
            ("body, content-length", BODY_BOUND, body_segments, (loop, True, args.runs)),
            ("200 messages", MESSAGES_BOUND, message_segments, (loop, args.runs)),
        ]
        for name, bound, measure, measure_args in cases:
            harness.log(f"{loop}: {name}")
            counts = measure(*measure_args)
            within = sum(c <= bound for c in counts)
            rows.append(
                f"| {loop} | {name} | {statistics.median(counts):g} | {max(counts)} "
                f"| {bound} | {within}/{len(counts)} |"
            )
    lines = [
        "# Writes per burst of small sends (TCP segments received)",
        "",
        f"- ferrule: {harness.ferrule_build()}",
        f"- load before: `{started}`",
        f"- load after: `{harness.uptime()}`",
        f"- command: `python3 benches/{Path(__file__).name} {' '.join(sys.argv[1:])}`",
        "",
        "| loop | case | median | max | quiet-machine bound | runs within it |",
        "| --- | --- | ---: | ---: | ---: | ---: |",
        *rows,
        "",
        "The bound is what asyncio keeps on a quiet machine; uvloop's tokio thread may take the",
        "sends as they come, so its counts are shown for comparison only.",
    ]
    harness.write_report(args.out, time.strftime("write-batching-%Y%m%d-%H%M%S.md"), lines)


if __name__ == "__main__":
    main()
