"""A restart under socket activation, under load: this script holds the listening socket as
systemd holds a .socket unit's, starts ferrule on it (descriptor 3, ``LISTEN_FDS=1``), keeps
``--connections`` clients busy for ``--seconds`` (each request on a new connection, so a
request is either taken by a running ferrule or waits in the socket's backlog), stops ferrule
with SIGTERM halfway through and starts it again on the same socket. It prints every request
sent and how each ended: the claim is that none fails and every response is whole.

    python3 benches/restart_under_load.py --seconds 20 --connections 50 [--workers 2]
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import httpx

HERE = os.path.dirname(os.path.abspath(__file__))
BODY = b"Hello, world!"


def start(held: socket.socket, workers: int) -> subprocess.Popen[bytes]:
    fd = held.fileno()
    move = "" if fd == 3 else f"exec 3<&{fd} {fd}<&-; "  # systemd's sockets start at 3
    script = f'{move}LISTEN_PID=$$ LISTEN_FDS=1 exec "$@"'
    argv = ["bash", "-c", script, "bash", sys.executable, "-m", "ferrule", "apps:app"]
    argv += ["--workers", str(workers), "--no-access-log", "--log-level", "warning"]
    return subprocess.Popen(argv, cwd=HERE, pass_fds=(fd,), start_new_session=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--workers", type=int, default=1)
    args = parser.parse_args()

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(4096)
    port = held.getsockname()[1]
    outcomes: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()
    stop = threading.Event()

    def client() -> None:
        with httpx.Client(
            timeout=30, trust_env=False, limits=httpx.Limits(max_keepalive_connections=0)
        ) as http:
            while not stop.is_set():
                try:
                    response = http.get(f"http://127.0.0.1:{port}/hello")
                    whole = response.status_code == 200 and response.content == BODY
                    outcome = (
                        "200, whole"
                        if whole
                        else f"{response.status_code}, {len(response.content)} bytes"
                    )
                except httpx.HTTPError as exc:
                    outcome = type(exc).__name__
                with lock:
                    outcomes[outcome] += 1

    server = start(held, args.workers)
    time.sleep(2.0)  # the app imported and serving before the clients start
    threads = [threading.Thread(target=client, daemon=True) for _ in range(args.connections)]
    for thread in threads:
        thread.start()
    time.sleep(args.seconds / 2)
    stopped_at = time.monotonic()
    server.send_signal(signal.SIGTERM)
    status = server.wait(60)
    down = time.monotonic() - stopped_at
    server = start(held, args.workers)
    time.sleep(args.seconds / 2)
    stop.set()
    for thread in threads:
        thread.join(60)
    server.send_signal(signal.SIGTERM)
    server.wait(60)
    held.close()
    total = sum(outcomes.values())
    print(
        f"restart under socket activation: {args.connections} clients, {args.seconds:g} s, "
        f"--workers {args.workers}; the first ferrule exited {status} after {down:.2f} s"
    )
    for outcome, count in outcomes.most_common():
        print(f"  {count:7d}  {outcome}")
    failed = total - outcomes["200, whole"]
    print(f"  {total:7d}  requests, {failed} not answered whole")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
