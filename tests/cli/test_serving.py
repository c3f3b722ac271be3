"""The command line and ``ferrule.run``: import strings, sockets, logging and the access line,
options with uvicorn's names, proxies, the benchmark routes (``hello_app`` unless said
otherwise)."""

from __future__ import annotations

import json
import re
import signal
import socket
import sys
import threading
import time
import uuid
from pathlib import Path

import ferrule
import httpx
import pytest
from support.h1raw import request_bytes
from support.serverutil import (
    APPS_DIR,
    ServerProcess,
    ferrule_command,
    free_port,
    is_clean_exit,
    poll,
    run_to_exit,
    running_server,
    wait_until_serving,
)

OPTIONS = [
    "--host",
    "--port",
    "--uds",
    "--workers",
    "--reload",
    "--reload-dir",
    "--reload-include",
    "--reload-exclude",
    "--reload-delay",
    "--loop",
    "--app-dir",
    "--factory",
    "--lifespan",
    "--interface",
    "--root-path",
    "--timeout-keep-alive",
    "--timeout-graceful-shutdown",
    "--limit-concurrency",
    "--backlog",
    "--log-level",
    "--access-log",
    "--no-access-log",
    "--use-colors",
    "--no-use-colors",
    "--proxy-headers",
    "--no-proxy-headers",
    "--forwarded-allow-ips",
    "--server-header",
    "--no-server-header",
    "--date-header",
    "--no-date-header",
    "--header",
    "--log-config",
    "--env-file",
    "--limit-max-requests",
    "--limit-max-requests-jitter",
    "--version",
    "--reset-contextvars",
    "--http",
    "--ws",
    "--ssl-version",
    "--ssl-ciphers",
    "--timeout-worker-healthcheck",
]


def test_help_lists_every_option() -> None:
    """Rule: the CLI has uvicorn's option names. ``--help`` exits 0 and names each. Broken: an
    option is missing or renamed (listed in the failure)."""
    result = run_to_exit(ferrule_command("--help"))
    assert result.returncode == 0, result.describe()
    missing = [option for option in OPTIONS if option not in result.stdout + result.stderr]
    assert not missing, f"--help does not mention {missing}\n{result.describe()}"


def test_running_line_once_with_real_port() -> None:
    """Rule: the server logs exactly one "ferrule running on http://HOST:PORT" line, with the
    real port when --port 0. Broken: no line, port 0 in it, or the line repeated."""
    with running_server("hello_app:app") as server:
        assert server.port and server.port > 0
        assert server.get("/").status_code == 200
        lines = re.findall(r"ferrule running on http://127\.0\.0\.1:(\d+)", server.stderr)
    assert lines == [str(server.port)], server.describe()


def test_dotted_attribute_import_string() -> None:
    """Rule: APP is "module:attr" where attr may be dotted ("pkg.nested:holder.app"). Broken:
    the import fails (no running line) or the wrong object is served."""
    with running_server("pkg.nested:holder.app") as server:
        assert server.get("/").text == "nested app"


def test_app_dir_is_put_on_sys_path(tmp_path: Path) -> None:
    """Rule: --app-dir DIR is put first on sys.path before importing APP. The server runs from
    an empty directory. Broken: "No module named hello_app", the process exits."""
    with running_server("hello_app:app", "--app-dir", str(APPS_DIR), cwd=tmp_path) as server:
        assert server.get("/").json()["path"] == "/"


def test_factory_option_calls_the_callable() -> None:
    """Rule: with --factory, APP names a callable that returns the app. Broken: the factory
    itself is served as the app (it is not an ASGI app: 500) or the option is refused."""
    with running_server("pkg.nested:create_app", "--factory") as server:
        assert server.get("/").text == "made by the factory"


