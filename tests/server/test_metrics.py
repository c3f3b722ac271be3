"""--metrics: a Prometheus endpoint on its own port, summed over every worker process. Each test
starts the real server, makes requests over real sockets and scrapes ``/metrics``, parsed
with the Prometheus client library's own text parser."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from collections.abc import Iterable
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.serverutil import (
    ServerProcess,
    ferrule_command,
    free_port,
    poll,
    run_to_exit,
    running_server,
)
from websockets.asyncio.client import connect

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(port: int, path: str = "/metrics") -> httpx.Response:
    return httpx.get(f"http://127.0.0.1:{port}{path}", timeout=5, trust_env=False)


def samples(port: int) -> Samples:
    """Every sample of one scrape, by name and labels."""
    response = scrape(port)
    assert response.status_code == 200, response.text
    found: Samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(found: Samples, name: str, **labels: str) -> float:
    return found.get((name, frozenset(labels.items())), 0.0)


def labelled(found: Samples, name: str, label: str) -> dict[str, float]:
    """``label``'s value to the sample's, for every sample of ``name``."""
    return {
        dict(labels)[label]: sample
        for (sample_name, labels), sample in found.items()
        if sample_name == name and label in dict(labels)
    }


def get_on_new_connections(server: ServerProcess, count: int) -> set[int]:
    """``count`` requests, each on a new connection (so any worker may take it); the pids."""
    pids = set()
    for _ in range(count):
        with httpx.Client(base_url=server.base_url, timeout=5, trust_env=False) as client:
            response = client.get("/")
            assert response.status_code == 200
            pids.add(response.json()["pid"])
    return pids


def metrics_args(port: int, *extra: str) -> Iterable[str]:
    return ("--metrics", "--metrics-port", str(port), *extra)


def test_one_process_counts_each_request_and_serves_the_text_format() -> None:
    """Rule: one process (no --workers) serves /metrics itself: requests by protocol and status
    class, their durations, the bridge's counters and GIL waits, its memory and descriptors.
    Fails without the metrics: nothing listens on --metrics-port; with counting only at the
    app's end, the 501 the server answers itself (a CONNECT) is missing."""
    port = free_port()
    with running_server("workers_app:app", "--loop", "asyncio", *metrics_args(port)) as server:
        with httpx.Client(base_url=server.base_url, timeout=5, trust_env=False) as client:
            for _ in range(25):
                assert client.get("/").status_code == 200
            response = scrape(port)
            assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
            during = samples(port)
            assert value(during, "ferrule_connections_active") == 1
            # Refused by the server itself, which then closes the connection.
            assert client.request("CONNECT", "/").status_code == 501

        def published() -> Samples | None:
            found = samples(port)
            return found if value(found, "ferrule_bridge_drives_total") >= 25 else None

        found = poll(published, what="the bridge counters to be published")
    requests = "ferrule_requests_total"
    assert value(found, requests, protocol="http/1.1", status="2xx") == 25
    assert value(found, requests, protocol="http/1.1", status="5xx") == 1
    assert value(found, "ferrule_request_duration_seconds_count", protocol="http/1.1") == 26
    assert value(found, "ferrule_request_duration_seconds_sum", protocol="http/1.1") > 0
    assert (
        value(found, "ferrule_request_duration_seconds_bucket", protocol="http/1.1", le="+Inf")
        == 26
    )
    assert value(found, "ferrule_request_duration_seconds_count", protocol="h2") == 0
    # asyncio's selector loop: every request's start takes the GIL on a tokio thread.
    assert value(found, "ferrule_gil_wait_seconds_count", phase="start") == 25
    assert value(found, "ferrule_gil_wait_seconds_bucket", phase="start", le="+Inf") == 25
    assert value(found, "ferrule_bridge_collisions_total") == 0
    assert value(found, "ferrule_connections_active") == 0
    assert labelled(found, "ferrule_worker_resident_memory_bytes", "worker").keys() == {
        str(server.pid)
    }
    assert value(found, "ferrule_worker_open_fds", worker=str(server.pid)) > 3
    assert value(found, "ferrule_workers") == 1
    restarts = labelled(found, "ferrule_worker_restarts_total", "reason")
    assert restarts == {
        "crash": 0,
        "max_requests": 0,
        "max_rss": 0,
        "lifetime": 0,
        "health_check": 0,
    }


@pytest.mark.smoke
@pytest.mark.parametrize("region", ["memfd", "unlinked-file"])
def test_two_workers_one_scrape_shows_the_sum(region: str, tmp_path: Path) -> None:
    """Rule: with --workers 2 the parent serves /metrics, and one scrape is the sum over both
    workers, with each worker's memory labelled by its pid. Fails with per-process counting
    (a worker answering the scrape): the total is one worker's share. ``unlinked-file`` is the
    region where there is no memfd (macOS), made here by taking ``os.memfd_create`` away; seen
    failing (no server start: AttributeError) before the region had that counterpart."""
    env = None
    if region == "unlinked-file":
        (tmp_path / "sitecustomize.py").write_text("import os\ndel os.memfd_create\n")
        env = {
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])
            )
        }
    port = free_port()
    with running_server(
        "workers_app:app", "--workers", "2", *metrics_args(port), env=env
    ) as server:
        seen: set[int] = set()
        sent = 0
        while len(seen) < 2 or sent < 40:
            seen |= get_on_new_connections(server, 10)
            sent += 10
            assert sent <= 400, f"only {seen} answered"

        def published() -> Samples | None:
            found = samples(port)
            starts = value(found, "ferrule_gil_wait_seconds_count", phase="start")
            return found if starts == sent else None

        # uvloop (the default loop): a start's wait for the loop thread is its GIL wait.
        found = poll(published, what="every start's GIL wait to be published")
    assert value(found, "ferrule_requests_total", protocol="http/1.1", status="2xx") == sent
    assert value(found, "ferrule_request_duration_seconds_count", protocol="http/1.1") == sent
    workers = labelled(found, "ferrule_worker_resident_memory_bytes", "worker")
    assert {int(pid) for pid in workers} == seen
    assert all(rss > 1_000_000 for rss in workers.values())
    assert value(found, "ferrule_workers") == 2


