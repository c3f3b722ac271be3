"""Fixtures for every test: a hard time limit per test, and the TLS certificates
(``tests/support/certs.py``) made once per session. On a system without ``/proc`` (macOS), the
tests that read it (what a server process holds: memory, threads, descriptors) are skipped.

The time limit is a faulthandler watchdog: it holds even when a deadlock inside the extension
keeps the GIL forever, dumping every thread's stack and exiting the process.
"""

from __future__ import annotations

import faulthandler
import os
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest
from support.certs import Certs, make_certs

#: Hard per-test limit enforced by the faulthandler watchdog (kills the process). Longer than
#: pytest-timeout's ``timeout = 120`` (when installed), which fails the test more gently but
#: cannot fire while a thread holds the GIL forever.
HARD_TEST_LIMIT = 150.0


@pytest.fixture(autouse=True)
def hard_time_limit(request: pytest.FixtureRequest) -> Iterator[None]:
    """Dump all stacks and exit if a test exceeds ``HARD_TEST_LIMIT``, or 30 s more than a
    longer ``--timeout`` (an emulated architecture's), even with the GIL held."""
    timeout = float(request.config.getoption("timeout", None) or 0)
    faulthandler.dump_traceback_later(max(HARD_TEST_LIMIT, timeout + 30), exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """A CA, a server certificate for 127.0.0.1/localhost and client certificates (PEM files,
    see ``tests/support/certs.py``), made once per session."""
    return make_certs(tmp_path_factory.mktemp("certs"))


@cache
def _reads_proc(path: Path) -> bool:
    source = path.read_text(encoding="utf-8")
    return "/proc/" in source or "from support.memutil" in source or "import memutil" in source


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    if os.path.isdir("/proc/self"):
        return
    skip = pytest.mark.skip(reason="reads /proc, which this system does not have")
    for item in items:
        if _reads_proc(item.path):
            item.add_marker(skip)
