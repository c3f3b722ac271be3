"""A uvicorn user's habits, tried on ferrule: environment variables, factories, loggers,
exit statuses, error messages and certificate files as uvicorn takes them."""

from __future__ import annotations

import json
import re
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import ferrule
import pytest
from support.certs import Certs
from support.serverutil import (
    STARTUP_TIMEOUT,
    ServerProcess,
    base_env,
    ferrule_command,
    free_port,
    poll,
    run_to_exit,
    running_server,
)


def test_uvicorn_environment_variables_set_options() -> None:
    """Rule: every option may come from ``UVICORN_NAME`` (uvicorn reads them all through
    click) or ``FERRULE_NAME``, the command line winning; ``UVICORN_APP`` names the app.
    Broken: the variables ignored, so the server listened on 8000 (seen before they were
    read: the running line said 8000)."""
    port = free_port()
    env = {
        "UVICORN_APP": "hello_app:app",
        "UVICORN_PORT": str(port),
        "UVICORN_ROOT_PATH": "/from-uvicorn-env",
        "FERRULE_HEADERS": "x-one:1 x-two:2",
        "UVICORN_SERVER_HEADER": "false",
    }
    srv = ServerProcess(ferrule_command("--access-log"), env=env)
    try:
        srv.wait_running()
        assert srv.port == port, srv.describe()
        response = srv.get("/from-uvicorn-env/scope")
        assert response.json()["root_path"] == "/from-uvicorn-env"
        assert (response.headers["x-one"], response.headers["x-two"]) == ("1", "2")
        assert "server" not in response.headers
    finally:
        srv.close()
    given = {"UVICORN_PORT": "1", "UVICORN_ROOT_PATH": "/env"}
    with running_server("hello_app:app", "--root-path", "/cli", env=given) as srv:
        assert srv.get("/cli/scope").json()["root_path"] == "/cli"


def test_a_bad_environment_value_is_a_usage_error_naming_the_variable() -> None:
    """Rule: ``UVICORN_PORT=abc`` is a usage error (exit 2) naming the variable. Broken: a
    traceback, or the value ignored."""
    result = run_to_exit(ferrule_command("hello_app:app"), env={"UVICORN_PORT": "abc"})
    assert result.returncode == 2, result.describe()
    assert "UVICORN_PORT" in result.stderr and "Traceback" not in result.stderr


def test_uvicorn_054_protocol_and_loop_names_are_accepted() -> None:
    """Rule: uvicorn 0.54's ``--http zttp`` (its HTTP/1.1 + HTTP/2 parser) and ``--loop
    zuvloop`` / ``--loop none`` start the server (as auto and uvloop/asyncio). Broken: exit 2,
    "invalid choice"."""
    for args in (["--http", "zttp"], ["--loop", "zuvloop"], ["--loop", "none"]):
        with running_server("hello_app:app", *args) as srv:
            assert srv.get("/").status_code == 200, srv.describe()


def test_app_factory_without_the_factory_flag_is_detected() -> None:
    """Rule: an app string naming a zero-argument callable is called to make the app, with
    uvicorn's warning. Broken: served as the app itself, so "lifespan appears unsupported"
    and a 500 on every request (seen before the detection)."""
    with running_server("dropin_apps:create_app") as srv:
        response = srv.get("/")
        assert (response.status_code, response.text) == (200, "made by the factory")
    assert "ASGI app factory detected" in srv.stderr, srv.describe()
    assert "appears unsupported" not in srv.stderr, srv.describe()


def test_app_logging_to_uvicorn_error_is_printed() -> None:
    """Rule: what an app logs to ``logging.getLogger("uvicorn.error")`` is printed as ferrule's
    own lines are. Broken: nothing printed (an INFO record reached no handler)."""
    with running_server("dropin_apps:logs_to_uvicorn") as srv:
        assert srv.get("/").text == "logged"
        srv.wait_for_output(r"INFO: +app says hello through uvicorn.error")


