"""The app's own tasks under ``--task-impl bridge`` (``tests/apps/task_factory_app.py``), on a
real server: what asyncio promises of a task holds whoever steps it, and with the factory the
bridge steps them.

CPython's own task suites, run with the factory on every loop, are ``scripts/task_suites.py``.
"""

from __future__ import annotations

import asyncio
import time

import ferrule
import pytest
from support.loopkinds import LOOP_KINDS
from support.serverutil import running_server, wait_for_event

IMPLS = ["bridge", "asyncio"]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("loop", LOOP_KINDS)
def test_tasks_keep_asyncio_semantics_whoever_steps_them(loop: str, impl: str) -> None:
    """Rule: create_task, gather, TaskGroup, an anyio task group, wait_for, shield, timeout,
    cancel with a message, cancelling/uncancel, done callbacks and the request's context give
    the same answers with either --task-impl, and with ``bridge`` every child task is the
    factory's. Seen broken while building it: the task's future state done at once (its first
    step ran the coroutine's stand-in), ``cancelling()`` 0 after a cancel, a task that caught
    the loop's first step ran twice."""
    with running_server("task_factory_app:app", "--loop", loop, "--task-impl", impl) as server:
        seen = server.get("/probe").json()
    child = {"var": "request", "driver": impl}
    assert seen["type"] == "Task"
    assert seen["all_tasks"] is True
    assert seen["create_task"] == {"value": 1, "name": "first", **child}
    assert seen["done_callback"] == ["first"]
    assert [(r["value"], r["var"], r["driver"]) for r in seen["gather"]] == [
        (2, "request", impl),
        (3, "request", impl),
    ]
    assert {k: seen["task_group"][k] for k in child} == child
    assert [{k: r[k] for k in child} for r in seen["anyio"]] == [child]
    assert seen["wait_for"] == "timed out"
    assert seen["shield"]["value"] == 6
    assert seen["timeout"] == "timed out"
    assert seen["cancelling_after_timeout"] == 0
    assert seen["cancel"] == [True, 1]
    assert seen["cancelled"] == [True, ["stop"]]
    assert seen["uncancel"] == 0
    assert seen["same_cancelled_error"] is True
    assert seen["swallowed"] == ["inner", False, 1]
    assert seen["context_after_cancel"] == "reset"
    assert seen["exception"] == "ValueError('never retrieved')"
    assert seen["current"] == "request"


@pytest.mark.parametrize("loop", LOOP_KINDS)
def test_a_failed_task_nobody_awaited_is_logged(loop: str) -> None:
    """Rule: a task that raised and that nothing awaited logs "Task exception was never
    retrieved" with its exception when it is collected, as asyncio's does. Broken if the
    bridge held the task (or its job) past its end, or set its state another way."""
    with running_server("task_factory_app:app", "--loop", loop, "--task-impl", "bridge") as server:
        assert server.get("/orphan").json() == "orphaned"
        server.wait_for_output("Task exception was never retrieved")
        server.wait_for_output("ValueError: never retrieved")


@pytest.mark.parametrize("loop", LOOP_KINDS)
def test_background_tasks_are_cancelled_at_shutdown_without_delaying_it(
    loop: str, tmp_path
) -> None:
    """Rule: tasks still running when the server stops (one from the lifespan, one a request
    left behind) do not hold the shutdown up (no request waits on them), and are cancelled
    once it is over, so their ``finally`` blocks run. Broken if the factory's jobs counted as
    requests in flight: the stop waited the graceful-shutdown timeout."""
    events = tmp_path / "events"
    env = {"FERRULE_TEST_EVENTS": str(events)}
    with running_server(
        "task_factory_app:app", "--loop", loop, "--task-impl", "bridge", env=env
    ) as server:
        assert server.get("/background").json() == "started"
        started = time.monotonic()
        assert server.stop() == 0, server.describe()
        # Waiting on them would take the 30 s the server allows apps without a timeout.
        assert time.monotonic() - started < 15, server.describe()
    wait_for_event(events, "background-cancelled")
    wait_for_event(events, "lifespan-background-cancelled")


@pytest.mark.parametrize("resumed", [False, True], ids=["first-drive", "resumed"])
def test_first_steps_keep_their_order_with_the_loops_callbacks(run, resumed: bool) -> None:
    """Rule: tasks made by a coroutine the bridge drives take their first steps in the order
    they were made, and in order with callbacks scheduled between them, as asyncio's queue
    orders them, whether the first step runs as a loop callback or right after the drive (on
    the tokio thread, or in the loop callback that drove: done when nothing else was waiting
    for the loop). Made in a resumed drive, which on the loop thread is a bridge callback,
    the first task takes that shortcut. Broken if every task made during a drive ran after it:
    ``c`` before the callback ``b``; with the shortcut taken only by tokio drives, or with
    uvloop's queue of ready callbacks not found, uvloop's ``resumed`` case counted no
    ``first_drives_after`` (asyncio's bridge here is gated, and its resumed drives are tokio
    drives)."""

    async def step(name: str, order: list[str]) -> None:
        order.append(name)

    async def driven() -> list[str]:
        order: list[str] = []
        loop = asyncio.get_running_loop()
        if resumed:
            await asyncio.sleep(0)
        first = asyncio.create_task(step("a", order))
        loop.call_soon(order.append, "b")
        last = asyncio.create_task(step("c", order))
        await asyncio.gather(first, last)
        return order

    async def main(bridge: ferrule.Bridge) -> list[list[str]]:
        return [await bridge.spawn(driven()) for _ in range(20)]

    outcome = run(main, task_factory=True)
    assert outcome.result == [["a", "b", "c"]] * 20
    if resumed:
        assert outcome.counters["first_drives_after"] >= 20, outcome.counters
