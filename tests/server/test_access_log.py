"""The access log: ``--access-log-format`` and each of its atoms, read from the line a real
server writes on stdout; WebSocket sessions' lines (handshake and close), in uvicorn's style and
in a format; refused formats.

uvicorn's default line itself is checked in ``tests/cli/test_serving.py``
(``test_access_log_line_format`` and its neighbours)."""

from __future__ import annotations

import asyncio
import datetime
import json
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.serverutil import APPS_DIR, ServerProcess, ferrule_command, running_server
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

#: Every atom, each as ``NAME=VALUE`` between bars, after the request's tag.
FORMAT = (
    "<%({x-tag}i)s> h=%(h)s|l=%(l)s|u=%(u)s|t=%(t)s|r=%(r)s|m=%(m)s|U=%(U)s|q=%(q)s|H=%(H)s"
    "|s=%(s)s|b=%(b)s|B=%(B)s|f=%(f)s|a=%(a)s|T=%(T)s|M=%(M)s|D=%(D)s|L=%(L)s|p=%(p)s|c=%(c)s"
    "|in=%({X-Custom-In}i)s|out=%({X-Served-By}o)s|pct=100%%"
)


@pytest.fixture(scope="module")
def server() -> Iterator[ServerProcess]:
    with running_server("access_app:app", "--access-log-format", FORMAT) as server:
        yield server


def atoms(
    server: ServerProcess,
    method: str = "GET",
    path: str = "/",
    params: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    http2: bool = False,
    **options: Any,
) -> dict[str, str]:
    """Sends one request tagged with a fresh ``x-tag``; returns its line's atoms by name."""
    tag = uuid.uuid4().hex
    headers = {"x-tag": tag, **(headers or {})}
    with httpx.Client(
        timeout=10, trust_env=False, http1=not http2, http2=http2, **options
    ) as client:
        client.request(method, f"{server.base_url}{path}", params=params, headers=headers)
    line = server.wait_for_output(rf"<{tag}> (.*)", stream="stdout").group(1)
    return dict(field.split("=", 1) for field in line.split("|"))


CASES = [
    # (atom, request, expected value), each "fails without" the atom's own code: before it,
    # every case failed with "unknown atom" (the format was refused).
    ("h", {}, "127.0.0.1"),
    ("l", {}, "-"),
    ("u", {"auth": ("alice", "secret")}, "alice"),
    ("u", {}, "-"),
    ("r", {"method": "PATCH", "path": "/a/b", "params": {"k": "v"}}, "PATCH /a/b?k=v HTTP/1.1"),
    ("m", {"method": "PATCH"}, "PATCH"),
    ("U", {"path": "/a/b", "params": {"k": "v"}}, "/a/b"),
    ("q", {"path": "/a/b", "params": {"k": "v", "j": "w"}}, "k=v&j=w"),
    ("q", {"path": "/a/b"}, ""),
    ("H", {}, "HTTP/1.1"),
    ("H", {"http2": True}, "HTTP/2"),
    ("s", {"params": {"status": "201"}}, "201"),
    ("b", {"params": {"size": "7"}}, "7"),
    ("b", {"params": {"size": "0"}}, "-"),
    ("B", {"params": {"size": "7"}}, "7"),
    ("B", {"params": {"size": "0"}}, "0"),
    ("B", {"method": "HEAD", "params": {"size": "7"}}, "0"),
    ("f", {"headers": {"referer": "http://example.com/from"}}, "http://example.com/from"),
    ("f", {}, "-"),
    ("a", {"headers": {"user-agent": "probe/1.0 (test)"}}, "probe/1.0 (test)"),
    ("in", {"headers": {"x-custom-in": "Hello There"}}, "Hello There"),
    ("in", {}, "-"),
    ("out", {"params": {"served-by": "unit-7"}}, "unit-7"),
    ("c", {}, "-"),
    ("pct", {}, "100%"),
]


