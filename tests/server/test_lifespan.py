"""Lifespan: startup before serving, startup failures, auto/on/off, shutdown after the last
request, and state in every request scope (``lifespan_apps``)."""

from __future__ import annotations

import signal
import threading
import uuid
from pathlib import Path

import httpx
import pytest
from support.serverutil import (
    ferrule_command,
    fetch_record,
    free_port,
    is_clean_exit,
    poll,
    read_events,
    run_to_exit,
    running_server,
    start_server,
    wait_for_event,
)


def test_startup_completes_before_first_request() -> None:
    """Rule: lifespan startup completes before the first request is accepted. The port is known
    in advance and polled from the moment the process starts; startup takes 1 s. Broken: a
    request is served with {"started": false}, i.e. before startup.complete."""
    port = free_port()
    server = start_server(
        "lifespan_apps:slow_startup",
        "--port",
        str(port),
        "--lifespan",
        "on",
        wait=False,
        env={"FERRULE_TEST_STARTUP_DELAY": "1.0"},
    )
    try:

        def probe() -> dict:
            assert server.returncode is None, server.describe()
            with httpx.Client(timeout=5.0, trust_env=False) as client:
                return client.get(f"http://127.0.0.1:{port}/").json()

        first = poll(probe, timeout=30, interval=0.02, what="the first response")
        assert first == {"started": True}, server.describe()
        server.wait_running()
    finally:
        server.close()


@pytest.mark.parametrize("mode", ["auto", "on"])
def test_startup_failed_exits_non_zero(mode: str) -> None:
    """Rule: lifespan.startup.failed makes the process exit non-zero with the message logged
    (in auto and on modes). Broken: the server serves anyway (the command does not exit and is
    killed after 15 s), exits 0, or drops the message."""
    tok = uuid.uuid4().hex
    result = run_to_exit(
        ferrule_command("lifespan_apps:startup_failed", "--port", "0", "--lifespan", mode),
        env={"FERRULE_TEST_TOKEN": tok},
    )
    assert result.returncode != 0, result.describe()
    assert f"startup refused {tok}" in result.stderr, result.describe()
    assert "running on" not in result.stderr, result.describe()


def test_startup_exception_with_lifespan_on_exits_non_zero() -> None:
    """Rule: with --lifespan on, an exception during startup makes the process exit non-zero
    with the exception logged. Broken: the server starts serving, exits 0, or the message is
    missing from stderr."""
    tok = uuid.uuid4().hex
    result = run_to_exit(
        ferrule_command("lifespan_apps:startup_raises", "--port", "0", "--lifespan", "on"),
        env={"FERRULE_TEST_TOKEN": tok},
    )
    assert result.returncode != 0, result.describe()
    assert f"startup exploded {tok}" in result.stderr, result.describe()


def test_lifespan_auto_serves_app_without_lifespan_support() -> None:
    """Rule: --lifespan auto (the default): an app that raises on the lifespan scope is served
    anyway. Broken: the process exits at startup (no running line) or requests fail."""
    with running_server("lifespan_apps:rejects_lifespan") as server:
        response = server.get("/")
    assert response.status_code == 200
    assert response.text == "served without lifespan"


def test_lifespan_off_never_calls_lifespan() -> None:
    """Rule: --lifespan off never sends a lifespan scope. Broken: the app records that it was
    called with one."""
    with running_server("lifespan_apps:probe_lifespan", "--lifespan", "off") as server:
        assert server.get("/").json() == {"lifespan_called": False}


def test_lifespan_on_calls_lifespan() -> None:
    """Rule: --lifespan on runs the lifespan protocol. Broken: the app never sees a lifespan
    scope (it reports false)."""
    with running_server("lifespan_apps:probe_lifespan", "--lifespan", "on") as server:
        assert server.get("/").json() == {"lifespan_called": True}


def test_shutdown_runs_after_last_in_flight_request(tmp_path: Path) -> None:
    """Rule: on SIGINT, lifespan shutdown runs only after the last in-flight request finished.
    Broken: the events file shows "shutdown" before "request-end", the request fails, or
    shutdown never runs."""
    events = tmp_path / "events.log"
    with running_server(
        "lifespan_apps:shutdown_order", env={"FERRULE_TEST_EVENTS": str(events)}
    ) as server:
        results: list[httpx.Response | BaseException] = []

        def request() -> None:
            try:
                results.append(server.get("/", params={"sleep": "1.0"}, timeout=10))
            except BaseException as exc:  # noqa: BLE001 - reported below
                results.append(exc)

        thread = threading.Thread(target=request)
        thread.start()
        wait_for_event(events, "request-start")
        server.send_signal(signal.SIGINT)
        thread.join(15)
        code = server.wait_exit(15)
    assert isinstance(results[0], httpx.Response) and results[0].status_code == 200, results
    assert is_clean_exit(code), server.describe()
    assert read_events(events) == ["startup", "request-start", "request-end", "shutdown"]


def test_state_reaches_every_request_as_a_shallow_copy() -> None:
    """Rule: every request scope has "state", a shallow copy of what startup stored: startup's
    keys are there, a key one request adds is not seen by the next, nested objects are shared.
    Broken: no state / missing token; the same dict passed to every request (had_request_key
    true); or a deep copy (shared_len stays 0)."""
    with running_server("lifespan_apps:with_state") as server, server.client() as client:
        reports = [client.get("/").json() for _ in range(3)]
    assert [r["token"] for r in reports] == ["state-from-startup"] * 3
    assert [r["had_request_key"] for r in reports] == [False] * 3
    assert [r["shared_len"] for r in reports] == [0, 1, 2]


def test_app_can_add_signal_handler_during_startup() -> None:
    """Rule: an app that calls loop.add_signal_handler during lifespan startup does not crash
    (e.g. for being driven off the main thread), and its handler runs. Broken: startup fails
    (--lifespan on makes it exit), or SIGUSR1 kills the process / is never handled."""
    with running_server("lifespan_apps:signal_handler", "--lifespan", "on") as server:
        server.send_signal(signal.SIGUSR1)
        assert fetch_record(server, "usr1") == {"handled": True}
        code = server.stop()
    assert is_clean_exit(code), server.describe()
