"""Invariants I1-I14 (listed in ``docs/design.md``): what the bridge must uphold.

Each test is named after the invariant it protects. The harness (``conftest.run_bridge``) also
fails any test whose loop reported an error or whose bridge counted a collision.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
import os
import signal
import sys
import threading
import time
import weakref
from typing import Any

import anyio
import ferrule
import pytest
from conftest import (
    HAS_UVLOOP,
    check_first_drive_thread,
    child_value,
    expected_mode,
    gather_bounded,
    on_loop_thread,
    run_bridge,
    wait_for_marks,
    wait_until,
)

# --- I1: one current task per loop -----------------------------------------------------------


def test_i1_loop_tasks_never_collide_with_driven_coroutines(run, fast_switching) -> None:
    """I1: while hundreds of coroutines are driven (first on tokio threads), plain asyncio tasks
    keep stepping on the loop thread and always see themselves as the current task.

    If a tokio thread stayed "entered" in its task while the loop thread ran a Task.__step, the
    step would raise ``RuntimeError: Cannot enter into task ... while another task ... is being
    executed`` (reported to the loop's exception handler, failing the harness, and the loop task
    would hang) or ``current_task()`` would name the wrong task.
    """

    async def driven(bridge: ferrule.Bridge, i: int) -> int:
        me = asyncio.current_task()
        for _ in range(4):
            await asyncio.sleep(0)
            await bridge.sleep(0)
            assert asyncio.current_task() is me
        return i

    async def loop_task(hops: int) -> int:
        me = asyncio.current_task()
        for _ in range(hops):
            await asyncio.sleep(0)
            assert asyncio.current_task() is me
        return hops

    async def main(bridge: ferrule.Bridge) -> None:
        main_task = asyncio.current_task()
        loop_tasks = [asyncio.ensure_future(loop_task(300)) for _ in range(10)]
        results = await gather_bounded([bridge.spawn(driven(bridge, i)) for i in range(300)])
        assert results == list(range(300))
        assert await gather_bounded(loop_tasks) == [300] * 10
        assert asyncio.current_task() is main_task

    run(main)


def test_i1_spawn_on_loop_keeps_the_callers_current_task(run) -> None:
    """I1: coroutines handed over with ``spawn_on_loop`` are driven on the loop thread between
    other callbacks: inside, each sees its own task (not the spawning task, not None, the same
    object after a resumption) and the spawning task stays current in its own steps.

    Driving while the spawning task is entered raises ``RuntimeError: Cannot enter into task``;
    a drive that does not leave its task leaves ``current_task()`` wrong for the next loop step
    (anyio would then raise "Attempted to exit cancel scope in a different task").
    """
    seen: list[asyncio.Task[Any] | None] = []

    async def driven(bridge: ferrule.Bridge) -> str:
        seen.append(asyncio.current_task())
        await bridge.sleep(0.001)
        seen.append(asyncio.current_task())
        return "done"

    async def main(bridge: ferrule.Bridge) -> None:
        caller = asyncio.current_task()
        futures = [bridge.spawn_on_loop(driven(bridge)) for _ in range(3)]
        assert asyncio.current_task() is caller
        await asyncio.sleep(0)
        assert asyncio.current_task() is caller
        assert await gather_bounded(futures) == ["done"] * 3
        assert asyncio.current_task() is caller
        assert all(task is not None and task is not caller for task in seen)
        assert len({id(task) for task in seen}) == 3

    run(main)


# --- I2: context entered per drive cycle -----------------------------------------------------

I2_VAR: contextvars.ContextVar[str] = contextvars.ContextVar("i2_var", default="unset")


def test_i2_context_survives_every_kind_of_suspension(run) -> None:
    """I2: a ContextVar set by a driven coroutine keeps its value after a bare yield, a native
    awaitable, a pending asyncio future and an already-resolved native awaitable, and the value
    never reaches the loop's own context.

    Without entering the coroutine's copied context around every drive, the value read after a
    resumption is the context of whatever thread resumed it (``"unset"`` or ``"main"``).
    """

    async def driven(bridge: ferrule.Bridge, name: str, pending: asyncio.Future[None]) -> str:
        assert I2_VAR.get() == "main"
        I2_VAR.set(name)
        await asyncio.sleep(0)
        assert I2_VAR.get() == name
        await bridge.sleep(0.001)
        assert I2_VAR.get() == name
        await pending
        assert I2_VAR.get() == name
        await bridge.ready(None)
        return I2_VAR.get()

    async def main(bridge: ferrule.Bridge) -> None:
        I2_VAR.set("main")
        loop = asyncio.get_running_loop()
        pending = loop.create_future()
        names = [f"coroutine-{i}" for i in range(20)]
        futures = [bridge.spawn(driven(bridge, name, pending)) for name in names]
        await asyncio.sleep(0.02)
        assert I2_VAR.get() == "main"
        pending.set_result(None)
        assert await gather_bounded(futures) == names
        assert I2_VAR.get() == "main"

    run(main)


# --- I3: Task.__init__ must be called --------------------------------------------------------


def test_i3_per_coroutine_task_is_fully_initialised(run) -> None:
    """I3: the task a driven coroutine sees is an initialised ``asyncio.Task``: its name, repr,
    loop, cancellation count and (3.12+) context can be read on the tokio thread and after a
    resumption, and it is not done while the coroutine runs.

    A Task subclass whose ``Task.__init__`` was skipped has uninitialised C fields: reading them
    segfaults on 3.12+ (the faulthandler dump shows this test). ``done()`` True while running
    would make anyio skip the task when delivering cancellation.
    """

    def inspect_task(loop: asyncio.AbstractEventLoop) -> asyncio.Task[Any]:
        task = asyncio.current_task()
        assert isinstance(task, asyncio.Task)
        assert isinstance(task.get_name(), str) and task.get_name()
        assert isinstance(repr(task), str)
        assert task.get_loop() is loop
        assert task.cancelling() == 0
        assert not task.done()
        if sys.version_info >= (3, 12):
            assert isinstance(task.get_context(), contextvars.Context)
        return task

    async def driven(bridge: ferrule.Bridge) -> bool:
        loop = asyncio.get_running_loop()
        first = inspect_task(loop)
        await asyncio.sleep(0)
        await bridge.sleep(0.001)
        return inspect_task(loop) is first

    async def main(bridge: ferrule.Bridge) -> None:
        results = await gather_bounded(
            [bridge.spawn(driven(bridge)) for _ in range(10)]
            + [bridge.spawn_on_loop(driven(bridge)) for _ in range(10)]
        )
        assert all(results)

    run(main)


def test_i3_a_task_is_reused_only_when_no_one_can_tell(run) -> None:
    """I3, with the bridge's pool of idle tasks: a finished coroutine's task stands for the next
    one only if nothing holds it, strongly or weakly. A task kept in a list stays done and is
    never handed out again; a task that keys a ``WeakKeyDictionary`` (anyio keeps per-task state
    so) is never handed out again either, so the next coroutine cannot find that state under
    its own task; idle tasks are not in ``all_tasks()``.

    Seen failing: with the pool's weak-reference check removed, the WeakKeyDictionary part
    found the previous coroutine's entry under the reused task ("stale state 0").
    """

    async def record(kept: list[Any] | None, state: weakref.WeakKeyDictionary, i: int) -> int:
        task = asyncio.current_task()
        assert task is not None
        stale = state.get(task)
        assert stale is None, f"stale state {stale}"
        if kept is not None:
            kept.append(task)
        else:
            state[task] = i
        await asyncio.sleep(0)
        return id(task)

    async def main(bridge: ferrule.Bridge) -> None:
        plain = weakref.WeakKeyDictionary()
        ids = [await bridge.spawn(record(None, plain, i)) for i in range(20)]
        kept: list[Any] = []
        for i in range(20):
            await bridge.spawn(record(kept, weakref.WeakKeyDictionary(), i))
        assert len({id(t) for t in kept}) == 20, "a task someone holds was handed out again"
        assert all(t.done() for t in kept)
        later = [await bridge.spawn(record(None, plain, i)) for i in range(5)]
        assert not {id(t) for t in kept} & set(later), "a held task was handed out again"
        assert len(set(ids)) < len(ids), "no task was ever reused"
        here = asyncio.current_task()
        idle = [
            t for t in asyncio.all_tasks() if type(t).__name__ == "DriverTask" and t is not here
        ]
        assert not idle, idle

    run(main)


def test_i3_finished_tasks_are_reused_on_every_loop(run) -> None:
    """The pool of idle tasks works on both loops: 60 coroutines run one after another, each
    finishing without suspending (as a hello-world request does), then 20 that suspend, build
    a handful of ``DriverTask``s, not one each. On 3.11 with uvloop a new task's sentinel step
    waits in the loop's queue, holding the task, when its coroutine finishes in its first
    drive; such tasks cool until the loop has run that step, then are reused.

    Seen failing on 3.11 with uvloop without the cooling queue: ``tasks_made`` was 61 of 80,
    a new task for every coroutine that never suspended.
    """

    async def quick() -> None:
        assert asyncio.current_task() is not None

    async def suspending() -> None:
        await asyncio.sleep(0)

    async def main(bridge: ferrule.Bridge) -> int:
        before = bridge.counters()["tasks_made"]
        for _ in range(60):
            await bridge.spawn(quick())
        for _ in range(20):
            await bridge.spawn(suspending())
        return bridge.counters()["tasks_made"] - before

    made = run(main).result
    assert made <= 5, f"{made} tasks built for 80 coroutines run one at a time"


# --- I4: cross-thread scheduling needs call_soon_threadsafe ----------------------------------


def test_i4_task_created_then_native_await_completes_within_1s(run) -> None:
    """I4 (the cross-thread ``_ready`` stall): a coroutine creates an asyncio task and then
    awaits a native awaitable (``bridge.sleep(0.01)``); with no other I/O it completes in well
    under a second.

    The task's first ``__step`` is queued with ``call_soon`` from the tokio thread, which does
    not wake the loop blocked in ``select``; without the conditional wake-up after the drive the
    child never runs and the coroutine finishes only when an unrelated timer (the test's 5 s
    guard) wakes the loop, failing the elapsed-time assertion.
    """

    async def driven(bridge: ferrule.Bridge) -> tuple[bool, str, str]:
        first_on_loop_thread = on_loop_thread()
        child = asyncio.get_running_loop().create_task(child_value("child"))
        slept = await bridge.sleep(0.01, "native")
        return first_on_loop_thread, slept, await child

    async def main(bridge: ferrule.Bridge) -> float:
        started = time.monotonic()
        first_on_loop_thread, *values = await asyncio.wait_for(bridge.spawn(driven(bridge)), 5)
        elapsed = time.monotonic() - started
        assert values == ["native", "child"]
        check_first_drive_thread(first_on_loop_thread, bridge.mode)
        return elapsed

    elapsed = run(main).result
    assert elapsed < 1.0, f"took {elapsed:.3f}s: the loop stalled with the child task queued"


# --- I5: asyncio.Future callbacks are deferred -----------------------------------------------


def test_i5_future_resolved_on_a_tokio_thread_resumes_its_waiter_promptly(run) -> None:
    """I5: coroutine B resolves an asyncio future that coroutine A awaits, then suspends for a
    long time on a native awaitable; A resumes and completes long before B.

    ``set_result`` only queues A's resume callback with ``call_soon`` on B's (tokio) thread; if
    the driver assumed the callback ran immediately, or did not wake the loop after a drive
    that queued it, A would finish only when B's completion finally woke the loop (~1 s).
    """
    marks: list[str] = []

    async def waiter(gate: asyncio.Future[str]) -> tuple[str, float]:
        marks.append("waiting")
        value = await gate
        return value, time.monotonic()

    async def resolver(bridge: ferrule.Bridge, gate: asyncio.Future[str]) -> float:
        gate.set_result("released")
        await bridge.sleep(1.0)
        return time.monotonic()

    async def main(bridge: ferrule.Bridge) -> None:
        gate = asyncio.get_running_loop().create_future()
        waiting = bridge.spawn(waiter(gate))
        await wait_for_marks(marks)
        started = time.monotonic()
        resolving = bridge.spawn(resolver(bridge, gate))
        (value, resumed_at), resolved_at = await gather_bounded([waiting, resolving])
        assert value == "released"
        assert resumed_at - started < 0.5, f"waiter resumed after {resumed_at - started:.3f}s"
        assert resolved_at > resumed_at

    run(main)


# --- I6: _ready is CPython-specific ----------------------------------------------------------


@pytest.mark.skipif(not HAS_UVLOOP, reason="uvloop is not importable")
def test_i6_bridge_works_on_uvloop_which_has_no_ready_queue() -> None:
    """I6: on uvloop (no ``loop._ready``) the bridge attaches, reports its mode, and drives
    coroutines that create tasks, await native and asyncio futures, via spawn and spawn_on_loop.

    Code that touches ``loop._ready`` unguarded (the 3.11 sentinel pop, the conditional wake-up)
    raises ``AttributeError: 'Loop' object has no attribute '_ready'`` here, from Bridge() or
    from the first drive.
    """

    async def driven(bridge: ferrule.Bridge, i: int) -> int:
        child = asyncio.create_task(child_value(i))
        await bridge.sleep(0.001)
        return await child + await bridge.ready(i)

    async def main(bridge: ferrule.Bridge) -> str:
        assert not hasattr(bridge.loop, "_ready")
        futures = [bridge.spawn(driven(bridge, i)) for i in range(50)]
        futures += [bridge.spawn_on_loop(driven(bridge, i)) for i in range(50)]
        assert await gather_bounded(futures) == [2 * i for i in range(50)] * 2
        return bridge.mode

    assert run_bridge(main, loop="uvloop").result == expected_mode("uvloop")


# --- I7: Task.__init__ has side effects (call_soon) ------------------------------------------


def is_task_step(handle: asyncio.Handle) -> bool:
    """Whether a ``loop._ready`` handle is some task's ``__step``."""
    callback = handle._callback
    return type(callback).__name__ == "TaskStepMethWrapper" or isinstance(
        getattr(callback, "__self__", None), asyncio.Task
    )