def test_a_log_config_for_uvicorn_loggers_formats_ferrules_lines(tmp_path: Path) -> None:
    """Rule: a ``--log-config`` written for uvicorn (handlers on ``uvicorn``, ``uvicorn.error``
    and ``uvicorn.access``, existing loggers disabled) formats ferrule's server and access
    lines. Broken: silently ignored, ferrule's default format printed (seen before)."""
    config = {
        "version": 1,
        "formatters": {"custom": {"format": "UVCONF %(levelname)s %(message)s"}},
        "handlers": {"err": {"class": "logging.StreamHandler", "formatter": "custom"}},
        "loggers": {
            "uvicorn": {"handlers": ["err"], "level": "INFO"},
            "uvicorn.error": {"level": "INFO"},
            "uvicorn.access": {"handlers": ["err"], "level": "INFO", "propagate": False},
        },
    }
    path = tmp_path / "uvicorn-logging.json"
    path.write_text(json.dumps(config))
    with running_server("hello_app:app", "--log-config", str(path)) as srv:
        srv.get("/")
        srv.wait_for_output(r'UVCONF INFO .*"GET / HTTP/1.1" 200')
    assert re.search(r"^UVCONF INFO ferrule running on", srv.stderr, re.M), srv.describe()


def test_run_exits_3_when_the_server_cannot_start(tmp_path: Path) -> None:
    """Rule: ``ferrule.run()`` in a script whose server cannot start (port taken, app not
    importable) ends the program with status 3, as ``uvicorn.run`` does. Broken: run()
    returned 3 and the script went on to exit 0 (seen before)."""
    script = tmp_path / "serve.py"
    script.write_text("import ferrule\nferrule.run('no_such_module:app', port=0)\nprint('after')\n")
    result = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=30, env=base_env()
    )
    assert result.returncode == 3, result.stderr
    assert "after" not in result.stdout


def test_app_raising_at_import_with_workers_exits_3_at_once() -> None:
    """Rule: with ``--workers 2``, an app that raises at import stops the server with status 3
    after its first failures, each traceback whole on its own lines. Broken: workers
    respawned without a pause (48 in 5 s), exit 1 or no exit, tracebacks interleaved. The
    exit comes within a few seconds on an idle machine; the bound is 45 s (two imports each
    take seconds on a loaded one), still short of a respawn loop that never ends."""
    env = {"DROPIN_RAISE_AT_IMPORT": "no database"}
    started = time.monotonic()
    result = run_to_exit(
        ferrule_command("dropin_apps:create_app", "--port", "0", "--workers", "2"),
        env=env,
        timeout=60,
    )
    assert result.returncode == 3, result.describe()
    assert time.monotonic() - started < 45, result.describe()
    assert result.stderr.count("Started worker process") <= 3, result.describe()
    for line in result.stderr.splitlines():
        if "RuntimeError: " in line:
            assert line == "RuntimeError: this app cannot start: no database", result.describe()


def test_a_worker_crashing_before_serving_is_respawned_with_a_growing_pause() -> None:
    """Rule: a worker that dies before serving (not a startup failure: killed, or exiting 1)
    is replaced after a pause that doubles each time, not in a tight loop: the parent's
    lines say so, each pause twice the one before. Broken: dozens of "Started worker process"
    lines a second. (The pauses are read from the log, not counted in a fixed time: a loaded
    machine takes seconds over each worker's import.)"""
    # hello_app exits 1 before serving when FERRULE_TEST_EXIT_AT_IMPORT is set.
    env = {"FERRULE_TEST_EXIT_AT_IMPORT": "1"}
    pause = re.compile(r"died before serving \(1\); starting a new one in ([\d.]+) s")
    with running_server("hello_app:app", "--workers", "2", env=env, wait=False) as srv:
        poll(lambda: len(pause.findall(srv.stderr)) >= 4, timeout=60, what="four respawns")
        log = srv.stderr
    pauses = [float(seconds) for seconds in pause.findall(log)]
    assert all(b == 2 * a for a, b in zip(pauses, pauses[1:4], strict=False)), srv.describe()
    assert log.count("Started worker process") <= 2 + len(pauses), srv.describe()


