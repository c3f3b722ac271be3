"""The parent process of ``--workers N`` (``Supervisor``): it binds the sockets once, starts
worker processes (``ferrule.spawning``), watches them and stops them."""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from typing import Any

from ferrule import systemd, upgrade
from ferrule.config import STARTUP_FAILURE, Config
from ferrule.handshake import REPLACE_ME
from ferrule.metrics import SUPERVISOR_SLOTS, Metrics, MetricsListenError
from ferrule.recycling import REASONS, Recycling
from ferrule.sockets import close_all, describe, remove_socket_file
from ferrule.spawning import parent_sockets, spawn_worker, stop_workers

logger = logging.getLogger("ferrule.error")


#: How long a new worker may take to start serving (import the app, run lifespan startup)
#: before its silence counts against the health check: generous, as imports can be slow.
WORKER_STARTUP_GRACE = 300.0

#: The pause before replacing a worker that died before it served, doubled at each such death
#: up to the maximum: an app that crashes at import does not respawn in a tight loop.
FIRST_CRASH_DELAY = 0.5
MAX_CRASH_DELAY = 30.0

#: Signals the supervisor acts on as uvicorn's does: restart the workers, one more, one fewer.
MANAGEMENT_SIGNALS = (signal.SIGHUP, signal.SIGTTIN, signal.SIGTTOU, signal.SIGUSR2)


