"""Counters and mode: what the bridge reports to tests and benchmarks."""

from __future__ import annotations

import asyncio
import sys

import ferrule
import pytest
from bridgeutil import (
    REQUIRED_COUNTERS,
    YieldDone,
    counter_delta,
    expected_mode,
    gather_bounded,
    run_bridge,
    settled_counters,
    wait_for_marks,
)


async def immediate() -> str:
    """Completes on its first drive without suspending."""
    return "now"


def test_counters_report_every_counter_and_reset(run) -> None:
    """``counters()`` returns non-negative ints for every name in ``COUNTERS`` (which includes
    every required counter) and ``reset_counters()`` sets them all back to 0.

    Benchmarks and these tests index the dict by name: a missing key is a KeyError there, a
    counter that ignores the reset skews every per-scenario measurement.
    """

    async def main(bridge: ferrule.Bridge) -> None:
        await gather_bounded([bridge.spawn(immediate()) for _ in range(3)])
        counters = await settled_counters(bridge)
        assert set(counters) == set(ferrule.COUNTERS)
        assert set(REQUIRED_COUNTERS) <= set(counters)
        assert all(isinstance(v, int) and v >= 0 for v in counters.values()), counters
        assert counters["spawned"] >= 3 and counters["completed"] >= 3
        bridge.reset_counters()
        assert all(v == 0 for v in bridge.counters().values()), bridge.counters()

    run(main)


def test_mode_matches_loop_and_python_version(run, loop_kind) -> None:
    """``bridge.mode`` is "gated" on asyncio's selector loop and "loop-only" on uvloop, on every
    interpreter.

    The mode decides whether tokio threads may drive at all; a wrong mode on uvloop (which has
    no selector to gate) would let tokio threads collide with the loop thread. Seen failing on
    3.14 when it had a "per-thread" mode letting tokio threads drive on uvloop: 26 tests timed
    out, because libuv calls (call_soon, call_later) made off the loop thread never woke it.
    """

    async def main(bridge: ferrule.Bridge) -> str:
        return bridge.mode

    assert run(main).result == expected_mode(loop_kind)


def test_task_path_matches_python_version(run) -> None:
    """``bridge.task_path`` names how the interpreter gets a task with no ``__step`` queued:
    popping the sentinel's step on 3.11, ``eager_start`` on 3.12/3.13, eager start with the
    per-thread running loop on 3.14+.

    Using eager start on 3.11 (no such argument) raises TypeError at the first spawn; popping on
    3.12+ would remove an unrelated handle from ``_ready``.
    """

    async def main(bridge: ferrule.Bridge) -> str:
        return bridge.task_path

    if sys.version_info >= (3, 14):
        expected = "eager-start-per-thread"
    elif sys.version_info >= (3, 12):
        expected = "eager-start"
    else:
        expected = "pop-sentinel-step"
    assert run(main).result == expected


def test_spawned_and_completed_count_every_coroutine(run) -> None:
    """After 100 coroutines of mixed shapes (inline, native sleep, bare yield, failing) have
    finished, ``spawned`` and ``completed`` each grew by exactly 100 and ``in_flight`` is 0.

    A coroutine counted twice, or one that errors and is never counted as completed, shows
    here; it is how leaks are measured under load.
    """

    async def shaped(bridge: ferrule.Bridge, i: int) -> int:
        if i % 4 == 1:
            await bridge.sleep(0.001)
        elif i % 4 == 2:
            await asyncio.sleep(0)
        elif i % 4 == 3:
            raise ValueError(i)
        return i

    async def main(bridge: ferrule.Bridge) -> None:
        before = await settled_counters(bridge)
        futures = [bridge.spawn(shaped(bridge, i)) for i in range(100)]
        await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 5)
        delta = counter_delta(before, await settled_counters(bridge))
        assert delta["spawned"] == 100 and delta["completed"] == 100, delta
        assert bridge.in_flight == 0

    run(main)


def test_inline_completion_is_counted(run) -> None:
    """A coroutine that completes on its first drive without suspending counts one spawn, one
    drive, one completion and one inline completion, with no resume.

    This is the cheapest path the design promises (no suspension, no second GIL acquisition);
    counting it as a resume or as two drives would hide a regression of that path.
    """

    async def main(bridge: ferrule.Bridge) -> None:
        before = await settled_counters(bridge)
        assert await asyncio.wait_for(bridge.spawn(immediate()), 2) == "now"
        delta = counter_delta(before, await settled_counters(bridge))
        for name, expected in [
            ("spawned", 1),
            ("completed", 1),
            ("drives", 1),
            ("inline_completions", 1),
            ("resumes_inline", 0),
            ("deferred_resumes", 0),
        ]:
            assert delta[name] == expected, (name, delta)

    run(main, task_factory=False)  # counts the scenario's work alone