@pytest.mark.parametrize(
    ("app", "mentions"),
    [
        ("hello_app", "hello_app"),
        ("no_such_module_xyz:app", "no_such_module_xyz"),
        ("hello_app:no_such_attribute", "no_such_attribute"),
    ],
    ids=["no-colon", "missing-module", "missing-attribute"],
)
def test_bad_app_string_exits_3_with_message(app: str, mentions: str) -> None:
    """Rule: a bad APP string, a missing module or a missing attribute exits with status 3
    (uvicorn's STARTUP_FAILURE) and a clear message on stderr naming what failed. Broken: a
    hang (killed after 15 s), another exit status, or a message that does not name the import
    string."""
    result = run_to_exit(ferrule_command(app, "--port", "0"))
    assert result.returncode == 3, result.describe()
    assert mentions in result.stderr, result.describe()
    assert "running on" not in result.stderr


def test_port_in_use_exits_3() -> None:
    """Rule: a port already in use exits with status 3 and "Address already in use" on stderr.
    Broken: a traceback-only crash, exit 0, or a hang."""
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen(1)
        port = blocker.getsockname()[1]
        result = run_to_exit(ferrule_command("hello_app:app", "--port", str(port)))
    assert result.returncode == 3, result.describe()
    assert "address already in use" in result.stderr.lower(), result.describe()


def test_unix_socket(tmp_path: Path) -> None:
    """Rule: --uds PATH listens on a unix socket and logs "ferrule running on unix socket PATH".
    Broken: no such line, or httpx cannot connect through the socket."""
    path = tmp_path / "ferrule.sock"
    with running_server("hello_app:app", "--uds", str(path)) as server:
        assert server.uds == str(path), server.describe()
        transport = httpx.HTTPTransport(uds=str(path))
        with httpx.Client(transport=transport, timeout=5, trust_env=False) as client:
            response = client.get("http://localhost/via-uds")
    assert response.json()["path"] == "/via-uds"


@pytest.mark.parametrize(
    "args", [[], ["--workers", "2"], ["--reload"]], ids=["one-process", "workers", "reload"]
)
def test_unix_socket_file_is_removed_on_exit(tmp_path: Path, args: list[str]) -> None:
    """Rule: the process that bound ``--uds PATH`` (the server, or the parent of workers or of
    the reloaded worker) removes the socket file when it exits cleanly, as uvicorn does.
    Seen failing before the change: the file was left behind in all three modes."""
    path = tmp_path / "gone.sock"
    if "--reload" in args:
        args = [*args, "--reload-dir", str(tmp_path)]
    with running_server("hello_app:app", "--uds", str(path), *args) as server:
        transport = httpx.HTTPTransport(uds=str(path))
        with httpx.Client(transport=transport, timeout=5, trust_env=False) as client:
            poll(lambda: client.get("http://localhost/").status_code == 200, what="an answer")
        assert path.exists()
        assert is_clean_exit(server.stop()), server.describe()
    assert not path.exists(), server.describe()


def test_unix_socket_file_put_in_its_place_is_left_alone(tmp_path: Path) -> None:
    """Rule: the server removes the socket file at exit only if it is still the one it bound:
    a socket bound at the same path meanwhile (another server's) is left alone. Seen failing
    with the check of the file's identity left out (the other socket's file was removed)."""
    path = tmp_path / "shared.sock"
    with running_server("hello_app:app", "--uds", str(path)) as server:
        path.unlink()
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as other:
            other.bind(str(path))
            assert is_clean_exit(server.stop()), server.describe()
            assert path.is_socket(), server.describe()


def test_console_script() -> None:
    """Rule: the ``ferrule`` console script is installed next to the interpreter and starts the
    server like ``python -m ferrule``. Broken: the script is missing or does not serve."""
    script = Path(sys.executable).parent / "ferrule"
    assert script.exists(), f"no console script at {script}"
    server = ServerProcess([str(script), "hello_app:app", "--port", "0"], cwd=APPS_DIR)
    try:
        server.wait_running()
        assert server.get("/").status_code == 200
        assert is_clean_exit(server.stop()), server.describe()
    finally:
        server.close()


