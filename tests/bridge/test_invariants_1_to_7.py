"""Invariants I1-I7 (listed in ``docs/design.md``): one current task per loop, the context entered
per drive, a fully initialised task per coroutine, thread-safe scheduling, deferred future
callbacks, loops without ``_ready``, and ``Task.__init__``'s side effects.

Each test is named after the invariant it protects. The harness (``bridgeutil.run_bridge``) also
fails any test whose loop reported an error or whose bridge counted a collision.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import time
import weakref
from typing import Any

import ferrule
import pytest
from bridgeutil import (
    GUARD,
    PROMPT,
    check_first_drive_thread,
    child_value,
    exercised,
    expected_mode,
    gather_bounded,
    on_loop_thread,
    run_bridge,
    wait_for_marks,
)
from support.loopkinds import HAS_UVLOOP

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

    elapsed = exercised(lambda: run(main)).result
    assert elapsed < PROMPT, f"took {elapsed:.3f}s: the loop stalled with the child task queued"


# --- I5: asyncio.Future callbacks are deferred -----------------------------------------------


def test_i5_future_resolved_on_a_tokio_thread_resumes_its_waiter_promptly(run) -> None:
    """I5: coroutine B resolves an asyncio future that coroutine A awaits, then suspends for a
    long time (4 s) on a native awaitable; A resumes and completes long before B (within
    :data:`PROMPT`, for a loaded machine).

    ``set_result`` only queues A's resume callback with ``call_soon`` on B's (tokio) thread; if
    the driver assumed the callback ran immediately, or did not wake the loop after a drive
    that queued it, A would finish only when B's completion finally woke the loop (~4 s).
    """
    marks: list[str] = []

    async def waiter(gate: asyncio.Future[str]) -> tuple[str, float]:
        marks.append("waiting")
        value = await gate
        return value, time.monotonic()

    async def resolver(bridge: ferrule.Bridge, gate: asyncio.Future[str]) -> float:
        gate.set_result("released")
        await bridge.sleep(4.0)
        return time.monotonic()

    async def main(bridge: ferrule.Bridge) -> None:
        gate = asyncio.get_running_loop().create_future()
        waiting = bridge.spawn(waiter(gate))
        await wait_for_marks(marks)
        started = time.monotonic()
        resolving = bridge.spawn(resolver(bridge, gate))
        (value, resumed_at), resolved_at = await gather_bounded([waiting, resolving], GUARD)
        assert value == "released"
        assert resumed_at - started < PROMPT, f"waiter resumed after {resumed_at - started:.3f}s"
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