def test_i7_first_drives_leave_no_sentinel_step_in_ready() -> None:
    """I7 (asyncio loop): creating each coroutine's task object must not leave the sentinel's
    ``__step`` handle in ``loop._ready``. 100 coroutines are first driven on the loop thread
    (``spawn_on_loop``) in the iteration before the spawner resumes and suspend on a native
    awaitable; when the spawner resumes, ``_ready`` holds no task step.

    ``Task.__init__`` calls ``loop.call_soon(self.__step)``; on 3.11 without popping that handle
    (3.12+: without ``eager_start=True``) 100 steps are queued, and such steps later collide
    with tokio-thread drives.
    """
    marks: list[int] = []

    async def driven(bridge: ferrule.Bridge) -> None:
        marks.append(1)
        await bridge.sleep(0.05)

    async def main(bridge: ferrule.Bridge) -> None:
        ready = bridge.loop._ready
        futures = [bridge.spawn_on_loop(driven(bridge)) for _ in range(100)]
        await asyncio.sleep(0)
        assert len(marks) == 100, "the first drives did not run in the next iteration"
        steps = [handle for handle in ready if is_task_step(handle)]
        assert not steps, f"{len(steps)} task steps queued, e.g. {steps[0]!r}"
        await gather_bounded(futures)

    run_bridge(main, loop="asyncio")


def test_i7_sentinel_step_never_runs_later(run) -> None:
    """I7 (both loops): after many loop iterations the coroutine's task is still not done and
    still current after each resumption.

    If the sentinel ``__step`` stayed queued (uvloop's opaque queue, or ``_ready`` on 3.11 without
    the pop), it would run later and finish the task object while its coroutine still runs:
    ``task.done()`` turns True, anyio stops delivering cancellation to it, and on the loop
    thread that stray step can raise ``Cannot enter into task`` against a tokio-thread drive.
    """

    async def driven(bridge: ferrule.Bridge) -> bool:
        task = asyncio.current_task()
        for _ in range(5):
            await asyncio.sleep(0)
        await bridge.sleep(0.01)
        return task is asyncio.current_task() and not task.done()

    async def main(bridge: ferrule.Bridge) -> None:
        futures = [bridge.spawn(driven(bridge)) for _ in range(50)]
        futures += [bridge.spawn_on_loop(driven(bridge)) for _ in range(50)]
        assert all(await gather_bounded(futures))

    run(main)


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
        assert await asyncio.wait_for(future, 2) == "survived"
        assert time.monotonic() - started < 1.0

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

    run(main)


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
