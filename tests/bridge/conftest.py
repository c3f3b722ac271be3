"""Fixtures of the bridge tests: the loop kind under test, :func:`bridgeutil.run_bridge` bound
to it, and a GIL switch interval short enough to open every window between two threads."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from bridgeutil import Main, Outcome, run_bridge
from support.loopkinds import LOOP_KINDS


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every bridge test is a smoke test: the bridge is what differs most between architectures
    (atomics, the wake descriptor, thread states), so an emulated one runs all of it."""
    for item in items:
        if "bridge" in item.path.parent.parts[-1:]:
            item.add_marker(pytest.mark.smoke)


@pytest.fixture(params=LOOP_KINDS)
def loop_kind(request: pytest.FixtureRequest) -> str:
    """The event loop implementation under test: ``asyncio`` and, when importable, ``uvloop``."""
    return request.param


@pytest.fixture
def run(loop_kind: str) -> Callable[..., Outcome]:
    """:func:`run_bridge` bound to the parametrized loop kind."""

    def run_on_loop(main: Main, **options: Any) -> Outcome:
        return run_bridge(main, loop=loop_kind, **options)

    return run_on_loop


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Make the interpreter switch threads every 0.1 ms (restored afterwards).

    A tokio thread and the loop thread then hand the GIL to each other thousands of times per
    second, which opens every window where both could be inside a task at once.
    """
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    try:
        yield
    finally:
        sys.setswitchinterval(previous)
