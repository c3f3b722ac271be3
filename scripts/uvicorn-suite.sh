#!/usr/bin/env bash
# How much of uvicorn's own test suite does ferrule pass as a drop-in?
#
# Downloads the sdist of uvicorn $UVICORN_VERSION (which ships its tests), unpacks it into a
# cache dir (reused by later runs), installs the tests' dependencies into a venv made with
# --system-site-packages (so it sees the ferrule installed in the base Python, unless one is
# installed into the venv itself), and runs the end-to-end tests selected below with
# scripts/uvicorn_suite_plugin.py, which binds uvicorn.Config/Server/run (and the same names
# in uvicorn.config, uvicorn.server, uvicorn.main) and uvicorn's Multiprocess supervisor to
# ferrule's, and changes nothing else.
# uvicorn itself is importable from the unpacked sdist (PYTHONPATH): the tests import its
# modules (_types, protocol classes, ServerState, LOGGING_CONFIG...).
#
# Prints pytest's summary, the failures grouped by their first exception, and as the last line
# "N passed, M failed" (", S skipped" follows when not 0; M includes pytest's errors, failures
# in a fixture's setup or teardown). Exits 0 when the run completed, whatever the counts, so CI
# can run it for information; with --strict, exits 1 unless everything selected passed; 2 when
# the run did not complete (setup failed, pytest was interrupted or hit the whole-run bound).
# Run with --help for options.
set -euo pipefail

UVICORN_VERSION=0.54.0

# Versions as in uvicorn 0.54.0's dev dependency group where it pins them; the rest are
# already ferrule's test dependencies and are only checked.
TEST_REQUIREMENTS=(
    "httpx2==2.16.2"   # the tests' HTTP client
    "trustme==1.2.1"   # conftest's TLS certificates
    "httptools==0.9.0" # test_server.py imports uvicorn's HttpToolsProtocol
    "wsproto==1.3.2"   # the ws_protocol_cls fixture's "wsproto" parameter
    "cryptography"     # conftest: the encrypted key of test_ssl.py::test_run_password
    "websockets>=13"
    "pytest>=9"
    "pytest-timeout"
    "anyio"
    "click>=7.0"       # uvicorn's own dependencies (uvicorn/__init__.py imports uvicorn.main)
    "h11>=0.8"
)

# ---- The selection ------------------------------------------------------------------------
# The tests that run the server end to end through its public API: they build Config and
# Server (tests/utils.py's run_server: Server(config).serve() as a task, then
# server.shutdown()) or call run(), then talk HTTP or WebSocket over real sockets on
# 127.0.0.1.
SELECTION=(
    tests/test_default_headers.py       # all: Server and Date headers, headers=, *_header=False
    tests/test_server.py                # all: signals, lifespan, limit_max_requests, contextvars
    tests/supervisors/test_signal.py    # all: handle_exit() with a request in flight
    tests/test_ssl.py                   # its six test_run*: TLS servers; see DESELECT
    tests/test_main.py                  # its run() tests, and Server.serve() on a bad host
    tests/middleware/test_logging.py    # all: the access, trace and startup log lines
    tests/protocols/test_websocket.py   # the tests that serve on a port; see DESELECT
)
DESELECT=(
    # test_ssl.py: Config.load()/Config.is_ssl alone, no server.
    tests/test_ssl.py::test_ssl_context_factory_mutates_default
    tests/test_ssl.py::test_default_ssl_context_factory_requires_ssl_certfile
    tests/test_ssl.py::test_ssl_context_factory_must_return_ssl_context
    tests/test_ssl.py::test_ssl_ciphers_applied_when_set
    tests/test_ssl.py::test_is_ssl_true_when_only_factory_set
    # test_main.py: a deprecated attribute of the uvicorn.main module, not the server.
    tests/test_main.py::test_deprecated_server_state_from_main
    # test_websocket.py: these drive uvicorn's own WebSocket protocol classes in-process
    # (MockWebSocketConnection, a fake transport): ferrule is not involved.
    tests/protocols/test_websocket.py::test_send_respects_write_backpressure
    tests/protocols/test_websocket.py::test_close_waits_for_the_peer_close_frame
    tests/protocols/test_websocket.py::test_close_resumes_reads_paused_on_an_unconsumed_message
    tests/protocols/test_websocket.py::test_data_frame_while_closing_does_not_pause_reads
    tests/protocols/test_websocket.py::test_data_frame_and_peer_close_frame_in_one_read
    tests/protocols/test_websocket.py::test_ping_while_closing
    tests/protocols/test_websocket.py::test_close_gives_up_when_the_peer_never_replies
    tests/protocols/test_websocket.py::test_connection_lost_cancels_the_pending_close_timer
    tests/protocols/test_websocket.py::test_shutdown_while_the_close_reply_is_pending
    tests/protocols/test_websocket.py::test_send_after_peer_close_raises_client_disconnected
    tests/protocols/test_websocket.py::test_connection_lost_unblocks_paused_send
)
# The http_protocol_cls fixture's third parameter is uvicorn's experimental zttp backend; it is
# not installed, and its items would repeat the h11/httptools ones, so they are left out
# rather than counted as skipped.
KEYWORDS="not zttp"
# -------------------------------------------------------------------------------------------

