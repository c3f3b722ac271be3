"""The access line's path follows the app's logging: the fast path only while the access logger
is exactly as ferrule configured it; any change (at import, in lifespan startup, or while
serving) sends the lines through ``logging`` (or nowhere, for a level above INFO) within a
second, and undoing it brings the fast path back. ``--log-level debug`` writes
``Access log path: fast|logging|off (...)`` at startup and at each change, which the tests
read to know which path was taken.

The app is ``tests/apps/logging_app.py``: its routes make the changes."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from accessutil import (
    ACCESS_LINE,
    CHANGE_DEADLINE,
    FAST_LINE,
    lines_with,
    path_lines,
    wait_path,
)
from support.serverutil import ServerProcess, poll, running_server

#: How long the test waits for a path line after a change: the promise's second, and a
#: second more for a busy test machine (the lines' behaviour is checked after one second).
PATH_LINE_TIMEOUT = CHANGE_DEADLINE + 1.0


def start(env: dict[str, str] | None = None, *args: str):
    return running_server("logging_app:app", "--log-level", "debug", *args, env=env)


def change(server: ServerProcess, route: str, kind: str | None, **params: str) -> float:
    """Makes the change the app's ``route`` makes; waits for the path line of ``kind`` (none
    for None); returns when the change was made (monotonic)."""
    before = len(path_lines(server))
    response = server.get(route, params=params)
    assert response.status_code == 200, (route, response.text)
    made = time.monotonic()
    if kind is not None:
        wait_path(server, kind, after=before, timeout=PATH_LINE_TIMEOUT)
    return made


def after_deadline(made: float) -> None:
    """Sleep until the change made at ``made`` must have taken effect."""
    time.sleep(max(0.0, made + CHANGE_DEADLINE - time.monotonic()))


def ask(server: ServerProcess, path: str) -> None:
    assert server.get(path).status_code == 200, path


def flushed(server: ServerProcess, tag: str) -> None:
    """A last request on the fast path and its line: every line of an earlier request is out
    by then (a writer writes in order)."""
    ask(server, f"/probe?phase=end-{tag}")
    try:
        server.wait_for_output(f"phase=end-{tag} ", stream="stdout")
    except AssertionError as exc:
        raise AssertionError(f"the closing request's line is missing: {exc}") from None


def logged(server: ServerProcess, target: str) -> list[str]:
    """stdout's lines for the request ``target`` (exactly: ``/health?phase=x``)."""
    return [line for line in server.stdout.splitlines() if f" {target} HTTP/" in line]


@dataclass
class Change:
    """A change a route makes, the path it leads to, the route that undoes it; whether a
    health check's line, and another request's, are written meanwhile."""

    make: str
    kind: str | None
    undo: str
    health_logged: bool
    probe_logged: bool
    make_params: dict[str, str] = field(default_factory=dict)
    undo_params: dict[str, str] = field(default_factory=dict)


CHANGES = {
    "logger-filter": Change("/add-filter", "logging", "/remove-filter", False, True),
    "handler-filter": Change(
        "/add-filter", "logging", "/remove-filter", False, True, {"on": "handler"}
    ),
    "handler": Change("/add-handler", "logging", "/remove-handler", True, True),
    "uvicorn-level": Change(
        "/set-level", "off", "/set-level", False, False, {"level": "WARNING"}, {"level": "INFO"}
    ),
    "ferrule-level": Change(
        "/set-level",
        "off",
        "/set-level",
        False,
        False,
        {"logger": "ferrule.access", "level": "WARNING"},
        {"logger": "ferrule.access", "level": "INFO"},
    ),
    # logging.disable(INFO) silences the debug line too: no "off" line is required.
    "disable": Change("/disable", None, "/enable", False, False, {"level": "INFO"}),
    "formatter": Change(
        "/set-formatter", "logging", "/restore-formatter", True, True, {"fmt": "CUSTOM %(message)s"}
    ),
    "level-name": Change(
        "/level-name", "logging", "/level-name", True, True, {"name": "NOTICE"}, {"name": "INFO"}
    ),
    "record-factory": Change(
        "/record-factory", "logging", "/record-factory", True, True, {"on": "1"}, {"on": "0"}
    ),
}


