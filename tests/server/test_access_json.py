"""``--log-format json``: every access line on stdout, and every line of the server's own on
stderr, one JSON object; on the fast path and on the logging path alike. And the access
record's attributes (``record.status``, ``record.path``...) that ``logging`` handlers and
``--log-config`` formatters read, whatever the log format.

The app is ``tests/apps/logging_app.py``."""

from __future__ import annotations

import ast
import datetime
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from accessutil import CHANGE_DEADLINE, path_lines, wait_for, wait_path, ws_session
from support.serverutil import (
    APPS_DIR,
    ServerProcess,
    ferrule_command,
    run_to_exit,
    running_server,
)

HEADERS_OPTION = ("--access-log-headers", "x-request-id,x-tenant")
JSON_ARGS = ("--log-format", "json", *HEADERS_OPTION, "--log-level", "debug", "--use-colors")
ACCESS_KEYS = {
    "time",
    "level",
    "logger",
    "message",
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
}
TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00")
CLIENT = re.compile(r"127\.0\.0\.1:\d+")
#: Makes the logging path with ferrule's own handler and formatter: a filter dropping nothing.
LOGGING_PATH = {"FERRULE_TEST_LOGGING_AT_IMPORT": "pass-filter"}


def objects(text: str, stream: str) -> list[dict[str, Any]]:
    """Each line of ``text`` as a JSON object (fails naming the line that is not one)."""
    found = []
    for line in text.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            raise AssertionError(f"not a JSON line on {stream}: {line[:300]!r}") from None
        assert isinstance(value, dict), f"not an object on {stream}: {line[:300]!r}"
        found.append(value)
    return found


def check_time(value: Any) -> None:
    assert isinstance(value, str) and TIME.fullmatch(value), f"time {value!r}"
    when = datetime.datetime.fromisoformat(value)
    assert abs((datetime.datetime.now(datetime.UTC) - when).total_seconds()) < 120, value


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def check_access(obj: dict[str, Any]) -> None:
    """The keys and types every access object has."""
    keys = set(obj) - {"close_code"}
    assert keys == ACCESS_KEYS, (
        f"keys {sorted(keys)}: missing {ACCESS_KEYS - keys}, extra {keys - ACCESS_KEYS}"
    )
    check_time(obj["time"])
    assert (obj["level"], obj["logger"]) == ("INFO", "uvicorn.access"), obj
    assert obj["type"] in ("http", "websocket"), obj
    assert obj["type"] == "websocket" or "close_code" not in obj, obj
    assert CLIENT.fullmatch(obj["client"]), obj
    assert obj["message"].startswith(f'{obj["client"]} - "'), obj
    assert "\x1b" not in obj["message"] and not obj["message"].startswith("INFO"), obj
    assert "?" not in obj["path"] and isinstance(obj["query"], str), obj
    for name in ("status", "bytes"):
        assert is_int(obj[name]), (name, obj)
    assert isinstance(obj["duration"], float) and 0 <= obj["duration"] < 30, obj
    for name in ("user_agent", "referer"):
        assert obj[name] is None or isinstance(obj[name], str), (name, obj)
    assert isinstance(obj["headers"], dict) and set(obj["headers"]) == {"x-request-id", "x-tenant"}


def one(found: list[dict[str, Any]], needle: str, count: int = 1) -> list[dict[str, Any]]:
    """The access objects whose message holds ``needle`` (exactly ``count`` of them)."""
    hits = [obj for obj in found if needle in obj.get("message", "")]
    assert len(hits) == count, f"{len(hits)} objects with {needle!r}, wanted {count}: {found}"
    return hits


