#!/bin/bash
# System calls and context switches per request of a ferrule server, counted by the kernel
# (`perf stat` on syscall tracepoints, no hardware counters needed): what instructions.sh cannot
# see. A write per response where a batch was expected, or a wake-up per request, shows here.
# The server runs on CPU 0 and h2load on CPU 1, as in run.py; a 2-second warm-up, then a
# 4-second window (h2load --h1 -c50, or with --h2 over HTTP/2 without TLS, -c10 -m10).
#
#   benches/syscalls.sh [--ferrule-path DIR] [--h2] LOOP PATH [APP]
#   benches/syscalls.sh --h2 uvloop /hello
#   benches/syscalls.sh --ferrule-path /tmp/ferrule-rel asyncio /echo
#
# Prints the requests served, the server's user and system CPU time per request, and each
# counter per request. Needs `perf` (Debian: linux-perf) and a kernel that lets root trace.
set -euo pipefail
. "$(dirname "$0")/load_helpers.sh"
load_options "$@"
shift "$OPTION_COUNT"
LOOP=${1:?loop: asyncio or uvloop}
TARGET=${2:?path, e.g. /hello}
APP=${3:-apps:app}
PORT=${PORT:-$(free_port)}
OUT=$(mktemp -d /tmp/ferrule-syscalls.XXXXXX)
cd "$(dirname "$0")"
PYTHONPATH=$FERRULE_PATH taskset -c 0 python3 -m ferrule "$APP" --port "$PORT" --loop "$LOOP" \
    --no-access-log ${FERRULE_ARGS:-} > "$OUT/server.log" 2>&1 &
SERVER=$!
trap 'kill -INT $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true' EXIT
wait_serving "http://127.0.0.1:$PORT$TARGET" 100 0.1
body_for "$TARGET" "$OUT"
load() { taskset -c 1 h2load -D "$1" "${CLIENTS[@]}" "${BODY[@]}" "http://127.0.0.1:$PORT$TARGET"; }
load 2 > /dev/null
EVENTS=(raw_syscalls:sys_enter context-switches page-faults)
for call in read write writev recvfrom sendto epoll_wait epoll_pwait futex madvise; do
    EVENTS+=("syscalls:sys_enter_$call")
done
cpu() { awk '{print $14, $15}' "/proc/$SERVER/stat"; }
read -r USER0 SYS0 < <(cpu)
perf stat -x, -o "$OUT/perf.csv" "${EVENTS[@]/#/-e}" -p "$SERVER" &
PERF=$!
REQUESTS=$(load 4 | awk '/^requests:/ {print $8}')
kill -INT $PERF
wait $PERF || true
read -r USER1 SYS1 < <(cpu)
awk -F, -v n="$REQUESTS" -v hz="$(getconf CLK_TCK)" \
    -v user=$((USER1 - USER0)) -v sys=$((SYS1 - SYS0)) -v what="$LOOP $TARGET" '
    BEGIN {
        printf "%s: %d requests; CPU per request: user %.1f us, system %.1f us\n",
            what, n, user * 1e6 / hz / n, sys * 1e6 / hz / n
    }
    $1 ~ /^[0-9]+$/ && $1 > 0 {printf "  %-32s %.3f a request\n", $3, $1 / n}
' "$OUT/perf.csv"