@pytest.mark.parametrize("name", list(CHANGES))
def test_a_change_while_serving_is_honoured_within_a_second_and_undone(name: str) -> None:
    """Rule: a change to the access logging made while serving takes effect within one
    second, and undoing it brings the fast path back (the debug line says fast again): a
    filter on ``uvicorn.access`` (FastAPI's recipe to drop health checks) or on its handler
    drops ``/health``'s lines; an added handler sees every line, stdout still gets them; a
    level of WARNING on ``uvicorn.access`` or ``ferrule.access``, or ``logging.disable(INFO)``,
    writes no line ("off"); another formatter on ferrule's handler writes its own line; a
    renamed INFO level shows its name; a record factory set makes every record. A health
    check and another request are sent before the change, a second after it, and a second
    after it is undone. Broken: the fast path goes on writing uvicorn's line after the change
    (the filter, level, handler, formatter ignored), never comes back, or takes more than a
    second. Seen failing before the fast path: every case, for want of the debug line (the
    logging path honoured each change at once)."""
    spec = CHANGES[name]
    with start() as server:
        wait_path(server, "fast")
        ask(server, "/health?phase=before")
        made = change(server, spec.make, spec.kind, **spec.make_params)
        after_deadline(made)
        counted = server.get("/factory-count").json() if name == "record-factory" else 0
        ask(server, "/health?phase=during")
        ask(server, "/probe?phase=during")
        if name == "record-factory":
            grown = server.get("/factory-count").json() - counted
        if name == "handler":
            handled = [seen["message"] for seen in server.get("/handled").json()]
        made = change(server, spec.undo, "fast", **spec.undo_params)
        after_deadline(made)
        ask(server, "/health?phase=after")
        flushed(server, name)
        out = server.stdout
        described = server.describe()
    for target, wanted in (
        ("/health?phase=before", True),
        ("/health?phase=during", spec.health_logged),
        ("/probe?phase=during", spec.probe_logged),
        ("/health?phase=after", True),
    ):
        found = logged(server, target)
        assert len(found) == int(wanted), f"{target}: lines {found}, wanted {int(wanted)}\n{out}"
    during = logged(server, "/probe?phase=during")
    if name == "formatter":
        assert during[0].startswith("CUSTOM 127.0.0.1:"), during
        assert during[0].endswith('"GET /probe?phase=during HTTP/1.1" 200'), during
    elif name == "level-name":
        assert during[0].startswith("NOTICE:"), during
    elif spec.probe_logged:
        assert ACCESS_LINE.fullmatch(during[0]), during
    for target in ("/health?phase=before", "/health?phase=after"):
        assert ACCESS_LINE.fullmatch(logged(server, target)[0]), described
    if name == "handler":
        assert any("/probe?phase=during" in message for message in handled), handled
        assert not any("phase=after" in message for message in handled), handled
    if name == "record-factory":
        assert grown >= 2, f"the record factory made {grown} access records for 2 requests"