@pytest.mark.parametrize("path", ["fast", "logging"])
def test_json_access_and_server_lines(path: str) -> None:
    """Rule: with ``--log-format json`` each access line on stdout is one JSON object: time
    (ISO 8601 UTC, milliseconds), level INFO, logger uvicorn.access, message (the text line's,
    no level, no colours even with ``--use-colors``), type http|websocket, client
    "127.0.0.1:PORT", method, path (no query), query ("" for none), http_version ("1.1",
    "2"), status and bytes (ints: 0 for HEAD), duration (float seconds: at least the 0.2 s the
    app slept), user_agent and referer (null when absent), headers (``--access-log-headers``,
    lowercase, null when absent); a WebSocket's closing line adds close_code. Each line of
    the server's own on stderr is one too (logger uvicorn.error), an app's exception with
    exc_info, its traceback. The same on the logging path (a filter added at import). Broken:
    a key missing or of another type, a line that is not JSON (a traceback's lines split),
    colours in a message, or the path not the one the debug line should say. Seen failing
    before the fast path: the option did not exist (the server exited 2)."""
    env = LOGGING_PATH if path == "logging" else None
    with running_server("logging_app:app", *JSON_ARGS, env=env) as server:
        dressed = {
            "X-Request-ID": "abc",
            "X-Tenant": "t1",
            "User-Agent": "probe/1.0",
            "Referer": "http://example.com/from",
        }
        server.get("/dressed?size=7&x=1", headers=dressed)
        server.get("/plain")
        with server.client() as client:
            client.head("/head?size=7")
        server.get("/slow?sleep=0.2")
        with server.client(http1=False, http2=True) as client:
            client.get("/h2?x=1")
        ws_session(server.port, "/ws?close=4001")
        ws_session(server.port, "/refuse?x=1")
        server.get("/raise?token=json")
        wait_for(server, lambda: server.stdout.count("\n") >= 9, "9 access lines")
        time.sleep(0.2)
        kinds = [kind for kind, _ in path_lines(server)]
    found = objects(server.stdout, "stdout")
    assert len(found) == 9, found
    for obj in found:
        check_access(obj)
    dressed_line = one(found, "/dressed")[0]
    assert dressed_line == {
        **dressed_line,
        "message": f'{dressed_line["client"]} - "GET /dressed?size=7&x=1 HTTP/1.1" 200 OK',
        "type": "http",
        "method": "GET",
        "path": "/dressed",
        "query": "size=7&x=1",
        "http_version": "1.1",
        "status": 200,
        "bytes": 7,
        "user_agent": "probe/1.0",
        "referer": "http://example.com/from",
        "headers": {"x-request-id": "abc", "x-tenant": "t1"},
    }
    plain = one(found, "/plain")[0]
    assert (plain["query"], plain["referer"], plain["bytes"]) == ("", None, 2), plain
    assert plain["headers"] == {"x-request-id": None, "x-tenant": None}, plain
    head = one(found, "/head")[0]
    assert (head["method"], head["status"], head["bytes"]) == ("HEAD", 200, 0), head
    assert one(found, "/slow")[0]["duration"] >= 0.19, one(found, "/slow")
    h2 = one(found, "/h2")[0]
    assert (h2["http_version"], h2["path"], h2["query"]) == ("2", "/h2", "x=1"), h2
    assert h2["message"].endswith('"GET /h2?x=1 HTTP/2" 200 OK'), h2
    opened, closed = one(found, "WebSocket /ws?close=4001", 2)
    for obj in (opened, closed):
        assert (obj["type"], obj["path"], obj["query"]) == ("websocket", "/ws", "close=4001")
        assert obj["status"] == 101, obj  # as %(s)s: 101 on both lines over HTTP/1.1
    assert opened["message"].endswith("[accepted]") and "close_code" not in opened, opened
    assert re.search(r"\[closed 4001\] \d+\.\d{3}s$", closed["message"]), closed
    assert closed["close_code"] == 4001, closed
    refused = one(found, "/refuse")[0]
    assert (refused["type"], refused["status"]) == ("websocket", 403), refused
    assert refused["message"].endswith('"WebSocket /refuse?x=1" 403'), refused
    assert one(found, "/raise")[0]["status"] == 500
    own = objects(server.stderr, "stderr")
    for obj in own:
        assert {"time", "level", "logger", "message"} <= set(obj), obj
        assert obj["logger"] == "uvicorn.error" and "\x1b" not in obj["message"], obj
        check_time(obj["time"])
    failed = [obj for obj in own if "exc_info" in obj]
    assert len(failed) == 1 and failed[0]["level"] == "ERROR", own
    assert failed[0]["exc_info"].startswith("Traceback (most recent call last):"), failed
    assert "RuntimeError: the app failed on purpose json" in failed[0]["exc_info"], failed
    assert kinds and set(kinds) == {path}, f"path lines {kinds} on the {path} server"


def test_json_with_an_access_log_format_is_a_usage_error() -> None:
    """Rule: ``--access-log-format`` with ``--log-format json`` is refused before serving:
    exit 2, naming ``--access-log-format``. Broken: one of them silently ignored. Seen
    failing before the fast path: exit 2 for ``--log-format`` itself, unrecognised."""
    result = run_to_exit(
        ferrule_command(
            "logging_app:app", "--port", "0", "--log-format", "json", "--access-log-format", "%(h)s"
        )
    )
    assert result.returncode == 2, result.describe()
    assert "--access-log-format" in result.stderr, result.describe()
    assert "unrecognized arguments" not in result.stderr, result.describe()


def test_log_format_json_from_python() -> None:
    """Rule: ``ferrule.run(..., log_format="json")`` is ``--log-format json``: the running line
    on stderr and the access line on stdout are JSON objects. Broken: the keyword refused, or
    the text lines. Seen failing before the fast path: ``Config()`` refused the keyword
    (TypeError: unexpected keyword argument 'log_format')."""
    code = "import ferrule; ferrule.run('logging_app:app', port=0, log_format='json')"
    server = ServerProcess([sys.executable, "-c", code], cwd=APPS_DIR)
    try:
        server.wait_running()
        server.get("/from-python?x=1")
        line = server.wait_for_output(r"(?m)^.*/from-python.*$", stream="stdout").group(0)
    finally:
        server.close()
    obj = json.loads(line)
    check_access({**obj, "headers": {"x-request-id": None, "x-tenant": None}})
    assert not obj.get("headers"), obj  # no --access-log-headers: no headers
    assert (obj["path"], obj["query"], obj["status"]) == ("/from-python", "x=1", 200), obj
    assert objects(server.stderr, "stderr"), server.describe()


