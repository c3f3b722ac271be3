"""A restart under load, two ways, with ``--connections`` clients busy for ``--seconds`` (each
request on a new connection) and the restart halfway through. It prints every request sent and
how each ended: the claim is that none fails and every response is whole.

- ``--how socket-activation``: this script holds the listening socket as systemd holds a
  .socket unit's and starts ferrule on it (descriptor 3, ``LISTEN_FDS=1``); the restart stops
  ferrule with SIGTERM and starts it again on the same socket (a request meanwhile waits in the
  socket's backlog).
- ``--how sigusr2``: ferrule binds its port with ``--workers``; the restart is SIGUSR2 to its
  parent, which hands the socket to a new parent and exits once that one's workers serve.
- ``--how gunicorn-hup``: gunicorn's master with ferrule's worker class binds the port; the
  restart is SIGHUP to the master (new workers, then the old ones stopped gracefully).

    python3 benches/restart_under_load.py --seconds 20 --connections 50 [--workers 2] [--how H]
"""

from __future__ import annotations

import argparse
import collections
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

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


def start_bound(port: int, workers: int, log: Any) -> subprocess.Popen[bytes]:
    # The log is a file: the new parent an upgrade starts writes to it too, and outlives this
    # process (a pipe would stay open until it exits).
    argv = [sys.executable, "-m", "ferrule", "apps:app", "--port", str(port)]
    argv += ["--workers", str(workers), "--no-access-log"]
    return subprocess.Popen(argv, cwd=HERE, stderr=log, start_new_session=True)


def start_gunicorn(port: int, workers: int, log: Any) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "gunicorn", "-k", "ferrule.workers.FerruleWorker"]
    argv += ["-b", f"127.0.0.1:{port}", "-w", str(workers), "apps:app"]
    return subprocess.Popen(argv, cwd=HERE, stderr=log, start_new_session=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--how",
        choices=["socket-activation", "sigusr2", "gunicorn-hup"],
        default="socket-activation",
    )
    args = parser.parse_args()
    if args.how == "sigusr2" and args.workers < 2:
        parser.error("--how sigusr2 needs --workers 2 or more (a parent process)")

    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen(4096)
    port = held.getsockname()[1]
    if args.how != "socket-activation":
        held.close()  # the port is the server's to bind
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

    log = tempfile.TemporaryFile()
    if args.how == "sigusr2":
        server = start_bound(port, args.workers, log)
    elif args.how == "gunicorn-hup":
        server = start_gunicorn(port, args.workers, log)
    else:
        server = start(held, args.workers)
    time.sleep(3.0)  # the app imported and serving before the clients start
    threads = [threading.Thread(target=client, daemon=True) for _ in range(args.connections)]
    for thread in threads:
        thread.start()
    time.sleep(args.seconds / 2)
    stopped_at = time.monotonic()
    if args.how == "sigusr2":
        server.send_signal(signal.SIGUSR2)
        status = server.wait(120)
        log.seek(0)
        said = log.read().decode()
        new_pid = int(said.split("new parent process [")[1].split("]")[0])
    elif args.how == "gunicorn-hup":
        server.send_signal(signal.SIGHUP)
        status = "on (gunicorn's master stays)"
    else:
        server.send_signal(signal.SIGTERM)
        status = server.wait(60)
        server = start(held, args.workers)
    down = time.monotonic() - stopped_at
    time.sleep(args.seconds / 2)
    stop.set()
    for thread in threads:
        thread.join(60)
    if args.how == "gunicorn-hup":
        server.send_signal(signal.SIGTERM)
        server.wait(60)
    elif args.how == "sigusr2":
        os.kill(new_pid, signal.SIGTERM)
        while os.path.exists(f"/proc/{new_pid}"):
            time.sleep(0.1)
    else:
        server.send_signal(signal.SIGTERM)
        server.wait(60)
        held.close()
    total = sum(outcomes.values())
    print(
        f"restart ({args.how}) under load: {args.connections} clients, {args.seconds:g} s, "
        f"--workers {args.workers}; the first ferrule exited {status} after {down:.2f} s"
    )
    for outcome, count in outcomes.most_common():
        print(f"  {count:7d}  {outcome}")
    failed = total - outcomes["200, whole"]
    print(f"  {total:7d}  requests, {failed} not answered whole")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