@pytest.mark.parametrize("mode", ["object", "string"])
def test_ferrule_run_and_python_logging(tmp_path: Path, mode: str) -> None:
    """Rule: ``ferrule.run(app_or_import_string, **options)`` serves like the CLI, and the
    server logs through Python logging on "ferrule.error" (the running line) and
    "ferrule.access" (one line per request). Broken: run() rejects the options or the object,
    or the records do not pass through those loggers."""
    log_file = tmp_path / "records.log"
    argv = [sys.executable, "run_script.py", mode, str(log_file)]
    server = ServerProcess(argv, cwd=APPS_DIR)
    try:
        server.wait_running()
        assert server.get("/logged-path").json()["path"] == "/logged-path"
        records = poll(
            lambda: (text := log_file.read_text()) and "/logged-path" in text and text,
            what="the access record",
        )
        assert is_clean_exit(server.stop()), server.describe()
    finally:
        server.close()
    assert re.search(r"^ferrule\.error .*running on http://", records, re.M), records
    assert re.search(r"^ferrule\.access .*GET /logged-path HTTP/1\.1.* 200", records, re.M)


def test_access_log_line_format() -> None:
    """Rule: one access line per request, like uvicorn's default one:
    'INFO:     CLIENT_HOST:CLIENT_PORT - "GET /path HTTP/1.1" 200 OK', on stdout (see
    ``test_access_lines_on_stdout_the_rest_on_stderr``). Broken: no line, or another format.
    Seen failing before the fix: the line ended in "200" (no reason phrase) and was on
    stderr."""
    path = f"/access-{uuid.uuid4().hex}"
    pattern = re.compile(rf'^INFO:     127\.0\.0\.1:(\d+) - "GET {path} HTTP/1\.1" 200 OK$', re.M)
    with running_server("hello_app:app") as server:
        client_port = server.get(path).json()["client"][1]
        line = server.wait_for_output(pattern, stream="stdout")
    assert int(line.group(1)) == client_port


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (201, "201 Created"),
        (404, "404 Not Found"),
        (418, "418 I'm a Teapot"),
        (503, "503 Service Unavailable"),
        (299, "299"),
    ],
)
def test_access_line_ends_with_the_status_and_its_phrase(code: int, status: str) -> None:
    """Rule: as uvicorn's access formatter, the line ends with the status code and its reason
    phrase from ``http.HTTPStatus``; a code without one (299) ends with the bare code. Broken:
    the code alone, or a phrase made up for an unknown code. Seen failing before the fix:
    every case, as the lines were on stderr; read from stderr, every case but 299 (the lines
    ended in the bare code, "201", "404", ...)."""
    tag = uuid.uuid4().hex
    pattern = re.compile(rf'"GET /status\?code={code}&tag={tag} HTTP/1\.1" (.*)$', re.M)
    with running_server("response_app:app") as server:
        response = server.get("/status", params={"code": str(code), "tag": tag})
        assert response.status_code == code
        line = server.wait_for_output(pattern, stream="stdout")
    assert line.group(1) == status, server.describe()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_access_lines_on_stdout_the_rest_on_stderr(workers: str) -> None:
    """Rule: as uvicorn's default logging config has it, access lines go to stdout and
    everything else (the running line, errors) to stderr, in worker processes too. Broken: an
    access line on stderr, or the running line on stdout. Seen failing before the fix: both
    cases (the access line was on stderr and stdout stayed empty)."""
    path = f"/streams-{uuid.uuid4().hex}"
    with running_server("hello_app:app", "--workers", workers) as server:
        assert server.get(path).status_code == 200
        server.wait_for_output(rf'"GET {path} HTTP/1\.1" 200', stream="stdout")
        assert is_clean_exit(server.stop()), server.describe()
    assert path not in server.stderr, server.describe()
    assert "running on" in server.stderr, server.describe()
    assert "running on" not in server.stdout, server.describe()


def test_no_access_log() -> None:
    """Rule: --no-access-log silences the per-request lines (the server still logs its running
    line). Broken: the request's path appears on stdout or stderr."""
    path = f"/quiet-{uuid.uuid4().hex}"
    with running_server("hello_app:app", "--no-access-log") as server:
        assert server.get(path).status_code == 200
        time.sleep(0.5)
        assert path not in server.stdout + server.stderr, server.describe()