@pytest.mark.parametrize(
    ("atom", "request_options", "expected"),
    CASES,
    ids=[f"{atom}-{i}" for i, (atom, _, _) in enumerate(CASES)],
)
def test_atom(server: ServerProcess, atom: str, request_options: dict, expected: str) -> None:
    """Rule: each atom of ``--access-log-format`` is filled in as gunicorn documents it: h the
    client's address, l "-", u the Basic-auth user, r the request line, m the method, U the
    path and q the query string, H the protocol, s the status, b/B the body bytes sent ("-" /
    0 for none, none for HEAD), f the Referer, a the User-Agent, ``{NAME}i``/``{NAME}o`` a
    request/response header whatever its case, c "-" outside WebSockets, "%%" a "%"; "-"
    for a value missing. Seen failing with the core broken on purpose: b written 0 for no
    body (b-13), HEAD counted its body (B-16), f read from a misspelt header (f-17)."""
    assert atoms(server, **request_options)[atom] == expected


def test_time_atom(server: ServerProcess) -> None:
    """Rule: %(t)s is when the request arrived, in local time, as
    ``[10/Oct/2000:13:55:36 -0700]``. Broken: another layout, or a time that is not now."""
    value = atoms(server)["t"]
    assert re.fullmatch(r"\[\d\d/[A-Z][a-z]{2}/\d{4}:\d\d:\d\d:\d\d [+-]\d{4}\]", value), value
    when = datetime.datetime.strptime(value, "[%d/%b/%Y:%H:%M:%S %z]")
    assert abs((datetime.datetime.now(datetime.UTC) - when).total_seconds()) < 60


def test_duration_atoms(server: ServerProcess) -> None:
    """Rule: T, M, D and L are the request's time in whole seconds, milliseconds, microseconds
    and decimal seconds (six places), all of one measure, at least the 0.3 s the app slept.
    Broken: a unit off by 1000, or a time that does not include the app's (seen failing with
    M written in microseconds)."""
    found = atoms(server, params={"sleep": "0.3"})
    micros = int(found["D"])
    # asyncio may end a sleep up to its clock's resolution early (seen: 299,882 us).
    assert micros >= 290_000, found
    assert int(found["M"]) == micros // 1000, found
    assert int(found["T"]) == micros // 1_000_000, found
    assert found["L"] == f"{micros // 1_000_000}.{micros % 1_000_000:06d}", found


def test_pid_atom(server: ServerProcess) -> None:
    """Rule: %(p)s is the serving process's id in angle brackets, as gunicorn writes it.
    Broken: another process's id, or no brackets."""
    assert atoms(server)["p"] == f"<{server.pid}>"


def test_no_line_with_the_access_log_off() -> None:
    """Rule: ``--no-access-log`` wins over a format: no line. Broken: the format's line is
    written anyway."""
    tag = uuid.uuid4().hex
    with running_server(
        "access_app:app", "--no-access-log", "--access-log-format", "%(r)s"
    ) as server:
        server.get(f"/quiet-{tag}")
        server.get("/")  # served after the first: its line would be out by now
    assert tag not in server.stdout + server.stderr, server.describe()