usage() {
    cat <<EOF
Usage: scripts/uvicorn-suite.sh [options] [-- extra pytest arguments]

Run the end-to-end tests of uvicorn ${UVICORN_VERSION}'s own suite with ferrule standing in
for uvicorn, and print "N passed, M failed". Exits 0 once the run completed, whatever the
counts, unless --strict.

Options:
  --strict         exit 1 unless every selected test passed
  --timeout SECS   per-test timeout (pytest-timeout; default 10)
  --cache DIR      where the sdist, its tests and the failure log go
                   (env UVSUITE_CACHE, default \${XDG_CACHE_HOME:-~/.cache}/ferrule-uvicorn-suite)
  --venv DIR       the venv the tests run in, created with --system-site-packages if missing
                   (env UVSUITE_VENV, default CACHE/venv). To measure a ferrule other than the
                   base Python's, install it into this venv (pip install --no-deps WHEEL).
  --python EXE     the base Python of a new venv (env PYTHON, default python3)
  -h, --help       this text

Anything after -- goes to pytest, after the selection: -- -x stops at the first failure;
-- -k EXPR replaces the selection's -k "not zttp"; a test path or node id adds to the
selection (the whole selection still runs).
EOF
}

STRICT=0
TIMEOUT=10
SCRIPTS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
CACHE="${UVSUITE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ferrule-uvicorn-suite}"
VENV="${UVSUITE_VENV:-}"
BASE_PYTHON="${PYTHON:-python3}"
EXTRA=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --strict) STRICT=1 ;;
        --timeout) TIMEOUT="$2"; shift ;;
        --cache) CACHE="$2"; shift ;;
        --venv) VENV="$2"; shift ;;
        --python) BASE_PYTHON="$2"; shift ;;
        -h | --help) usage; exit 0 ;;
        --) shift; EXTRA=("$@"); break ;;
        *) echo "uvicorn-suite: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
VENV="${VENV:-$CACHE/venv}"
mkdir -p "$CACHE"
CACHE="$(cd "$CACHE" && pwd)"

# ---- uvicorn's sources and tests ----------------------------------------------------------
SRC="$CACHE/uvicorn-$UVICORN_VERSION"
if [[ ! -f "$SRC/.unpacked" ]]; then
    echo "uvicorn-suite: downloading the uvicorn $UVICORN_VERSION sdist" >&2
    rm -rf "$SRC" "$CACHE/sdist"
    mkdir -p "$CACHE/sdist"
    "$BASE_PYTHON" -m pip download --quiet --no-deps --no-binary :all: \
        --dest "$CACHE/sdist" "uvicorn==$UVICORN_VERSION"
    tar -xzf "$CACHE/sdist/uvicorn-$UVICORN_VERSION.tar.gz" -C "$CACHE"
    [[ -f "$SRC/tests/conftest.py" ]] || { echo "uvicorn-suite: no tests in the sdist" >&2; exit 2; }
    touch "$SRC/.unpacked"
