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


def configure_logging(level: int, use_colors: bool | None = None) -> None:
    """ferrule's own handler on stderr for its two loggers, unless logging is configured:
    ``INFO:     message``; with colours (``use_colors``, or by default when stderr is a
    terminal) the level name, and an access line's request and status, in ANSI colours as
    uvicorn's formatters have them."""
    if use_colors is None:
        use_colors = sys.stderr.isatty()
    for name in ("ferrule.error", "ferrule.access"):
        logger = logging.getLogger(name)
        logger.setLevel(level)
        if not logger.handlers and not logging.getLogger().handlers:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(_ColourFormatter() if use_colors else _FORMATTER)
            handler.addFilter(_pad_level)
            logger.addHandler(handler)
            logger.propagate = False


_FORMAT = "%(levelname)s:%(padding)s%(message)s"
_FORMATTER = logging.Formatter(_FORMAT)

#: The access line as the server logs it (crates/ferrule/src/http/callbacks.rs), with its
#: arguments: client, method, target, HTTP version, status.
ACCESS_FORMAT = '%s - "%s %s HTTP/%s" %d'

_RESET = "\033[0m"
_BOLD = "\033[1m"
#: SGR foreground colours of the level names and of the status codes (by hundreds).
_LEVEL_COLOURS = {
    TRACE: "\033[34m",  # blue
    logging.DEBUG: "\033[36m",  # cyan
    logging.INFO: "\033[32m",  # green
    logging.WARNING: "\033[33m",  # yellow
    logging.ERROR: "\033[31m",  # red
    logging.CRITICAL: "\033[91m",  # bright red
}
_STATUS_COLOURS = {
    1: "\033[97m",  # bright white
    2: "\033[32m",  # green
    3: "\033[33m",  # yellow
    4: "\033[31m",  # red
    5: "\033[91m",  # bright red
}


def _paint(text: object, colour: str | None) -> str:
    return f"{colour}{text}{_RESET}" if colour else str(text)


class _ColourFormatter(logging.Formatter):
    """The default format, coloured: the padding still counts the level name's letters only."""

    def __init__(self) -> None:
        super().__init__(_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        message = record.message
        args = record.args
        if record.msg == ACCESS_FORMAT and isinstance(args, tuple) and len(args) == 5:
            client, method, target, version, status = args
            request = _paint(f"{method} {target} HTTP/{version}", _BOLD)
            code = _paint(status, _STATUS_COLOURS.get(int(status) // 100))  # type: ignore[call-overload]
            message = f'{client} - "{request}" {code}'
        levelname = _paint(record.levelname, _LEVEL_COLOURS.get(record.levelno))
        return f"{levelname}:{record.padding}{message}"  # type: ignore[attr-defined]


def _pad_level(record: logging.LogRecord) -> bool:
    record.padding = " " * max(1, 9 - len(record.levelname))
    return True
