#!/bin/bash
# Two ferrule builds side by side, measured turn about: is a difference the code or the machine?
# Both servers run at once on CPU 0 (the idle one costs nothing), wrk on CPU 1 measures them
# in alternated 5-second runs after a warm-up, so both see the same minute of this machine.
#
#   benches/ab.sh [--loop asyncio|uvloop] [--rounds N] [--app MODULE:APP] [--post-kib N] PATH DIR_A DIR_B
#   benches/ab.sh --rounds 5 /hello /tmp/ferrule-before /tmp/ferrule-after
#   benches/ab.sh --app fastapi_app:app /sync /tmp/ferrule-before /tmp/ferrule-after
#
# Each run prints requests/s and the server's CPU time (user + system, all threads, from
# /proc/PID/stat) per request, steadier than requests/s when the machine is busy. --post-kib N
# sends POSTs with an N KiB body (the echo scenario: --post-kib 10 /echo).
#
# DIR_A and DIR_B hold each build as `pip install --no-deps --target DIR wheel` unpacks it.
# ARGS_A and ARGS_B add server options to one side, to compare flags on one build:
#   ARGS_B="--metrics --metrics-port 0" benches/ab.sh /hello /tmp/ferrule-rel /tmp/ferrule-rel
# ENV_A and ENV_B set environment variables for one side (NAME=VALUE ..., as `env` takes them):
#   ENV_B="MIMALLOC_PURGE_DELAY=0" benches/ab.sh /hello /tmp/ferrule-rel /tmp/ferrule-rel
set -euo pipefail
LOOP=uvloop ROUNDS=4 APP=apps:app POST_KIB=
while [ $# -gt 3 ]; do
    case $1 in
        --loop) LOOP=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --app) APP=$2; shift 2 ;;
        --post-kib) POST_KIB=$2; shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
TARGET=${1:?path, e.g. /hello}; A=${2:?first build}; B=${3:?second build}
PORT_A=${PORT:-8701}; PORT_B=$((PORT_A + 1))
cd "$(dirname "$0")"
WRK_SCRIPT=()
if [ -n "$POST_KIB" ]; then
    LUA=$(mktemp /tmp/ferrule-ab.XXXXXX.lua)
    echo "wrk.method = \"POST\"; wrk.body = string.rep(\"x\", $POST_KIB * 1024)" > "$LUA"
    WRK_SCRIPT=(-s "$LUA")
fi
PYTHONPATH=$A env ${ENV_A:-} taskset -c 0 python3 -m ferrule "$APP" --port "$PORT_A" --loop "$LOOP" \
    --no-access-log ${ARGS_A:-} > /dev/null 2>&1 &
SERVER_A=$!
PYTHONPATH=$B env ${ENV_B:-} taskset -c 0 python3 -m ferrule "$APP" --port "$PORT_B" --loop "$LOOP" \
    --no-access-log ${ARGS_B:-} > /dev/null 2>&1 &
SERVER_B=$!
trap 'kill -INT $SERVER_A $SERVER_B 2>/dev/null || true; wait' EXIT
for port in $PORT_A $PORT_B; do
    for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port$TARGET" && break; sleep 0.1; done
    taskset -c 1 wrk -t1 -c50 -d2 "${WRK_SCRIPT[@]}" "http://127.0.0.1:$port$TARGET" > /dev/null
done
TICKS=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# "REQ/S req/s CPU us/req" for one 5-second run against port $1, server pid $2.
rate() {
    local before after out
    before=$(cpu_ticks "$2")
    out=$(taskset -c 1 wrk -t1 -c50 -d5 "${WRK_SCRIPT[@]}" "http://127.0.0.1:$1$TARGET")
    after=$(cpu_ticks "$2")
    echo "$out" | awk -v ticks=$((after - before)) -v hz="$TICKS" '
        /requests in/ {n = $1} /Requests\/sec/ {r = $2}
        END {printf "%s req/s %.1f us/req", r, ticks * 1e6 / hz / n}'
}
for round in $(seq "$ROUNDS"); do
    echo "round $round: A $(rate $PORT_A $SERVER_A)   B $(rate $PORT_B $SERVER_B)"
done
