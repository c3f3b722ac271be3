#!/bin/bash
# Two ferrule builds side by side, measured turn about: is a difference the code or the machine?
# Both servers run at once on CPU 0 (the idle one costs nothing), wrk on CPU 1 measures them
# in alternated 5-second runs after a warm-up, so both see the same minute of this machine.
#
#   benches/ab.sh [--loop asyncio|uvloop] [--rounds N] [--app MODULE:APP] [--post-kib N] [--h2]
#                 PATH DIR_A DIR_B
#   benches/ab.sh --rounds 5 /hello /tmp/ferrule-before /tmp/ferrule-after
#   benches/ab.sh --h2 /hello /tmp/ferrule-before /tmp/ferrule-after   # HTTP/2: h2load -c10 -m10
#   benches/ab.sh --app fastapi_app:app /sync /tmp/ferrule-before /tmp/ferrule-after
#
# Each run prints requests/s, the server's CPU time (user + system, all threads, from
# /proc/PID/stat) per request, steadier than requests/s when the machine is busy, and over
# HTTP/1.1 wrk's 99th percentile of latency. --post-kib N
# sends POSTs with an N KiB body (the echo scenario: --post-kib 10 /echo).
#
# DIR_A and DIR_B hold each build as `pip install --no-deps --target DIR wheel` unpacks it.
# ARGS_A and ARGS_B add server options to one side, to compare flags on one build:
#   ARGS_B="--metrics --metrics-port 0" benches/ab.sh /hello /tmp/ferrule-rel /tmp/ferrule-rel
# ENV_A and ENV_B set environment variables for one side (NAME=VALUE ..., as `env` takes them):
#   ENV_B="MIMALLOC_PURGE_DELAY=0" benches/ab.sh /hello /tmp/ferrule-rel /tmp/ferrule-rel
set -euo pipefail
LOOP=uvloop ROUNDS=4 APP=apps:app POST_KIB= H2=
while [ $# -gt 3 ]; do
    case $1 in
        --h2) H2=1; shift ;;
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
# The load for $2 seconds against URL $1, as wrk reports it ("N requests in", "Requests/sec").
load() {
    if [ -z "$H2" ]; then
        taskset -c 1 wrk -t1 -c50 -d"$2" --latency "${WRK_SCRIPT[@]}" "$1"
        return
    fi
    # HTTP/2 without TLS (h2c), as the HTTP/2 hello scenario; h2load's summary said wrk's way.
    taskset -c 1 h2load -c10 -m10 -D "$2" "$1" | awk '
        /^finished in/ {r = $4} /^requests:/ {n = $8}
        END {print n " requests in"; print "Requests/sec: " r}'
}
PYTHONPATH=$A env ${ENV_A:-} taskset -c 0 python3 -m ferrule "$APP" --port "$PORT_A" --loop "$LOOP" \
    --no-access-log ${ARGS_A:-} > /dev/null 2>&1 &
SERVER_A=$!
PYTHONPATH=$B env ${ENV_B:-} taskset -c 0 python3 -m ferrule "$APP" --port "$PORT_B" --loop "$LOOP" \
    --no-access-log ${ARGS_B:-} > /dev/null 2>&1 &
SERVER_B=$!
trap 'kill -INT $SERVER_A $SERVER_B 2>/dev/null || true; wait' EXIT
for port in $PORT_A $PORT_B; do
    for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port$TARGET" && break; sleep 0.1; done
    load "http://127.0.0.1:$port$TARGET" 2 > /dev/null
done
TICKS=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# "REQ/S req/s CPU us/req" for one 5-second run against port $1, server pid $2; over HTTP/1.1
# also wrk's 99th percentile of latency ("p99 T").
rate() {
    local before after out
    before=$(cpu_ticks "$2")
    out=$(load "http://127.0.0.1:$1$TARGET" 5)
    after=$(cpu_ticks "$2")
    echo "$out" | awk -v ticks=$((after - before)) -v hz="$TICKS" '
        /requests in/ {n = $1} /Requests\/sec/ {r = $2} $1 == "99%" {p = " p99 " $2}
        END {printf "%s req/s %.1f us/req%s", r, ticks * 1e6 / hz / n, p}'
}
for round in $(seq "$ROUNDS"); do
    echo "round $round: A $(rate $PORT_A $SERVER_A)   B $(rate $PORT_B $SERVER_B)"
done
