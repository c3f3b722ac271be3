#!/usr/bin/env bash
# Everything, for a release: what CI proves on every change and what it proves only when its
# inputs change, and what no CI run does because it takes hours or proves nothing a change can
# break between releases. Hours on 2 cores; as root (chroots). In order:
#
#   the README's test command (3.11, the whole suite)
#   httpwg, gated on the known failures
#   Autobahn|Testsuite, every section (12 and 13 whole), gated
#   CPython's task suites with the task factory on asyncio and uvloop (3.11)
#   the lints, and clippy for every other target
#   every wheel in the release profile and the sdist (scripts/build-wheels.sh), proven, with the
#     aarch64 cp313 and cp314 wheels in an arm64 sid chroot too
#   the whole suite under CPython 3.13 and 3.14, tests/hostile included, with their task suites
#   the smoke tests on arm64 under qemu, CPython 3.11 (bookworm)
#   uvicorn's own end-to-end suite against ferrule, for information
#
# Each step's time and verdict is printed at the end; it goes on past a failure and exits 1 if
# any step failed.
set -uo pipefail
cd "$(dirname "$0")/.."
[[ $EUID -eq 0 ]] || { echo "release-check: must run as root (chroots)" >&2; exit 2; }
export PIP_DISABLE_PIP_VERSION_CHECK=1

RESULTS=()
FAILED=0
step() { # step NAME CMD...: run CMD, record its time and verdict
    local name="$1" start=$SECONDS status=0
    shift
    printf '[%s] release-check: %s\n' "$(date +%T)" "$name"
    "$@" || status=$?
    if ((status == 0)); then
        RESULTS+=("$(printf '%6d s  ok      %s' $((SECONDS - start)) "$name")")
    else
        RESULTS+=("$(printf '%6d s  FAILED  %s (exit %d)' $((SECONDS - start)) "$name" "$status")")
        FAILED=1
    fi
}
readme_tests() {
    python3 -m pip install '.[test]' && python3 -m pytest tests && cargo test --workspace
}
task_suites() {
    python3 scripts/task_suites.py --loop asyncio && python3 scripts/task_suites.py --loop uvloop
}
lints() {
    make lint && make lint-targets
}

step "the README's test command" readme_tests
step "httpwg, gated" bash scripts/httpwg.sh --gate
step "Autobahn|Testsuite, every section, gated" bash scripts/autobahn.sh --gate \
    --server ferrule-uvloop-deflate --out target/release-autobahn
step "CPython's task suites with the task factory (3.11)" task_suites
step "lints, clippy for every target" lints
step "every wheel (release profile) and the sdist" bash scripts/build-wheels.sh --arm64-sid
step "the whole suite under 3.13 and 3.14, with their task suites" \
    bash scripts/test-interpreters.sh --wheels dist --task-suites 3.13 --task-suites 3.14
step "the smoke tests on arm64 (bookworm, qemu)" bash scripts/test-arm64.sh --wheels dist --no-check
step "uvicorn's end-to-end suite, for information" bash scripts/uvicorn-suite.sh

echo "==== release-check ===="
printf '%s\n' "${RESULTS[@]}"
exit "$FAILED"