# -- the record's attributes ------------------------------------------------------------------

ATTRIBUTES_FORMAT = (
    "ATTRS|%(client)s|%(method)s|%(path)s|%(query)s|%(http_version)s|%(status)s|%(bytes)s"
    "|%(duration)s|%(user_agent)s|%(referer)s|%(headers)s"
)


def test_record_attributes_through_a_log_config_formatter(tmp_path: Path) -> None:
    """Rule: every access record carries its fields as attributes (client, method, path,
    query, http_version, status, bytes, duration, user_agent, referer, and headers with
    ``--access-log-headers``), so a ``--log-config`` formatter can write
    ``%(status)s %(method)s %(path)s``... Broken: the formatter fails on a missing attribute
    (logging's "--- Logging error ---" on stderr, no line), or a value is off. Seen failing
    before the fast path: ``--access-log-headers`` did not exist (exit 2); on a build of the
    change in progress: every line a logging error, the records lacking ``headers``."""
    config = {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"attrs": {"format": ATTRIBUTES_FORMAT}},
        "handlers": {
            "out": {
                "class": "logging.StreamHandler",
                "formatter": "attrs",
                "stream": "ext://sys.stdout",
            }
        },
        "loggers": {"uvicorn.access": {"handlers": ["out"], "level": "INFO", "propagate": False}},
    }
    path = tmp_path / "attributes.json"
    path.write_text(json.dumps(config))
    args = ("--log-config", str(path), *HEADERS_OPTION)
    with running_server("logging_app:app", *args) as server:
        server.get(
            "/attrs?size=5&x=1",
            headers={"referer": "http://example.com/r", "user-agent": "ua/2", "x-request-id": "r1"},
        )
        with server.client(http1=False, http2=True) as client:
            client.head("/attrs-h2")
        wait_for(
            server,
            lambda: server.stdout.count("ATTRS|") >= 2 or "Logging error" in server.stderr,
            "two ATTRS lines",
        )
    missing = re.findall(r"Formatting field not found in record: '(\w+)'", server.stderr)
    assert not missing, f"the records lack {sorted(set(missing))}\n{server.describe()}"
    lines = [line.split("|") for line in server.stdout.splitlines() if line.startswith("ATTRS|")]
    assert len(lines) == 2 and all(len(fields) == 12 for fields in lines), server.describe()
    first, second = lines
    assert CLIENT.fullmatch(first[1]), first
    assert first[2:8] == ["GET", "/attrs", "size=5&x=1", "1.1", "200", "5"], first
    assert 0 <= float(first[8]) < 30, first
    assert first[9:11] == ["ua/2", "http://example.com/r"], first
    assert ast.literal_eval(first[11]) == {"x-request-id": "r1", "x-tenant": None}, first
    assert second[2:8] == ["HEAD", "/attrs-h2", "", "2", "200", "0"], second
    assert second[10] == "None", second  # no Referer: None
    assert "Logging error" not in server.stderr, server.describe()


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_record_attributes_seen_by_an_app_handler(log_format: str) -> None:
    """Rule: a handler the app adds to ``uvicorn.access`` gets records with the same fields as
    attributes, typed as in the JSON line (status, bytes int; duration float; referer None
    when absent; headers a dict), whatever ``--log-format``. Broken: an attribute missing
    ("<missing>") or of another type. Seen failing before the fast path: ``--log-format`` did
    not exist (exit 2); on a build of the change in progress: ``text``, whose records lacked
    ``headers`` (``json``'s had it)."""
    args = ("--log-format", log_format, "--access-log-headers", "x-request-id")
    with running_server("logging_app:app", *args, "--log-level", "debug") as server:
        server.get("/add-handler")
        made = time.monotonic()
        time.sleep(max(0.0, made + CHANGE_DEADLINE - time.monotonic()))
        wait_path(server, "logging")
        server.get("/kept?size=3&y=2", headers={"user-agent": "ua/3", "x-request-id": "k1"})
        handled = server.get("/handled").json()
    kept = [seen for seen in handled if seen["path"] == "/kept"]
    assert len(kept) == 1, handled
    seen = kept[0]
    wanted = {
        "method": "GET",
        "path": "/kept",
        "query": "size=3&y=2",
        "http_version": "1.1",
        "status": 200,
        "bytes": 3,
        "user_agent": "ua/3",
        "referer": None,
        "headers": {"x-request-id": "k1"},
    }
    differ = {name: (seen[name], want) for name, want in wanted.items() if seen[name] != want}
    assert not differ, f"attributes (seen, wanted): {differ}; the record: {seen}"
    assert CLIENT.fullmatch(seen["client"]), seen
    types = {name: seen[f"{name}_type"] for name in ("status", "bytes", "duration", "headers")}
    assert types == {"status": "int", "bytes": "int", "duration": "float", "headers": "dict"}
    assert seen["name"] == "uvicorn.access", seen
