"""The access log: ``--access-log-format`` and each of its atoms, read from the line a real
server writes on stdout; refused formats.

uvicorn's default line itself is checked in ``test_server_cli.py``
(``test_access_log_line_format`` and its neighbours)."""

from __future__ import annotations

import datetime
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from serverutil import APPS_DIR, ServerProcess, ferrule_command, running_server

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
    for a value missing. Broken (seen before the format existed): the server refused the
    format, so no line at all; with the first draft, b counted only the last body message."""
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
    Broken: a unit off by 1000, or a time that does not include the app's."""
    found = atoms(server, params={"sleep": "0.3"})
    micros = int(found["D"])
    assert micros >= 300_000, found
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

