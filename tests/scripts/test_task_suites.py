"""``scripts/task_suites.py``, which CI runs over CPython's task suites with the task factory:
a test that hangs is named, its stacks printed, and the run fails, instead of the whole run
going silent until CI's own deadline."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "task_suites.py"

HANGING_SUITE = """
import asyncio
import unittest


class Hangs(unittest.TestCase):
    def test_a_passes(self):
        asyncio.run(asyncio.sleep(0))

    def test_b_hangs(self):
        asyncio.run(asyncio.sleep(3600))
"""


def test_a_hung_test_is_named_with_its_stack_and_fails_the_run(tmp_path: Path) -> None:
    """Rule: a test still running at the suite's deadline counts as TIMEOUT, a failure, and the
    stack of the thread that hung is printed; the tests before it keep their outcomes. Seen
    broken: with the deadline's line not read, the hung test had no outcome at all and the run
    passed (exit 0, "1 tests, {'ok': 1}"); and before the counts allowed for a suite killed
    before it could report, the run ended in a KeyError."""
    (tmp_path / "test_hangs.py").write_text(HANGING_SUITE)
    run = subprocess.run(
        [sys.executable, str(SCRIPT), "--testdir", str(tmp_path), "--timeout", "5"]
        + ["--no-baseline", "test_hangs"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    report = run.stdout
    assert run.returncode == 1, report + run.stderr
    assert "task factory: 2 tests, {'ok': 1, 'TIMEOUT': 1}" in report
    assert "test_hangs hung; its threads that ran Python:" in report
    assert "in test_b_hangs" in report  # the hung test's own frame, in the stack
    assert "TIMEOUT with the factory only: test_hangs.Hangs.test_b_hangs" in report
