"""Read a macOS wheel's extension modules and say which libraries they load.

    python scripts/check_macos_wheel.py WHEEL...

No Mac is needed: the Mach-O load commands are read with macholib. Every library an extension
loads must be one of macOS's own (under /usr/lib or /System/Library), since a Mac that has
installed nothing has no other; its architecture must be the wheel tag's, and its minimum macOS
version no later than the tag's. Prints one line per wheel; exits 1 naming what is wrong."""

from __future__ import annotations

import sys
import tempfile
import zipfile
from pathlib import Path

from macholib.mach_o import (
    CPU_TYPE_NAMES,
    LC_BUILD_VERSION,
    LC_LOAD_DYLIB,
    LC_LOAD_WEAK_DYLIB,
    LC_REEXPORT_DYLIB,
)
from macholib.MachO import MachO

SYSTEM_PREFIXES = ("/usr/lib/", "/System/Library/")
ARCH_OF_TAG = {"arm64": "ARM64", "x86_64": "x86_64"}


def check(wheel: Path) -> str:
    """One line about ``wheel``; raises ``ValueError`` naming what is wrong."""
    # ferrule-0.1.0-cp311-cp311-macosx_11_0_arm64.whl
    platform = wheel.name.removesuffix(".whl").split("-")[-1]
    _, major, minor, arch = platform.split("_", 3)
    tag_version = (int(major), int(minor))
    found = []
    with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as archive:
        modules = [n for n in archive.namelist() if n.endswith((".so", ".dylib"))]
        if not modules:
            raise ValueError(f"{wheel.name}: no extension module")
        for name in modules:
            path = Path(archive.extract(name, tmp))
            for header in MachO(str(path)).headers:
                cpu = CPU_TYPE_NAMES.get(header.header.cputype, str(header.header.cputype))
                if cpu != ARCH_OF_TAG[arch]:
                    raise ValueError(f"{name} is built for {cpu}, the tag says {arch}")
                for command, body, data in header.commands:
                    if command.cmd in (LC_LOAD_DYLIB, LC_LOAD_WEAK_DYLIB, LC_REEXPORT_DYLIB):
                        library = data.rstrip(b"\0").decode()
                        if not library.startswith(SYSTEM_PREFIXES):
                            raise ValueError(f"{name} loads {library}, which no Mac has")
                        found.append(library)
                    elif command.cmd == LC_BUILD_VERSION:
                        minos = (body.minos >> 16, (body.minos >> 8) & 0xFF)
                        if minos > tag_version:
                            raise ValueError(
                                f"{name} needs macOS {minos}, the tag says {tag_version}"
                            )
    return f"{arch}, loads only macOS's own {', '.join(sorted(set(found)))}"


def main() -> None:
    status = 0
    for arg in sys.argv[1:]:
        try:
            print(check(Path(arg)))
        except ValueError as exc:
            print(exc, file=sys.stderr)
            status = 1
    sys.exit(status)


if __name__ == "__main__":
    main()