def test_log_level_warning_hides_info_lines() -> None:
    """Rule: --log-level warning filters info records (access lines are info). The port is
    chosen up front since the info-level running line may be filtered too. Broken: the
    request's access line appears anyway (on stdout or stderr)."""
    port = free_port()
    path = f"/hidden-{uuid.uuid4().hex}"
    with running_server(
        "hello_app:app", "--port", str(port), "--log-level", "warning", wait=False
    ) as server:
        wait_until_serving(port)
        with httpx.Client(timeout=5, trust_env=False) as client:
            assert client.get(f"http://127.0.0.1:{port}{path}").status_code == 200
        time.sleep(0.5)
        assert path not in server.stdout + server.stderr, server.describe()


@pytest.mark.parametrize(
    ("loop", "module"),
    [("asyncio", "asyncio"), ("uvloop", "uvloop"), ("auto", "uvloop")],
)
def test_loop_option(loop: str, module: str) -> None:
    """Rule: --loop asyncio|uvloop picks that event loop; auto picks uvloop when installed.
    Broken: the app's running loop comes from another module than the one asked for."""
    with running_server("hello_app:app", "--loop", loop) as server:
        assert server.get("/").json()["loop"].split(".")[0] == module


def test_timeout_keep_alive_closes_idle_connection() -> None:
    """Rule: --timeout-keep-alive SECS closes a connection idle that long, not earlier. With 3 s:
    a request after 0.3 s idle is served on the same socket, then the server closes it within
    about 3 s of idleness. Broken: closed too early (second request fails) or never (no EOF
    within 15 s). The timeout is 3 s, not 1, for the 0.3 s pause to stay well short of it on
    a loaded machine."""
    with running_server("hello_app:app", "--timeout-keep-alive", "3") as server:
        with server.raw() as conn:
            conn.send(request_bytes("GET", "/one"))
            assert conn.read_response().status == 200
            time.sleep(0.3)
            conn.send(request_bytes("GET", "/two"))
            assert conn.read_response().status == 200
            idle_since = time.monotonic()
            assert conn.wait_closed(15), "the idle connection was not closed"
            idle = time.monotonic() - idle_since
    assert 1.5 <= idle <= 10, f"closed after {idle:.2f}s idle with --timeout-keep-alive 3"


def test_limit_concurrency_answers_503() -> None:
    """Rule: --limit-concurrency N answers 503 to work beyond N concurrent requests (uvicorn's
    behaviour), and serves again once below. With N = 2, three slow requests (8 s each): one is
    refused, and while the other two are in flight an extra request gets 503 too. Broken: the
    extra request waits and gets a 200, none of the slow ones is served, or the server stays
    saturated. The extra request is sent only once a slow one has been refused: sent while they
    were still coming in (a loaded machine), extras took the slots and left one slow request in
    flight, beside which every extra was within the limit."""
    with running_server("hello_app:app", "--limit-concurrency", "2") as server:
        results: list[int] = []

        def slow() -> None:
            results.append(server.get("/sleep?secs=8", timeout=30).status_code)

        threads = [threading.Thread(target=slow) for _ in range(3)]
        for thread in threads:
            thread.start()
        poll(lambda: 503 in results, what="one of three slow requests refused")
        assert server.get("/extra", timeout=5).status_code == 503
        for thread in threads:
            thread.join(30)
        recovered = poll(lambda: server.get("/after").status_code == 200)
    assert sorted(results) == [200, 200, 503], results
    assert recovered


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--proxy-headers", "--forwarded-allow-ips", "127.0.0.1"], ("203.0.113.7", "https")),
        (["--no-proxy-headers"], ("127.0.0.1", "http")),
        (["--proxy-headers", "--forwarded-allow-ips", "10.9.8.7"], ("127.0.0.1", "http")),
    ],
    ids=["trusted", "disabled", "untrusted-peer"],
)
def test_proxy_headers(args: list[str], expected: tuple[str, str]) -> None:
    """Rule: --proxy-headers with the peer in --forwarded-allow-ips takes the client address
    and scheme from X-Forwarded-For / X-Forwarded-Proto; --no-proxy-headers or an untrusted
    peer leaves them alone. Broken: the headers are ignored when trusted or obeyed when not."""
    headers = {"X-Forwarded-For": "203.0.113.7", "X-Forwarded-Proto": "https"}
    with running_server("hello_app:app", *args) as server:
        seen = server.get("/", headers=headers).json()
    assert (seen["client"][0], seen["scheme"]) == expected


