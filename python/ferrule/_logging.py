"""Default logging for the server's two loggers, unless the user configured them already."""

from __future__ import annotations

import atexit
import datetime
import json
import logging
import logging.config
import os
import sys
from http import HTTPStatus
from pathlib import Path
from typing import Any

from ferrule._ferrule import TRACE

logging.addLevelName(TRACE, "TRACE")

#: ``--log-level``'s names and the ``logging`` levels they set: uvicorn's, TRACE below DEBUG.
LOG_LEVELS = {
    "critical": logging.CRITICAL,
    "error": logging.ERROR,
    "warning": logging.WARNING,
    "info": logging.INFO,
    "debug": logging.DEBUG,
    "trace": TRACE,
}


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


#: ferrule's loggers and the uvicorn loggers they stand for: apps log to ``uvicorn.error`` (as
#: FastAPI's docs show), and log configs are written for ``uvicorn.*``.
UVICORN_NAMES = {
    "ferrule.error": "uvicorn.error",
    "ferrule.access": "uvicorn.access",
    "ferrule.asgi": "uvicorn.asgi",
}


def configure_logging(
    level: int, use_colors: bool | None = None, *, given: bool = True, log_format: str = "text"
) -> None:
    """ferrule's lines go out through the uvicorn loggers, named as them, so that everything
    written for uvicorn's sees them: a log config naming ``uvicorn.*``, a handler an app or a
    test adds to ``uvicorn.access``, a filter on the record's name. Where those loggers are not
    configured (nor the root logger), they get ferrule's default handlers: as in uvicorn's
    default config, access lines on stdout and the other lines on stderr, each as
    ``INFO:     message``, an access line's status followed by its reason phrase. With colours
    (``use_colors``, or by default for each stream that is a terminal) the level name, and an
    access line's request and status, are in ANSI colours as uvicorn's formatters have them.

    With ``log_format`` "json" each line is a JSON object instead (``_JsonFormatter``).

    A log config that sets up ferrule's own names (``ferrule.error``...) is obeyed instead.
    ``level`` is set on the uvicorn loggers a log config set up only when it was ``given``
    (``--log-level``), as uvicorn does."""
    global _access_handler
    loggers = (
        ("ferrule.error", sys.stderr),
        ("ferrule.access", sys.stdout),
        ("ferrule.asgi", sys.stderr),
    )
    root_configured = bool(logging.getLogger().handlers)
    for name, stream in loggers:
        logger = logging.getLogger(name)
        uvicorn = logging.getLogger(UVICORN_NAMES[name])
        logger.setLevel(level)
        forwards = [f for f in logger.filters if isinstance(f, _Forward)]
        if logger.handlers:  # a log config for ferrule's own names
            for forward in forwards:
                logger.removeFilter(forward)
            continue
        if not forwards:
            logger.addFilter(_Forward(uvicorn))
        logger.propagate = True
        logger.disabled = False  # a dictConfig that named only uvicorn's loggers
        uvicorn.disabled = False
        if _configured_below_root(uvicorn):
            if given:
                uvicorn.setLevel(level)
            continue
        uvicorn.setLevel(level)
        if root_configured:
            continue  # the lines propagate to the root logger's handlers
        colours = _is_terminal(stream) if use_colors is None else use_colors
        handler = _WholeRecords(stream)
        formatter = _JsonFormatter() if log_format == "json" else _Formatter(colours)
        handler.setFormatter(formatter)
        uvicorn.addHandler(handler)
        uvicorn.propagate = False
        if name == "ferrule.access":
            _access_handler = handler


