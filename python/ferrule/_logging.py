"""Default logging for the server's two loggers, unless the user configured them already."""

from __future__ import annotations

import logging
import sys

TRACE = 5
logging.addLevelName(TRACE, "TRACE")


def configure_logging(level: int) -> None:
    for name in ("ferrule.error", "ferrule.access"):
        logger = logging.getLogger(name)
        logger.setLevel(level)
        if not logger.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter("%(levelname)s:%(padding)s%(message)s"))
            handler.addFilter(_pad_level)
            logger.addHandler(handler)
            logger.propagate = False


def _pad_level(record: logging.LogRecord) -> bool:
    record.padding = " " * max(1, 9 - len(record.levelname))
    return True
