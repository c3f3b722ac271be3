"""The app's own tasks as a request sees them: who steps them (the bridge's task factory, or
asyncio's ``Task``), and what asyncio promises of a task either way.

- ``/probe``: create_task, gather, TaskGroup, an anyio task group, wait_for, shield, timeout,
  cancel/uncancel, done callbacks; a JSON object of what each saw.
- ``/orphan``: a task that raises and that nobody awaits ("Task exception was never
  retrieved" must be logged once it is collected).
- ``/background``: starts a task that runs until cancelled, logging ``background-cancelled``
  to ``FERRULE_TEST_EVENTS`` then; the lifespan starts one the same way.
"""

from __future__ import annotations

import asyncio
import contextvars
import gc
from typing import Any

import anyio
from asgi_helpers import log_event, send_json

VAR = contextvars.ContextVar("var", default="unset")
KEEP: set[asyncio.Task[Any]] = set()


def driver(task: asyncio.Task[Any] | None) -> str:
    """Who steps ``task``: the factory's tasks are ferrule's ``Task`` subclass, a request's
    coroutine has the bridge's ``DriverTask``."""
    if task is None:
        return "none"
    if not type(task).__module__.startswith("ferrule"):
        return "asyncio"
    return "request" if type(task).__name__ == "DriverTask" else "bridge"


async def child(value: int) -> dict[str, Any]:
    await asyncio.sleep(0)
    await asyncio.sleep(0.001)
    task = asyncio.current_task()
    assert task is not None
    return {"value": value, "var": VAR.get(), "name": task.get_name(), "driver": driver(task)}


async def forever(name: str, started: asyncio.Event | None = None) -> None:
    if started is not None:
        started.set()
    try:
        await asyncio.Event().wait()
    except asyncio.CancelledError:
        log_event(f"{name}-cancelled")
        raise


async def boom() -> None:
    raise ValueError("never retrieved")


async def reraise(box: list[BaseException], started: asyncio.Event) -> None:
    started.set()
    try:
        await asyncio.sleep(5)
    except asyncio.CancelledError as exc:
        box.append(exc)
        raise


async def swallow(started: asyncio.Event) -> str:
    started.set()
    try:
        await asyncio.sleep(5)
    except asyncio.CancelledError:
        return "inner"
    return "not cancelled"


async def reset_after_cancel(started: asyncio.Event) -> str:
    started.set()
    token = VAR.set("in task")
    try:
        await asyncio.sleep(5)
    except asyncio.CancelledError:
        VAR.reset(token)  # ValueError unless still in the task's own context
        return "reset"
    return "not cancelled"


async def outer(started: asyncio.Event) -> str:
    return await asyncio.create_task(swallow(started))


async def probe() -> dict[str, Any]:
    seen: dict[str, Any] = {}
    VAR.set("request")
    task = asyncio.create_task(child(1), name="first")
    seen["type"] = type(task).__name__
    seen["all_tasks"] = task in asyncio.all_tasks()
    called: list[str] = []
    task.add_done_callback(lambda t: called.append(t.get_name()))
    seen["create_task"] = await task
    seen["done_callback"] = called
    seen["gather"] = await asyncio.gather(child(2), child(3))
    async with asyncio.TaskGroup() as group:
        grouped = group.create_task(child(4))
    seen["task_group"] = grouped.result()
    results: list[dict[str, Any]] = []

    async def anyio_child() -> None:
        results.append(await child(5))

    async with anyio.create_task_group() as anyio_group:
        anyio_group.start_soon(anyio_child)
    seen["anyio"] = results
    try:
        await asyncio.wait_for(forever("wait_for"), 0.01)
    except TimeoutError:
        seen["wait_for"] = "timed out"
    seen["shield"] = await asyncio.shield(child(6))
    try:
        async with asyncio.timeout(0.01):
            await asyncio.sleep(5)
    except TimeoutError:
        seen["timeout"] = "timed out"
    seen["cancelling_after_timeout"] = asyncio.current_task().cancelling()  # type: ignore[union-attr]
    # Each task below is cancelled once it has started: a pause of a millisecond was not enough
    # when the loop thread stalled that long (the task then got its cancellation at its start).
    started = asyncio.Event()
    waiting = asyncio.create_task(forever("cancelled", started))
    await started.wait()
    seen["cancel"] = [waiting.cancel("stop"), waiting.cancelling()]
    try:
        await waiting
    except asyncio.CancelledError as exc:
        seen["cancelled"] = [waiting.cancelled(), list(exc.args)]
    seen["uncancel"] = waiting.uncancel()
    box: list[BaseException] = []
    started = asyncio.Event()
    reraising = asyncio.create_task(reraise(box, started))
    await started.wait()
    reraising.cancel("again")
    try:
        await reraising
    except asyncio.CancelledError as exc:
        seen["same_cancelled_error"] = exc is box[0]
    started = asyncio.Event()
    resetting = asyncio.create_task(reset_after_cancel(started))
    await started.wait()
    resetting.cancel()
    seen["context_after_cancel"] = await resetting
    started = asyncio.Event()
    outer_task = asyncio.create_task(outer(started))
    await started.wait()
    outer_task.cancel()
    seen["swallowed"] = [await outer_task, outer_task.cancelled(), outer_task.cancelling()]
    failing = asyncio.create_task(boom())
    await asyncio.sleep(0.01)
    seen["exception"] = repr(failing.exception())
    seen["current"] = driver(asyncio.current_task())
    return seen


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                KEEP.add(asyncio.create_task(forever("lifespan-background")))
                await send({"type": "lifespan.startup.complete"})
            else:
                await send({"type": "lifespan.shutdown.complete"})
                return
    path = scope["path"]
    if path == "/probe":
        await send_json(send, await probe())
    elif path == "/orphan":
        asyncio.create_task(boom())
        await asyncio.sleep(0.01)
        gc.collect()
        await send_json(send, "orphaned")
    elif path == "/background":
        KEEP.add(asyncio.create_task(forever("background")))
        await send_json(send, "started")
    else:
        await send_json(send, "not found", 404)
