"""The driver: where drives happen, the step budget, yields, results and exceptions."""

from __future__ import annotations

import asyncio
from typing import Any

import ferrule
import pytest
from bridgeutil import (
    YieldDone,
    counter_delta,
    drives_first_off_loop,
    gather_bounded,
    on_loop_thread,
    run_bridge,
    settled_counters,
    wait_for_marks,
    wait_until,
)


async def await_done_futures(count: int) -> int:
    """Hand the driver ``count`` already-resolved asyncio futures; return their values' sum."""
    total = 0
    for i in range(count):
        total += await YieldDone(i)
    return total


def test_spawn_drives_first_off_loop_and_spawn_on_loop_on_the_loop_thread(run) -> None:
    """``spawn`` makes a coroutine's first drive on a tokio thread (gated mode; on
    the loop thread in loop-only mode); ``spawn_on_loop`` makes it on the loop thread, in the
    loop's next iteration (not inside the call).

    This is the design's GIL-relay saving: a spawn whose first drive went through the loop
    thread would cost an extra GIL hand-off per request; a spawn_on_loop that drove inside the
    call would nest two entered tasks, one that drove on a tokio thread would break callers
    that rely on loop-thread execution.
    """
    started: list[str] = []

    async def where() -> bool:
        started.append("started")
        return on_loop_thread()

    async def main(bridge: ferrule.Bridge) -> None:
        future = bridge.spawn_on_loop(where())
        assert started == [], "spawn_on_loop drove inside the call"
        assert await asyncio.wait_for(future, 2) is True
        spawned_on_loop_thread = await asyncio.wait_for(bridge.spawn(where()), 2)
        assert spawned_on_loop_thread == (not drives_first_off_loop(bridge.mode)), bridge.mode

    run(main)


def test_bridge_properties(run) -> None:
    """``loop``, ``budget`` and ``in_flight`` report the loop the bridge serves, the budget it
    was given and the coroutines it holds (those suspended count until they finish).

    ``in_flight`` is how tests and the server see leaks: a driver that dropped suspended
    coroutines, or never decremented it, fails the counts here.
    """
    marks: list[int] = []

    async def suspended(gate: asyncio.Future[None], i: int) -> int:
        marks.append(i)
        await gate
        return i

    async def main(bridge: ferrule.Bridge) -> None:
        assert bridge.loop is asyncio.get_running_loop()
        assert bridge.budget == 7
        assert bridge.in_flight == 0
        gate = asyncio.get_running_loop().create_future()
        futures = [bridge.spawn(suspended(gate, i)) for i in range(5)]
        await wait_for_marks(marks, 5)
        assert bridge.in_flight == 5
        gate.set_result(None)
        assert await gather_bounded(futures) == list(range(5))
        await wait_until(lambda: bridge.in_flight == 0, what="in_flight to drop")

    run(main, budget=7)


def test_default_budget_is_128() -> None:
    """Without a ``budget`` argument the bridge allows 128 sends per drive (the documented
    default the benchmarks assume)."""

    async def main(bridge: ferrule.Bridge) -> int:
        return bridge.budget

    assert ferrule.drive(main) == 128


@pytest.mark.parametrize("spawn", ["spawn", "spawn_on_loop"])
def test_budget_exhaustion_reschedules_and_completes(run, spawn) -> None:
    """With a budget of 8, a coroutine that awaits 200 already-resolved asyncio futures is cut
    into several drives (``budget_exhaustions`` grows), keeps every value (the sum is right),
    takes the done-future fast path each time, and completes; on the loop thread (spawn_on_loop)
    the rescheduled drive goes through ``call_soon``.

    Without the budget one coroutine could hold the GIL and the loop indefinitely; a
    reschedule that lost the value or the coroutine would give a wrong sum or never finish.
    """

    async def main(bridge: ferrule.Bridge) -> None:
        before = await settled_counters(bridge)
        future = getattr(bridge, spawn)(await_done_futures(200))
        assert await asyncio.wait_for(future, 3) == sum(range(200))
        delta = counter_delta(before, await settled_counters(bridge))
        assert delta["budget_exhaustions"] >= 200 // 8 - 1, delta
        assert delta["future_fast_path"] >= 200, delta
        assert delta["drives"] >= 200 // 8, delta
        assert delta["completed"] == 1, delta

    run(main, budget=8)


def test_driver_is_iterative_not_recursive(run) -> None:
    """With a budget larger than the work, one drive continues through 20,000 already-resolved
    futures in a row and completes.

    A driver that recursed into itself for each done future (instead of looping) overflows
    the native stack: the process crashes (faulthandler shows this test) or raises
    RecursionError.
    """

    async def main(bridge: ferrule.Bridge) -> None:
        future = bridge.spawn(await_done_futures(20_000))
        assert await asyncio.wait_for(future, 5) == sum(range(20_000))

    run(main, budget=1_000_000)


def test_bare_yield_lets_the_loop_run_between_steps(run) -> None:
    """Each bare yield (``await asyncio.sleep(0)``) of a driven coroutine goes back through the
    loop: a loop task that ticks on every iteration advances between the coroutine's yields.

    A driver that treated a bare yield as "send again now" would spin through all 50 yields
    in one drive, starving the loop; the recorded ticks would not advance.
    """
    ticks = [0]
    stop: list[bool] = []

    async def ticker() -> None:
        while not stop:
            ticks[0] += 1
            await asyncio.sleep(0)

    async def driven() -> list[int]:
        seen = []
        for _ in range(50):
            await asyncio.sleep(0)
            seen.append(ticks[0])
        return seen

    async def main(bridge: ferrule.Bridge) -> None:
        ticking = asyncio.ensure_future(ticker())
        try:
            seen = await asyncio.wait_for(bridge.spawn(driven()), 3)
        finally:
            stop.append(True)
            await asyncio.wait_for(ticking, 2)
        assert seen == sorted(seen)
        assert seen[-1] - seen[0] >= 25, seen

    run(main)