@pytest.mark.parametrize(
    ("fmt", "problem"),
    [
        ("%(zz)s", "unknown atom %(zz)s"),
        ("%(h)s 100%", "a '%' must start an atom"),
        ("%(h)d", "unterminated atom"),
    ],
)
def test_a_bad_format_is_a_usage_error(fmt: str, problem: str) -> None:
    """Rule: an unknown atom or a stray "%" is refused before serving, with a usage error
    (exit 2) naming --access-log-format and the problem. Broken: the server starts and logs
    nonsense, or fails at its first request."""
    result = subprocess.run(
        ferrule_command("access_app:app", "--port", "0", "--access-log-format", fmt),
        cwd=APPS_DIR,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2, result.stderr
    assert "--access-log-format" in result.stderr, result.stderr
    assert problem in result.stderr, result.stderr


def test_a_bad_format_from_python_raises_naming_the_setting() -> None:
    """Rule: ``Config(access_log_format=...)`` refuses a bad format with a ValueError naming
    the setting. Broken: accepted, to fail later in the server."""
    code = (
        "import ferrule\n"
        "try:\n"
        "    ferrule.Config('x:app', access_log_format='%(nope)s')\n"
        "except ValueError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=30
    ).stdout
    assert out.startswith("access_log_format: unknown atom %(nope)s"), out


@pytest.mark.parametrize("with_format", [False, True], ids=["default", "format"])
def test_the_records_shape(tmp_path: Path, with_format: bool) -> None:
    """Rule: without a format the access record is uvicorn's, message
    ``'%s - "%s %s HTTP/%s" %d'`` with arguments (client, method, target, version, status),
    which ``--log-config`` formatters and filters read; with one, the message is the finished
    line and there are no arguments (a "%" in it is not taken for a placeholder). Broken: the
    default record's arguments changed, or a format's line formatted a second time (it
    passed when written: it guards the shape main had)."""
    config = {
        "version": 1,
        "formatters": {
            "raw": {"format": "RAW %(msg)r %(args)r"},
            "plain": {"format": "%(message)s"},
        },
        "handlers": {
            "out": {"class": "logging.StreamHandler", "formatter": "raw"},
            "err": {"class": "logging.StreamHandler", "formatter": "plain"},
        },
        "loggers": {
            "uvicorn": {"handlers": ["err"], "level": "INFO"},
            "uvicorn.access": {"handlers": ["out"], "level": "INFO", "propagate": False},
        },
    }
    path = tmp_path / "logging.json"
    path.write_text(json.dumps(config))
    fmt = ["--access-log-format", "%(m)s %(U)s 100%%"] if with_format else []
    tag = uuid.uuid4().hex
    with running_server("access_app:app", "--log-config", str(path), *fmt) as server:
        server.get(f"/{tag}")
        if with_format:
            server.wait_for_output(rf"RAW 'GET /{tag} 100%' \(\)")
        else:
            line = server.wait_for_output(rf"RAW (.*/{tag}.*)").group(1)
            pattern = (
                rf"""'%s - "%s %s HTTP/%s" %d' \('127.0.0.1:\d+', 'GET', '/{tag}', '1.1', 200\)"""
            )
            assert re.fullmatch(pattern, line), line


# WebSocket sessions


def ws_session(server: ServerProcess, path: str, client_close: int | None = None) -> None:
    """Opens a WebSocket on ``path``; closes it with ``client_close``, or waits for the server
    to close it. A refused handshake is no error."""

    async def session() -> None:
        url = f"ws://127.0.0.1:{server.port}{path}"
        try:
            async with connect(url, open_timeout=5, close_timeout=5, proxy=None) as ws:
                if client_close is not None:
                    await ws.close(client_close)
                else:
                    try:
                        await asyncio.wait_for(ws.recv(), 5)
                    except ConnectionClosed:
                        pass
        except InvalidStatus:
            pass

    asyncio.run(asyncio.wait_for(session(), 15))


def test_websocket_lines_in_uvicorns_style() -> None:
    """Rule: with no format, a session logs on the access logger (stdout) uvicorn's handshake
    line ``CLIENT - "WebSocket /path?query" [accepted]``, then, once closed, ``CLIENT -
    "WebSocket /path?query" [closed CODE] SECONDSs``: the client's code, or the app's; a
    refused handshake logs its status instead of [accepted], and no close line. Fails
    without the change: the handshake line was on stderr (the error logger, where
    ``test_websocket.py`` found it before) and no line told of the close; seen failing
    with the close code always written 1000."""
    tag = uuid.uuid4().hex
    client = r"127\.0\.0\.1:\d+"
    with running_server("access_app:app") as server:
        ws_session(server, f"/chat?tag={tag}", client_close=4002)
        ws_session(server, f"/chat?tag={tag}&close=4001")
        ws_session(server, f"/refuse?tag={tag}")
        for query, code in ((f"tag={tag}", 4002), (f"tag={tag}&close=4001", 4001)):
            target = re.escape(f"/chat?{query}")
            server.wait_for_output(
                rf'(?m)^INFO:     {client} - "WebSocket {target}" \[accepted\]$', stream="stdout"
            )
            server.wait_for_output(
                rf'(?m)^INFO:     {client} - "WebSocket {target}" \[closed {code}\] \d+\.\d{{3}}s$',
                stream="stdout",
            )
        refused = re.escape(f"/refuse?tag={tag}")
        server.wait_for_output(rf'{client} - "WebSocket {refused}" 403$', stream="stdout")
    # uvicorn's other two lines stay on the error logger.
    assert "connection open" in server.stderr, server.describe()
    assert f'/refuse?tag={tag}" [closed' not in server.stdout, server.describe()


def test_websocket_lines_in_a_format() -> None:
    """Rule: with --access-log-format, a session's two lines use it: the handshake's with
    %(s)s 101 and %(c)s "-", the close's with %(c)s the close code and the time atoms the
    session's length; a refusal's with its status. Broken: no WebSocket line in the format,
    or the close line without its code (seen failing with it always 1000)."""
    tag = uuid.uuid4().hex
    fmt = "WS %(m)s %(U)s %(q)s %(s)s %(c)s %(D)s"
    with running_server("access_app:app", "--access-log-format", fmt) as server:
        ws_session(server, f"/chat?tag={tag}", client_close=4003)
        ws_session(server, f"/refuse?tag={tag}")
        server.wait_for_output(rf"WS GET /chat tag={tag} 101 - \d+\n", stream="stdout")
        closed = server.wait_for_output(rf"WS GET /chat tag={tag} 101 4003 (\d+)", stream="stdout")
        server.wait_for_output(rf"WS GET /refuse tag={tag} 403 - \d+", stream="stdout")
    assert int(closed.group(1)) > 0


@pytest.mark.parametrize("with_format", [False, True], ids=["default", "format"])
def test_websocket_lines_over_http2(with_format: bool) -> None:
    """Rule: a session on an HTTP/2 stream (RFC 8441) logs as one over HTTP/1.1: uvicorn's
    ``[accepted]`` though the answer is 200, then its close; in a format, %(m)s CONNECT,
    %(H)s HTTP/2 and %(s)s 200 on both lines, %(c)s the client's close code on the second.
    Broken: the handshake logged as a refusal, "200" in place of [accepted] (what taking 101
    for "accepted" did; not seen run, as HTTP/2 sessions came after that code)."""
    from support.h2ws import plain_client
    from support.wsutil import OP_CLOSE

    tag = uuid.uuid4().hex
    fmt = ["--access-log-format", "H2 %(m)s %(U)s %(q)s %(H)s %(s)s %(c)s"] if with_format else []
    with running_server("access_app:app", "--http2", *fmt) as server:
        client = plain_client(server)
        try:
            stream = client.connect_ws(f"/chat?tag={tag}")
            assert client.response(stream) == 200
            client.send_ws(stream, OP_CLOSE, (4002).to_bytes(2, "big"))
            client.next_frames(stream)  # the server's answering close
        finally:
            client.sock.close()
        if with_format:
            server.wait_for_output(rf"H2 CONNECT /chat tag={tag} HTTP/2 200 -\n", stream="stdout")
            server.wait_for_output(rf"H2 CONNECT /chat tag={tag} HTTP/2 200 4002", stream="stdout")
        else:
            target = re.escape(f"/chat?tag={tag}")
            server.wait_for_output(rf'"WebSocket {target}" \[accepted\]', stream="stdout")
            server.wait_for_output(rf'"WebSocket {target}" \[closed 4002\]', stream="stdout")
