"""``--metrics``: the Prometheus endpoint, summed over every worker.

The process that owns the metrics (the supervisor with ``--workers``, else the one server)
makes a shared memory region (a memfd; on macOS an unlinked file) with one slot per worker and
serves ``GET /metrics`` on its own listener (``--metrics-address``, ``--metrics-port``). Each
worker maps the inherited file and its server core adds to its own slot with atomic adds; a
scrape sums the slots in the core, adds each worker's resident memory and open descriptors
(``ferrule.usage``) and the supervisor's restart counts, and encodes them
(``prometheus-client``). Nothing is asked of the workers at scrape time, and a worker's counts
outlive it (its slot is folded into the totals when it exits). ``docs/operations.md`` lists
every metric."""

from __future__ import annotations

import logging
import os
import socket
import tempfile
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from ferrule._ferrule import MetricsRegion
from ferrule.usage import open_descriptors, resident_bytes

logger = logging.getLogger("ferrule.error")

#: Slots in a supervisor's region: workers serving at once, SIGTTIN included; a worker
#: started when all are taken serves without metrics (and a warning says so).
SUPERVISOR_SLOTS = 256

#: The one path answered.
PATH = "/metrics"


class MetricsListenError(Exception):
    """The metrics endpoint could not listen; the message names ``--metrics-port``."""


class Metrics:
    """The region and the ``/metrics`` listener of the process that owns them.
    ``restarts`` returns the restart counts by reason (the supervisor's ``restarts``)."""

    def __init__(self, slots: int, restarts: Callable[[], Mapping[str, int]] = lambda: {}) -> None:
        self.fd = _anonymous_file()
        try:
            os.ftruncate(self.fd, MetricsRegion.size_for(slots))
            self.region = MetricsRegion(os.dup(self.fd))
        except BaseException:
            os.close(self.fd)
            raise
        self.restarts = restarts
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._closing = False

    def listen(self, address: str, port: int) -> tuple[str, int]:
        """Binds the endpoint and serves it on a thread; returns where it listens."""
        metrics = self

        class Handler(BaseHTTPRequestHandler):
            server_version = "ferrule-metrics"

            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path.split("?", 1)[0] != PATH:
                    self.send_error(404)
                    return
                body = metrics.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", MetricsRegion.CONTENT_TYPE)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # a scrape every few seconds is not worth a log line

        class Listener(ThreadingHTTPServer):
            address_family = socket.AF_INET6 if ":" in address else socket.AF_INET

        try:
            server = Listener((address, port), Handler)
        except OSError as exc:
            raise MetricsListenError(
                f"Cannot listen for the metrics on {address}:{port} (--metrics-address "
                f"{address}, --metrics-port {port}): {exc.strerror or exc}"
            ) from None
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=self._serve, name="ferrule-metrics", daemon=True)
        self._thread.start()
        host, bound_port = server.server_address[:2]
        logger.info("Metrics on http://%s:%d%s", _host_for_url(str(host)), bound_port, PATH)
        return str(host), bound_port

    def _serve(self) -> None:
        # Blocks in accept until a scrape comes, where serve_forever would wake (and take the
        # GIL) twice a second; close() wakes it with a connection of its own.
        assert self._server is not None
        while not self._closing:
            self._server.handle_request()

    def claim(self) -> int | None:
        """A slot for a worker about to start; None (with a warning) if all are taken."""
        slot = self.region.claim()
        if slot is None:
            logger.warning(
                "All %d metrics slots are taken: the new worker's requests are not counted",
                self.region.slots,
            )
        return slot

    def release(self, slot: int) -> None:
        """The worker of ``slot`` has exited: its counts stay, its slot is free again."""
        self.region.release(slot)

    def render(self) -> str:
        processes = []
        for pid in self.region.pids():
            usage = process_usage(pid)
            if usage is not None:
                processes.append((pid, *usage))
        return self.region.encode(processes, dict(self.restarts()))

    def close(self) -> None:
        if self._server is not None:
            self._closing = True
            host, port = self._server.server_address[:2]
            try:
                socket.create_connection((str(host), port), timeout=1).close()
            except OSError:
                pass
            if self._thread is not None:
                self._thread.join(2)
            self._server.server_close()
            self._server = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def process_usage(pid: int) -> tuple[int, int] | None:
    """A process's resident memory (bytes) and open descriptors; None if it is gone."""
    resident, fds = resident_bytes(pid), open_descriptors(pid)
    if resident is None or fds is None:
        return None
    return resident, fds


def _anonymous_file() -> int:
    """A descriptor of a file no path names, for the region: a memfd where there is one (Linux),
    else a temporary file unlinked at once (macOS), which workers map the same way."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create("ferrule-metrics", os.MFD_CLOEXEC)
    with tempfile.TemporaryFile(prefix="ferrule-metrics-") as file:
        return os.dup(file.fileno())


def worker_region(fd: int) -> MetricsRegion:
    """A worker's mapping of the region it inherited as ``fd`` (closed here: the mapping stays)."""
    try:
        return MetricsRegion(os.dup(fd))
    finally:
        os.close(fd)


def _host_for_url(host: str) -> str:
    return f"[{host}]" if ":" in host else host
