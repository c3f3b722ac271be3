"""Install a built ferrule wheel into a fresh venv and serve the example app from it.

    python3.X scripts/check_wheel.py WHEEL

Run it with the interpreter the wheel is for. It proves what a user's `pip install` gets: the
wheel alone (no source tree on sys.path, no test dependencies) imports, its `ferrule` command
serves `examples/hello.py` on a free port, answers GET / with the example's body, and stops
cleanly on Ctrl-C (SIGINT). Standard library only; exits non-zero with the reason otherwise.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXPECTED_BODY = b"Hello from ferrule\n"
START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0


def fail(message: str, log: Path | None = None) -> None:
    print(f"check_wheel: FAILED: {message}", file=sys.stderr)
    if log is not None and log.exists():
        print("---- server output ----", file=sys.stderr)
        print(log.read_text(errors="replace")[-4000:], file=sys.stderr)
    sys.exit(1)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.read()


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    wheel = Path(sys.argv[1]).resolve()
    if not wheel.is_file():
        fail(f"no wheel at {wheel}")
    tag = f"cp{sys.version_info.major}{sys.version_info.minor}"
    if f"-{tag}-" not in wheel.name:
        fail(f"{wheel.name} is not a wheel for {tag} (run this with the wheel's interpreter)")

    with tempfile.TemporaryDirectory(prefix="ferrule-wheel-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = venv / "bin" / "python"
        # --no-index: ferrule has no runtime dependencies, so the wheel must install on its own.
        subprocess.run(
            [str(python), "-m", "pip", "install", "--quiet", "--no-index", str(wheel)],
            check=True,
            env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        )
        imported_from = subprocess.run(
            [str(python), "-c", "import ferrule, ferrule._ferrule; print(ferrule.__file__)"],
            check=True,
            capture_output=True,
            text=True,
            cwd=tmp,  # not the checkout: the import must come from the venv
        ).stdout.strip()
        if not imported_from.startswith(str(venv)):
            fail(f"ferrule imported from {imported_from}, not from the fresh venv")

        port = free_port()
        log = Path(tmp) / "server.log"
        with log.open("wb") as out:
            server = subprocess.Popen(
                [
                    str(venv / "bin" / "ferrule"),
                    "examples.hello:app",
                    "--app-dir",
                    str(REPO),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=tmp,
            )
        try:
            deadline = time.monotonic() + START_TIMEOUT
            while True:
                if server.poll() is not None:
                    fail(f"the server exited with {server.returncode} before serving", log)
                try:
                    status, body = get(f"http://127.0.0.1:{port}/")
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        fail(f"nothing answered on port {port} within {START_TIMEOUT:.0f} s", log)
                    time.sleep(0.1)
            if (status, body) != (200, EXPECTED_BODY):
                fail(f"GET / gave {status} {body!r}, expected 200 {EXPECTED_BODY!r}", log)
            server.send_signal(signal.SIGINT)
            try:
                code = server.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                fail(f"the server did not stop within {STOP_TIMEOUT:.0f} s of SIGINT", log)
            if code != 0:
                fail(f"the server exited with {code} after SIGINT", log)
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()
    print(f"check_wheel: {wheel.name} installs into a fresh venv and serves the example app")


if __name__ == "__main__":
    main()