class Worker:
    """A worker process started by ``Supervisor``, and the reading end of the pipe its event
    loop writes heartbeats on (see ``Heartbeat``)."""

    def __init__(self, config: Config, socks: list[socket.socket]) -> None:
        # With --metrics, a slot of the supervisor's region, kept until the worker has exited.
        self.metrics: Metrics | None = config.metrics_owner
        self.metrics_slot = None if self.metrics is None else self.metrics.claim()
        # Always a pipe, even with the health check off: its first beat says the worker serves,
        # which a restart on SIGHUP waits for before it retires the old worker.
        self.fd: int | None
        self.fd, write_end = os.pipe()
        os.set_blocking(self.fd, False)
        try:
            shared = None
            if self.metrics is not None and self.metrics_slot is not None:
                shared = (self.metrics.fd, self.metrics_slot)
            self.process = spawn_worker(config, socks, heartbeat_fd=write_end, metrics_slot=shared)
        except BaseException:
            self.close()
            raise
        finally:
            os.close(write_end)  # the worker's now: EOF here once it exits
        self.started = time.monotonic()
        self.last_beat: float | None = None
        self.terminated: float | None = None  # when the supervisor sent SIGTERM
        # Recycling: when its lifetime ends, whether it asked to be replaced, the worker
        # started to replace it (and why), and when a failed replacement may be tried again.
        self.lifetime_end: float | None = None
        self.asked_replacement = False
        self.successor: Worker | None = None
        self.reason = ""
        self.retry_at = 0.0

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def serving(self) -> bool:
        """Whether it has beaten once: its server is up (the app imported, lifespan started)."""
        return self.last_beat is not None

    def read_beats(self, now: float) -> None:
        if self.fd is None:
            return
        try:
            beats = os.read(self.fd, 4096)
        except BlockingIOError:  # nothing new
            return
        if beats:
            self.last_beat = now
        if REPLACE_ME in beats:
            self.asked_replacement = True

    def close(self) -> None:
        """Called once the process has exited (or never started)."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
        if self.metrics is not None and self.metrics_slot is not None:
            self.metrics.release(self.metrics_slot)
            self.metrics_slot = None


class Supervisor:
    """``--workers N``: N processes each importing the app itself (never forked after import),
    sharing the listening sockets, with uvicorn's signals:

    - a worker that dies is replaced, and so is one whose event loop stops beating
      (``--timeout-worker-healthcheck``); one that exits with ``STARTUP_FAILURE`` (the app would
      not load, lifespan startup failed) stops them all, as the next would fail the same way;
    - SIGHUP replaces the workers one by one, each retired only once its replacement serves
      (new code deployed under the same command); SIGTTIN adds a worker, SIGTTOU retires one;
    - a worker past ``--limit-max-requests``, ``--workers-max-rss`` or ``--workers-lifetime``
      is replaced the same way, one worker at a time (``Recycling``);
    - SIGINT/SIGTERM stops all.

    ``restarts`` counts the workers replaced, by reason (``recycling.REASONS``)."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.workers: list[Worker] = []
        # When to start a worker again in place of one that died before serving, and the
        # pause after the next such death (doubled each time, reset once a worker serves).
        self.respawns: list[float] = []
        self.crash_delay = FIRST_CRASH_DELAY
        # Workers sent SIGTERM (failed health check, replaced, one fewer): not waited for yet.
        self.retiring: list[Worker] = []
        self.stopping = False
        self.signals: list[int] = []  # SIGHUP, SIGTTIN, SIGTTOU received, not yet handled
        self.recycling = Recycling(config)
        # The pause before trying again to recycle a worker whose successor did not start,
        # doubled at each such failure (the app may have been broken on disk meanwhile).
        self.recycle_delay = FIRST_CRASH_DELAY
        self.restarts: dict[str, int] = dict.fromkeys(REASONS, 0)
        # Made before any worker starts: it takes systemd's variables from the environment,
        # so that only this process, the one systemd watches, speaks to it.
        self.systemd = systemd.Notifier()
        self.serving_told = -1  # the workers serving when systemd was last told
        self.upgrade: upgrade.Upgrade | None = None  # a new supervisor started on SIGUSR2
        self.upgraded = False  # that supervisor serves: this one stops

    def run(self) -> int:
        bound = parent_sockets(self.config)
        if bound is None:
            return STARTUP_FAILURE
        socks, socket_file = bound
        if not self._start_metrics():
            close_all(socks)
            remove_socket_file(self.config, socket_file)
            return STARTUP_FAILURE
        # The handlers first: a signal sent on seeing the lines below finds them in place.
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, self._on_stop_signal)
        for signum in MANAGEMENT_SIGNALS:
            signal.signal(signum, self._on_management_signal)
        logger.info("ferrule running on %s (Press CTRL+C to quit)", describe(socks, self.config))
        logger.info("Started parent process [%d]", os.getpid())
        self.workers = [self._new_worker(socks) for _ in range(self.config.workers)]
        status = 0
        while not self.stopping:
            self._handle_signals(socks)
            status = self._tend_workers(socks, time.monotonic())
            self._tell_systemd()
            self._follow_upgrade()
            time.sleep(0.1)
        self.systemd.send("STOPPING=1", "STATUS=Stopping")
        self._stop_everyone(socks, socket_file)
        logger.info("Stopping parent process [%d]", os.getpid())
        return status

    def _tell_systemd(self) -> None:
        """READY=1 once every worker serves (and again after a SIGHUP's RELOADING=1), STATUS=
        when the count of serving workers changes, and the watchdog's ping: this loop runs."""
        self.systemd.tick()
        serving = sum(worker.serving for worker in self.workers)
        if serving != self.serving_told and serving == len(self.workers):
            self.systemd.send("READY=1", f"STATUS={serving} workers serving")
            self.serving_told = serving
            upgrade.tell_ready()  # to the supervisor this one replaces, if any

    def _follow_upgrade(self) -> None:
        """Once the supervisor started on SIGUSR2 serves, this one stops (its workers finish
        what they have); if it exits first, this one serves on."""
        if self.upgrade is None:
            return
        state = self.upgrade.poll()
        if state == "ready":
            logger.info("New parent process [%d] serving; stopping this one.", self.upgrade.pid)
            self.systemd.send(f"MAINPID={self.upgrade.pid}", "STATUS=Upgraded")
            self.upgraded = self.stopping = True
        elif state == "failed":
            logger.error(
                "New parent process [%d] exited before serving (%s); serving on.",
                self.upgrade.pid,
                f"exit status {self.upgrade.process.returncode}",
            )
            self.upgrade = None

    def _start_metrics(self) -> bool:
        """With ``--metrics``, the region the workers count into and its listener; False if
        that could not listen."""
        if not self.config.metrics:
            return True
        metrics = Metrics(SUPERVISOR_SLOTS, restarts=lambda: self.restarts)
        try:
            metrics.listen(self.config.metrics_address, self.config.metrics_port)
        except MetricsListenError as exc:
            logger.error("%s", exc)
            metrics.close()
            return False
        self.config.metrics_owner = metrics
        return True

    def _tend_workers(self, socks: list[socket.socket], now: float) -> int:
        """One look at every worker: read its beats, and replace it if it exited or stopped
        beating, or recycle it when due. Returns ``STARTUP_FAILURE`` (and stops) if a worker
        failed to start, else 0."""
        read_rss = self.recycling.rss_due(now)
        gone: list[Worker] = []  # died before serving: replaced later (self.respawns)
        status = 0
        for i, worker in enumerate(self.workers):
            if self.stopping:
                break
            worker.read_beats(now)
            if worker.process.poll() is not None:
                if worker.process.returncode == STARTUP_FAILURE:
                    logger.error(
                        "Worker [%d] failed to start; stopping the parent process", worker.pid
                    )
                    self.stopping = True
                    status = STARTUP_FAILURE
                    break
                if self._replace_exited(worker, now):
                    self.workers[i] = worker.successor or self._new_worker(socks)
                else:
                    gone.append(worker)
            elif not self._healthy(worker, now):
                self.restarts["health_check"] += 1
                self._retire(worker, now)
                self.workers[i] = worker.successor or self._new_worker(socks)
            else:
                if worker.serving:
                    self.crash_delay = FIRST_CRASH_DELAY
                self._recycle(i, socks, now, read_rss)
        self.workers = [worker for worker in self.workers if worker not in gone]
        while self.respawns and self.respawns[0] <= now and not self.stopping:
            self.respawns.pop(0)
            self.workers.append(self._new_worker(socks))
        self._reap_retiring(now)
        return status

    def _replace_exited(self, worker: Worker, now: float) -> bool:
        """Says why ``worker`` exited. True if it is to be replaced at once; False if it died
        before serving, when its replacement waits (``respawns``)."""
        worker.close()
        self.restarts["crash"] += 1
        if worker.process.returncode == 0:  # stopped by someone else's SIGTERM
            logger.info("Worker [%d] finished; starting a new one", worker.pid)
        elif worker.serving:
            logger.warning(
                "Worker [%d] died (%s); starting a new one", worker.pid, worker.process.returncode
            )
        else:
            # Died before serving: the next one would likely die the same way, so wait longer
            # each time rather than flood the log with respawns.
            self.respawns.append(now + self.crash_delay)
            logger.warning(
                "Worker [%d] died before serving (%s); starting a new one in %g s",
                worker.pid,
                worker.process.returncode,
                self.crash_delay,
            )
            self.crash_delay = min(2 * self.crash_delay, MAX_CRASH_DELAY)
            return False
        return True

    def _stop_everyone(
        self, socks: list[socket.socket], socket_file: tuple[int, int] | None
    ) -> None:
        """Stops every worker (serving, retiring, or a successor not yet serving), then lets go
        of the socket and the metrics."""
        everyone = self.workers + self.retiring + self._successors()
        stop_workers(self.config, [worker.process for worker in everyone])
        for worker in everyone:
            worker.close()
        close_all(socks)
        if not self.upgraded:  # the new supervisor serves on the socket file
            remove_socket_file(self.config, socket_file)
        if self.config.metrics_owner is not None:
            self.config.metrics_owner.close()
            self.config.metrics_owner = None

    def _handle_signals(self, socks: list[socket.socket]) -> None:
        while self.signals and not self.stopping:
            signum = self.signals.pop(0)
            if signum == signal.SIGHUP:
                logger.info("Received SIGHUP, restarting processes.")
                self._restart_all(socks)
            elif signum == signal.SIGUSR2:
                if self.upgrade is not None:
                    logger.info("Received SIGUSR2, but an upgrade is under way.")
                    continue
                self.upgrade = upgrade.Upgrade(
                    [s.fileno() for s in socks], self.systemd.environment
                )
                logger.info(
                    "Received SIGUSR2, upgrading: new parent process [%d] started.",
                    self.upgrade.pid,
                )
            elif signum == signal.SIGTTIN:
                logger.info("Received SIGTTIN, increasing the number of processes.")
                self.workers.append(self._new_worker(socks))
            elif len(self.workers) <= 1:
                logger.info("Received SIGTTOU, but one process is the fewest there can be.")
            else:
                logger.info("Received SIGTTOU, decreasing the number of processes.")
                worker = self.workers.pop()
                self._drop_successor(worker)
                self._retire(worker, time.monotonic())

    def _restart_all(self, socks: list[socket.socket]) -> None:
        """Each worker in turn: start its replacement, wait until it serves, then retire the
        old one (SIGTERM: it finishes its requests). A replacement that exits or stays silent
        past the startup grace is killed and the restart given up, the old workers kept. A
        recycling in progress is dropped: its successor may run the old code."""
        for worker in self.workers:
            self._drop_successor(worker)
        self.systemd.reloading()
        self.serving_told = -1  # READY=1 again once all serve
        for i, old in enumerate(list(self.workers)):
            new = self._new_worker(socks)
            grace = self._startup_grace
            while not (new.serving or self.stopping or new.process.poll() is not None):
                now = time.monotonic()
                if now - new.started > grace:
                    break
                time.sleep(0.05)
                self.systemd.tick()
                new.read_beats(now)
                self._reap_retiring(now)
            if not new.serving or self.stopping:
                if new.process.poll() is None:
                    new.process.kill()
                new.process.wait()
                new.close()
                if not self.stopping:
                    logger.error(
                        "New worker [%d] did not start serving (%s); keeping worker [%d] "
                        "and giving up the restart",
                        new.pid,
                        f"exit status {new.process.returncode}"
                        if new.process.returncode is not None and new.process.returncode >= 0
                        else f"not within {grace:g} seconds",
                        old.pid,
                    )
                return
            self._retire(old, time.monotonic())
            self.workers[i] = new

    def _new_worker(self, socks: list[socket.socket]) -> Worker:
        worker = Worker(self.config, socks)
        worker.lifetime_end = self.recycling.lifetime_end(worker.started)
        return worker

    def _recycle(self, i: int, socks: list[socket.socket], now: float, read_rss: bool) -> None:
        """Recycling of the serving worker ``self.workers[i]``: once its successor serves,
        it is retired and the successor takes its place; a successor that exits or does not
        serve in time is killed, the worker kept and tried again later. Else, if it is due
        (and no other worker is being replaced), its successor is started."""
        worker = self.workers[i]
        new = worker.successor
        if new is not None:
            new.read_beats(now)
            if new.serving:
                worker.successor = None
                self._retire(worker, now)
                self.workers[i] = new
                self.restarts[worker.reason] += 1
                self.recycle_delay = FIRST_CRASH_DELAY
                logger.info("Worker [%d] serves; stopping worker [%d]", new.pid, worker.pid)
            elif new.process.poll() is not None or now - new.started > self._startup_grace:
                worker.successor = None
                status = new.process.poll()
                if status is None:
                    new.process.kill()
                    new.process.wait()
                new.close()
                logger.error(
                    "New worker [%d] did not start serving (%s); keeping worker [%d], and "
                    "trying again in %g s",
                    new.pid,
                    f"not within {self._startup_grace:g} seconds"
                    if status is None
                    else f"exit status {status}",
                    worker.pid,
                    self.recycle_delay,
                )
                worker.retry_at = now + self.recycle_delay
                self.recycle_delay = min(2 * self.recycle_delay, MAX_CRASH_DELAY)
            return
        if not worker.serving or now < worker.retry_at or self._successors():
            return
        reason, why = self._due(worker, now, read_rss)
        if reason:
            logger.warning("Worker [%d] past %s: replacing it", worker.pid, why)
            worker.reason = reason
            worker.successor = self._new_worker(socks)

    def _due(self, worker: Worker, now: float, read_rss: bool) -> tuple[str, str]:
        """Why ``worker`` is to be replaced: the reason counted and the limit passed, for the
        log; empty strings if it is not."""
        if worker.asked_replacement:
            return "max_requests", "--limit-max-requests"
        why = self.recycling.over_rss(worker.pid) if read_rss else None
        if why:
            return "max_rss", why
        why = self.recycling.over_lifetime(worker.lifetime_end, worker.started, now)
        if why:
            return "lifetime", why
        return "", ""

    def _successors(self) -> list[Worker]:
        """The workers started to replace one being recycled, not serving in its place yet."""
        return [worker.successor for worker in self.workers if worker.successor is not None]

    def _drop_successor(self, worker: Worker) -> None:
        """Gives up the recycling of ``worker``: its successor is stopped."""
        if worker.successor is not None:
            self._retire(worker.successor, time.monotonic())
            worker.successor = None

    def _retire(self, worker: Worker, now: float) -> None:
        """SIGTERM, and watched by ``_reap_retiring`` until it exits."""
        worker.process.send_signal(signal.SIGTERM)
        worker.terminated = now
        self.retiring.append(worker)

    @property
    def _startup_grace(self) -> float:
        """How long a new worker may take to serve its first request."""
        return max(WORKER_STARTUP_GRACE, self.config.timeout_worker_healthcheck)

    def _healthy(self, worker: Worker, now: float) -> bool:
        """False, with a warning, for a worker whose loop has not beaten for the timeout, or
        that has not started serving within ``WORKER_STARTUP_GRACE``."""
        timeout = self.config.timeout_worker_healthcheck
        if not timeout:
            return True
        if worker.last_beat is None:
            grace = self._startup_grace
            if now - worker.started <= grace:
                return True
            logger.warning(
                "Worker [%d] has not started serving within %g seconds; "
                "terminating it and starting a new one",
                worker.pid,
                grace,
            )
            return False
        silent = now - worker.last_beat
        if silent <= timeout:
            return True
        logger.warning(
            "Worker [%d] failed its health check: its event loop has not run for %.1f seconds "
            "(--timeout-worker-healthcheck %g); terminating it and starting a new one",
            worker.pid,
            silent,
            timeout,
        )
        return False

    def _reap_retiring(self, now: float) -> None:
        """Forget the retiring workers that exited; SIGKILL one whose loop is still stuck a
        health-check timeout after its SIGTERM (a blocked loop never runs the handler), or
        still shutting down past the graceful-shutdown timeout and 5 s."""
        timeout = self.config.timeout_worker_healthcheck
        graceful = (self.config.timeout_graceful_shutdown or 30) + 5
        for worker in list(self.retiring):
            if worker.process.poll() is not None:
                worker.close()
                self.retiring.remove(worker)
                continue
            assert worker.terminated is not None
            worker.read_beats(now)
            stuck = worker.last_beat is None or worker.last_beat < worker.terminated
            waited = now - worker.terminated
            if (stuck and waited > timeout) or waited > graceful:
                logger.warning("Worker [%d] did not stop after SIGTERM; killing it", worker.pid)
                worker.process.kill()
                worker.process.wait()
                worker.close()
                self.retiring.remove(worker)

    def _on_stop_signal(self, signum: int, frame: Any) -> None:
        self.stopping = True

    def _on_management_signal(self, signum: int, frame: Any) -> None:
        self.signals.append(signum)
