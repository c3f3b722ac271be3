#!/usr/bin/env bash
# The test suite under load: ROUNDS rounds, each running the whole suite twice at once (two
# clones of the committed tree, one ferrule build), so that every test meets a machine as busy as
# a CI machine that shares its cores. A test that fails even once here is a test to fix, in the
# test or in the server. Prints each round's pytest summaries and the failed tests, and exits 1 if
# any round failed.
#
#   scripts/loaded-suite.sh [--rounds N] [--ferrule-path DIR] [-- PYTEST_ARGS...]
#   scripts/loaded-suite.sh --rounds 5 --ferrule-path /tmp/ferrule-rel
#
# --ferrule-path: a directory holding an installed ferrule (pip install --target DIR WHEEL);
# without it, a dev build of the committed tree is made into target/loaded-suite/ferrule.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ROUNDS=5
FERRULE_PATH=""
PYTEST_ARGS=()
while (($#)); do
    case "$1" in
        --rounds) ROUNDS="$2"; shift 2 ;;
        --ferrule-path) FERRULE_PATH="$2"; shift 2 ;;
        --) shift; PYTEST_ARGS=("$@"); break ;;
        -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "loaded-suite: unknown argument $1" >&2; exit 2 ;;
    esac
done
[[ $ROUNDS =~ ^[1-9][0-9]*$ ]] || { echo "loaded-suite: --rounds takes a number" >&2; exit 2; }
note() { printf '[%s] loaded-suite: %s\n' "$(date +%T)" "$*"; }

WORK="$REPO/target/loaded-suite"
rm -rf "$WORK/a" "$WORK/b"
mkdir -p "$WORK"
for side in a b; do
    git -C "$REPO" archive --format=tar --prefix="$side/" HEAD | tar -C "$WORK" -xf -
done
if [[ -z $FERRULE_PATH ]]; then
    note "dev build of $(git -C "$REPO" rev-parse --short HEAD) into $WORK/ferrule"
    rm -rf "$WORK/wheel" "$WORK/ferrule"
    (cd "$WORK/a" && maturin build -q -i python3 -o "$WORK/wheel" > "$WORK/build.log" 2>&1)
    python3 -m pip install -q --no-deps --target "$WORK/ferrule" "$WORK"/wheel/*.whl
    FERRULE_PATH="$WORK/ferrule"
fi
FERRULE_PATH="$(cd "$FERRULE_PATH" && pwd)"

failed_rounds=0
for ((round = 1; round <= ROUNDS; round++)); do
    note "round $round of $ROUNDS: the suite twice at once ($(cut -d' ' -f1-3 /proc/loadavg) before)"
    pids=()
    for side in a b; do
        (cd "$WORK/$side" && PYTHONPATH="$FERRULE_PATH" timeout 3600 python3 -m pytest tests -q \
            -p no:cacheprovider "${PYTEST_ARGS[@]}" > "$WORK/round-$round-$side.log" 2>&1) &
        pids+=($!)
    done
    status=0
    for pid in "${pids[@]}"; do wait "$pid" || status=1; done
    for side in a b; do
        log="$WORK/round-$round-$side.log"
        echo "  $side: $(grep -E '(passed|failed).* in [0-9.]+s' "$log" | tail -n 1)"
        grep -E '^(FAILED|ERROR) ' "$log" | sed 's/^/    /' || true
    done
    ((status == 0)) || failed_rounds=$((failed_rounds + 1))
done
note "$((ROUNDS - failed_rounds)) of $ROUNDS rounds passed (logs: $WORK/round-*.log)"
((failed_rounds == 0))
