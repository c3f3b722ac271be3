"""Helpers for the framework compatibility suite (``tests/compat/``): other people's
frameworks (Django, Litestar, Quart, python-socketio, FastAPI, Starlette with sse-starlette)
served by the real server process and driven by real clients (httpx, ``websockets``, the
Socket.IO client).

- :func:`framework_server` starts an app of ``tests/apps`` on one loop kind, with an events file
  (``FERRULE_TEST_EVENTS``) its lifespan hooks write to; the module-scoped fixtures use it.
- :func:`stop_cleanly` is the clean-stop rule every framework must pass: SIGINT or SIGTERM, exit
  within a few seconds with a clean status, and nothing on stderr a user would take for an
  error (:data:`ERROR_MARKERS`). :data:`STOP_CASES` pairs the loop kinds with the signals.
- :func:`parse_sse` splits a ``text/event-stream`` body into events.

Imported by the test modules as ``from compatutil import ...`` (pytest puts ``tests/compat``
on ``sys.path``).
"""

from __future__ import annotations

import contextlib
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.loopkinds import HAS_UVLOOP
from support.serverutil import (
    STOP_TIMEOUT,
    ServerProcess,
    is_clean_exit,
    poll,
    read_events,
    running_server,
)

#: What a user reading the server's stderr after a stop would take for a problem.
ERROR_MARKERS = ("Task was destroyed but it is pending!", "Traceback", "ERROR", "Exception")
#: How long a stop may take once every client is gone (under a second on an idle machine; a
#: stop that hangs is what fails).
CLEAN_STOP_SECONDS = STOP_TIMEOUT
#: Startup bound for the framework apps (Django, Litestar and FastAPI import a lot, for many
#: seconds on a loaded machine).
FRAMEWORK_STARTUP = 45.0

#: Each loop kind once, each with one of the two stop signals.
STOP_CASES = [
    pytest.param("asyncio", signal.SIGINT, id="asyncio-SIGINT"),
    pytest.param(
        "uvloop",
        signal.SIGTERM,
        id="uvloop-SIGTERM",
        marks=pytest.mark.skipif(not HAS_UVLOOP, reason="uvloop is not importable"),
    ),
]


@contextlib.contextmanager
def framework_server(app: str, loop: str, events: Path, *args: str) -> Iterator[ServerProcess]:
    """``python -m ferrule APP --loop LOOP ARGS`` with ``FERRULE_TEST_EVENTS=events``; the
    process gets ``loop_kind`` and ``events`` attributes for the tests."""
    env = {"FERRULE_TEST_EVENTS": str(events)}
    with running_server(app, "--loop", loop, *args, env=env, timeout=FRAMEWORK_STARTUP) as server:
        server.loop_kind = loop  # type: ignore[attr-defined]
        server.events = events  # type: ignore[attr-defined]
        yield server


def stop_cleanly(
    server: ServerProcess, sig: int, *, within: float = CLEAN_STOP_SECONDS, sent: bool = False
) -> None:
    """Send ``sig`` (unless the test already ``sent`` it: a second one would force the stop);
    the server must exit cleanly within ``within`` seconds and its stderr must hold none of
    :data:`ERROR_MARKERS` (the failure message quotes the offending lines)."""
    started = time.monotonic()
    if sent:
        try:
            code = server.wait_exit(within)
        except AssertionError:
            server.kill_group()
            raise
    else:
        code = server.stop(sig, timeout=within)  # kills the group and fails when too slow
    elapsed = time.monotonic() - started
    assert is_clean_exit(code, sig), f"exit status {code}\n{server.describe()}"
    noisy = [
        line
        for line in server.stderr.splitlines()
        if any(marker in line for marker in ERROR_MARKERS)
    ]
    assert not noisy, (
        f"stderr after a clean stop ({elapsed:.1f}s) has lines a user takes for errors:\n"
        + "\n".join(noisy[:20])
        + f"\n{server.describe()}"
    )


def logged_events(server: ServerProcess) -> list[str]:
    """What the app's lifespan hooks wrote to the events file so far."""
    return read_events(server.events)  # type: ignore[attr-defined]


def parse_sse(text: str) -> list[dict[str, str]]:
    """The events of a ``text/event-stream`` body: one dict of field -> value per event
    (``data`` lines joined by newlines); comment lines (``: ping``) are dropped."""
    events: list[dict[str, str]] = []
    current: dict[str, str] = {}
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        if not line:
            if current:
                events.append(current)
                current = {}
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data" and "data" in current:
            current["data"] += "\n" + value
        else:
            current[name] = value
    if current:
        events.append(current)
    return events


def background_task_ran(client: httpx.Client) -> Any:
    """POSTs ``/background/KEY`` (the app answers 202 and leaves a background task), then polls
    ``/results/KEY`` until the task has recorded its result, which is returned."""
    key = uuid.uuid4().hex
    assert client.post(f"/background/{key}").status_code == 202
    return poll(
        lambda: (r := client.get(f"/results/{key}")).status_code == 200 and r.json(),
        timeout=5,
        what="the background task's result",
    )
