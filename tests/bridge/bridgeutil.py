"""What the black-box tests of the coroutine bridge (``tests/bridge/``) share.

Every test runs its scenario through :func:`run_bridge`, which wraps ``ferrule.drive``:

- the scenario is bounded by ``asyncio.wait_for`` so a stalled bridge fails with a timeout
  instead of hanging (the loop always has that timer, so it never blocks forever in ``select``);
- every exception the loop reports through its exception handler is collected and fails the test
  (a loop-side ``RuntimeError: Cannot enter into task`` surfaces there, not in the scenario);
- the bridge must end with no coroutine in flight and ``collisions == 0``.

The fixtures that bind it to a loop kind are in ``tests/bridge/conftest.py``. Imported by the
test modules as ``from bridgeutil import ...`` (pytest puts ``tests/bridge`` on ``sys.path``).
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import ferrule

T = TypeVar("T")

#: ``FERRULE_TEST_TASK_IMPL=bridge`` runs every scenario with the bridge's task factory on its
#: loop (as ``--task-impl bridge`` does for the servers the tests start).
TASK_FACTORY = os.environ.get("FERRULE_TEST_TASK_IMPL") == "bridge"

#: Default bound for one scenario, well above what any scenario needs when the bridge works.
SCENARIO_TIMEOUT = 10.0
#: How soon a wake-up or a cancellation must take effect: milliseconds when the bridge works
#: (a second or so on a loaded machine), half the 5 s suspension the scenarios await when it
#: misses one. A guard that ends a hang waits longer: :data:`GUARD`.
PROMPT = 2.5
#: How long a scenario's own guard waits for what must come at once before it fails.
GUARD = 10.0

#: Counters every bridge reports in ``bridge.counters()``; ``_ferrule.COUNTERS`` must name each.
REQUIRED_COUNTERS = (
    "spawned",
    "completed",
    "drives",
    "steps",
    "gil_acquisitions",
    "handoffs",
    "wakes",
    "collisions",
    "inline_completions",
    "future_fast_path",
    "resumes_inline",
    "deferred_resumes",
    "budget_exhaustions",
    "tasks_made",
    "first_drives_after",
)

Main = Callable[["ferrule.Bridge"], Awaitable[Any]]


@dataclass
class Outcome:
    """What a bridge scenario produced: its result, the final counters and the bridge mode."""

    result: Any
    counters: dict[str, int]
    mode: str


def expected_mode(loop_kind: str) -> str:
    """The bridge mode documented for this loop kind (the same on every interpreter)."""
    return "loop-only" if loop_kind == "uvloop" else "gated"


def drives_first_off_loop(mode: str) -> bool:
    """Whether ``bridge.spawn`` makes its first drive on a tokio thread in this mode."""
    return mode == "gated"


class MisplacedFirstDrive(AssertionError):
    """A scenario's first drive ran on the other thread than ``spawn`` puts it in its mode."""


def check_first_drive_thread(first_on_loop_thread: bool, mode: str) -> None:
    """Fail unless a coroutine's first drive ran where ``spawn`` puts it in this mode (a tokio
    thread in gated mode): a cross-thread scenario that ran on the loop thread did
    not exercise what it is meant to test."""
    off_loop = drives_first_off_loop(mode)
    if first_on_loop_thread is off_loop:
        raise MisplacedFirstDrive(
            f"{mode} mode: the first drive ran on the "
            f"{'loop' if first_on_loop_thread else 'tokio'} thread"
        )


def exercised(scenario: Callable[[], T], attempts: int = 5) -> T:
    """Runs ``scenario`` (which calls :func:`check_first_drive_thread`) until its first drive
    lands where ``spawn`` puts it, at most ``attempts`` times. In gated mode a tokio thread
    drives first only if the loop thread is in ``select`` by then; on a loaded machine the loop
    thread can be preempted before it gets there, and the drive is handed back to it (seen once
    in ten loaded runs). Such a run tests nothing, so it runs again; one that never lands fails."""
    for _ in range(attempts - 1):
        try:
            return scenario()
        except MisplacedFirstDrive:
            pass
    return scenario()


