"""Default logging for the server's two loggers, unless the user configured them already."""

from __future__ import annotations

import json
import logging
import logging.config
import sys
from pathlib import Path
from typing import Any

TRACE = 5
logging.addLevelName(TRACE, "TRACE")


def apply_log_config(log_config: str | dict[str, Any]) -> None:
    """uvicorn's ``--log-config``: a dictConfig dict, a ``.json`` or ``.yaml``/``.yml`` file
    holding one, or a ``logging.config.fileConfig`` file. Raises ``ValueError`` saying why a
    file cannot be used."""
    if isinstance(log_config, dict):
        logging.config.dictConfig(log_config)
        return
    path = Path(log_config)
    try:
        if path.suffix == ".json":
            logging.config.dictConfig(json.loads(path.read_text()))
        elif path.suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:
                raise ValueError(f"{path}: a YAML log config needs PyYAML") from None
            logging.config.dictConfig(yaml.safe_load(path.read_text()))
        else:
            logging.config.fileConfig(path, disable_existing_loggers=False)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"cannot use the log config {path}: {exc}") from exc


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
