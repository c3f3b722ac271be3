"""Runs ``ferrule.supervisor.Supervisor`` in this process, as a metrics exporter living in the
parent would see it, and prints its ``restarts`` as JSON when it stops.

``python restarts_script.py SECONDS``: two workers of ``leak_app`` with a 2 s lifetime; once
both serve, one is killed (SIGKILL); once the kill and two lifetimes are counted, or after
SECONDS more (a loaded machine takes several seconds over each replacement), the supervisor
is told to stop.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time

from ferrule._logging import configure_logging
from ferrule.config import Config
from ferrule.supervisor import Supervisor

config = Config("leak_app:app", port=0, workers=2, workers_lifetime=2)
configure_logging(config.log_level_number, False)
supervisor = Supervisor(config)


def drive() -> None:
    deadline = time.monotonic() + 30
    while not (
        len(supervisor.workers) == 2 and all(worker.serving for worker in supervisor.workers)
    ):
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    os.kill(supervisor.workers[0].pid, signal.SIGKILL)
    deadline = time.monotonic() + float(sys.argv[1])
    restarts = supervisor.restarts
    while time.monotonic() < deadline and not (restarts["crash"] and restarts["lifetime"] >= 2):
        time.sleep(0.05)
    supervisor.stopping = True


threading.Thread(target=drive, daemon=True).start()
supervisor.run()
print(json.dumps(supervisor.restarts))