def test_a_replaced_workers_requests_stay_counted() -> None:
    """Rule: counters never go down: the requests a worker served stay in the totals after it
    is killed and replaced, and the restart is counted by reason. Seen failing with the
    dead worker's slot freed without folding its counts in: 4 requests counted of 10 sent."""
    port = free_port()
    with running_server("workers_app:app", "--workers", "2", *metrics_args(port)) as server:
        seen: set[int] = set()
        sent = 0
        while len(seen) < 2:
            seen |= get_on_new_connections(server, 10)
            sent += 10
            assert sent <= 400, f"only {seen} answered"
        victim = min(seen)
        os.kill(victim, signal.SIGKILL)

        def replaced() -> Samples | None:
            found = samples(port)
            pids = labelled(found, "ferrule_worker_resident_memory_bytes", "worker")
            fresh = {int(pid) for pid in pids} - seen
            return found if fresh and len(pids) == 2 else None

        found = poll(replaced, what="a new worker in the metrics")
        assert value(found, "ferrule_requests_total", protocol="http/1.1", status="2xx") == sent
        assert value(found, "ferrule_worker_restarts_total", reason="crash") == 1
        sent += len(get_on_new_connections(server, 5)) and 5
        found = samples(port)
    assert value(found, "ferrule_requests_total", protocol="http/1.1", status="2xx") == sent


def test_websockets_and_http2_are_counted_by_protocol() -> None:
    """Rule: a WebSocket handshake counts as protocol ws (101: 1xx) and its session in
    ferrule_websockets_active while it is open; an h2c request counts as h2. Fails if the
    upgrade bypasses the counting (no ws sample) or HTTP/2 is labelled http/1.1."""
    port = free_port()
    with running_server("ws_app:app", *metrics_args(port)) as server:
        assert server.port is not None

        async def session() -> Samples:
            async with connect(f"ws://127.0.0.1:{server.port}/echo", ping_interval=None) as ws:
                await ws.send("hi")
                assert await ws.recv() == "hi"
                return await asyncio.to_thread(
                    poll,
                    lambda: (
                        (found := samples(port))
                        and (value(found, "ferrule_websockets_active") == 1 and found or None)
                    ),
                    timeout=5,
                    what="the open session in the metrics",
                )

        during = asyncio.run(session())
        assert value(during, "ferrule_requests_total", protocol="ws", status="1xx") == 1
        with httpx.Client(http1=False, http2=True, timeout=5, trust_env=False) as client:
            assert client.get(f"http://127.0.0.1:{server.port}/").http_version == "HTTP/2"
        found = poll(
            lambda: (s := samples(port)) and (value(s, "ferrule_websockets_active") == 0 and s),
            timeout=5,
            what="the closed session to leave the gauge",
        )
    assert value(found, "ferrule_requests_total", protocol="h2", status="2xx") == 1
    assert value(found, "ferrule_request_duration_seconds_count", protocol="h2") == 1


def test_only_metrics_is_served_and_off_by_default() -> None:
    """Rule: the endpoint answers /metrics and 404 elsewhere, and without --metrics nothing
    listens on the metrics port. Fails if another path gets the metrics, or the endpoint is on
    by default."""
    port = free_port()
    with running_server("workers_app:app", *metrics_args(port)):
        assert scrape(port, "/").status_code == 404
        assert scrape(port, "/metrics/x").status_code == 404
        assert scrape(port, "/metrics?name=x").status_code == 200
    with running_server("workers_app:app", "--metrics-port", str(port)):
        with pytest.raises(httpx.ConnectError):
            scrape(port)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_metrics_port_in_use_is_a_startup_error_naming_the_option(workers: str) -> None:
    """Rule: a --metrics-port someone else listens on stops the server at startup (status 3)
    with an error naming --metrics-port. Fails if the server serves without its metrics, or
    the message leaves the operator to guess which port clashed."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        argv = ferrule_command(
            "workers_app:app", "--port", "0", "--workers", workers, *metrics_args(port)
        )
        finished = run_to_exit(argv, timeout=30)
    assert finished.returncode == 3, finished.describe()
    assert f"--metrics-port {port}" in finished.stderr, finished.describe()


def test_recycled_workers_keep_their_counts_and_the_reason_is_counted() -> None:
    """Rule: workers replaced at --limit-max-requests keep their requests in the totals, and
    each replacement shows in ferrule_worker_restarts_total{reason="max_requests"}. Seen
    failing with the supervisor's restarts not passed to the endpoint: the reason stayed 0 for
    20 s; a retired worker's slot dropped would make the total fall short of the requests sent."""
    port = free_port()
    args = ("--workers", "2", "--limit-max-requests", "5", *metrics_args(port))
    with running_server("workers_app:app", *args) as server:
        sent = 0
        for _ in range(6):
            sent += len(get_on_new_connections(server, 5)) and 5

        def recycled() -> Samples | None:
            found = samples(port)
            return (
                found
                if value(found, "ferrule_worker_restarts_total", reason="max_requests")
                else None
            )

        found = poll(recycled, timeout=20, what="a worker replaced at --limit-max-requests")
        assert value(found, "ferrule_requests_total", protocol="http/1.1", status="2xx") == sent
