#!/bin/bash
# User-space instructions per request of a ferrule server, under callgrind: steadier than
# requests/s on a noisy machine (this VM has no hardware counters for `perf stat`), so small
# changes can be compared. Warm-up of 500 requests, then N measured ones (h2load --h1 -c50, or
# with --h2 over HTTP/2 without TLS, -c10 -m10 as the HTTP/2 hello benchmark).
#
#   benches/instructions.sh [--ferrule-path DIR] [--h2] LOOP PATH [N] [APP]
#   benches/instructions.sh --ferrule-path /tmp/ferrule-rel uvloop /hello 2000
#   benches/instructions.sh asyncio /async 1000 fastapi_app:app
#   benches/instructions.sh --h2 asyncio /hello 2000    # HTTP/2 (h2c): h2load -c10 -m10
#
# Prints `Ir/request`; the callgrind file is kept for callgrind_annotate. FERRULE_ARGS adds
# server options (FERRULE_ARGS="--metrics --metrics-port 0": the cost of the metrics;
# FERRULE_ARGS="--access-log": with the access log on, as deployed, its lines in the log file).
set -euo pipefail
. "$(dirname "$0")/load_helpers.sh"
load_options "$@"
shift "$OPTION_COUNT"
LOOP=${1:?loop: asyncio or uvloop}
TARGET=${2:?path, e.g. /hello}
N=${3:-2000}
APP=${4:-apps:app}
PORT=${PORT:-$(free_port)}
PYTHON=$(python3 -c 'import sys; print(sys.executable)')  # not a shim: valgrind must see python
OUT=$(mktemp -d /tmp/ferrule-callgrind.XXXXXX)/callgrind.out
cd "$(dirname "$0")"
PYTHONPATH=$FERRULE_PATH valgrind --tool=callgrind --callgrind-out-file="$OUT" \
    "$PYTHON" -m ferrule "$APP" --port "$PORT" --loop "$LOOP" --no-access-log ${FERRULE_ARGS:-} \
    > "$OUT.log" 2>&1 &
SERVER=$!
trap 'kill -INT $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true' EXIT
wait_serving "http://127.0.0.1:$PORT$TARGET" 120 1
body_for "$TARGET" "$(dirname "$OUT")"
load() { h2load -n "$1" "${CLIENTS[@]}" "${BODY[@]}" "http://127.0.0.1:$PORT$TARGET" > /dev/null; }
load 500
callgrind_control -z "$SERVER" > /dev/null 2>&1
load "$N"
callgrind_control -d "$SERVER" > /dev/null 2>&1
TOTAL=$(callgrind_annotate "$OUT.1" | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
echo "$LOOP $TARGET: $((TOTAL / N)) Ir/request ($OUT.1)"