def test_a_callback_scheduled_before_a_bare_yield_runs_before_the_next_step(run) -> None:
    """A coroutine that schedules a callback and then yields (``loop.call_soon(cb)`` then
    ``await asyncio.sleep(0)``, the usual way to let a callback run) finds it run when it goes
    on, however many other coroutines yield in the same loop iteration, as under a ``Task``.

    Seen failing with the yields of one iteration resumed together behind one ``call_soon``:
    a coroutine that joined a batch already scheduled went on before its own callback ran, in
    49 of 50 coroutines.
    """

    async def schedules_then_yields(i: int) -> bool:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0)  # every coroutine now steps from the loop, in one iteration
        ran: list[int] = []
        loop.call_soon(ran.append, i)
        await asyncio.sleep(0)
        return ran == [i]

    async def main(bridge: ferrule.Bridge) -> None:
        futures = [bridge.spawn_on_loop(schedules_then_yields(i)) for i in range(50)]
        results = await gather_bounded(futures)
        assert results.count(False) == 0, f"{results.count(False)} of 50 went on too early"

    run(main)


def test_bare_yield_with_nothing_else_ready_stays_on_the_tokio_thread(run) -> None:
    """In gated mode a coroutine driven on a tokio thread that yields bare while the loop has
    nothing ready (and nothing queued for the loop thread) goes on in the same drive: the loop
    would run it next anyway, so handing it over only costs a wake-up and a GIL hand-off (that
    relay made ``sleep(0)`` x3 handlers 40% slower than hello world). The test above shows a
    bare yield still lets ready loop work run first.

    Seen failing before the change: every step after the first ran on the loop thread.
    """

    async def driven() -> list[bool]:
        where = [on_loop_thread()]
        for _ in range(5):
            await asyncio.sleep(0)
            where.append(on_loop_thread())
        return where

    async def main(bridge: ferrule.Bridge) -> None:
        where = await asyncio.wait_for(bridge.spawn(driven()), 3)
        expected = not drives_first_off_loop(bridge.mode)
        assert where == [expected] * 6, (bridge.mode, where)

    run(main)


@pytest.mark.parametrize("where", ["first-drive", "after-native", "after-asyncio-future"])
def test_exceptions_propagate_to_the_spawn_future(run, where) -> None:
    """An exception raised by a driven coroutine (in its first drive, after a native await, or
    after an asyncio future resumed it on the loop thread) is the very exception object that
    awaiting the spawn future raises, from spawn and from spawn_on_loop.

    A driver that swallowed the error would resolve the future with None (or never); one that
    converted it would raise another type or a copy.
    """
    raised: list[BaseException] = []

    async def failing(bridge: ferrule.Bridge, gate: asyncio.Future[None]) -> None:
        if where == "after-native":
            await bridge.sleep(0.001)
        elif where == "after-asyncio-future":
            await gate
        error = LookupError(f"failed {where}")
        raised.append(error)
        raise error

    async def main(bridge: ferrule.Bridge) -> None:
        gate = asyncio.get_running_loop().create_future()
        futures = [bridge.spawn(failing(bridge, gate)), bridge.spawn_on_loop(failing(bridge, gate))]
        await asyncio.sleep(0.01)
        gate.set_result(None)
        for index, future in enumerate(futures):
            with pytest.raises(LookupError, match=f"failed {where}") as caught:
                await asyncio.wait_for(future, 2)
            assert any(caught.value is error for error in raised), index

    run(main)


def test_results_are_passed_through_unchanged(run) -> None:
    """Whatever a coroutine returns (None, a tuple, an arbitrary object) is the spawn future's
    result, the same object.

    ``StopIteration.value`` must be forwarded as is; a driver that returned the last sent
    value or a converted copy fails the identity checks.
    """
    marker = object()

    async def returns(bridge: ferrule.Bridge, value: Any) -> Any:
        await bridge.ready(None)
        return value

    async def main(bridge: ferrule.Bridge) -> None:
        values = [None, (1, "two"), marker]
        results = await gather_bounded([bridge.spawn(returns(bridge, v)) for v in values])
        assert all(r is v for r, v in zip(results, values, strict=True))

    run(main)


def test_close_is_idempotent() -> None:
    """``Bridge.close()`` may be called by user code and again by ``ferrule.drive``'s cleanup
    without error, once every coroutine has finished.

    A second close that tried to stop the already stopped tokio runtime would panic or raise.
    """

    async def driven(bridge: ferrule.Bridge) -> str:
        return await bridge.sleep(0.001, "slept")

    async def main(bridge: ferrule.Bridge) -> str:
        result = await asyncio.wait_for(bridge.spawn(driven(bridge)), 2)
        await wait_until(lambda: bridge.in_flight == 0, what="in_flight to drop")
        bridge.close()
        bridge.close()
        return result

    assert ferrule.drive(main) == "slept"


def test_consecutive_bridges_each_work() -> None:
    """Two ``ferrule.drive`` calls in a row, each with a new loop and bridge, both work.

    Left-over global state from the first bridge (a runtime handle, a patched selector, the
    tokio runtime) would break the second run.
    """

    async def driven(bridge: ferrule.Bridge) -> str:
        await asyncio.sleep(0)
        return await bridge.sleep(0.001, "ok")

    async def main(bridge: ferrule.Bridge) -> str:
        return await asyncio.wait_for(bridge.spawn(driven(bridge)), 2)

    assert run_bridge(main).result == "ok"
    assert run_bridge(main).result == "ok"
