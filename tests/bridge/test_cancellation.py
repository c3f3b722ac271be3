"""Cancellation and timeouts inside driven coroutines behave as in an asyncio task.

Edge-triggered delivery (catch, then await again) is ``test_i8_...`` in the invariants file.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import anyio
import ferrule
import pytest
from bridgeutil import GUARD, PROMPT, wait_for_marks

#: What a coroutine can be suspended on when the cancellation arrives.
SUSPENSIONS = ["native", "asyncio-future", "asyncio-sleep"]


def suspend_on(kind: str, bridge: ferrule.Bridge, seconds: float) -> Any:
    """An awaitable of the given kind that stays pending for ``seconds`` (or forever)."""
    if kind == "native":
        return bridge.sleep(seconds)
    if kind == "asyncio-future":
        return asyncio.get_running_loop().create_future()
    return asyncio.sleep(seconds)


@pytest.mark.parametrize("suspension", SUSPENSIONS)
def test_asyncio_timeout_raises_timeout_error_in_a_driven_coroutine(run, suspension) -> None:
    """``async with asyncio.timeout(0.05)`` around an await that would last 5 s raises
    TimeoutError after about 0.05 s; the task's cancellation count is back to 0 afterwards and
    the coroutine keeps running normally.

    ``asyncio.timeout`` cancels ``current_task()`` from a loop timer and then relies on
    ``cancelling()``/``uncancel()`` to turn the CancelledError into TimeoutError: a task object
    that does not forward ``cancel`` to the awaited thing leaves the coroutine asleep for 5 s;
    a count that is not decremented turns the TimeoutError into CancelledError.
    """

    async def driven(bridge: ferrule.Bridge) -> str:
        started = time.monotonic()
        try:
            async with asyncio.timeout(0.05):
                await suspend_on(suspension, bridge, 5)
        except TimeoutError:
            elapsed = time.monotonic() - started
            assert elapsed < PROMPT, f"timed out only after {elapsed:.3f}s"
        else:
            return "no timeout"
        assert asyncio.current_task().cancelling() == 0
        await bridge.sleep(0.001)
        await asyncio.sleep(0)
        return "timed out"

    async def main(bridge: ferrule.Bridge) -> None:
        futures = [bridge.spawn(driven(bridge)) for _ in range(5)]
        futures.append(bridge.spawn_on_loop(driven(bridge)))
        results = await asyncio.wait_for(asyncio.gather(*futures), GUARD)
        assert results == ["timed out"] * 6

    run(main)


def test_asyncio_wait_for_times_out_in_a_driven_coroutine(run) -> None:
    """``asyncio.wait_for(bridge.sleep(5), 0.05)`` inside a driven coroutine raises TimeoutError
    promptly and cancels the native awaitable.

    ``wait_for`` wraps the awaitable with ``ensure_future`` and cancels it on timeout: a
    NativeFuture that is not an asyncio-compatible future makes ``ensure_future`` raise
    TypeError, and one whose ``cancel`` does nothing keeps the wait going for 5 s.
    """

    async def driven(bridge: ferrule.Bridge) -> bool:
        native = bridge.sleep(5)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(native, 0.05)
        assert time.monotonic() - started < PROMPT
        return native.cancelled()

    async def main(bridge: ferrule.Bridge) -> None:
        assert await asyncio.wait_for(bridge.spawn(driven(bridge)), GUARD) is True

    run(main)


@pytest.mark.parametrize("suspension", SUSPENSIONS)
def test_cancel_from_outside_delivers_cancelled_error(run, suspension) -> None:
    """``task.cancel()`` called from another task while the coroutine is suspended raises
    CancelledError at its await (its ``finally`` runs) and the spawn future ends cancelled (or
    holding the CancelledError).

    If the task object did not forward the cancellation to what the coroutine awaits (a native
    timer, an asyncio future or timer), the coroutine would sleep on for 5 s and the spawn
    future would resolve with "not cancelled" or time out.
    """
    tasks: list[asyncio.Task[Any]] = []
    cleanups: list[str] = []

    async def driven(bridge: ferrule.Bridge) -> str:
        tasks.append(asyncio.current_task())
        try:
            await suspend_on(suspension, bridge, 5)
        finally:
            cleanups.append("finally")
        return "not cancelled"

    async def main(bridge: ferrule.Bridge) -> None:
        future = bridge.spawn(driven(bridge))
        await wait_for_marks(tasks)
        assert tasks[0].cancel() is True
        done, _ = await asyncio.wait([future], timeout=2)
        assert done, "the cancelled coroutine did not finish"
        assert future.cancelled() or isinstance(future.exception(), asyncio.CancelledError), (
            future.result()
        )
        assert cleanups == ["finally"]

    run(main)


def test_self_cancel_is_delivered_at_the_next_await(run) -> None:
    """A coroutine that cancels its own task gets CancelledError at its next await (a bare
    yield), not before, and may carry on after catching it.

    Cancelling ``current_task()`` from inside only sets a flag; if the driver did not throw
    CancelledError into the coroutine at its next suspension, the ``except`` never runs and the
    coroutine returns "not delivered".
    """

    async def driven(bridge: ferrule.Bridge) -> str:
        asyncio.current_task().cancel()
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError:
            pass
        else:
            return "not delivered"
        await bridge.sleep(0.001)
        return "delivered"

    async def main(bridge: ferrule.Bridge) -> None:
        futures = [bridge.spawn(driven(bridge)), bridge.spawn_on_loop(driven(bridge))]
        assert await asyncio.wait_for(asyncio.gather(*futures), GUARD) == ["delivered"] * 2

    run(main)


def test_anyio_move_on_after_cancels_a_native_await(run) -> None:
    """``anyio.move_on_after(0.05)`` around ``bridge.sleep(5)`` inside a driven coroutine exits
    after about 0.05 s with ``cancelled_caught``; the coroutine then continues.

    anyio delivers the cancellation with ``task.cancel()`` on the host task and skips tasks
    whose ``done()`` is True or whose ``_must_cancel`` is set: a task object that reports done
    while its coroutine runs (an eager or stray sentinel step) is never cancelled, and the
    scope lasts the full 5 s.
    """

    async def driven(bridge: ferrule.Bridge) -> tuple[bool, str]:
        started = time.monotonic()
        with anyio.move_on_after(0.05) as scope:
            await bridge.sleep(5)
        assert time.monotonic() - started < PROMPT
        return scope.cancelled_caught, await bridge.sleep(0.001, "after")

    async def main(bridge: ferrule.Bridge) -> None:
        futures = [bridge.spawn(driven(bridge)) for _ in range(5)]
        futures.append(bridge.spawn_on_loop(driven(bridge)))
        results = await asyncio.wait_for(asyncio.gather(*futures), GUARD)
        assert results == [(True, "after")] * 6

    run(main)


def test_anyio_fail_after_raises_timeout_error(run) -> None:
    """``anyio.fail_after(0.05)`` around an asyncio future that never resolves raises
    TimeoutError inside the driven coroutine, which the spawn future then carries.

    Needs the same cancellation delivery as ``move_on_after``; without it the coroutine waits
    forever and the guard times out.
    """

    async def driven() -> None:
        with anyio.fail_after(0.05):
            await asyncio.get_running_loop().create_future()

    async def main(bridge: ferrule.Bridge) -> None:
        started = time.monotonic()
        future = bridge.spawn(driven())
        done, _ = await asyncio.wait([future], timeout=GUARD)
        assert done, "fail_after never interrupted the coroutine"
        assert time.monotonic() - started < PROMPT
        with pytest.raises(TimeoutError):
            future.result()

    run(main)


def test_anyio_cancel_scope_cancelled_from_inside(run) -> None:
    """A CancelScope cancelled by the coroutine itself ends its next await (a native sleep)
    at once, and the code after the scope runs.

    ``CancelScope.cancel()`` schedules delivery with ``call_soon`` on the current thread and
    cancels ``current_task()``; with a missing wake-up or an ignored cancel the scope lasts 5 s.
    """

    async def driven(bridge: ferrule.Bridge) -> str:
        started = time.monotonic()
        with anyio.CancelScope() as scope:
            scope.cancel()
            await bridge.sleep(5)
        assert scope.cancelled_caught
        assert time.monotonic() - started < PROMPT
        return "after scope"

    async def main(bridge: ferrule.Bridge) -> None:
        assert await asyncio.wait_for(bridge.spawn(driven(bridge)), GUARD) == "after scope"

    run(main)


def test_cancelling_the_spawn_future_cancels_the_coroutine(run) -> None:
    """``asyncio.wait_for(bridge.spawn(coro), 0.05)`` timing out cancels ``coro`` itself, as
    cancelling a Task cancels its coroutine: the coroutine sees CancelledError at its await and
    the bridge holds nothing afterwards.

    Seen failing: before the spawn future's done callback forwarded cancellation, the coroutine
    slept on for its full 5 s and ``in_flight`` stayed at 1 after the timeout. The timeout
    starts once the coroutine has: on a loaded machine its first drive came later than 50 ms,
    and a coroutine closed before its first step sees no CancelledError.
    """

    async def main(bridge: ferrule.Bridge) -> list[str]:
        seen: list[str] = []

        async def sleeps_long() -> None:
            seen.append("started")
            try:
                await bridge.sleep(5)
            except asyncio.CancelledError:
                seen.append("cancelled")
                raise

        spawned = bridge.spawn(sleeps_long())
        deadline = time.monotonic() + 20
        while not seen and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(spawned, 0.05)
        while bridge.in_flight and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert bridge.in_flight == 0
        return seen

    assert run(main).result == ["started", "cancelled"]
