"""Invariants I8-I14 (listed in ``docs/design.md``): edge-triggered cancellation, coroutines kept
alive while suspended, signals on the main thread, the running loop on tokio threads, the
runtime found from loop-thread continuations, channel capacity over the drive budget, and no
inline drive on the loop thread while a tokio thread drives.

Each test is named after the invariant it protects. The harness (``bridgeutil.run_bridge``) also
fails any test whose loop reported an error or whose bridge counted a collision.
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import threading
import time
import weakref
from typing import Any

import anyio
import ferrule
import pytest
from bridgeutil import (
    GUARD,
    PROMPT,
    check_first_drive_thread,
    exercised,
    gather_bounded,
    on_loop_thread,
    wait_for_marks,
    wait_until,
)

# --- I8: cancellation is edge-triggered ------------------------------------------------------


def test_i8_cancelled_coroutine_can_catch_and_await_again(run) -> None:
    """I8: ``task.cancel()`` on a suspended coroutine's task delivers one CancelledError at its
    current await; the coroutine catches it and then awaits a bare yield, a native awaitable and
    an asyncio future normally.

    A level-triggered cancel (cancelling every later await as well) would make the awaits after
    the ``except`` raise CancelledError again, and the spawn future would end cancelled instead
    of returning "survived"; a cancel that is never delivered leaves the coroutine sleeping 5 s.
    """
    tasks: list[asyncio.Task[Any]] = []

    async def driven(bridge: ferrule.Bridge, later: asyncio.Future[str]) -> str:
        tasks.append(asyncio.current_task())
        try:
            await bridge.sleep(5)
        except asyncio.CancelledError:
            pass
        else:
            return "not cancelled"
        await asyncio.sleep(0)
        await bridge.sleep(0.001)
        await later
        return "survived"

    async def main(bridge: ferrule.Bridge) -> None:
        later = asyncio.get_running_loop().create_future()
        future = bridge.spawn(driven(bridge, later))
        await wait_for_marks(tasks)
        started = time.monotonic()
        assert tasks[0].cancel() is True
        await asyncio.sleep(0.01)
        later.set_result("later")
        assert await asyncio.wait_for(future, GUARD) == "survived"
        assert time.monotonic() - started < PROMPT

    run(main)


# --- I9: tasks are weakly referenced ---------------------------------------------------------


def test_i9_driver_keeps_a_suspended_coroutine_alive(run) -> None:
    """I9: a spawned coroutine whose only strong reference is the driver survives
    ``gc.collect()`` while suspended on ``bridge.sleep`` and then completes.

    asyncio keeps only weak references to tasks; if the driver did not hold the coroutine and
    its task, the collector would destroy them mid-flight: the weak references die, the result
    is never produced and ``in_flight`` never drops.
    """
    marks: list[str] = []
    results: list[str] = []
    task_refs: list[weakref.ref[asyncio.Task[Any]]] = []

    async def driven(bridge: ferrule.Bridge) -> None:
        task_refs.append(weakref.ref(asyncio.current_task()))
        marks.append("suspending")
        await bridge.sleep(0.2)
        results.append("completed")

    async def main(bridge: ferrule.Bridge) -> None:
        coroutine = driven(bridge)
        coroutine_ref = weakref.ref(coroutine)
        bridge.spawn(coroutine)
        del coroutine
        await wait_for_marks(marks)
        gc.collect()
        assert coroutine_ref() is not None, "the suspended coroutine was collected"
        assert task_refs[0]() is not None, "the coroutine's task was collected"
        assert bridge.in_flight == 1
        await wait_until(lambda: results == ["completed"], timeout=3.0, what="the coroutine")

    run(main)


def test_i9_future_cycle_is_not_collected_mid_flight(run) -> None:
    """I9: a coroutine suspended on an asyncio future that nothing else references (coroutine
    -> future -> resume callback -> coroutine is a pure cycle) survives ``gc.collect()`` and is
    resumed when the future is resolved through a weak reference.

    Without a strong reference held by the driver the whole cycle is garbage: the collector
    frees it and ``future_ref()`` returns None.
    """
    future_refs: list[weakref.ref[asyncio.Future[int]]] = []
    results: list[int] = []

    async def driven() -> None:
        future = asyncio.get_running_loop().create_future()
        future_refs.append(weakref.ref(future))
        results.append(await future)

    async def main(bridge: ferrule.Bridge) -> None:
        bridge.spawn(driven())
        await wait_for_marks(future_refs)
        gc.collect()
        future = future_refs[0]()
        assert future is not None, "the suspended coroutine and its future were collected"
        future.set_result(42)
        del future
        await wait_until(lambda: results == [42], what="the coroutine to resume")

    run(main)


# --- I10: signal handling requires the main thread -------------------------------------------


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="needs SIGUSR1")
def test_i10_signal_handlers_work_while_a_bridge_is_attached(run) -> None:
    """I10: the loop runs on the main thread, ``loop.add_signal_handler`` succeeds with a bridge
    attached, and a signal sent from a coroutine driven by the bridge reaches the handler while
    other coroutines are suspended.

    A loop moved off the main thread raises ``RuntimeError: set_wakeup_fd only works in main
    thread``; a loop thread blocked in Rust (not in its selector) never runs the handler, and
    the wait for it times out.
    """
    received: list[int] = []

    async def sleeper(bridge: ferrule.Bridge) -> str:
        await bridge.sleep(0.2)
        return "slept"

    async def sender() -> str:
        await asyncio.sleep(0)
        os.kill(os.getpid(), signal.SIGUSR1)
        return "sent"

    async def main(bridge: ferrule.Bridge) -> None:
        assert threading.current_thread() is threading.main_thread()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGUSR1, received.append, signal.SIGUSR1)
        try:
            sleepers = [bridge.spawn(sleeper(bridge)) for _ in range(10)]
            assert await asyncio.wait_for(bridge.spawn(sender()), 2) == "sent"
            await wait_until(lambda: received == [signal.SIGUSR1], what="the signal handler")
            assert await gather_bounded(sleepers) == ["slept"] * 10
        finally:
            loop.remove_signal_handler(signal.SIGUSR1)

    run(main)


# --- I11: _set_running_loop is thread-local --------------------------------------------------


def test_i11_running_loop_is_visible_on_the_tokio_thread(run) -> None:
    """I11: inside a coroutine driven on a tokio thread, ``asyncio.get_running_loop()`` (and
    everything built on it: ``create_future``, ``asyncio.sleep(0)``, ``get_event_loop``) returns
    the bridge's loop, before and after a suspension.

    The running loop is a thread-local set only on the loop thread; without setting it on the
    tokio thread around the drive, ``get_running_loop()`` raises ``RuntimeError: no running
    event loop`` in the coroutine's first segment.
    """

    async def driven(bridge: ferrule.Bridge) -> tuple[bool, bool]:
        first_on_loop_thread = on_loop_thread()
        assert asyncio.get_running_loop() is bridge.loop
        assert asyncio.get_event_loop() is bridge.loop
        assert bridge.loop.create_future().get_loop() is bridge.loop
        await asyncio.sleep(0)
        await bridge.sleep(0.001)
        assert asyncio.get_running_loop() is bridge.loop
        return first_on_loop_thread, True

    async def main(bridge: ferrule.Bridge) -> None:
        first_on_loop_thread, ok = await asyncio.wait_for(bridge.spawn(driven(bridge)), 2)
        assert ok
        check_first_drive_thread(first_on_loop_thread, bridge.mode)

    exercised(lambda: run(main))


# --- I12: tokio work started on the loop thread finds the runtime ----------------------------


def test_i12_native_awaitables_work_in_loop_thread_continuations(run) -> None:
    """I12: after a coroutine is resumed inline on the loop thread by an asyncio future, it
    creates and awaits ``bridge.sleep`` and ``bridge.ready``; a plain loop callback can create a
    native awaitable too.

    The loop thread is not a tokio worker: if the bridge looked its runtime up in a thread-local
    instead of spawning on its own handle, creating the tokio timer here would raise
    ``RuntimeError: no tokio runtime`` (or panic: "there is no reactor running").
    """
    marks: list[str] = []

    async def driven(bridge: ferrule.Bridge, gate: asyncio.Future[None]) -> tuple[Any, ...]:
        marks.append("waiting")
        await gate
        resumed_on_loop_thread = on_loop_thread()
        slept = await bridge.sleep(0.01, "slept")
        ready = await bridge.ready("ready")
        return resumed_on_loop_thread, slept, ready

    async def main(bridge: ferrule.Bridge) -> None:
        loop = asyncio.get_running_loop()
        gate = loop.create_future()
        future = bridge.spawn(driven(bridge, gate))
        await wait_for_marks(marks)
        gate.set_result(None)
        assert await asyncio.wait_for(future, 2) == (True, "slept", "ready")

        from_callback: list[ferrule.NativeFuture[str]] = []
        loop.call_soon(lambda: from_callback.append(bridge.sleep(0.01, "callback")))
        await wait_until(lambda: bool(from_callback), what="the loop callback")
        assert await asyncio.wait_for(from_callback[0], 2) == "callback"

    run(main)


# --- I13: stream channel capacity must exceed the drive budget -------------------------------


def test_i13_many_native_steps_in_one_drive_do_not_deadlock(run) -> None:
    """I13: coroutines that await thousands of native awaitables (resolved ones and zero-length
    timers), far more than the drive budget, complete with the right values, on tokio threads
    and on the loop thread.

    If resolving native awaitables inside one drive filled a bounded channel that is drained
    only after the drive releases the GIL, the driver would block holding the GIL: the whole
    process freezes (the faulthandler watchdog dumps the stacks) or the guard times out.
    """
    steps = 2000

    async def driven(bridge: ferrule.Bridge, offset: int) -> int:
        total = 0
        for i in range(steps):
            total += await bridge.ready(i + offset)
            if i % 500 == 0:
                await bridge.sleep(0)
        return total

    def expected(offset: int) -> int:
        return sum(range(offset, offset + steps))

    async def main(bridge: ferrule.Bridge) -> None:
        futures = [bridge.spawn(driven(bridge, i)) for i in range(10)]
        futures += [bridge.spawn_on_loop(driven(bridge, i)) for i in range(10)]
        assert await gather_bounded(futures, 8) == [expected(i) for i in range(10)] * 2

    run(main, budget=16)


# --- I14: the loop thread must not drive inline while a tokio thread drives ------------------


def test_i14_anyio_limiter_and_cancel_scopes_under_concurrency(run, fast_switching) -> None:
    """I14: 400 concurrent coroutines share an anyio CapacityLimiter and open CancelScopes and
    ``move_on_after`` scopes around awaits of every kind, with the GIL switching every 0.1 ms;
    every one succeeds and no collision is counted.

    If the loop thread drove a continuation inline while a tokio thread was inside a drive,
    ``current_task()`` would name the other coroutine's task: anyio raises "Attempted to exit
    cancel scope in a different task" or "this borrower isn't holding any of this
    CapacityLimiter's tokens", and ``collisions`` becomes non-zero.
    """
    count = 400

    async def driven(bridge: ferrule.Bridge, limiter: anyio.CapacityLimiter, i: int) -> int:
        async with limiter:
            with anyio.CancelScope():
                await asyncio.sleep(0)
                await bridge.sleep(0.0005)
            with anyio.move_on_after(10) as scope:
                value = await bridge.ready(i)
                await anyio.sleep(0)
            assert not scope.cancel_called
        return value

    async def main(bridge: ferrule.Bridge) -> None:
        limiter = anyio.CapacityLimiter(8)
        futures = [bridge.spawn(driven(bridge, limiter, i)) for i in range(count)]
        assert await gather_bounded(futures, 8) == list(range(count))
        assert limiter.borrowed_tokens == 0

    run(main, worker_threads=2)