def test_proxy_headers_belong_to_their_own_request_on_a_kept_alive_connection() -> None:
    """Rule: on one connection, each request's client and scheme come from its own headers: a
    forwarded request does not lend its client to the next request, nor the connection's
    first request its own to the later ones. Seen failing with a forwarded client and scheme
    written into what the connection's scopes start from (the second request reported
    203.0.113.7 and https)."""
    forwarded = [("X-Forwarded-For", "203.0.113.7"), ("X-Forwarded-Proto", "https")]
    args = ["--proxy-headers", "--forwarded-allow-ips", "127.0.0.1"]
    with running_server("hello_app:app", *args) as server:
        conn = server.raw()
        seen = []
        for headers in (forwarded, [], forwarded, []):
            conn.send(request_bytes("GET", "/", headers=headers))
            scope = json.loads(conn.read_response().body)
            seen.append((scope["client"][0], scope["scheme"]))
        conn.close()
    proxied, direct = ("203.0.113.7", "https"), ("127.0.0.1", "http")
    assert seen == [proxied, direct, proxied, direct]


#: Two hops: the client, then a proxy at 10.0.0.5 that hands the request to the test's
#: 127.0.0.1. The client the server takes depends on which hops it trusts.
TWO_HOPS = {"X-Forwarded-For": "203.0.113.7, 10.0.0.5"}


@pytest.mark.parametrize(
    ("args", "env", "client"),
    [
        ([], {}, "10.0.0.5"),
        ([], {"FORWARDED_ALLOW_IPS": "10.9.8.7"}, "127.0.0.1"),
        ([], {"FORWARDED_ALLOW_IPS": "127.0.0.1, 10.0.0.5"}, "203.0.113.7"),
        (["--workers", "2"], {"FORWARDED_ALLOW_IPS": "10.9.8.7"}, "127.0.0.1"),
        (["--forwarded-allow-ips", "127.0.0.1"], {"FORWARDED_ALLOW_IPS": "10.9.8.7"}, "10.0.0.5"),
    ],
    ids=["default", "env-untrusts-peer", "env-trusts-both", "env-with-workers", "option-wins"],
)
def test_forwarded_allow_ips_defaults_to_the_environment(
    args: list[str], env: dict[str, str], client: str
) -> None:
    """Rule: as uvicorn's, the default of --forwarded-allow-ips is ``$FORWARDED_ALLOW_IPS``
    when set (in worker processes too), else "127.0.0.1,::1"; an explicit option wins over
    the variable. The request comes from 127.0.0.1 through a proxy at 10.0.0.5: trusted hops
    are skipped, right to left. Broken: the variable ignored, or preferred to the option.
    Seen failing before the fix: ``env-untrusts-peer``, ``env-trusts-both`` and
    ``env-with-workers`` (the variable was ignored: 10.0.0.5 each time); ``default`` and
    ``option-wins`` passed, as they pin what the fix must leave alone."""
    with running_server("hello_app:app", *args, env=env) as server:
        for _ in range(4):  # a connection each, so more than one worker answers
            assert server.get("/", headers=TWO_HOPS).json()["client"][0] == client


