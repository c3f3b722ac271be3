"""The access log's fast path: with the access logger as ferrule configured it, the line is
formatted in Rust and written to stdout by a batching writer thread. Here: the same bytes as
the logging path for every kind of line; no line lost at any kind of stop; whole lines from
workers sharing a pipe; and a stdout nobody reads, which must not stop the serving.

The paths' changes while serving are in ``test_access_path_changes.py``, JSON lines in
``test_access_json.py``; the app is ``tests/apps/logging_app.py``."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path

import httpx
import pytest
from accessutil import (
    ACCESS_LINE,
    FAST_LINE,
    HeldStdout,
    connections_to_both_workers,
    dropped_counter,
    in_threads,
    keep_sending,
    normalise,
    path_lines,
    pipelined,
    stdout_lines,
    wait_lines,
    wait_path,
    ws_session,
)
from support.serverutil import (
    ferrule_command,
    free_port,
    is_clean_exit,
    poll,
    run_to_exit,
    running_server,
)

#: A format whose line is the same from one run to the next (no time, pid or duration atoms).
FORMAT = (
    '%(h)s %(l)s %(u)s "%(r)s" %(s)s %(b)s %(B)s "%(f)s" "%(a)s" %(m)s %(U)s %(q)s %(H)s'
    " %(c)s <%({x-tag}i)s> <%({content-type}o)s> 100%%"
)
#: Makes the logging path with ferrule's own handler and formatter: a filter dropping nothing.
LOGGING_PATH = {"FERRULE_TEST_LOGGING_AT_IMPORT": "pass-filter"}


def exercise(server: HeldStdout) -> None:
    """One request of each kind, each step's lines awaited before the next (so both servers
    write them in the same order)."""
    base = f"http://127.0.0.1:{server.port}"

    def get(path: str, method: str = "GET", http2: bool = False, **options: object) -> None:
        with httpx.Client(timeout=5, trust_env=False, http1=not http2, http2=http2) as client:
            client.request(method, base + path, **options)

    dressed = {"referer": "http://example.com/from", "user-agent": "probe/1.0"}
    steps: list[tuple[str, Callable[[], None], int]] = [
        ("plain", partial(get, "/plain"), 1),
        ("query", partial(get, "/query?a=1&b=two%20words&c=%C3%A9"), 1),
        ("404", partial(get, "/missing?status=404"), 1),
        ("418", partial(get, "/teapot?status=418"), 1),
        ("299", partial(get, "/unnamed?status=299"), 1),
        ("500", partial(get, "/raise?token=bytes"), 1),
        ("HEAD", partial(get, "/head?size=7", "HEAD"), 1),
        ("POST", partial(get, "/post", "POST", content=b"abc"), 1),
        ("auth", partial(get, "/dressed?size=3", auth=("alice", "pw"), headers=dressed), 1),
        ("header", partial(get, "/tagged", headers={"x-tag": "the-tag"}), 1),
        ("HTTP/2", partial(get, "/h2?x=1", http2=True), 1),
        ("ws-client-close", partial(ws_session, server.port, "/ws?room=1", 1000), 2),
        ("ws-app-close", partial(ws_session, server.port, "/ws?close=4001"), 2),
        ("ws-refused", partial(ws_session, server.port, "/refuse?x=1"), 1),
        ("static", partial(get, "/static/hello.txt"), 1),
        ("static-404", partial(get, "/static/nope.txt"), 1),
    ]
    expected = 0
    for name, step, lines in steps:
        step()
        expected += lines
        wait_lines(server, expected, what=f"access lines (after the {name} step)")


@pytest.mark.parametrize("fmt", [None, FORMAT], ids=["uvicorn-line", "access-log-format"])
@pytest.mark.parametrize("colours", ["plain", "use-colors", "tty"])
def test_the_fast_path_writes_the_logging_paths_bytes(
    tmp_path: Path, colours: str, fmt: str | None
) -> None:
    """Rule: on the fast path each line is byte for byte the line the logging path writes:
    uvicorn's line with its reason phrase (418, and a bare 299), a query, 404, a 500 from the
    app, HEAD, POST, Basic auth, Referer, User-Agent, HTTP/2, WebSocket lines (accepted, closed
    by either side, refused), static files (found, not found); in ANSI colours with
    ``--use-colors`` or with stdout a terminal; and ``--access-log-format``'s line. Two servers
    get the same requests: one as configured (the debug line says fast), one whose app adds a
    filter dropping nothing at import (the debug line says logging, same handler and
    formatter); their stdout lines, client ports and WebSocket durations taken out, are equal.
    Broken: any byte differing (a missing phrase, colour, quote...), a line missing or extra,
    or the first server not on the fast path. Seen failing before the fast path: every case,
    for want of the debug line only (both servers on the logging path wrote the same lines)."""
    static = tmp_path / "static"
    static.mkdir()
    (static / "hello.txt").write_text("hello\n")
    args = ["--log-level", "debug", "--static-path-mount", str(static)]
    if colours == "use-colors":
        args.append("--use-colors")
    if fmt is not None:
        args += ["--access-log-format", fmt]
    stdout = "tty" if colours == "tty" else "pipe"
    written = {}
    for path, env in (("fast", None), ("logging", LOGGING_PATH)):
        with HeldStdout("logging_app:app", *args, stdout=stdout, env=env) as server:
            exercise(server)
            written[path] = [normalise(line) for line in stdout_lines(server)]
            described = server.describe()
            wait_path(server, path)
            kinds = [kind for kind, _ in path_lines(server)]
        assert set(kinds) == {path}, f"path lines {kinds} on the {path} server\n{described}"
    fast, logging_ = written["fast"], written["logging"]
    differ = [
        f"line {i}:\n  fast    {a!r}\n  logging {b!r}"
        for i, (a, b) in enumerate(zip(fast, logging_, strict=False))
        if a != b
    ]
    assert not differ and len(fast) == len(logging_), "\n".join(differ) or (fast, logging_)
    assert len(fast) == 18, fast
    coloured = any("\x1b[" in line for line in fast)
    assert coloured == (colours != "plain"), fast


# -- no line lost at a stop -------------------------------------------------------------------


def logged_paths(server: object, marker: str) -> Counter[str]:
    """The target of each access line on stdout holding ``marker``; every stdout line must be
    a whole access line."""
    found: Counter[str] = Counter()
    for line in stdout_lines(server):
        match = ACCESS_LINE.fullmatch(line)
        assert match, f"not a whole access line on stdout: {line[:300]!r}"
        if marker in match.group(3):
            found[match.group(3)] += 1
    return found


def assert_fast(server: object) -> None:
    kinds = path_lines(server)
    assert kinds and kinds[0][0] == "fast", f"path lines: {kinds} (the fast path was to be taken)"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_ten_thousand_requests_ten_thousand_lines_after_a_stop(sig: int) -> None:
    """Rule: every request answered has its line on stdout before the process exits: 10,000
    requests (4 keep-alive connections, pipelined 50 at a time), then SIGTERM (or SIGINT) at
    once, and stdout holds exactly 10,000 access lines, one per request, each whole. Broken:
    lines still queued in the writer when the process exits are lost (fewer than 10,000), or a
    line written twice. Seen failing before the fast path: only for want of the debug line
    saying fast (the logging path writes each line before answering)."""
    with running_server("logging_app:app", "--log-level", "debug") as server:
        clients = [[f"/n/{c}-{i}" for i in range(2500)] for c in range(4)]
        done = in_threads([partial(pipelined, server.port, paths) for paths in clients])
        code = server.stop(sig)
    answered = Counter(path for answers in done for path, _ in answers)
    assert sum(answered.values()) == 10_000
    assert is_clean_exit(code, sig), server.describe()
    logged = logged_paths(server, "/n/")
    missing = answered - logged
    assert not missing, f"{sum(missing.values())} lines missing, e.g. {list(missing)[:5]}"
    assert logged == answered, f"lines twice: {list((logged - answered).items())[:5]}"
    assert_fast(server)


def test_limit_max_requests_stops_with_every_line_written() -> None:
    """Rule: a single process stopping itself at ``--limit-max-requests 2000`` writes the
    line of each of the 2,000 requests it answered before it exits. Broken: the last batch of
    lines lost at the exit. Seen failing before the fast path: only for want of the debug
    line."""
    args = ("--limit-max-requests", "2000", "--log-level", "debug")
    with running_server("logging_app:app", *args) as server:
        clients = [[f"/m/{c}-{i}" for i in range(500)] for c in range(4)]
        done = in_threads([partial(pipelined, server.port, paths) for paths in clients])
        code = server.wait_exit(15)
    answered = Counter(path for answers in done for path, _ in answers)
    assert code == 0, server.describe()
    assert logged_paths(server, "/m/") == answered, server.describe()
    assert_fast(server)


def check_traffic(server: object, traffic: list, marker: str) -> None:
    """Each answered request has exactly one line; a line for no answered request may only
    be one whose client saw its connection fail (the request may have been served)."""
    answered = Counter(path for t in traffic for path in t.answered)
    failed = {path for t in traffic for path in t.failed}
    logged = logged_paths(server, marker)
    missing = answered - logged
    assert not missing, f"{sum(missing.values())} lines missing, e.g. {sorted(missing)[:5]}"
    twice = [path for path, count in logged.items() if count > 1]
    assert not twice, f"lines written twice: {twice[:5]}"
    unknown = set(logged) - set(answered) - failed
    assert not unknown, f"lines of requests never sent: {sorted(unknown)[:5]}"


def test_worker_recycling_loses_no_line() -> None:
    """Rule: workers replaced at ``--limit-max-requests 300`` (``--workers 2``: the parent
    starts a successor, then stops the old worker) write every line of theirs before they
    exit: 4 clients send requests one at a time on keep-alive connections (reconnecting when
    their worker closes) until two workers have been replaced and stopped, then SIGTERM: each
    answered request has exactly one line. Broken: a retired worker's queued lines lost. Seen
    failing before the fast path: only for want of the debug line."""
    args = ("--workers", "2", "--limit-max-requests", "300", "--log-level", "debug")
    deadline = time.monotonic() + 40
    with running_server("logging_app:app", *args) as server:

        def enough() -> bool:
            stopped = server.stderr.count("serves; stopping worker")
            return stopped >= 2 or time.monotonic() > deadline

        jobs = [
            partial(keep_sending, server.port, f"/r/{c}", enough, limit=100_000) for c in range(4)
        ]
        traffic = in_threads(jobs)
        code = server.stop(signal.SIGTERM)
    assert is_clean_exit(code, signal.SIGTERM), server.describe()
    replaced = server.stderr.count("serves; stopping worker")
    assert replaced >= 2, f"only {replaced} workers replaced in 40 s\n{server.describe()}"
    check_traffic(server, traffic, "/r/")
    assert_fast(server)


def test_sighup_replacement_loses_no_line() -> None:
    """Rule: SIGHUP to the parent of ``--workers 2`` replaces both workers; each old worker
    writes every line of its requests before it exits. Four clients send requests all along
    (one at a time, keep-alive, reconnecting when closed), until both replacements are done;
    then SIGTERM: each answered request has exactly one line. Broken: the old workers' queued
    lines lost when the parent stops them. Seen failing before the fast path: only for want
    of the debug line."""
    enough = threading.Event()
    with running_server("logging_app:app", "--workers", "2", "--log-level", "debug") as server:

        def restart() -> None:
            time.sleep(0.3)
            os.kill(server.pid, signal.SIGHUP)
            try:
                poll(
                    lambda: server.stderr.count("Finished server process") >= 2,
                    timeout=30,
                    what="both old workers finished",
                )
            finally:
                enough.set()
            time.sleep(0.3)
            enough.set()

        jobs = [
            partial(keep_sending, server.port, f"/h/{c}", enough.is_set, limit=100_000)
            for c in range(4)
        ]
        try:
            traffic = in_threads(jobs, during=restart)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{server.describe()}") from None
        code = server.stop(signal.SIGTERM)
    assert is_clean_exit(code, signal.SIGTERM), server.describe()
    assert "Received SIGHUP, restarting processes." in server.stderr, server.describe()
    check_traffic(server, traffic, "/h/")
    assert_fast(server)


def test_two_workers_on_one_pipe_write_whole_lines() -> None:
    """Rule: the writer's writes hold whole lines only, at most 4096 bytes, so two workers
    sharing one stdout pipe never split or interleave a line: 3,200 requests on 8 pipelined
    connections, their paths from 1 to 3,000 bytes long (so a batch holds one to dozens of
    lines), and every stdout line is one whole access line whose path has the length its
    name says; one line per request. Broken: a line cut by a write of more than the pipe's
    atomic 4096 bytes, or a batch ending mid-line (seen as a line matching no access line, or
    a path of the wrong length). Seen failing before the fast path: only for want of the
    debug line."""

    def target(client: int, i: int) -> str:
        length = (i * 397 + client * 31) % 3000 + 1
        return f"/w/{client}-{i}-{length}/" + "x" * length

    # 5 MB of lines in a burst: the test's own reader of the pipe, a Python thread on a
    # loaded machine, fell behind the default buffer once (lines dropped, and said so).
    args = ("--workers", "2", "--log-level", "debug", "--access-log-buffer", str(64 << 20))
    with running_server("logging_app:app", *args) as server:
        conns = connections_to_both_workers(server)
        clients = [[target(c, i) for i in range(400)] for c in range(len(conns))]
        jobs = [
            partial(pipelined, conn, paths, batch=20)
            for conn, paths in zip(conns, clients, strict=True)
        ]
        done = in_threads(jobs)
        code = server.stop(signal.SIGTERM)
    assert is_clean_exit(code, signal.SIGTERM), server.describe()
    logged = logged_paths(server, "/w/")
    for path in logged:
        match = re.fullmatch(r"/w/\d+-\d+-(\d+)/(x*)", path)
        assert match and len(match.group(2)) == int(match.group(1)), path[:200]
    answered = Counter(path for answers in done for path, _ in answers)
    assert logged == answered, f"{sum((answered - logged).values())} lines missing or garbled"
    kinds = {kind for kind, _ in path_lines(server)}
    assert kinds == {"fast"}, f"path lines: {path_lines(server)}; wanted {FAST_LINE!r}"


# -- a stdout nobody reads --------------------------------------------------------------------

WARNING_LINE = re.compile(
    r"WARNING:  (\d+) access log lines dropped: standard output was not being read"
    r" \(--access-log-buffer (\d+) bytes\)"
)
#: Requests sent while stdout is not read, and their paths' length (a line of about 2 KiB).
STALLED_REQUESTS = 5000
STALLED_PATH = 2000


@pytest.mark.parametrize("buffer", [65536, None], ids=["64KiB", "default-1MiB"])
def test_a_stalled_stdout_does_not_stop_serving(buffer: int | None) -> None:
    """Rule: with nothing reading stdout (a full pipe), serving goes on: lines wait in memory up
    to ``--access-log-buffer`` bytes (1 MiB by default), past that they are dropped and
    counted; once stdout is read again, one line says ``WARNING:  N access log lines dropped:
    standard output was not being read (--access-log-buffer B bytes)``, and ``--metrics``
    counts N in ``ferrule_access_log_lines_dropped_total``. Here 5,000 requests with 2 KiB
    lines (10 MB of lines) are all answered within 60 s (each batch of ten within 10 s) while
    the test leaves stdout unread; the server's memory grows by less than half of what keeping
    the lines would take; then stdout is read: the lines present plus N make 5,000, every line
    whole, and a request after that has its line. Broken: the server stops answering when the
    pipe is full, the lines kept without bound, lines lost without a count, or the warning
    missing or wrong.
    Seen failing before the fast path: default-1MiB, the server stopped answering after 17 of
    the 5,000 requests (its event loop blocked writing a line to the full pipe); 64KiB, the
    option did not exist (exit 2). Seen failing on a build of the change in progress: the
    counter read at the warning lagged it by up to 100 under load (hence the wait, up to 20 s,
    for it to settle)."""
    from support.memutil import MiB, RssGrowth

    metrics_port = free_port()
    args = ["--metrics", "--metrics-port", str(metrics_port), "--log-level", "debug"]
    if buffer is not None:
        args += ["--access-log-buffer", str(buffer)]
    paths = [f"/s/{i}/" + "x" * STALLED_PATH for i in range(STALLED_REQUESTS)]
    answered: list = []
    with HeldStdout("logging_app:app", *args) as server:
        started = time.monotonic()
        try:
            pipelined(server.port, paths[:1000], batch=10, timeout=10, answered=answered)
            growth = RssGrowth(server.proc.pid, settle=2.0)
            pipelined(server.port, paths[1000:], batch=10, timeout=10, answered=answered)
        except (AssertionError, OSError) as exc:
            raise AssertionError(
                f"the server stopped answering after {len(answered)} of {STALLED_REQUESTS}"
                f" requests while nothing read its stdout ({exc!r})\n{server.describe()}"
            ) from None
        elapsed = time.monotonic() - started
        held = growth.held()
        server.read_stdout()
        warning = poll(
            lambda: WARNING_LINE.search(server.stdout),
            what=f"the WARNING line once stdout was read\n{server.describe()}",
        )
        dropped = int(warning.group(1))
        # Settled: the metrics may be a moment behind the writer.
        with contextlib.suppress(AssertionError):
            poll(lambda: dropped_counter(metrics_port) == dropped, what="the count")
        counted = dropped_counter(metrics_port)
        pipelined(server.port, ["/after-the-stall"])
        poll(lambda: "/after-the-stall" in server.stdout, what="a line after it")
        code = server.stop(signal.SIGTERM)
    assert elapsed < 60, f"{STALLED_REQUESTS} requests took {elapsed:.1f}s"
    assert is_clean_exit(code, signal.SIGTERM), server.describe()
    lines = stdout_lines(server)
    warnings = [line for line in lines if WARNING_LINE.fullmatch(line)]
    assert len(warnings) == 1, warnings
    said_buffer = int(warning.group(2))
    assert said_buffer == (buffer or 4194304), warnings
    whole = (ACCESS_LINE, WARNING_LINE)
    garbled = [line[:200] for line in lines if not any(r.fullmatch(line) for r in whole)]
    assert not garbled, f"not whole lines: {garbled[:3]}"
    present = [line for line in lines if "/s/" in line]
    assert len(present) + dropped == STALLED_REQUESTS, (len(present), dropped)
    assert dropped > 0, "nothing dropped: the buffer was not filled"
    assert len(set(present)) == len(present), "a line written twice"
    unbounded = (STALLED_REQUESTS - 1000) * STALLED_PATH
    assert held < unbounded / 2, f"RSS grew {held / MiB:.1f} MiB while the lines were dropped"
    assert counted == dropped, f"metrics counted {counted}, the warning said {dropped}"
    assert path_lines(server)[:1] == [("fast", "(formatted and written by the server)")], (
        path_lines(server)
    )


@pytest.mark.parametrize("value", ["4095", "0"])
def test_access_log_buffer_below_4096_is_a_usage_error(value: str) -> None:
    """Rule: ``--access-log-buffer`` below 4096 bytes (one write's worth) is refused before
    serving: exit 2, the message naming ``--access-log-buffer``; 4096 itself serves. Broken:
    the server starts with a buffer that cannot hold a batch, or fails later. Seen failing
    before the fast path: the option did not exist (exit 2, "unrecognized arguments", and
    4096 refused too)."""
    result = run_to_exit(
        ferrule_command("logging_app:app", "--port", "0", "--access-log-buffer", value)
    )
    assert result.returncode == 2, result.describe()
    assert "--access-log-buffer" in result.stderr, result.describe()
    assert "unrecognized arguments" not in result.stderr, result.describe()
    with running_server("logging_app:app", "--access-log-buffer", "4096") as server:
        assert server.get("/minimum").status_code == 200