@pytest.mark.parametrize(
    ("when", "what"),
    [("IMPORT", "drop-filter"), ("STARTUP", "drop-filter"), ("IMPORT", "handler")],
    ids=["filter-at-import", "filter-in-lifespan-startup", "handler-at-import"],
)
def test_a_change_before_serving_is_honoured(when: str, what: str) -> None:
    """Rule: a change made before serving, at the app's import or in its lifespan startup
    (FastAPI's health-check filter on ``uvicorn.access``, or a handler), is honoured from the
    start (within a second of it): the debug line says logging, a health check has no line
    (the filter) or the handler sees the lines; then, undone while serving, the fast path
    comes back within a second. Broken: the fast path decided once before the app changed
    the logging (health checks logged all along). Seen failing before the fast path: every
    case, for want of the debug line."""
    with start({f"FERRULE_TEST_LOGGING_AT_{when}": what}) as server:
        running = time.monotonic()
        wait_path(server, "logging")
        after_deadline(running)
        ask(server, "/health?phase=during")
        ask(server, "/probe?phase=during")
        handled = server.get("/handled").json()
        undo = "/remove-handler" if what == "handler" else "/remove-filter"
        made = change(server, undo, "fast")
        after_deadline(made)
        ask(server, "/health?phase=after")
        flushed(server, what)
        first = path_lines(server)[0]
    during = logged(server, "/health?phase=during")
    assert len(during) == (1 if what == "handler" else 0), (during, server.describe())
    assert len(logged(server, "/probe?phase=during")) == 1, server.describe()
    assert len(logged(server, "/health?phase=after")) == 1, server.describe()
    if what == "handler":
        messages = [seen["message"] for seen in handled]
        assert any("/probe?phase=during" in message for message in messages), messages
    if when == "IMPORT":
        assert first[0] == "logging", f"first path line {first}: the import's change missed"


def test_a_stdout_encoding_other_than_utf8_takes_the_logging_path() -> None:
    """Rule: the fast path writes UTF-8; a stdout in another encoding (``PYTHONIOENCODING``
    latin-1) takes the logging path, whose lines are still uvicorn's. Broken: the fast path
    taken regardless (its bytes then not those of the stream's encoding). Seen failing before
    the fast path: for want of the debug line."""
    with start({"PYTHONIOENCODING": "latin-1"}) as server:
        ask(server, "/probe?phase=latin")
        flushed(server, "latin")
        kind = wait_path(server, "logging")
    assert ACCESS_LINE.fullmatch(logged(server, "/probe?phase=latin")[0]), server.describe()
    assert kind[0] == "logging" and "fast" not in [k for k, _ in path_lines(server)], kind


LOG_CONFIG = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "custom": {"format": "CUSTOM|%(levelname)s|%(name)s|%(message)s"},
        "plain": {"format": "%(levelname)s %(message)s"},
    },
    "handlers": {
        "out": {
            "class": "logging.StreamHandler",
            "formatter": "custom",
            "stream": "ext://sys.stdout",
        },
        "err": {
            "class": "logging.StreamHandler",
            "formatter": "plain",
            "stream": "ext://sys.stderr",
        },
    },
    "loggers": {
        "uvicorn.error": {"handlers": ["err"], "level": "DEBUG", "propagate": False},
        "uvicorn.access": {"handlers": ["out"], "level": "INFO", "propagate": False},
    },
}


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_a_log_config_takes_the_logging_path(tmp_path: Path, suffix: str) -> None:
    """Rule: with ``--log-config`` (a dictConfig in JSON or YAML) the lines go through
    ``logging``, in the config's format (here ``CUSTOM|INFO|uvicorn.access|MESSAGE``); the
    debug line says logging. Broken: the fast path's uvicorn line written in spite of the
    config. Seen failing before the fast path: for want of the debug line."""
    import yaml

    path = tmp_path / f"logging{suffix}"
    path.write_text(json.dumps(LOG_CONFIG) if suffix == ".json" else yaml.safe_dump(LOG_CONFIG))
    with start(None, "--log-config", str(path)) as server:
        ask(server, "/probe?phase=config")
        line = server.wait_for_output(r"(?m)^.*phase=config.*$", stream="stdout").group(0)
        kind = poll(lambda: path_lines(server), timeout=PATH_LINE_TIMEOUT, what="a path line")
    client = line.split("|")[3].split(" ")[0]
    wanted = f'CUSTOM|INFO|uvicorn.access|{client} - "GET /probe?phase=config HTTP/1.1" 200'
    assert line == wanted, server.describe()
    assert [k for k, _ in kind] == ["logging"], f"path lines {kind}; not {FAST_LINE!r}"
    assert lines_with(server, "phase=config") == [line]
