"""Installed by ``scripts/task_suites.py`` (through ``PYTHONPATH``) into the interpreter that
runs CPython's own asyncio tests: every event loop gets ferrule's task factory, and the bridge
behind it is made on the loop's first task and closed with the loop.

``FERRULE_TASK_SUITES_LOOP=uvloop`` also makes uvloop the default loop. What reached the
factory is written, as JSON, to ``FERRULE_TASK_SUITES_REPORT`` when the interpreter exits.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import unittest
import weakref

from ferrule._ferrule import Bridge

_bridges: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_made = {"tasks": 0, "stock": 0, "bridges": 0}
_tests: dict[str, int] = {}


def _factory(loop, coro, **kwargs):
    """Bridges the loop on its first task: made then, on the thread that runs the loop."""
    factory = _bridges.get(loop)
    if factory is None:
        try:
            bridge = Bridge(loop)
        except Exception:  # a closed loop, or one without add_reader: asyncio's Task
            _made["stock"] += 1
            return asyncio.Task(coro, loop=loop, **kwargs)
        _made["bridges"] += 1
        factory = _bridges[loop] = (bridge, bridge.task_factory())
    _made["tasks"] += 1
    return factory[1](loop, coro, **kwargs)


def _with_factory(init):
    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.set_task_factory(_factory)

    return __init__


def _closing_bridge(close):
    def close_loop(self):
        if not self.is_closed():
            _close_bridge(self)
        close(self)

    return close_loop


def _counting(run):
    def run_test(self, result=None):
        before = _made["tasks"]
        try:
            return run(self, result)
        finally:
            _tests[self.id()] = _made["tasks"] - before
            _close_idle_bridges()

    return run_test


def _close_idle_bridges() -> None:
    """Closes the bridges of loops a test left unclosed, each with its tokio threads and
    descriptors: on uvloop, CPython's close_loop fails before it closes the loop, and the
    bridges of 139 tests of test_tasks stayed open to the end of the process."""
    for loop in list(_bridges):
        _close_bridge(loop)


def _close_bridge(loop) -> None:
    """Closes ``loop``'s bridge, if it has one and the loop is not running."""
    if loop in _bridges and not loop.is_running():
        _bridges.pop(loop)[0].close()


def _install() -> None:
    loops = [asyncio.BaseEventLoop]
    if os.environ.get("FERRULE_TASK_SUITES_LOOP") == "uvloop":
        import uvloop

        # The policy asyncio falls back to after set_event_loop_policy(None), as every
        # test module's tearDownModule calls.
        asyncio.DefaultEventLoopPolicy = uvloop.EventLoopPolicy
        asyncio.events.DefaultEventLoopPolicy = uvloop.EventLoopPolicy
        # 3.14 falls back to unix_events' private name instead, and deprecates the public ones.
        if hasattr(asyncio.unix_events, "_DefaultEventLoopPolicy"):
            asyncio.unix_events._DefaultEventLoopPolicy = uvloop.EventLoopPolicy
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        loops.append(uvloop.Loop)
    if os.environ.get("FERRULE_TASK_SUITES_FACTORY", "1") == "1":
        for cls in loops:
            cls.__init__ = _with_factory(cls.__init__)
            cls.close = _closing_bridge(cls.close)
    unittest.TestCase.run = _counting(unittest.TestCase.run)
    report = os.environ.get("FERRULE_TASK_SUITES_REPORT")
    if report:

        def write() -> None:
            with open(report, "w") as out:
                json.dump({"made": _made, "tests": _tests}, out)

        atexit.register(write)


if os.environ.get("FERRULE_TASK_SUITES_LOOP"):
    _install()