def test_done_future_fast_path_is_counted(run) -> None:
    """A coroutine handing the driver 3 already-resolved asyncio futures continues through
    them in its first drive: ``future_fast_path`` +3, and it still counts as an inline
    completion (it never suspended).

    Without the ``done()`` check the driver would attach a done callback to each resolved
    future and suspend: three resumes and four drives instead of one.
    """

    async def three_done() -> int:
        return await YieldDone(1) + await YieldDone(2) + await YieldDone(3)

    async def main(bridge: ferrule.Bridge) -> None:
        before = await settled_counters(bridge)
        assert await asyncio.wait_for(bridge.spawn(three_done()), 2) == 6
        delta = counter_delta(before, await settled_counters(bridge))
        assert delta["future_fast_path"] == 3, delta
        assert delta["inline_completions"] == 1, delta
        assert delta["drives"] == 1, delta

    run(main, task_factory=False)  # counts the scenario's work alone


def gated_only(mode: str) -> None:
    if mode != "gated":
        pytest.skip(f"exact GIL acquisition counts are specified for gated mode, not {mode}")


def test_inline_completion_costs_one_gil_acquisition() -> None:
    """Gated mode: a spawned coroutine that completes without suspending costs exactly one GIL
    acquisition (the tokio thread's drive, which also resolves the spawn future).

    The design's headline saving: a hand-off to the loop thread for the first drive, or a
    separate acquisition to resolve the future, would make it 2.
    """

    async def main(bridge: ferrule.Bridge) -> dict[str, int]:
        await asyncio.sleep(0.01)
        before = await settled_counters(bridge)
        assert await asyncio.wait_for(bridge.spawn(immediate()), 2) == "now"
        return counter_delta(before, await settled_counters(bridge))

    outcome = run_bridge(main, task_factory=False)
    gated_only(outcome.mode)
    delta = outcome.result
    assert delta["inline_completions"] == 1, delta
    assert delta["gil_acquisitions"] == 1, delta


def test_resume_by_pending_asyncio_future_costs_two_gil_acquisitions() -> None:
    """Gated mode: a coroutine that suspends on a pending asyncio future and is resumed by it
    costs exactly two GIL acquisitions: the first drive on a tokio thread, then the inline
    resume in the future's done callback on the loop thread (``resumes_inline`` +1).

    Resuming through a queue drained by another thread (or handing the continuation back to a
    tokio thread) would cost a third acquisition: the GIL relay the design removes.
    """
    marks: list[str] = []

    async def waits(gate: asyncio.Future[str]) -> str:
        marks.append("waiting")
        return await gate

    async def main(bridge: ferrule.Bridge) -> dict[str, int]:
        gate = asyncio.get_running_loop().create_future()
        before = await settled_counters(bridge)
        future = bridge.spawn(waits(gate))
        await wait_for_marks(marks)
        gate.set_result("resumed")
        assert await asyncio.wait_for(future, 2) == "resumed"
        return counter_delta(before, await settled_counters(bridge))

    outcome = run_bridge(main, task_factory=False)
    gated_only(outcome.mode)
    delta = outcome.result
    assert delta["resumes_inline"] == 1, delta
    assert delta["inline_completions"] == 0, delta
    assert delta["drives"] == 2, delta
    assert delta["gil_acquisitions"] == 2, delta


def test_trace_records_native_resumes_only_when_enabled(loop_kind) -> None:
    """``Bridge(loop, trace=True).trace()`` returns the histograms (one count per bucket of
    ``bucket_upper_ns``): a coroutine suspended on ``bridge.sleep`` records its resume in
    ``resume_wait``, and no wait is over the 5 s this test allows. Without ``trace=True`` it
    returns None. Seen failing: with the resume mark left out of ``NativeFuture::resolve`` on
    asyncio, where a tokio thread drives the resume at once (``resume_wait`` stayed empty)."""

    async def sleeper(bridge: ferrule.Bridge) -> None:
        await bridge.sleep(0.01)

    async def main() -> tuple[dict | None, dict | None]:
        loop = asyncio.get_running_loop()
        plain = ferrule.Bridge(loop)
        traced = ferrule.Bridge(loop, trace=True)
        try:
            await gather_bounded([traced.spawn(sleeper(traced)) for _ in range(10)])
            return plain.trace(), traced.trace()
        finally:
            plain.close()
            traced.close()

    if loop_kind == "uvloop":
        import uvloop

        plain, trace = uvloop.run(main())
    else:
        plain, trace = asyncio.run(main())
    assert plain is None
    assert trace is not None
    bounds = trace["bucket_upper_ns"]
    for name in ("gil_wait", "first_drive", "resume_wait"):
        assert len(trace[name]) == len(bounds), name
    assert sum(trace["resume_wait"]) == 10, trace["resume_wait"]
    longest = max(b for b, n in zip(bounds, trace["resume_wait"], strict=True) if n)
    assert longest < 5e9