class _WholeRecords(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes each record, traceback and all, with one write(2): the workers of one server
    share its stderr, and their records then never interleave within a line (a pipe write up
    to 4 KiB is atomic; a terminal's too, in practice)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            text = self.format(record) + self.terminator
            fd = self.stream.fileno()
        except (AttributeError, OSError, ValueError):  # no descriptor: a captured stream
            super().emit(record)
            return
        except Exception:
            self.handleError(record)
            return
        try:
            self.stream.flush()
            data = text.encode(getattr(self.stream, "encoding", None) or "utf-8", "replace")
            while data:
                data = data[os.write(fd, data) :]
        except Exception:
            self.handleError(record)


def _configured_below_root(logger: logging.Logger) -> bool:
    """Whether ``logger`` or an ancestor of it other than the root has a handler."""
    current: logging.Logger | None = logger
    while current is not None and current is not logging.getLogger():
        if current.handlers:
            return True
        if not current.propagate:
            return False
        current = current.parent  # type: ignore[assignment]
    return False


class _Forward(logging.Filter):
    """Hands ferrule's records to a uvicorn logger, as if logged there: named as it, through
    its filters, handlers and propagation; then drops them from ferrule's logger. A filter
    rather than a handler, so that ferrule's logger keeps propagating (with nothing to
    propagate) and tools that attach to non-propagating loggers (pytest's caplog) do not see
    every line twice."""

    def __init__(self, target: logging.Logger) -> None:
        super().__init__()
        self.target = target

    def filter(self, record: logging.LogRecord) -> bool:
        if self.target.isEnabledFor(record.levelno):
            record.name = self.target.name
            self.target.handle(record)
        return False


def _is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is a terminal (no stream at all, as under pythonw, is not one)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # None, or a closed file
        return False


#: The access line as the server logs it (crates/ferrule/src/http/access_log.rs), with its
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


def _status_with_phrase(status: int) -> str:
    """``200 OK``: the code and its reason phrase from ``http.HTTPStatus``, as uvicorn's access
    lines end; the bare code for one without a phrase."""
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


class _Formatter(logging.Formatter):
    """The default format: the level name, a colon, then the message from column 10; an
    access line rebuilt from its arguments with the status's reason phrase. With ``colours``,
    the level name, and an access line's request (bold) and status, are coloured; the padding
    still counts the level name's letters only."""

    def __init__(self, colours: bool) -> None:
        super().__init__()
        self.colours = colours

    def _paint(self, text: str, colour: str | None) -> str:
        return f"{colour}{text}{_RESET}" if self.colours and colour else text

    def formatMessage(self, record: logging.LogRecord) -> str:
        message = _status_message(record, self._paint)
        padding = " " * max(1, 9 - len(record.levelname))
        levelname = self._paint(record.levelname, _LEVEL_COLOURS.get(record.levelno))
        return f"{levelname}:{padding}{message}"


def _status_message(record: logging.LogRecord, paint: Any) -> str:
    """The record's message; an access record's (``ACCESS_FORMAT``) rebuilt with the status's
    reason phrase, its request and status passed through ``paint(text, colour)``."""
    args = record.args
    if record.msg == ACCESS_FORMAT and isinstance(args, tuple) and len(args) == 5:
        client, method, target, version, status = args
        if isinstance(status, int):
            request = paint(f"{method} {target} HTTP/{version}", _BOLD)
            code = paint(_status_with_phrase(status), _STATUS_COLOURS.get(status // 100))
            return f'{client} - "{request}" {code}'
    return record.getMessage()


#: The access record's attributes (set by the server), in the order a JSON line gives them.
ACCESS_FIELDS = (
    "type",
    "client",
    "method",
    "path",
    "query",
    "http_version",
    "status",
    "bytes",
    "duration",
    "user_agent",
    "referer",
    "headers",
    "close_code",
)


class _JsonFormatter(logging.Formatter):
    """``--log-format json``: a record as one JSON object: its time (UTC, ISO 8601, to the
    millisecond), level, logger and message, an access record's fields, a traceback as
    ``exc_info``. The server writes the same object itself on the access log's fast path."""

    def format(self, record: logging.LogRecord) -> str:
        created = datetime.datetime.fromtimestamp(record.created, datetime.UTC)
        line: dict[str, Any] = {
            "time": created.isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": _status_message(record, lambda text, colour: text),
        }
        for field in ACCESS_FIELDS:
            if field in record.__dict__:
                value = record.__dict__[field]
                if field == "duration":
                    value = round(value, 6)
                line[field] = value
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exc_info"] = record.exc_text
        return json.dumps(line, ensure_ascii=False, separators=(",", ":"), default=str)


#: The handler ``configure_logging`` put on ``uvicorn.access``, if it put one there.
_access_handler: _WholeRecords | None = None


def access_path(log_config: bool, fd: int) -> tuple[str, str]:
    """Which way access lines should go now, and why: ``("fast", ...)`` when the access
    loggers are exactly as ``configure_logging`` left them, writing to descriptor ``fd``, so
    that the server may format and write the line itself; ``("off", why)`` when no line would
    be written; else ``("logging", why)``. Cheap: called a few times a second while serving."""
    source = logging.getLogger("ferrule.access")
    target = logging.getLogger("uvicorn.access")
    if not source.isEnabledFor(logging.INFO):
        return "off", "ferrule.access does not take INFO"
    only_forwarded = all(isinstance(f, _Forward) for f in source.filters) and source.filters
    if only_forwarded and not source.handlers and not target.isEnabledFor(logging.INFO):
        return "off", "uvicorn.access does not take INFO"
    handler = _access_handler
    if log_config:
        return "logging", "a log config is given"
    if handler is None:
        return "logging", "the access logger was configured before the server (its handlers)"
    forwards = source.filters
    if (
        source.handlers
        or len(forwards) != 1
        or not isinstance(forwards[0], _Forward)
        or forwards[0].target is not target
        or source.disabled
        or type(source) is not logging.Logger
    ):
        return "logging", "ferrule.access has a filter or handler of its own"
    if target.filters:
        return "logging", "uvicorn.access has a filter"
    if not _handled_by_ferrule_alone(handler) or target.disabled:
        return "logging", "uvicorn.access has another handler, or propagates"
    if type(target) is not logging.Logger:
        return "logging", "uvicorn.access is not a plain logging.Logger"
    if (
        handler.filters
        or handler.level > logging.INFO
        or handler.terminator != "\n"
        or type(handler.formatter) not in (_Formatter, _JsonFormatter)
        or vars(handler).keys() & {"emit", "handle", "format"}
    ):
        return "logging", "the access handler or its formatter was changed"
    stream = handler.stream
    try:
        if stream.fileno() != fd:
            return "logging", "the access handler writes elsewhere"
    except (AttributeError, OSError, ValueError):
        return "logging", "the access handler's stream has no descriptor"
    encoding = (getattr(stream, "encoding", None) or "utf-8").lower().replace("_", "-")
    if encoding not in ("utf-8", "utf8"):
        return "logging", f"the access stream's encoding is {encoding}"
    if logging.getLogRecordFactory() is not logging.LogRecord:
        return "logging", "a log record factory is set"
    if _logging_patched():
        return "logging", "a method of logging's classes was replaced"
    if logging.getLevelName(logging.INFO) != "INFO":
        return "logging", "INFO's level name was changed"
    return "fast", "formatted and written by the server"


def access_fields_wanted(log_config: bool) -> bool:
    """Whether access records should carry the line's fields as attributes: wherever a handler
    or formatter other than ferrule's own text one may read them. (With only a filter added,
    as for dropping health checks, the record has uvicorn's arguments alone: the attributes
    cost the logging path a third more.)"""
    handler = _access_handler
    return (
        log_config
        or handler is None
        or not _handled_by_ferrule_alone(handler)
        or type(handler.formatter) is not _Formatter
    )


def _handled_by_ferrule_alone(handler: logging.Handler) -> bool:
    """Whether ``handler`` (the one ``configure_logging`` installed) is the only handler an
    access record reaches: ``ferrule.access`` has none of its own, and ``uvicorn.access`` has
    it alone and does not propagate."""
    target = logging.getLogger("uvicorn.access")
    return (
        not logging.getLogger("ferrule.access").handlers
        and target.handlers == [handler]
        and not target.propagate
    )


#: The methods of ``logging``'s classes a record passes through on its way to the access
#: handler: a program that wraps one of them (to record or alter every record) is honoured.
_RECORD_ROUTE = (
    (logging.Logger, ("info", "_log", "makeRecord", "handle", "filter", "callHandlers")),
    (logging.Handler, ("handle", "filter", "format")),
    (logging.StreamHandler, ("emit", "flush")),
    (logging.Formatter, ("format", "formatMessage", "formatTime", "usesTime")),
)


def _logging_patched() -> bool:
    """Whether a method on a record's way to the handler is no longer ``logging``'s own."""
    return any(
        getattr(getattr(cls, name, None), "__module__", None) != "logging"
        for cls, names in _RECORD_ROUTE
        for name in names
    )


def access_colours() -> bool:
    """Whether the access handler's lines are coloured."""
    formatter = _access_handler.formatter if _access_handler is not None else None
    return bool(getattr(formatter, "colours", False))


def access_stream_fd() -> int | None:
    """The descriptor ``configure_logging``'s access handler writes to, if it has one."""
    try:
        return _access_handler.stream.fileno() if _access_handler is not None else None
    except (AttributeError, OSError, ValueError):
        return None


#: The process's access writers by descriptor (``ferrule._ferrule.AccessWriter``): one per
#: process, so that servers made one after another share it and its ordering.
_writers: dict[int, Any] = {}


def access_writer(fd: int, limit: int, json_lines: bool) -> Any:
    """The process's writer of access lines to ``fd``, started on first use (on a duplicate
    of ``fd``), flushed at exit."""
    writer = _writers.get(fd)
    if writer is None:
        from ferrule._ferrule import AccessWriter

        writer = _writers[fd] = AccessWriter(os.dup(fd), limit, json=json_lines)
        if len(_writers) == 1:
            atexit.register(flush_access_lines)
    return writer


def flush_access_lines(timeout: float = 5.0) -> None:
    """Waits until every access line written so far is out, at most ``timeout`` seconds
    (a reader that never reads again must not keep the process from exiting); a writer that
    could not finish once is not waited for again."""
    for fd, writer in _writers.items():
        if fd not in _stalled and not writer.flush(timeout):
            _stalled.add(fd)


#: The descriptors whose writer a flush gave up on.
_stalled: set[int] = set()


#: ``http.HTTPStatus``'s reason phrases, as the access line ends.
STATUS_PHRASES = [(status.value, status.phrase) for status in HTTPStatus]