def on_loop_thread() -> bool:
    """The loop always runs on the main thread (``ferrule.drive`` runs it there)."""
    return threading.current_thread() is threading.main_thread()


def describe_loop_errors(errors: list[dict[str, Any]]) -> str:
    lines = []
    for context in errors:
        exc = context.get("exception")
        lines.append(f"- {context.get('message')}: {exc!r}")
    return "the loop reported errors:\n" + "\n".join(lines)


def run_bridge(
    main: Main,
    *,
    loop: str = "asyncio",
    budget: int = 128,
    worker_threads: int = 1,
    timeout: float = SCENARIO_TIMEOUT,
    task_factory: bool = TASK_FACTORY,
) -> Outcome:
    """Run ``main(bridge)`` on a new loop via ``ferrule.drive``; check the bridge ended clean.
    ``task_factory=False`` keeps the scenario's own tasks asyncio's, for exact counts of the
    bridge's work on what it was given."""
    loop_errors: list[dict[str, Any]] = []

    async def guarded(bridge: ferrule.Bridge) -> Outcome:
        running = asyncio.get_running_loop()
        running.set_exception_handler(lambda _loop, context: loop_errors.append(context))
        result = await asyncio.wait_for(main(bridge), timeout)
        counters = await settled_counters(bridge)
        return Outcome(result, counters, bridge.mode)

    try:
        outcome = ferrule.drive(
            guarded,
            loop=loop,
            budget=budget,
            worker_threads=worker_threads,
            task_factory=task_factory,
        )
    except BaseException as exc:
        if loop_errors:
            exc.add_note(describe_loop_errors(loop_errors))
        raise
    assert not loop_errors, describe_loop_errors(loop_errors)
    assert outcome.counters["collisions"] == 0, outcome.counters
    return outcome


async def wait_until(
    predicate: Callable[[], bool],
    *,
    timeout: float = GUARD,
    interval: float = 0.001,
    what: str = "the condition",
) -> None:
    """Poll ``predicate`` on the loop until it holds; fail (never hang) after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(interval)


async def settled_counters(bridge: ferrule.Bridge) -> dict[str, int]:
    """Counters once every coroutine has finished and the driver's bookkeeping has caught up."""
    await wait_until(lambda: bridge.in_flight == 0, what="bridge.in_flight to drop to 0")
    await asyncio.sleep(0.01)
    return bridge.counters()


async def wait_for_marks(marks: list[Any], count: int = 1, *, settle: float = 0.02) -> None:
    """Wait until driven coroutines appended ``count`` marks (each just before it suspends),
    then give the drives that appended them time to reach their suspension point."""
    await wait_until(lambda: len(marks) >= count, what=f"{count} coroutine(s) to reach a mark")
    await asyncio.sleep(settle)


class YieldDone:
    """Awaitable that hands the driver an already-resolved asyncio future.

    ``asyncio.Future.__await__`` never yields a done future, so this mimics it for a future
    that is done by the time the driver classifies it (the driver's fast path: continue
    without suspending). Plain asyncio tasks accept it too.
    """

    def __init__(self, value: Any) -> None:
        self.future = asyncio.get_running_loop().create_future()
        self.future.set_result(value)

    def __await__(self) -> Any:
        self.future._asyncio_future_blocking = True
        yield self.future
        return self.future.result()


async def child_value(value: Any) -> Any:
    """Body of a child asyncio task: returns ``value`` after one loop iteration."""
    await asyncio.sleep(0)
    return value


def counter_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """Per-counter difference ``after - before``."""
    return {name: after[name] - before.get(name, 0) for name in after}


async def gather_bounded(futures: list[Awaitable[Any]], timeout: float = 5.0) -> list[Any]:
    """``asyncio.gather`` under a timeout, so a future that never resolves fails the test."""
    return await asyncio.wait_for(asyncio.gather(*futures), timeout)
