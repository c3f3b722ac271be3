"""Install built ferrule artefacts, one at a time, into fresh venvs and serve the example app.

    python3.X scripts/check_wheel.py [--stripped] ARTEFACT...

Run it with the interpreter the artefacts are for. Each ARTEFACT is a wheel, an sdist
(`ferrule-*.tar.gz`: pip builds it from source, so cargo must be on PATH; CARGO_TARGET_DIR is
passed on, so a kept target dir makes the rebuild incremental), or a directory, which stands for
every wheel in it tagged for this interpreter (at least one must be). It proves what a user's
`pip install` gets: the artefact alone (no source tree on sys.path, no test dependencies; a wheel
installs with --no-index) imports, its `ferrule` command serves `examples/hello.py` on a free
port, answers GET / and GET /stream with the example's bodies, and stops cleanly on Ctrl-C
(SIGINT). A wheel must also hold the typing marker `py.typed`, and with --stripped its extension
module must carry no symbol table or debug sections (a release wheel is built with --strip).
Standard library only; exits non-zero with the reason otherwise.
"""

from __future__ import annotations

import argparse
import os
import platform
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.request
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXPECTED = {
    "/": b"Hello from ferrule\n",
    "/stream": b"".join(b"chunk %d\n" % i for i in range(5)),
}
START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0
TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"


class CheckFailed(Exception):
    pass


def fail(message: str, log: Path | None = None) -> None:
    if log is not None and log.exists():
        message += "\n---- server output ----\n" + log.read_text(errors="replace")[-4000:]
    raise CheckFailed(message)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def get(url: str) -> tuple[int, bytes]:
    with urllib.request.urlopen(url, timeout=5) as response:
        return response.status, response.read()


def elf_section_names(data: bytes) -> list[str]:
    """The section names of a 64-bit little-endian ELF file (what `readelf -S` lists)."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        fail("the extension module is not a 64-bit little-endian ELF file")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)

    def header(i: int) -> tuple[int, int, int]:  # name offset, file offset, size
        base = shoff + i * shentsize
        name = struct.unpack_from("<I", data, base)[0]
        offset, size = struct.unpack_from("<QQ", data, base + 0x18)
        return name, offset, size

    _, strtab, _ = header(shstrndx)
    names = []
    for i in range(shnum):
        name = header(i)[0]
        names.append(data[strtab + name : data.index(b"\0", strtab + name)].decode())
    return names


def inspect_wheel(wheel: Path, stripped: bool) -> None:
    if f"-{TAG}-" not in wheel.name:
        fail(f"{wheel.name} is not a wheel for {TAG} (run this with the wheel's interpreter)")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        if "ferrule/py.typed" not in names:
            fail(f"{wheel.name} has no ferrule/py.typed (type checkers would ignore its stubs)")
        modules = [n for n in names if n.startswith("ferrule/_ferrule.") and n.endswith(".so")]
        if len(modules) != 1:
            fail(f"{wheel.name} holds {len(modules)} extension modules, expected one: {modules}")
        if stripped:
            sections = elf_section_names(zf.read(modules[0]))
            unstripped = [s for s in sections if s == ".symtab" or s.startswith(".debug")]
            if unstripped:
                fail(f"{modules[0]} in {wheel.name} is not stripped: it has {unstripped}")


def serve_example(venv: Path, tmp: Path) -> None:
    port = free_port()
    log = tmp / "server.log"
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
        for path, expected in EXPECTED.items():
            if path != "/":
                status, body = get(f"http://127.0.0.1:{port}{path}")
            if (status, body) != (200, expected):
                fail(f"GET {path} gave {status} {body!r}, expected 200 {expected!r}", log)
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


def check(artefact: Path, stripped: bool) -> str:
    sdist = artefact.name.endswith(".tar.gz")
    if not sdist:
        inspect_wheel(artefact, stripped)
    with tempfile.TemporaryDirectory(prefix="ferrule-wheel-") as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        python = venv / "bin" / "python"
        # A wheel installs with --no-index: ferrule has no runtime dependencies, so the wheel must
        # install on its own. An sdist needs its build backend (maturin) from the index.
        install = [str(python), "-m", "pip", "install", "--quiet"]
        install += [str(artefact)] if sdist else ["--no-index", str(artefact)]
        start = time.monotonic()
        done = subprocess.run(install, env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
        if done.returncode != 0:
            fail(f"pip install {artefact.name} failed with exit {done.returncode}")
        built = f", built from source in {time.monotonic() - start:.0f} s" if sdist else ""
        imported_from = subprocess.run(
            [str(python), "-c", "import ferrule, ferrule._ferrule; print(ferrule.__file__)"],
            check=True,
            capture_output=True,
            text=True,
            cwd=tmp,  # not the checkout: the import must come from the venv
        ).stdout.strip()
        if not imported_from.startswith(str(venv)):
            fail(f"ferrule imported from {imported_from}, not from the fresh venv")
        serve_example(venv, Path(tmp))
    size = artefact.stat().st_size / 1e6
    return (
        f"{artefact.name} ({size:.2f} MB) installs into a fresh venv of Python "
        f"{platform.python_version()}{built} and serves the example app"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("artefacts", nargs="+", type=Path, metavar="ARTEFACT")
    parser.add_argument(
        "--stripped", action="store_true", help="also require a stripped extension module"
    )
    args = parser.parse_args()

    artefacts: list[Path] = []
    for path in args.artefacts:
        path = path.resolve()
        if path.is_dir():
            found = sorted(path.glob(f"ferrule-*-{TAG}-{TAG}-*.whl"))
            if not found:
                sys.exit(f"check_wheel: FAILED: no {TAG} wheel in {path}")
            artefacts += found
        elif path.is_file():
            artefacts.append(path)
        else:
            sys.exit(f"check_wheel: FAILED: no artefact at {path}")

    failed = 0
    for artefact in artefacts:
        try:
            print(f"check_wheel: {check(artefact, args.stripped)}", flush=True)
        except (CheckFailed, subprocess.CalledProcessError) as exc:
            print(f"check_wheel: FAILED: {artefact.name}: {exc}", file=sys.stderr, flush=True)
            failed += 1
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
