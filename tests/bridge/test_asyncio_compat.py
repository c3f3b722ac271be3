"""What handler code relies on inside a driven coroutine: the current task, sniffio, anyio and
asyncio's synchronisation primitives shared between driven coroutines."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import ferrule
import sniffio
from bridgeutil import child_value, gather_bounded


def test_current_task_is_one_object_for_the_coroutines_whole_life(run) -> None:
    """``asyncio.current_task()`` inside a driven coroutine is never None and is the same
    object before and after a bare yield, a native awaitable, a pending asyncio future (resumed
    on the loop thread) and a resolved native awaitable; concurrent coroutines have distinct
    tasks.

    Without the ``_enter_task`` bracket around each drive ``current_task()`` is None on the tokio
    thread; a task object made per drive (instead of per coroutine) differs after each
    resumption, which breaks every library that keys state by task (anyio cancel scopes,
    limiters).
    """

    async def driven(bridge: ferrule.Bridge, gate: asyncio.Future[None]) -> Any:
        first = asyncio.current_task()
        assert first is not None
        for awaitable in (asyncio.sleep(0), bridge.sleep(0.001), gate, bridge.ready(None)):
            await awaitable
            assert asyncio.current_task() is first
        return first

    async def main(bridge: ferrule.Bridge) -> None:
        gate = asyncio.get_running_loop().create_future()
        futures = [bridge.spawn(driven(bridge, gate)) for _ in range(10)]
        futures += [bridge.spawn_on_loop(driven(bridge, gate)) for _ in range(10)]
        await asyncio.sleep(0.01)
        gate.set_result(None)
        tasks = await gather_bounded(futures)
        assert len({id(task) for task in tasks}) == len(tasks)
        assert asyncio.current_task() not in tasks

    run(main)


def test_sniffio_detects_asyncio_on_both_threads(run) -> None:
    """``sniffio.current_async_library()`` returns ``"asyncio"`` in a coroutine's first drive
    (tokio thread) and after it was resumed on the loop thread.

    sniffio answers "asyncio" only when ``asyncio.current_task()`` is not None: without a task
    entered around the drive it raises ``AsyncLibraryNotFoundError`` and anyio cannot start.
    """

    async def driven(bridge: ferrule.Bridge, gate: asyncio.Future[None]) -> tuple[str, ...]:
        first = sniffio.current_async_library()
        await bridge.sleep(0.001)
        second = sniffio.current_async_library()
        await gate
        return first, second, sniffio.current_async_library()

    async def main(bridge: ferrule.Bridge) -> None:
        gate = asyncio.get_running_loop().create_future()
        futures = [bridge.spawn(driven(bridge, gate)) for _ in range(5)]
        await asyncio.sleep(0.02)
        gate.set_result(None)
        assert await gather_bounded(futures) == [("asyncio",) * 3] * 5

    run(main)


def test_anyio_task_group_runs_workers_and_propagates_errors(run) -> None:
    """An anyio TaskGroup inside a driven coroutine runs its workers (asyncio tasks that
    themselves await native awaitables) to completion, and a failing worker cancels its
    siblings and surfaces as an ExceptionGroup in the coroutine.

    A task group needs sniffio to see asyncio, the host task to stay the same object across
    the group's exit (otherwise "Attempted to exit cancel scope in a different task"), and
    cancellation to reach the host task while it waits.
    """

    async def worker(bridge: ferrule.Bridge, results: list[int], i: int) -> None:
        await bridge.sleep(0.001 * i)
        results.append(await child_value(i))

    async def failing(bridge: ferrule.Bridge) -> None:
        await bridge.sleep(0.001)
        raise ValueError("worker failed")

    async def sleeps_long(bridge: ferrule.Bridge) -> None:
        await bridge.sleep(5)

    async def driven(bridge: ferrule.Bridge) -> tuple[list[int], str]:
        results: list[int] = []
        async with anyio.create_task_group() as group:
            for i in range(5):
                group.start_soon(worker, bridge, results, i)
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(sleeps_long, bridge)
                group.start_soon(failing, bridge)
        except ExceptionGroup as error:
            message = str(error.exceptions[0])
        else:
            message = "no error"
        return sorted(results), message

    async def main(bridge: ferrule.Bridge) -> None:
        results = await gather_bounded([bridge.spawn(driven(bridge)) for _ in range(5)], 3)
        assert results == [([0, 1, 2, 3, 4], "worker failed")] * 5

    run(main)


def test_anyio_capacity_limiter_bounds_concurrency(run) -> None:
    """An anyio CapacityLimiter(3) shared by 30 driven coroutines admits at most 3 at a time,
    reaches 3, and ends with no borrowed tokens.

    The limiter records the borrowing task on acquire and checks it on release: a task object
    that changed across the awaits raises "this borrower isn't holding any of this
    CapacityLimiter's tokens"; waiters woken from a tokio thread without a loop wake-up stall
    until the guard times out.
    """
    state = {"inside": 0, "peak": 0}

    async def driven(bridge: ferrule.Bridge, limiter: anyio.CapacityLimiter, i: int) -> int:
        async with limiter:
            state["inside"] += 1
            state["peak"] = max(state["peak"], state["inside"])
            await bridge.sleep(0.002)
            await asyncio.sleep(0)
            state["inside"] -= 1
        return i

    async def main(bridge: ferrule.Bridge) -> None:
        limiter = anyio.CapacityLimiter(3)
        futures = [bridge.spawn(driven(bridge, limiter, i)) for i in range(30)]
        assert await gather_bounded(futures) == list(range(30))
        assert state["peak"] == 3
        assert limiter.borrowed_tokens == 0

    run(main)


def test_asyncio_lock_gives_mutual_exclusion_across_awaits(run) -> None:
    """An ``asyncio.Lock`` shared by 40 driven coroutines and 5 loop tasks, each holding it
    across a bare yield or a native awaitable, is never held by two at once and never stalls.

    Lock waiters are woken with ``call_soon`` from whichever thread releases: a release on a
    tokio thread without a loop wake-up stalls the next holder until the guard times out.
    """
    state: dict[str, Any] = {"holder": None, "count": 0}

    async def critical(lock: asyncio.Lock, pause: Any, who: str) -> None:
        for _ in range(5):
            async with lock:
                assert state["holder"] is None, f"{who} entered while {state['holder']} held it"
                state["holder"] = who
                await pause()
                state["holder"] = None
                state["count"] += 1

    async def main(bridge: ferrule.Bridge) -> None:
        lock = asyncio.Lock()
        futures = [
            bridge.spawn(critical(lock, lambda: bridge.sleep(0), f"driven-{i}")) for i in range(40)
        ]
        futures += [
            asyncio.ensure_future(critical(lock, lambda: asyncio.sleep(0), f"loop-{i}"))
            for i in range(5)
        ]
        await gather_bounded(futures)
        assert state["count"] == 45 * 5

    run(main)


def test_asyncio_semaphore_bounds_concurrency(run) -> None:
    """An ``asyncio.Semaphore(4)`` shared by 40 driven coroutines admits at most 4 at a time,
    reaches 4, and every coroutine gets through.

    A semaphore waiter woken from a tokio-thread release without a loop wake-up stalls until
    the guard times out.
    """
    state = {"inside": 0, "peak": 0}

    async def driven(bridge: ferrule.Bridge, semaphore: asyncio.Semaphore, i: int) -> int:
        async with semaphore:
            state["inside"] += 1
            state["peak"] = max(state["peak"], state["inside"])
            await bridge.sleep(0.002)
            state["inside"] -= 1
        return i

    async def main(bridge: ferrule.Bridge) -> None:
        semaphore = asyncio.Semaphore(4)
        futures = [bridge.spawn(driven(bridge, semaphore, i)) for i in range(40)]
        assert await gather_bounded(futures) == list(range(40))
        assert state["peak"] == 4

    run(main)


def test_asyncio_event_set_by_a_driven_coroutine_wakes_every_waiter(run) -> None:
    """50 driven coroutines wait on one ``asyncio.Event``; another driven coroutine sets it
    after a native sleep; every waiter returns.

    ``Event.set`` resolves 50 futures whose callbacks are queued on the setter's thread; a
    missing wake-up or a resume that assumed immediate callbacks leaves waiters stalled.
    """

    async def waiter(event: asyncio.Event, i: int) -> int:
        await event.wait()
        return i

    async def setter(bridge: ferrule.Bridge, event: asyncio.Event) -> str:
        await bridge.sleep(0.01)
        event.set()
        return "set"

    async def main(bridge: ferrule.Bridge) -> None:
        event = asyncio.Event()
        waiters = [bridge.spawn(waiter(event, i)) for i in range(50)]
        assert await gather_bounded(waiters + [bridge.spawn(setter(bridge, event))]) == [
            *range(50),
            "set",
        ]

    run(main)


def test_asyncio_condition_hands_each_item_to_one_consumer(run) -> None:
    """20 driven consumers wait on an ``asyncio.Condition`` for items that 4 driven producers
    append (with ``notify(1)``) between native sleeps: each item is consumed exactly once.

    ``Condition.wait`` releases and re-acquires the lock around a future woken from the
    producer's thread; a lost wake-up leaves a consumer parked until the guard times out.
    """
    items: list[int] = []

    async def consumer(condition: asyncio.Condition) -> int:
        async with condition:
            await condition.wait_for(lambda: bool(items))
            return items.pop(0)

    async def producer(bridge: ferrule.Bridge, condition: asyncio.Condition, base: int) -> None:
        for i in range(base, base + 5):
            await bridge.sleep(0.001)
            async with condition:
                items.append(i)
                condition.notify(1)

    async def main(bridge: ferrule.Bridge) -> None:
        condition = asyncio.Condition()
        consumers = [bridge.spawn(consumer(condition)) for _ in range(20)]
        producers = [bridge.spawn(producer(bridge, condition, 5 * p)) for p in range(4)]
        consumed = await gather_bounded(consumers)
        await gather_bounded(producers)
        assert sorted(consumed) == list(range(20))

    run(main)


def test_asyncio_queue_moves_every_item_through_a_small_buffer(run) -> None:
    """5 driven producers put 40 items each into an ``asyncio.Queue(maxsize=2)`` drained by 5
    driven consumers, so both ``put`` and ``get`` block constantly: every item arrives once.

    Each blocked put/get is a future resolved from the other side's thread; any missed wake-up
    stalls the pipeline until the guard times out.
    """
    per_producer = 40

    async def producer(bridge: ferrule.Bridge, queue: asyncio.Queue[int | None], p: int) -> None:
        for i in range(per_producer):
            await queue.put(p * per_producer + i)
            if i % 7 == 0:
                await bridge.sleep(0)

    async def consumer(queue: asyncio.Queue[int | None]) -> list[int]:
        received = []
        while (item := await queue.get()) is not None:
            received.append(item)
        return received

    async def main(bridge: ferrule.Bridge) -> None:
        queue: asyncio.Queue[int | None] = asyncio.Queue(maxsize=2)
        consumers = [bridge.spawn(consumer(queue)) for _ in range(5)]
        await gather_bounded([bridge.spawn(producer(bridge, queue, p)) for p in range(5)])
        for _ in consumers:
            await asyncio.wait_for(queue.put(None), 5)
        received = [item for batch in await gather_bounded(consumers) for item in batch]
        assert sorted(received) == list(range(5 * per_producer))

    run(main)


def test_current_task_get_coro_is_the_driven_coroutine(run) -> None:
    """``asyncio.current_task().get_coro()`` inside a driven coroutine is that coroutine, on every
    interpreter. anyio's ``get_current_task()`` (used by its memory streams, hence by Starlette's
    BaseHTTPMiddleware) asserts it is not None.

    Seen failing on 3.13 and 3.14: the per-coroutine task is eagerly started over a sentinel
    that finishes at once, after which ``get_coro()`` returned None, and every Starlette request
    through BaseHTTPMiddleware failed with "created TaskInfo from a completed Task".
    """

    async def main(bridge: ferrule.Bridge) -> bool:
        async def driven() -> bool:
            coro = asyncio.current_task().get_coro()
            info = anyio.get_current_task()
            return coro is not None and coro.cr_code is driven.__code__ and info.coro is coro

        return await bridge.spawn(driven())

    assert run(main).result is True
