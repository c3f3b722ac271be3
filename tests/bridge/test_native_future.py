"""``NativeFuture`` (``bridge.sleep`` / ``bridge.ready``) speaks the asyncio future protocol, so
plain asyncio tasks on the loop can await, gather, time out and cancel it."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import ferrule
import pytest
from bridgeutil import GUARD, PROMPT, on_loop_thread, wait_until


def test_plain_asyncio_tasks_await_native_futures(run) -> None:
    """A plain asyncio task awaits ``bridge.sleep`` (value and default None), ``bridge.ready``
    and a ``gather`` of both, getting the right values after the right delay.

    A NativeFuture that is not recognised as an asyncio future makes the task raise
    ``RuntimeError: Task got bad yield``; one resolved from a tokio thread without a loop
    wake-up stalls the task until the guard times out.
    """

    async def main(bridge: ferrule.Bridge) -> None:
        started = time.monotonic()
        assert await bridge.sleep(0.02, "value") == "value"
        assert 0.015 < time.monotonic() - started < PROMPT
        assert await bridge.sleep(0) is None
        assert await bridge.ready(5) == 5
        assert await bridge.ready() is None
        both = await asyncio.gather(bridge.sleep(0.01, 1), bridge.ready(2))
        assert both == [1, 2]
        assert asyncio.isfuture(bridge.ready(1))

    run(main)


def test_state_methods_follow_asyncio_future(run) -> None:
    """``done``, ``cancelled``, ``result``, ``exception`` and ``get_loop`` answer like an
    asyncio.Future's: pending before the timer, resolved after it, ``result()`` of a pending
    future raises InvalidStateError.

    asyncio helpers (``wait_for``, ``gather``, ``shield``) read these; a wrong answer makes them
    return too early or never.
    """

    async def main(bridge: ferrule.Bridge) -> None:
        native = bridge.sleep(0.01, "late")
        assert native.get_loop() is bridge.loop
        assert not native.done() and not native.cancelled()
        with pytest.raises(asyncio.InvalidStateError):
            native.result()
        await wait_until(native.done, what="the native timer")
        assert native.result() == "late"
        assert native.exception() is None
        assert not native.cancelled()

        ready = bridge.ready("now")
        assert ready.done() and ready.result() == "now"

    run(main)


def test_cancel_follows_asyncio_future(run) -> None:
    """``cancel()`` on a pending NativeFuture returns True, marks it cancelled, makes
    ``result()`` and awaiting raise CancelledError; ``cancel()`` on a resolved one returns False.

    A plain task that awaits a native timer and is cancelled relies on this: a cancel that is
    ignored leaves the task waiting for the timer (5 s), past the guard.
    """

    async def main(bridge: ferrule.Bridge) -> None:
        native = bridge.sleep(5)
        assert native.cancel() is True
        assert native.cancelled() and native.done()
        with pytest.raises(asyncio.CancelledError):
            native.result()
        with pytest.raises(asyncio.CancelledError):
            await native
        assert bridge.ready(1).cancel() is False

        waiting = asyncio.ensure_future(bridge.sleep(5))
        await asyncio.sleep(0.01)
        started = time.monotonic()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(waiting, GUARD)
        assert time.monotonic() - started < PROMPT

    run(main)


def test_asyncio_wait_for_times_out_a_native_future(run) -> None:
    """``asyncio.wait_for(bridge.sleep(5), 0.05)`` in a plain task raises TimeoutError after
    about 0.05 s and leaves the native future cancelled.

    ``wait_for`` uses ``add_done_callback``/``remove_done_callback`` and ``cancel``; if either
    is missing or wrong it raises AttributeError or waits 5 s.
    """

    async def main(bridge: ferrule.Bridge) -> None:
        native = bridge.sleep(5)
        started = time.monotonic()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(native, 0.05)
        assert time.monotonic() - started < PROMPT
        assert native.cancelled()

    run(main)


def test_done_callbacks_run_on_the_loop_thread(run) -> None:
    """Done callbacks of a NativeFuture resolved by a tokio timer run on the loop thread with
    the future as argument, once; ``remove_done_callback`` removes every registration of a
    callback and returns how many it removed.

    asyncio tasks register ``Task.__wakeup`` as a done callback: run on the tokio thread it
    would step a loop task off the loop (``Cannot enter into task`` or corrupted loop state).
    """

    async def main(bridge: ferrule.Bridge) -> None:
        calls: list[tuple[Any, bool]] = []

        def record(future: Any) -> None:
            calls.append((future, on_loop_thread()))

        def never(future: Any) -> None:
            calls.append(("never", on_loop_thread()))

        native = bridge.sleep(0.01, "x")
        native.add_done_callback(record)
        native.add_done_callback(never)
        native.add_done_callback(never)
        assert native.remove_done_callback(never) == 2
        await wait_until(lambda: bool(calls), what="the done callback")
        await asyncio.sleep(0.02)
        assert calls == [(native, True)]

    run(main)
