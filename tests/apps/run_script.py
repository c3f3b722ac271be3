"""Starts the server with ``ferrule.run``, as a program embedding ferrule would.

``python run_script.py object|string LOGFILE``: serve ``hello_app.app``, passed as the object or
as the import string. Every log record of a ``ferrule.*`` logger that Python's ``logging``
handles is also written to LOGFILE as ``NAME MESSAGE`` (``Logger.handle`` is wrapped, so this
works whatever handlers ``ferrule.run`` installs), to check the server logs through ``logging``.
"""

from __future__ import annotations

import logging
import sys

import ferrule

mode, log_file = sys.argv[1], sys.argv[2]
original_handle = logging.Logger.handle


def recording_handle(self: logging.Logger, record: logging.LogRecord) -> None:
    if record.name.startswith("ferrule"):
        with open(log_file, "a", encoding="utf-8") as out:
            out.write(f"{record.name} {record.getMessage()}\n")
    original_handle(self, record)


logging.Logger.handle = recording_handle  # type: ignore[method-assign]

if mode == "object":
    from hello_app import app as target
else:
    target = "hello_app:app"

ferrule.run(target, host="127.0.0.1", port=0, loop="asyncio", lifespan="on", log_level="info")
