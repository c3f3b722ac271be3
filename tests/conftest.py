"""Fixtures for every test: a hard time limit per test, and the TLS certificates
(``tests/certs.py``) made once per session.

The time limit is a faulthandler watchdog: it holds even when a deadlock inside the extension
keeps the GIL forever, dumping every thread's stack and exiting the process.
"""

from __future__ import annotations

import faulthandler
from collections.abc import Iterator

import pytest
from certs import Certs, make_certs

#: Hard per-test limit enforced by the faulthandler watchdog (kills the process). Longer than
#: pytest-timeout's ``timeout = 120`` (when installed), which fails the test more gently but
#: cannot fire while a thread holds the GIL forever.
HARD_TEST_LIMIT = 150.0


@pytest.fixture(autouse=True)
def hard_time_limit() -> Iterator[None]:
    """Dump all stacks and exit if a test exceeds ``HARD_TEST_LIMIT`` (even with the GIL held)."""
    faulthandler.dump_traceback_later(HARD_TEST_LIMIT, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="session")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    """A CA, a server certificate for 127.0.0.1/localhost and client certificates (PEM files,
    see ``tests/certs.py``), made once per session."""
    return make_certs(tmp_path_factory.mktemp("certs"))