def test_one_pem_holding_certificate_and_key(certs: Certs, tmp_path: Path) -> None:
    """Rule: ``--ssl-certfile`` naming a PEM that holds the certificate and the key serves TLS
    without ``--ssl-keyfile``, as uvicorn (``ssl.load_cert_chain``) does. Broken: refused,
    "TLS needs both --ssl-certfile and --ssl-keyfile"."""
    both = tmp_path / "both.pem"
    both.write_bytes(certs.server_cert.read_bytes() + certs.server_key.read_bytes())
    with running_server("hello_app:app", "--ssl-certfile", str(both)) as srv:
        assert srv.scheme == "https", srv.describe()
        context = ssl.create_default_context(cafile=str(certs.ca))
        with srv.client(verify=context) as client:
            assert client.get("/").status_code == 200


def test_usage_errors_name_the_option_in_three_lines() -> None:
    """Rule: a bad value is a short usage error naming the option as typed. Broken: a 40-line
    usage block first, or the Python field's name."""
    result = run_to_exit(ferrule_command("hello_app:app", "--workers", "0"))
    assert result.returncode == 2
    assert result.stderr.splitlines()[-1] == "Error: argument --workers: must be at least 1, not 0"
    assert len(result.stderr.splitlines()) == 4, result.describe()


def test_config_refuses_an_unknown_log_level_at_once() -> None:
    """Rule: ``Config(app, log_level="verbose")`` raises ValueError naming the setting when
    made. Broken: accepted, failing later with a traceback inside the server."""
    with pytest.raises(ValueError, match="log_level"):
        ferrule.Config("hello_app:app", log_level="verbose")


def test_ctrl_c_during_lifespan_startup_shuts_down_cleanly() -> None:
    """Rule: SIGINT while lifespan startup runs lets startup finish, then runs lifespan
    shutdown and exits 0, with no traceback and no "appears unsupported", as uvicorn. Broken:
    a KeyboardInterrupt traceback through the loop, "lifespan appears unsupported", "Task was
    destroyed but it is pending!" (seen before the signal handlers went in first)."""
    env = {"FERRULE_TEST_STARTUP_DELAY": "1.5"}
    args = ("--lifespan", "on")
    with running_server("lifespan_apps:slow_startup", *args, env=env, wait=False) as srv:
        srv.wait_for_output(r"Waiting for application startup", STARTUP_TIMEOUT)
        srv.send_signal(signal.SIGINT)
        code = srv.wait_exit()
    assert code == 0, srv.describe()
    assert "Application shutdown complete" in srv.stderr, srv.describe()
    for bad in ("Traceback", "appears unsupported", "destroyed but it is pending"):
        assert bad not in srv.stderr, srv.describe()
    assert "running on" not in srv.stderr, srv.describe()


def test_log_level_trace_logs_asgi_messages() -> None:
    """Rule: ``--log-level trace`` logs each ASGI message both ways (uvicorn's ``ASGI [N] Send``
    lines), and ``info`` does not. Broken: trace showing nothing more than info."""
    with running_server("hello_app:app", "--log-level", "trace") as srv:
        srv.get("/")
        sent = r"TRACE: +(\S+ - )?ASGI \[\d+\] Send \{'type': 'http.response.start'"
        srv.wait_for_output(sent)
        assert re.search(r"ASGI \[\d+\] Started scope=\{.*'path': '/'", srv.stderr)
        # Logged once the app has returned, a moment after the response went out.
        srv.wait_for_output(r"ASGI \[\d+\] Completed")
    with running_server("hello_app:app", "--log-level", "info") as srv:
        srv.get("/")
    assert "ASGI [" not in srv.stderr, srv.describe()


