"""contextvars: one context copied per coroutine at spawn, entered around every drive."""

from __future__ import annotations

import asyncio
import contextvars

import ferrule
from bridgeutil import gather_bounded

REQUEST_ID: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="unset")
TOUCHED: contextvars.ContextVar[str] = contextvars.ContextVar("touched", default="untouched")


def test_thousand_interleaved_coroutines_keep_their_own_context(run) -> None:
    """1,000 coroutines, spawned while the spawner changes a ContextVar between spawns, each
    see the value current at their own spawn, set their own value, and re-read it after bare
    yields, native sleeps of different lengths, a shared asyncio future and a resolved native
    awaitable. The spawning context is left exactly as the spawner set it.

    Copying the context lazily (at the first drive) shows a later spawner value; sharing one
    context between coroutines, or not entering each coroutine's context around each drive,
    shows another coroutine's value after a resumption (a leak between requests); running the
    coroutine in the spawner's context changes the spawner's ``TOUCHED``.
    """
    count = 1000

    async def driven(bridge: ferrule.Bridge, i: int, gate: asyncio.Future[None]) -> int:
        assert REQUEST_ID.get() == f"spawned-{i}", "context not copied at spawn"
        REQUEST_ID.set(f"own-{i}")
        TOUCHED.set(f"touched-{i}")
        checks = 0
        awaitables = (
            lambda: asyncio.sleep(0),
            lambda: bridge.sleep(0.001 * (i % 5)),
            lambda: gate,
            lambda: bridge.ready(i),
            lambda: asyncio.sleep(0),
        )
        for make in awaitables:
            await make()
            assert REQUEST_ID.get() == f"own-{i}", f"coroutine {i} sees {REQUEST_ID.get()!r}"
            assert TOUCHED.get() == f"touched-{i}"
            checks += 1
        return checks

    async def main(bridge: ferrule.Bridge) -> None:
        gate = asyncio.get_running_loop().create_future()
        futures = []
        for i in range(count):
            REQUEST_ID.set(f"spawned-{i}")
            spawn = bridge.spawn_on_loop if i % 10 == 0 else bridge.spawn
            futures.append(spawn(driven(bridge, i, gate)))
        REQUEST_ID.set("spawner")
        await asyncio.sleep(0.02)
        gate.set_result(None)
        assert await gather_bounded(futures, 8) == [5] * count
        assert REQUEST_ID.get() == "spawner"
        assert TOUCHED.get() == "untouched"

    run(main)


def test_tasks_created_in_a_driven_coroutine_inherit_its_context(run) -> None:
    """An asyncio task created inside a driven coroutine (on the tokio thread and after a
    resumption) copies the coroutine's context, as ``create_task`` does in any task.

    ``create_task`` copies the *current* context of the calling thread: if the driver did not
    enter the coroutine's context around the drive, the child would see the tokio thread's
    empty context (``"unset"``) or the loop thread's.
    """

    async def read_request_id() -> str:
        await asyncio.sleep(0)
        return REQUEST_ID.get()

    async def driven(bridge: ferrule.Bridge, i: int) -> tuple[str, str]:
        REQUEST_ID.set(f"parent-{i}")
        first = await asyncio.create_task(read_request_id())
        await bridge.sleep(0.001)
        second = await asyncio.create_task(read_request_id())
        return first, second

    async def main(bridge: ferrule.Bridge) -> None:
        results = await gather_bounded([bridge.spawn(driven(bridge, i)) for i in range(20)])
        assert results == [(f"parent-{i}", f"parent-{i}") for i in range(20)]
        assert REQUEST_ID.get() == "unset"

    run(main)
