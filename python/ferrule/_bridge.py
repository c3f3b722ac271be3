"""Running a coroutine on the bridge from plain Python: loop choice and a one-call helper."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Literal, TypeVar

from ferrule._ferrule import Bridge

T = TypeVar("T")
LoopName = Literal["auto", "asyncio", "uvloop"]


def new_event_loop(loop: LoopName = "auto") -> asyncio.AbstractEventLoop:
    """A new event loop: uvloop when asked (or, for ``auto``, when installed), else asyncio's."""
    if loop in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if loop == "uvloop":
                raise
        else:
            return uvloop.new_event_loop()
    if loop not in ("auto", "asyncio"):
        raise ValueError(f"unknown loop {loop!r}: expected auto, asyncio or uvloop")
    return asyncio.new_event_loop()


def close_event_loop(loop: asyncio.AbstractEventLoop) -> None:
    """Closes ``loop`` as ``asyncio.run`` does: the tasks still running on it (the app's
    background tasks) are cancelled and awaited, so that their ``finally`` blocks run and none
    is destroyed while pending; then async generators and the default executor are shut down."""
    try:
        tasks = [task for task in asyncio.all_tasks(loop) if not task.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        for task in tasks:
            if not task.cancelled() and task.exception() is not None:
                loop.call_exception_handler(
                    {
                        "message": "unhandled exception during shutdown",
                        "exception": task.exception(),
                        "task": task,
                    }
                )
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()


def drive(
    main: Callable[[Bridge], Awaitable[T]],
    *,
    loop: LoopName = "asyncio",
    budget: int = 128,
    worker_threads: int = 1,
    task_factory: bool = False,
) -> T:
    """Run ``main(bridge)`` on a new loop with a bridge attached, then close both.

    ``main`` is an ordinary coroutine function run by the loop; it hands coroutines to the bridge
    with ``bridge.spawn`` and awaits their results. With ``task_factory``, the tasks made on the
    loop meanwhile are the bridge's too (``bridge.task_factory()``).
    """
    event_loop = new_event_loop(loop)

    async def runner() -> T:
        running = asyncio.get_running_loop()
        bridge = Bridge(running, budget=budget, worker_threads=worker_threads)
        if task_factory:
            running.set_task_factory(bridge.task_factory())
        try:
            return await main(bridge)
        finally:
            if task_factory:
                running.set_task_factory(None)
            bridge.close()

    try:
        return event_loop.run_until_complete(runner())
    finally:
        close_event_loop(event_loop)