fi

# ---- the venv and the tests' dependencies -------------------------------------------------
if [[ ! -x "$VENV/bin/python" ]]; then
    echo "uvicorn-suite: creating $VENV (--system-site-packages)" >&2
    "$BASE_PYTHON" -m venv --system-site-packages "$VENV"
fi
PY="$VENV/bin/python"
STAMP="$VENV/.uvicorn-suite-requirements"
if [[ "$(cat "$STAMP" 2>/dev/null)" != "${TEST_REQUIREMENTS[*]}" ]]; then
    echo "uvicorn-suite: installing the tests' dependencies into $VENV" >&2
    "$PY" -m pip install --quiet "${TEST_REQUIREMENTS[@]}"
    echo "${TEST_REQUIREMENTS[*]}" >"$STAMP"
fi
if ! "$PY" -c "import ferrule" 2>/dev/null; then
    echo "uvicorn-suite: $PY cannot import ferrule: install it into the base Python or $VENV" >&2
    exit 2
fi

# ---- the run ------------------------------------------------------------------------------
LOG="$CACHE/last-run.log"
FAILURES="$CACHE/last-run-failures.jsonl"
rm -f "$FAILURES"
ARGS=(
    # uvicorn's pytest settings (its pyproject.toml) apply, filterwarnings = error included;
    # only its addopts are replaced, to drop "-n 8" (pytest-xdist) on a shared machine.
    -o "addopts=-rxXs --strict-config --strict-markers"
    -p uvicorn_suite_plugin
    -p no:cacheprovider
    --timeout "$TIMEOUT"
    --uvsuite-failures "$FAILURES"
    -k "$KEYWORDS"
    "${SELECTION[@]}"
)
for nodeid in "${DESELECT[@]}"; do
    ARGS+=(--deselect "$nodeid")
done

echo "uvicorn-suite: $("$PY" -c 'import ferrule; print("ferrule", ferrule.__version__, "from", ferrule.__file__)')" >&2
set +e
# PYTHONPATH: the plugin, and uvicorn's sources ahead of any installed uvicorn. A whole-run
# bound on top of the per-test timeout, in case a server outlives its test.
(
    cd "$SRC" &&
        PYTHONPATH="$SCRIPTS_DIR:$SRC${PYTHONPATH:+:$PYTHONPATH}" \
            timeout --kill-after=30 600 "$PY" -m pytest "${ARGS[@]}" "${EXTRA[@]}"
) 2>&1 | tee "$LOG"
STATUS=${PIPESTATUS[0]}
set -e

# pytest's own last line, e.g. "== 12 failed, 250 passed, 3 skipped in 60.1s ==".
SUMMARY="$(grep -E '^=+ .*( passed| failed| error| skipped| deselected| no tests ran).* in [0-9.]+s' "$LOG" | tail -n 1 || true)"
count() { grep -oE "[0-9]+ $1" <<<"$SUMMARY" | grep -oE '^[0-9]+' || echo 0; }
PASSED=$(count passed)
FAILED=$(count failed)
ERRORS=$(count 'errors?')
SKIPPED=$(count skipped)
# The last line counts an error (a fixture failing in setup or teardown) as a failure.
LINE="$PASSED passed, $((FAILED + ERRORS)) failed"
[[ "$SKIPPED" != 0 ]] && LINE+=", $SKIPPED skipped"

# pytest: 0 all passed, 1 some failed; anything else (interrupted, usage error, no tests, the
# whole-run timeout) means the run did not complete.
if [[ -z "$SUMMARY" || ($STATUS != 0 && $STATUS != 1) ]]; then
    echo "uvicorn-suite: the run did not complete (pytest exit status $STATUS); log: $LOG" >&2
    echo "$LINE"
    exit 2
fi
echo "uvicorn-suite: log $LOG, failures $FAILURES" >&2
[[ "$ERRORS" != 0 ]] && echo "uvicorn-suite: the failed count includes $ERRORS errors" >&2
echo "$LINE"
if [[ $STRICT == 1 && ($FAILED != 0 || $ERRORS != 0) ]]; then
    exit 1
fi
exit 0
