"""pytest plugin for scripts/uvicorn-suite.sh: run uvicorn's own tests with ferrule in its place.

It only maps names. Before any test module is imported, the public names through which
uvicorn's tests reach the server (``uvicorn.Config``, ``uvicorn.Server``, ``uvicorn.run`` and
the same objects in ``uvicorn.config``, ``uvicorn.server`` and ``uvicorn.main``) are bound to
ferrule's ``Config``, ``Server`` and ``run``, and ``uvicorn.supervisors.Multiprocess`` to
ferrule's ``Supervisor`` (the supervisor of ``--workers``). No test is edited, skipped or
marked, and nothing that ferrule lacks is added: a missing method, option or log line fails
the test that needs it, which is what the suite measures.

The rest of uvicorn stays uvicorn's: its protocol classes (which some tests pass as
``http=``/``ws=``), ``ServerState``, ``LOGGING_CONFIG``, ``STARTUP_FAILURE`` (3 in both).

Reporting only (no effect on outcomes): each failed or erroring test's exception chain is
recorded; the terminal summary groups the failures by their first exception (the one a
test's ``finally`` may have chained others onto), and ``--uvsuite-failures FILE`` writes
them as JSON lines for a closer look.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import re
import signal
import threading
from collections import Counter
from typing import Any

import ferrule
import pytest
from ferrule.supervisor import Supervisor

# module -> {name: ferrule object}; every place a selected test (or tests/utils.py, the helper
# they share) imports Config, Server or run from.
MAPPING: dict[str, dict[str, Any]] = {
    "uvicorn": {"Config": ferrule.Config, "Server": ferrule.Server, "run": ferrule.run},
    "uvicorn.config": {"Config": ferrule.Config},
    "uvicorn.server": {"Server": ferrule.Server},
    "uvicorn.main": {"Config": ferrule.Config, "Server": ferrule.Server, "run": ferrule.run},
    # The supervisor of --workers, which test_main.py stubs out to see what the parent does.
    "uvicorn.supervisors": {"Multiprocess": Supervisor},
}

_failures: list[dict[str, Any]] = []

# Tests the watchdog had to stop (see pytest_runtest_call): nodeid -> seconds it waited.
_stopped: dict[str, float] = {}
WATCHDOG_GRACE = 5.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--uvsuite-failures",
        metavar="FILE",
        default=None,
        help="write each failure's exception chain to FILE (JSON lines)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    for module_name, names in MAPPING.items():
        module = importlib.import_module(module_name)
        for name, replacement in names.items():
            if not hasattr(module, name):
                raise pytest.UsageError(f"{module_name} has no {name}: not the uvicorn expected")
            setattr(module, name, replacement)


def pytest_report_header(config: pytest.Config) -> list[str]:
    import uvicorn

    return [
        f"uvicorn-suite: uvicorn {uvicorn.__version__} tests from {uvicorn.__file__}",
        f"uvicorn-suite: ferrule {ferrule.__version__} from {ferrule.__file__}",
        "uvicorn-suite: uvicorn.{Config,Server,run} (and in .config/.server/.main) -> ferrule's",
    ]


def pytest_collection_finish(session: pytest.Session) -> None:
    # A module that imported a name before pytest_configure would keep uvicorn's object.
    for item in session.items:
        module = getattr(item, "module", None)
        for name in ("Config", "Server", "run"):
            value = getattr(module, name, None)
            if value is not None and getattr(value, "__module__", "").startswith("uvicorn"):
                raise pytest.UsageError(f"{item.nodeid}: {name} is still uvicorn's")


def _chain(exc: BaseException | None) -> list[BaseException]:
    """The exception and those it was raised while handling, first raised first."""
    chain: list[BaseException] = []
    while exc is not None and exc not in chain:
        chain.append(exc)
        exc = exc.__cause__ or exc.__context__
    chain.reverse()
    return chain


def _where(exc: BaseException) -> str:
    """Where it was raised: the innermost frame, as parent-dir/file:line."""
    tb = exc.__traceback__
    where = "?"
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename
        short = os.path.join(os.path.basename(os.path.dirname(path)), os.path.basename(path))
        where = f"{short}:{tb.tb_lineno}"
        tb = tb.tb_next
    return where


def _describe(exc: BaseException) -> str:
    first_line = (str(exc).strip().splitlines() or [""])[0]
    return f"{type(exc).__name__}: {first_line}"[:300]


def _normalise(text: str) -> str:
    text = re.sub(r"0x[0-9a-f]+", "0x...", text)
    # Ports, pids, byte counts; not the small numbers that tell messages apart.
    text = re.sub(r"(?<![\w.])\d{3,}(?![\w.])", "N", text)
    return text


def _interrupt_server(nodeid: str, after: float) -> None:
    """Press Ctrl+C for a test whose server would otherwise serve forever."""
    handler = signal.getsignal(signal.SIGINT)
    if handler in (signal.default_int_handler, signal.SIG_DFL, signal.SIG_IGN, None):
        return  # nobody is serving: the whole-run timeout is the bound
    _stopped[nodeid] = after
    signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    """A watchdog for the tests pytest-timeout cannot stop.

    pytest-timeout raises its failure from a SIGALRM handler. When a test is inside
    ``ferrule.run()`` (which serves until SIGINT or SIGTERM) the handler runs in a callback of
    the server's event loop, which logs the exception and serves on: the test would run until
    the whole-run timeout. So ``WATCHDOG_GRACE`` seconds after pytest-timeout's limit, if a
    server holds SIGINT (the handler is not Python's default), the watchdog sends SIGINT,
    as a person would press Ctrl+C; the server shuts down, and the test is reported failed
    whatever it does next.
    """
    limit = item.config.getoption("timeout", None)
    timer = None
    if limit:
        after = float(limit) + WATCHDOG_GRACE
        timer = threading.Timer(after, _interrupt_server, args=(item.nodeid, after))
        timer.daemon = True
        timer.start()
    try:
        return (yield)
    finally:
        if timer is not None:
            timer.cancel()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """Records each failure's exception chain; fails the tests the watchdog stopped.

    The cyclic GC is held off while pytest makes the report. A server task that ended in an
    exception nobody awaited (tests/utils.py's run_server never awaits its task, so every
    startup failure leaves one) logs "Task exception was never retrieved", with a traceback,
    when it is collected, and CPython 3.11 formats tracebacks with ``ast.parse``. Run from
    the GC inside another ``ast.parse`` (pytest rendering a failure's source), that nested
    call trips "SystemError: AST constructor recursion depth mismatch" and pytest stops with
    INTERNALERROR. The garbage is collected at the next automatic collection instead, and
    once more in pytest_sessionfinish, before the terminal summary (which imports, hence
    parses). Neither changes what a test does.
    """
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        report = yield
    finally:
        if gc_was_enabled:
            gc.enable()
    if call.when == "call" and item.nodeid in _stopped:
        message = (
            f"uvicorn-suite: still serving {_stopped[item.nodeid]:.0f}s after the start, past "
            "pytest-timeout's limit; the watchdog stopped the server with SIGINT"
        )
        report.outcome = "failed"
        report.longrepr = f"{message}\n\n{report.longrepr or ''}"
        _failures.append(
            {"nodeid": item.nodeid, "when": "call", "chain": [{"exception": message, "at": "?"}]}
        )
        return report
    if report.failed and call.excinfo is not None:
        try:
            chain = [
                {"exception": _describe(e), "at": _where(e)} for e in _chain(call.excinfo.value)
            ]
        except Exception as exc:  # reporting must not break the run
            chain = [{"exception": f"(uvicorn-suite could not describe it: {exc!r})", "at": "?"}]
        _failures.append({"nodeid": item.nodeid, "when": call.when, "chain": chain})
    return report


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    gc.collect()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    path = config.getoption("--uvsuite-failures")
    if path:
        with open(path, "w") as out:
            for failure in _failures:
                out.write(json.dumps(failure) + "\n")
    if not _failures:
        return
    groups: Counter[str] = Counter()
    example: dict[str, str] = {}
    for failure in _failures:
        first = failure["chain"][0]
        key = f"{_normalise(first['exception'])}  [{failure['when']}, at {first['at']}]"
        groups[key] += 1
        example.setdefault(key, failure["nodeid"])
    terminalreporter.section("uvicorn-suite: failures by first exception")
    for key, count in groups.most_common():
        terminalreporter.write_line(f"{count:4d}  {key}")
        terminalreporter.write_line(f"      e.g. {example[key]}")
