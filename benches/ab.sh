#!/bin/bash
# Two ferrule builds side by side, measured turn about: is a difference the code or the machine?
# Both servers run at once on CPU 0 (the idle one costs nothing), wrk on CPU 1 measures them
# in alternated 5-second runs after a warm-up, so both see the same minute of this machine.
#
#   benches/ab.sh [--loop asyncio|uvloop] [--rounds N] [--app MODULE:APP] PATH DIR_A DIR_B
#   benches/ab.sh --rounds 5 /hello /tmp/ferrule-before /tmp/ferrule-after
#   benches/ab.sh --app fastapi_app:app /sync /tmp/ferrule-before /tmp/ferrule-after
#
# DIR_A and DIR_B hold each build as `pip install --no-deps --target DIR wheel` unpacks it.
set -euo pipefail
LOOP=uvloop ROUNDS=4 APP=apps:app
while [ $# -gt 3 ]; do
    case $1 in
        --loop) LOOP=$2; shift 2 ;;
        --rounds) ROUNDS=$2; shift 2 ;;
        --app) APP=$2; shift 2 ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
done
TARGET=${1:?path, e.g. /hello}; A=${2:?first build}; B=${3:?second build}
PORT_A=${PORT:-8701}; PORT_B=$((PORT_A + 1))
cd "$(dirname "$0")"
PYTHONPATH=$A taskset -c 0 python3 -m ferrule "$APP" --port "$PORT_A" --loop "$LOOP" \
    --no-access-log > /dev/null 2>&1 &
SERVER_A=$!
PYTHONPATH=$B taskset -c 0 python3 -m ferrule "$APP" --port "$PORT_B" --loop "$LOOP" \
    --no-access-log > /dev/null 2>&1 &
SERVER_B=$!
trap 'kill -INT $SERVER_A $SERVER_B 2>/dev/null || true; wait' EXIT
for port in $PORT_A $PORT_B; do
    for _ in $(seq 100); do curl -s -o /dev/null "http://127.0.0.1:$port$TARGET" && break; sleep 0.1; done
    taskset -c 1 wrk -t1 -c50 -d2 "http://127.0.0.1:$port$TARGET" > /dev/null
done
rate() { taskset -c 1 wrk -t1 -c50 -d5 "http://127.0.0.1:$1$TARGET" | awk '/Requests\/sec/ {print $2}'; }
for round in $(seq "$ROUNDS"); do
    echo "round $round: $(basename "$A") $(rate $PORT_A) req/s   $(basename "$B") $(rate $PORT_B) req/s"
done