def test_forwarded_allow_ips_from_the_env_file(tmp_path: Path) -> None:
    """Rule: ``FORWARDED_ALLOW_IPS`` set by ``--env-file`` counts as if set in the environment
    (uvicorn loads the file before reading it). Broken: the file's value ignored (the peer,
    127.0.0.1, trusted by the built-in default). Seen failing before the fix: the client was
    10.0.0.5."""
    env_file = tmp_path / "proxy.env"
    env_file.write_text("FORWARDED_ALLOW_IPS=10.9.8.7\n")
    with running_server("hello_app:app", "--env-file", str(env_file)) as server:
        assert server.get("/", headers=TWO_HOPS).json()["client"][0] == "127.0.0.1"


def test_forwarded_allow_ips_networks_and_every_forwarded_for_line() -> None:
    """Rule: as uvicorn's, --forwarded-allow-ips takes networks (127.0.0.0/8, 10.0.0.0/8),
    the X-Forwarded-For lines make one list, a hop may carry a port (``host:port``, kept as
    the client's), and the access line names the client the scope has. Here the client
    203.0.113.7:4711 came through a proxy at 10.0.0.5, whose line came after the client's.
    Seen failing before the fix: the client was 127.0.0.1 (a network matched nothing, since
    entries were compared as strings); with the addresses listed instead, it was 10.0.0.5
    (only the last line was read), then "203.0.113.7:4711" with port 0; the access line gave
    the peer, 127.0.0.1."""
    headers = [("X-Forwarded-For", "203.0.113.7:4711"), ("X-Forwarded-For", "10.0.0.5")]
    args = ["--forwarded-allow-ips", "127.0.0.0/8, 10.0.0.0/8"]
    with running_server("hello_app:app", *args) as server:
        assert server.get("/", headers=headers).json()["client"] == ["203.0.113.7", 4711]
        server.wait_for_output(r'203\.0\.113\.7:4711 - "GET / HTTP/1\.1" 200', stream="stdout")


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as sock:
            sock.bind(("::1", 0))
    except OSError:
        return False
    return True


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback (::1) here")
@pytest.mark.parametrize("workers", ["1", "2"])
def test_ipv6_loopback_is_a_trusted_proxy_by_default(workers: str) -> None:
    """Rule: uvicorn's default --forwarded-allow-ips, "127.0.0.1,::1", trusts a proxy on the
    IPv6 loopback too: served on ``--host ::1``, a request from ::1 gets its client from
    X-Forwarded-For; in worker processes too. Broken: the client stays "::1". Seen failing
    before the fix: both cases (the default trusted 127.0.0.1 only)."""
    with running_server("hello_app:app", "--host", "::1", "--workers", workers, wait=False) as srv:
        srv.port = int(srv.wait_for_output(r"running on http://\[::1\]:(\d+)").group(1))
        srv.host = "[::1]"
        for _ in range(4):  # a connection each, so more than one worker answers
            seen = srv.get("/", headers={"X-Forwarded-For": "203.0.113.7"}).json()["client"]
            assert seen[0] == "203.0.113.7", srv.describe()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--http", "1", "--http2"], "HTTP/2 cannot be on with http 1"),
        (["--ws-per-message-deflate", "maybe"], "'maybe' is not a valid boolean"),
    ],
    ids=["http2-with-http-1", "deflate-not-a-boolean"],
)
def test_uvicorn_http2_and_deflate_options_refuse_nonsense(args: list[str], message: str) -> None:
    """Rule: uvicorn's ``--http2`` and ``--ws-per-message-deflate BOOLEAN`` are accepted (see
    the test of all options; before, each made a uvicorn command line fail with "unrecognized
    arguments"), but ``--http2`` with ``--http 1`` and a deflate value that is no boolean are
    usage errors (exit 2) naming the problem. Broken: served anyway, or another exit."""
    result = run_to_exit(ferrule_command("hello_app:app", "--port", "0", *args))
    assert result.returncode == 2, result.describe()
    assert message in result.stderr, result.describe()