def test_log_level_trace_logs_connections_as_uvicorn() -> None:
    """Rule: ``--log-level trace`` logs each connection and WebSocket as uvicorn does ("HTTP
    connection made/lost", "Upgrading to WebSocket", "WebSocket connection made/lost", each
    after the peer's address), and ASGI message lines begin with the peer too. Broken: none
    of these lines (seen before the server core logged them)."""
    from websockets.sync.client import connect

    with running_server("dropin_apps:ClassApp", "--log-level", "trace") as srv:
        srv.get("/")
        with connect(f"ws://127.0.0.1:{srv.port}/ws", open_timeout=5) as ws:
            ws.send("hi")
            assert ws.recv(timeout=5) == "echo hi"
        for line in (
            "HTTP connection made",
            "HTTP connection lost",
            "Upgrading to WebSocket",
            "WebSocket connection made",
            "WebSocket connection lost",
        ):
            srv.wait_for_output(rf"TRACE: +127\.0\.0\.1:\d+ - {line}")
        assert re.search(r"TRACE: +127\.0\.0\.1:\d+ - ASGI \[\d+\] Started", srv.stderr)
    with running_server("hello_app:app", "--log-level", "debug") as srv:
        srv.get("/")
    assert "connection made" not in srv.stderr, srv.describe()


UVICORN_LOGGERS_SCRIPT = """
import asyncio, logging, socket
import ferrule

async def app(scope, receive, send):
    if scope["type"] == "lifespan":
        raise RuntimeError("no lifespan here")
    await send({"type": "http.response.start", "status": 204, "headers": []})
    await send({"type": "http.response.body", "body": b""})

seen = []
class Keep(logging.Handler):
    def emit(self, record):
        seen.append((record.name, record.getMessage()))

log_config = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"null": {"class": "logging.NullHandler"}},
    "loggers": {
        "uvicorn": {"handlers": ["null"], "level": "INFO", "propagate": False},
        "uvicorn.access": {"handlers": ["null"], "level": "INFO", "propagate": False},
    },
}
config = ferrule.Config(app, port=0, log_config=log_config)
keep = Keep()
logging.getLogger("uvicorn.access").addHandler(keep)
logging.getLogger("uvicorn").addHandler(keep)
# As pytest's caplog does: also on every logger that does not propagate.
for logger in logging.Logger.manager.loggerDict.values():
    if isinstance(logger, logging.Logger) and not logger.propagate:
        logger.addHandler(keep)

async def main():
    server = ferrule.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\\r\\nHost: t\\r\\nConnection: close\\r\\n\\r\\n")
    await reader.read()
    writer.close()
    await server.shutdown()
    await task

asyncio.run(main())
for name, message in seen:
    print(f"{name}|{message}")
"""


def test_handlers_on_uvicorn_loggers_see_each_line_once_under_uvicorns_names() -> None:
    """Rule: ``Config(log_config=...)`` is applied when the Config is made, as uvicorn's is,
    so handlers a program (or pytest's caplog) adds to the uvicorn loggers afterwards stay;
    they get each of the server's lines once, named ``uvicorn.error``/``uvicorn.access``, in
    uvicorn's order ("Application startup complete." even when lifespan is unsupported).
    Broken: nothing seen (the log config, applied at serve time, removed the handlers), every
    line twice (ferrule's loggers did not propagate, so caplog attached to them too), names
    ``ferrule.*``, no "Application startup complete." (each seen before)."""
    result = run_to_exit([sys.executable, "-c", UVICORN_LOGGERS_SCRIPT], timeout=30)
    assert result.returncode == 0, result.describe()
    lines = result.stdout.splitlines()
    assert len(lines) == len(set(lines)), result.describe()
    messages = [line.split("|", 1)[1] for line in lines]
    expected = [
        "Started server process",
        "Waiting for application startup.",
        "ASGI 'lifespan' protocol appears unsupported.",
        "Application startup complete.",
        "ferrule running on http://127.0.0.1:",
        '"GET / HTTP/1.1" 204',
        "Shutting down",
    ]
    for want, got in zip(expected, messages, strict=False):
        assert want in got, result.describe()
    names = {line.split("|", 1)[0] for line in lines}
    assert names == {"uvicorn.error", "uvicorn.access"}, result.describe()