def test_all_options_together() -> None:
    """Rule: every option is accepted with a value of the documented form. Broken: one of them
    is refused (the process exits at startup with a usage error)."""
    with running_server(
        "hello_app:app",
        "--host",
        "127.0.0.1",
        "--workers",
        "1",
        "--loop",
        "asyncio",
        "--app-dir",
        ".",
        "--lifespan",
        "on",
        "--root-path",
        "/root",
        "--timeout-keep-alive",
        "5",
        "--timeout-graceful-shutdown",
        "5",
        "--limit-concurrency",
        "100",
        "--backlog",
        "128",
        "--log-level",
        "debug",
        "--access-log",
        "--proxy-headers",
        "--forwarded-allow-ips",
        "127.0.0.1",
        "--http2",
        "--ws-per-message-deflate",
        "false",
    ) as server:
        seen = server.get("/root/x").json()
        code = server.stop(signal.SIGTERM)
    assert seen["root_path"] == "/root"
    assert is_clean_exit(code, signal.SIGTERM), server.describe()


def test_benchmark_routes_are_answered_without_the_app() -> None:
    """Rule: the benchmark's hidden routes are answered by the server in Rust: with
    ``--rust-hello-route /r`` the path gets "Hello, world!" and the app is never called for it;
    with ``--stats-route /s`` the path gets the bridge counters as JSON (``ferrule.COUNTERS``),
    which count the app's requests and not the stats requests themselves. Broken: the app
    answers those paths (its JSON instead), a counter is missing, or reading the counters moves
    them."""
    with running_server("hello_app:app", "--rust-hello-route", "/r", "--stats-route", "/s") as srv:
        with srv.client() as client:
            hello = client.get("/r")
            assert hello.status_code == 200 and hello.text == "Hello, world!"
            for _ in range(5):
                assert client.get("/").status_code == 200
            first = client.get("/s").json()
            second = client.get("/s").json()
        assert sorted(first) == sorted(ferrule.COUNTERS)
        assert first["spawned"] >= 5 and first["collisions"] == 0, first
        assert second["spawned"] == first["spawned"], (first, second)


def _histogram_count(trace: dict[str, list[int]], name: str) -> int:
    assert len(trace[name]) == len(trace["bucket_upper_ns"]), trace
    return sum(trace[name])


def test_trace_requests_adds_latency_histograms_to_the_stats_route() -> None:
    """Rule: with ``--trace-requests`` the stats JSON gains ``trace``: cumulative histograms of
    ``gil_wait`` and ``first_drive`` (one entry per request handed to the app) and
    ``resume_wait`` (a coroutine resumed after a suspension: here a request body that arrives
    100 ms after its head, so the app's ``receive()`` suspends on a native future); without the
    flag there is no ``trace``. Seen failing: before the trace was built (no ``trace`` key), and
    with the resume mark left out of ``NativeFuture::resolve`` (``resume_wait`` did not move for
    the late body)."""
    with running_server("body_app:app", "--stats-route", "/s") as srv:
        assert "trace" not in srv.get("/s").json()
    traced = ("--stats-route", "/s", "--trace-requests", "--loop", "asyncio")
    with running_server("body_app:app", *traced) as srv:
        before = srv.get("/s").json()["trace"]
        with srv.client() as client:
            for _ in range(5):
                assert client.post("/echo", content=b"x").status_code == 200
        middle = srv.get("/s").json()["trace"]
        with srv.raw() as conn:
            conn.send(b"POST /first-chunk HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\n")
            time.sleep(0.1)
            conn.send(b"hello")
            head = conn.read_until(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200"), head
        after = srv.get("/s").json()["trace"]
    bounds = after["bucket_upper_ns"]
    assert bounds == sorted(bounds) and bounds[0] > 0, bounds
    for name in ("gil_wait", "first_drive"):
        assert _histogram_count(after, name) - _histogram_count(before, name) == 6, (name, after)
    # The late body's resume. On asyncio with the loop idle a tokio thread drives it at once, so
    # only the mark the resolved future leaves records it (uvloop would hand it over, and the
    # handoff leaves a mark of its own).
    assert _histogram_count(after, "resume_wait") > _histogram_count(middle, "resume_wait")