def test_config_and_run_signatures_are_uvicorns() -> None:
    """Rule: ``inspect.signature`` of ``Config`` and of ``run`` differ as uvicorn's do
    (``app_dir`` only in ``run``; the notify hooks only in ``Config``), as uvicorn's own test
    compares them. Broken: each had the other's (seen)."""
    import inspect

    config = set(inspect.signature(ferrule.Config.__init__).parameters)
    run = set(inspect.signature(ferrule.run).parameters)
    assert config - run == {"self", "callback_notify", "timeout_notify"}
    assert run - config == {"app_dir"}


def test_class_based_asgi3_app_is_served_over_http_and_websocket() -> None:
    """Rule: an app class whose instances are awaitable (``App(scope, receive, send)`` then
    ``await``) is served as ASGI3, over HTTP and WebSocket, though its instances have a
    ``send`` attribute. Broken: 500 on every request, "TypeError: 'NoneType' object is not
    subscriptable" (the bridge sent into the instance as if it were a coroutine; seen)."""
    from websockets.sync.client import connect

    with running_server("dropin_apps:ClassApp") as srv:
        response = srv.get("/")
        assert (response.status_code, response.text) == (200, "served by an awaitable instance")
        with connect(f"ws://127.0.0.1:{srv.port}/ws", open_timeout=5) as ws:
            ws.send("hi")
            assert ws.recv(timeout=5) == "echo hi"
    assert "Traceback" not in srv.stderr, srv.describe()


def test_server_header_given_with_header_replaces_the_default() -> None:
    """Rule: ``--header Server:NAME`` replaces ``server: ferrule``, as uvicorn's replaces its
    own, and given twice both values are sent. Broken: "ferrule, over-ridden" (seen)."""
    with running_server("hello_app:app", "--header", "Server:over-ridden") as srv:
        assert srv.get("/").headers["server"] == "over-ridden"
    twice = ("--header", "Server:over-ridden", "--header", "Server:another-value")
    with running_server("hello_app:app", *twice) as srv:
        assert srv.get("/").headers["server"] == "over-ridden, another-value"


FD_SCRIPT = """
import asyncio, socket
import ferrule

async def app(scope, receive, send):
    if scope["type"] == "http":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"fd"})

sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
sock.bind(("127.0.0.1", 0))

async def main():
    server = ferrule.Server(ferrule.Config(app, fd=sock.fileno(), lifespan="off"))
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    reader, writer = await asyncio.open_connection(*sock.getsockname())
    writer.write(b"GET / HTTP/1.1\\r\\nHost: t\\r\\nConnection: close\\r\\n\\r\\n")
    # One string, one write: the access line goes to the same stdout from the server's own
    # writer thread, and can land between the two writes of print("answer:", body).
    print("answer: " + (await reader.read()).rsplit(b"\\r\\n", 1)[-1].decode())
    writer.close()
    await server.shutdown()
    await task

asyncio.run(main())
print("still open:", sock.fileno() != -1 and sock.getsockname()[0])
sock.close()
"""


def test_a_socket_given_by_fd_is_served_and_left_open() -> None:
    """Rule: ``Config(fd=N)`` serves the socket even when it is bound but not listening yet
    (asyncio's servers call listen()), and the descriptor is still the caller's, open, once
    the server is done, as uvicorn leaves it. Broken: the caller's next use of its socket
    raised "Bad file descriptor" (seen in uvicorn's own logging test)."""
    result = run_to_exit([sys.executable, "-c", FD_SCRIPT], timeout=30)
    assert result.returncode == 0, result.describe()
    assert "answer: fd" in result.stdout, result.describe()
    assert "still open: 127.0.0.1" in result.stdout, result.describe()
