#!/usr/bin/env bash
# WebSocket conformance: runs Autobahn|Testsuite's fuzzing client (wstest -m fuzzingclient,
# autobahntestsuite 25.10.1) against ferrule and its peers, each serving benches/autobahn_app.py
# (an echo app) on 127.0.0.1, and writes a Markdown report: the behaviour of every case per
# server side by side, a count per server, what the client reported for each case ferrule did
# not pass, and section 9's durations as a speed measure.
#
# wstest runs only on Python 2.7, so it lives in a Debian bullseye chroot (the last Debian with
# python2.7), built once and reused: /var/cache/ferrule-autobahn. The chroot's Python 2 cannot
# verify this machine's certificate authority, so the host's pip downloads the pinned packages
# into a wheelhouse inside the chroot, and the chroot's pip installs them from there offline.
# Once built, a run needs no network. The servers run on the host, from the host's python3.
# Needs root (debootstrap, chroot). Run with --help for options.
# shellcheck disable=SC2317 # functions run through traps look unreachable
set -euo pipefail

# Every server the script knows, in the report's column order: ferrule's four variants
# (event loop x permessage-deflate), then the peers.
ALL_SERVERS=(
    ferrule-uvloop-deflate ferrule-uvloop-nodeflate
    ferrule-asyncio-deflate ferrule-asyncio-nodeflate
    uvicorn hypercorn granian
)

# Bump SETUP_VERSION when the chroot setup changes in a way the lists below do not show.
SETUP_VERSION=1
SUITE=bullseye
# python2.7-dev and gcc: wsaccel, ujson, autobahn, txaio and PyHamcrest come as sdists only.
DEB_PACKAGES=(python2.7 python2.7-dev gcc libc6-dev)
# pip for 2.7 first: it installs everything else.
PY2_BOOTSTRAP=(pip==20.3.4 setuptools==44.0.0 wheel==0.37.1)
# autobahntestsuite's own pins (its requirements), then what those need, each pinned to the
# last release that installs on 2.7. Downloaded as 2.7 wheels where one exists.
PY2_WHEELS=(
    autobahntestsuite==25.10.1
    Twisted==19.10.0 zope.interface==4.6.0 incremental==16.10.1 constantly==15.1.0
    Automat==20.2.0 attrs==21.4.0 hyperlink==21.0.0 idna==2.10 typing==3.10.0.0
    pyOpenSSL==19.1.0 cryptography==3.3.2 cffi==1.15.1 pycparser==2.21 enum34==1.1.10
    ipaddress==1.0.23 six==1.16.0 service_identity==18.1.0 pyasn1==0.4.8 pyasn1-modules==0.2.8
    jinja2==2.11.3 markupsafe==1.1.1 Werkzeug==1.0.1 klein==17.10.0
    unittest2==1.1.0 argparse==1.4.0 traceback2==1.4.0 linecache2==1.0.0
)
# No 2.7 wheel on PyPI: built in the chroot. wsaccel and ujson are autobahn's [accelerate] extra.
PY2_SDISTS=(autobahn==0.10.9 txaio==2.1.0 wsaccel==0.6.3 ujson==1.35 PyHamcrest==1.10.1)
# What --cases '*' (sections 1 to 13) runs as: a wstest per section, and per subsection in the
# slow compression sections 12 and 13 (there is no section 8 or 11).
DEFAULT_CHUNKS=('1.*' '2.*' '3.*' '4.*' '5.*' '6.*' '7.*' '9.*' '10.*'
    '12.1.*' '12.2.*' '12.3.*' '12.4.*' '12.5.*'
    '13.1.*' '13.2.*' '13.3.*' '13.4.*' '13.5.*' '13.6.*' '13.7.*')
# The peers, installed into the host's python3 only when missing.
PEER_PINS=(uvicorn==0.54.0 websockets==17.4 hypercorn==0.18.0 granian==2.8.9)

usage() {
    cat <<EOF
Usage: scripts/autobahn.sh [options]

Run Autobahn|Testsuite's fuzzing client against each server and write the report. Must run as
root. Builds the Debian $SUITE chroot with wstest first if it is not there.

Options:
  --server NAME    a server to test (repeatable; default: all). One of:
                   ${ALL_SERVERS[*]}
  --cases LIST     comma-separated case patterns as wstest takes them (default: '*', sections
                   1 to 13), e.g. '1.*,2.*' or '9.*'; each pattern is one wstest run ('*' is
                   run per section, and per subsection in 12 and 13)
  --out DIR        where results go (default /tmp/autobahn-YYYYmmdd-HHMMSS): DIR/NAME/ holds a
                   server's logs and wstest's reports, in reports/N/ for its Nth pattern
                   (index.json, a JSON and an HTML file per case); DIR/autobahn.md the report
  --jobs N         servers tested at once (default 1; more skews section 9's timings)
  --timeout SECS   limit of one server's wstest runs together (default 7200); the chunk
                   running when it passes is lost, the others are reported
  --chroot DIR     the chroot (env FERRULE_AUTOBAHN_CHROOT, default /var/cache/ferrule-autobahn)
  --rebuild        delete and recreate the chroot first
  --setup-only     build the chroot (if needed) and stop
  --report-only    write DIR/autobahn.md from the results already in --out DIR
  --gate           exit 1 if a ferrule server FAILED a case (its behaviour or its close), or
                   ran none: what CI runs
  -h, --help       show this help

Environment:
  FERRULE_AUTOBAHN_PYTHON  the host interpreter that runs the servers (default python3); a
                           PYTHONPATH set by the caller is kept (e.g. a release build of ferrule)
  FERRULE_AUTOBAHN_MIRROR  Debian mirror (default: the host's first deb URI)

Each server runs with a 64 MiB message limit (section 9 sends up to 16 MiB) and without
server pings (a ping arriving mid-case counts as an unexpected frame); peers on uvloop.
Sections 1-10 take 1-3 minutes per server. Sections 12-13 (216 cases) take an hour or more
for a server that agrees to permessage-deflate (the Python 2 client spends seconds on each case;
an unoptimised build of ferrule, slower still); run several servers with --jobs on more cores.
EOF
}

die() { echo "autobahn: $*" >&2; exit 2; }
note() { printf '[%s] autobahn: %s\n' "$(date +%T)" "$*"; }
fmt_secs() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHROOT="${FERRULE_AUTOBAHN_CHROOT:-/var/cache/ferrule-autobahn}"
PY="${FERRULE_AUTOBAHN_PYTHON:-python3}"
MIRROR="${FERRULE_AUTOBAHN_MIRROR:-}"
SERVERS=()
CASES='*'
OUT=""
JOBS=1
RUN_TIMEOUT=7200
REBUILD=0
SETUP_ONLY=0
REPORT_ONLY=0
GATE=0
MAX_SIZE=67108864

while (($#)); do
    case "$1" in
        --server) (($# >= 2)) || die "--server needs a name"; SERVERS+=("$2"); shift 2 ;;
        --cases) (($# >= 2)) || die "--cases needs a list"; CASES="$2"; shift 2 ;;
        --out) (($# >= 2)) || die "--out needs a directory"; OUT="$2"; shift 2 ;;
        --jobs) (($# >= 2)) || die "--jobs needs a number"; JOBS="$2"; shift 2 ;;
        --timeout) (($# >= 2)) || die "--timeout needs seconds"; RUN_TIMEOUT="$2"; shift 2 ;;
        --chroot) (($# >= 2)) || die "--chroot needs a directory"; CHROOT="$2"; shift 2 ;;
        --rebuild) REBUILD=1; shift ;;
        --setup-only) SETUP_ONLY=1; shift ;;
        --report-only) REPORT_ONLY=1; shift ;;
        --gate) GATE=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done
((${#SERVERS[@]})) || SERVERS=("${ALL_SERVERS[@]}")
for s in "${SERVERS[@]}"; do
    [[ " ${ALL_SERVERS[*]} " == *" $s "* ]] || die "unknown --server $s (choose from ${ALL_SERVERS[*]})"
done
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || die "--jobs must be a positive number"
[[ $RUN_TIMEOUT =~ ^[1-9][0-9]*$ ]] || die "--timeout must be a positive number of seconds"
[[ $CASES =~ ^[0-9.*,]+$ ]] || die "--cases takes patterns such as '1.*,9.1.1', not $CASES"
OUT="${OUT:-/tmp/autobahn-$(date +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"

if ((REPORT_ONLY)); then
    "$PY" "$REPO/scripts/autobahn_report.py" "$OUT" >"$OUT/autobahn.md"
    note "report: $OUT/autobahn.md"
    exit 0
fi

[[ $EUID -eq 0 ]] || die "must run as root (debootstrap and chroot need it)"
[[ $CHROOT == /* ]] || die "the chroot path must be absolute: $CHROOT"
CHROOT="${CHROOT%/}"
case "$CHROOT" in
    "" | / | /bin | /boot | /dev | /etc | /home | /lib* | /opt | /proc | /root | /run | /sbin | /srv | /sys | /tmp | /usr | /var | /var/cache)
        die "refusing to use $CHROOT as the chroot" ;;
esac
case "$CHROOT/" in "$REPO"/*) die "the chroot must live outside the checkout ($REPO)" ;; esac

# wipe_chroot and host_mirror; nothing is mounted in this chroot (wstest needs no /proc).
# shellcheck source=scripts/chroot.sh
source "$REPO/scripts/chroot.sh"

# Paths inside the chroot.
C_WHEELS=/opt/autobahn-wheels # the wheelhouse: kept, so a reinstall needs no network
C_RUNS=/autobahn              # one directory per server run, moved to --out afterwards
BOOTSTRAP_MARKER="$CHROOT/.ferrule-debootstrap-done"
READY_MARKER="$CHROOT/.ferrule-autobahn-ready"
SETUP_ID="v$SETUP_VERSION minbase $SUITE: ${DEB_PACKAGES[*]}; ${PY2_BOOTSTRAP[*]} ${PY2_WHEELS[*]} ${PY2_SDISTS[*]}"

# Nothing from the host's environment goes in (PIP_* variables in particular).
CHROOT_ENV=(
    HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    LANG=C.UTF-8 LC_ALL=C.UTF-8 TERM=dumb
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_NO_CACHE_DIR=1 PIP_PROGRESS_BAR=off
)
in_chroot() { # in_chroot SCRIPT
    chroot "$CHROOT" /usr/bin/env -i "${CHROOT_ENV[@]}" /bin/bash -euo pipefail -c "$1"
}

STAGES=()
stage() { # stage NAME CMD...: run CMD with its output in $OUT/setup.log, and time it
    local name="$1" start=$SECONDS status=0
    shift
    note "$name ..."
    "$@" >>"$OUT/setup.log" 2>&1 || status=$?
    STAGES+=("$(printf '  %-52s %8s  %s' "$name" "$(fmt_secs $((SECONDS - start)))" \
        "$( ((status == 0)) && echo ok || echo "FAILED (exit $status)")")")
    if ((status != 0)); then
        echo "---- last 30 lines of $OUT/setup.log ----"
        tail -n 30 "$OUT/setup.log" | sed 's/^/    /'
        die "$name failed"
    fi
    note "$name: done in $(fmt_secs $((SECONDS - start)))"
}

# ---------------------------------------------------------------------------------------------
# The chroot
# ---------------------------------------------------------------------------------------------
TOTAL_START=$SECONDS
: >"$OUT/setup.log"

# Runs share the chroot (each in its own directory in it); setting it up takes it alone.
mkdir -p "$(dirname "$CHROOT")"
exec 9>"$CHROOT.lock"
chroot_ready() {
    [[ -f $READY_MARKER ]] && [[ "$(head -n 1 "$READY_MARKER")" == "$SETUP_ID" ]]
}
if ((REBUILD)) || ! chroot_ready; then
    flock -n -x 9 || { note "another run is using $CHROOT; waiting for it"; flock -x 9; }
else
    flock -n -s 9 || { note "$CHROOT is being set up by another run; waiting for it"; flock -s 9; }
fi

if ((REBUILD)) && [[ -e $CHROOT ]]; then
    note "--rebuild: deleting $CHROOT"
    wipe_chroot
fi

if [[ ! -f $BOOTSTRAP_MARKER ]]; then
    command -v debootstrap >/dev/null || stage "host: install debootstrap" \
        bash -c 'apt-get update && apt-get install -y debootstrap'
    [[ -e $CHROOT ]] && { note "incomplete chroot at $CHROOT; recreating it"; wipe_chroot; }
    MIRROR="${MIRROR:-$(host_mirror)}"
    note "mirror: $MIRROR"
    packages="${DEB_PACKAGES[*]}"
    stage "debootstrap (minbase $SUITE + ${DEB_PACKAGES[*]})" \
        debootstrap --variant=minbase --include="${packages// /,}" "$SUITE" "$CHROOT" "$MIRROR"
    date -u +%FT%TZ >"$BOOTSTRAP_MARKER"
fi

download_wheelhouse() {
    local dir="$CHROOT$C_WHEELS" p
    rm -rf "$dir"
    mkdir -p "$dir"
    # One package at a time and without dependencies: all are pinned above, and pip cannot
    # resolve for a 2.7 target that mixes wheels and sdists.
    for p in "${PY2_BOOTSTRAP[@]}" "${PY2_WHEELS[@]}"; do
        timeout 300 "$PY" -m pip download --no-deps --disable-pip-version-check -d "$dir" \
            --only-binary=:all: --python-version 2.7 --implementation cp --abi cp27mu --abi none \
            --platform manylinux2010_x86_64 --platform manylinux1_x86_64 --platform any "$p"
    done
    for p in "${PY2_SDISTS[@]}"; do
        timeout 300 "$PY" -m pip download --no-deps --disable-pip-version-check -d "$dir" \
            --no-binary=:all: "$p"
    done
}

install_wstest() {
    local pip_whl
    pip_whl="$(cd "$CHROOT$C_WHEELS" && ls pip-*.whl)"
    # pip runs from its own wheel to install itself, then everything else offline.
    in_chroot "
        python2.7 $C_WHEELS/$pip_whl/pip install --no-index --find-links $C_WHEELS ${PY2_BOOTSTRAP[*]}
        python2.7 -m pip install --no-index --find-links $C_WHEELS ${PY2_WHEELS[*]} ${PY2_SDISTS[*]}
        python2.7 -m pip check
        wstest --help >/dev/null
    "
}

if ! chroot_ready; then
    rm -f "$READY_MARKER"
    stage "host pip: download ${#PY2_WHEELS[@]} wheels + ${#PY2_SDISTS[@]} sdists for 2.7" download_wheelhouse
    stage "chroot: pip install wstest offline" install_wstest
    {
        echo "$SETUP_ID"
        # shellcheck disable=SC2016 # ${Version} is dpkg-query's
        in_chroot 'python2.7 -V 2>&1; dpkg-query -W -f "debian python2.7 \${Version}\n" python2.7;
            python2.7 -m pip freeze 2>/dev/null | tr "\n" " "; echo'
        date -u +%FT%TZ
    } >"$READY_MARKER.tmp"
    mv "$READY_MARKER.tmp" "$READY_MARKER"
else
    note "reusing $CHROOT (set up $(tail -n 1 "$READY_MARKER"); --rebuild to recreate it)"
fi
note "chroot: $(sed -n 2,3p "$READY_MARKER" | tr '\n' ' ')"
if ((SETUP_ONLY)); then
    ((${#STAGES[@]} == 0)) || printf '%s\n' "${STAGES[@]}"
    exit 0
fi
# Set up: from here on other runs may share the chroot.
flock -s 9

# ---------------------------------------------------------------------------------------------
# The servers
# ---------------------------------------------------------------------------------------------
# Only the peers this run serves: a ferrule-only run (CI's) leaves the host's packages alone.
missing=()
for pin in "${PEER_PINS[@]}"; do
    package="${pin%%==*}"
    [[ $package == websockets ]] && package=uvicorn # uvicorn's WebSocket implementation
    [[ " ${SERVERS[*]} " == *" $package "* ]] || continue
    "$PY" -c "import importlib.metadata as m; m.version('${pin%%==*}')" 2>/dev/null || missing+=("$pin")
done
if ((${#missing[@]})); then
    stage "host pip: install ${missing[*]}" timeout 600 "$PY" -m pip install "${missing[@]}"
fi
{
    echo "host: $(uname -srm), $(nproc) cores; load before: $(uptime | sed 's/.*load average/load average/')"
    echo "wstest chroot: $(sed -n 2,3p "$READY_MARKER" | tr '\n' ' ')"
    "$PY" -c 'import sys, importlib.metadata as m
print("host python", sys.version.split()[0])
for name in ("ferrule", "uvloop", "uvicorn", "websockets", "hypercorn", "wsproto", "granian"):
    try:
        print(name, m.version(name))
    except m.PackageNotFoundError:
        print(name, "not installed")
import ferrule
print("ferrule from", ferrule.__file__)'
} >"$OUT/versions.txt"
sed 's/^/    /' "$OUT/versions.txt"

free_port() {
    "$PY" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

server_cmd() { # server_cmd NAME PORT DIR: sets CMD, the server's command line
    local name="$1" port="$2" dir="$3" loop deflate
    case "$name" in
        ferrule-*)
            loop="${name#ferrule-}"
            loop="${loop%%-*}"
            [[ $name == *-nodeflate ]] && deflate=false || deflate=true
            CMD=("$PY" -m ferrule autobahn_app:app --host 127.0.0.1 --port "$port" --loop "$loop"
                --ws-per-message-deflate "$deflate" --ws-max-size "$MAX_SIZE"
                --ws-ping-interval 0 --log-level warning --no-access-log) ;;
        uvicorn)
            CMD=("$PY" -m uvicorn autobahn_app:app --host 127.0.0.1 --port "$port" --loop uvloop
                --ws websockets --ws-per-message-deflate true --ws-max-size "$MAX_SIZE"
                --ws-ping-interval 0 --log-level warning --no-access-log) ;;
        hypercorn)
            # The message limit has no command-line option.
            echo "websocket_max_message_size = $MAX_SIZE" >"$dir/hypercorn.toml"
            CMD=("$PY" -m hypercorn autobahn_app:app --bind "127.0.0.1:$port" -k uvloop
                -c "$dir/hypercorn.toml" --log-level warning) ;;
        granian)
            CMD=("$PY" -m granian --interface asgi --host 127.0.0.1 --port "$port" --loop uvloop
                --log-level warning --no-access-log autobahn_app:app) ;;
    esac
}

# run_server NAME: start the server, run wstest against it, stop it; results in $OUT/NAME.
run_server() {
    # Not local: the EXIT trap reads them (run_server has a subshell of its own).
    name="$1" dir="$OUT/$1" pid="" tpid="" start=$SECONDS chunk="" done_chunks=0 chunks=()
    local port up=0 status=0
    # A directory of its own: runs of the same server may start in the same second.
    mkdir -p "$CHROOT$C_RUNS"
    cdir="$(mktemp -d "$CHROOT$C_RUNS/$(date +%Y%m%d-%H%M%S)-$name.XXXXXX")"
    cdir="${cdir#"$CHROOT"}"
    rm -rf "$dir"
    mkdir -p "$dir"
    stop() {
        # timeout passes the signal on to wstest.
        if [[ -n $tpid ]]; then
            kill -TERM "$tpid" 2>/dev/null || true
            wait "$tpid" 2>/dev/null || true
        fi
        tpid=""
        if [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null; then
            kill -TERM "$pid" 2>/dev/null || true
            for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
            kill -KILL "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
        fi
        pid=""
        rm -rf "${CHROOT:?}$cdir"
    }
    interrupted() {
        stop
        local elapsed=$((SECONDS - start))
        printf '%s %s interrupted during chunk %s; %s of %s chunks reported\n' "$elapsed" \
            "$(fmt_secs "$elapsed")" "$chunk" "$done_chunks" "${#chunks[@]}" >"$dir/status.txt"
    }
    trap stop EXIT
    trap 'interrupted; exit 143' TERM
    trap 'interrupted; exit 130' INT

    port="$(free_port)"
    server_cmd "$name" "$port" "$dir"
    printf '%q ' "${CMD[@]}" >"$dir/command.txt"
    echo >>"$dir/command.txt"
    (cd "$REPO/benches" && PYTHONPATH="$REPO/benches${PYTHONPATH:+:$PYTHONPATH}" exec "${CMD[@]}") \
        >"$dir/server.log" 2>&1 &
    pid=$!
    for _ in $(seq 300); do
        kill -0 "$pid" 2>/dev/null || break
        if "$PY" -c 'import socket, sys
socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=0.5).close()' "$port" 2>/dev/null; then
            up=1
            break
        fi
        sleep 0.1
    done
    if ((!up)); then
        note "$name: the server did not start; see $dir/server.log"
        echo "0 - server did not start" >"$dir/status.txt"
        return 1
    fi

    # One wstest per chunk of cases, so that the log shows progress and a timeout or a crash
    # loses only the chunk it stopped (wstest writes its reports when it ends).
    local i=0 left result="ok"
    if [[ $CASES == '*' ]]; then
        chunks=("${DEFAULT_CHUNKS[@]}")
    else
        IFS=, read -r -a chunks <<<"$CASES"
    fi
    mkdir -p "$CHROOT$cdir" "$dir/reports"
    note "$name: wstest on port $port, ${#chunks[@]} chunk(s) (log: $dir/wstest.log)"
    start=$SECONDS
    for chunk in "${chunks[@]}"; do
        i=$((i + 1))
        left=$((start + RUN_TIMEOUT - SECONDS))
        if ((left <= 0)); then
            result="timed out after ${RUN_TIMEOUT}s before chunk $chunk"
            break
        fi
        cat >"$CHROOT$cdir/spec.json" <<EOF
{
  "outdir": "$cdir/reports/$i",
  "servers": [{"agent": "$name", "url": "ws://127.0.0.1:$port/"}],
  "cases": ["$chunk"],
  "exclude-cases": [],
  "exclude-agent-cases": {}
}
EOF
        echo "== chunk $i/${#chunks[@]}: $chunk" >>"$dir/wstest.log"
        # Unbuffered: the log shows which case is running.
        status=0
        timeout --kill-after=30 "$left" chroot "$CHROOT" /usr/bin/env -i "${CHROOT_ENV[@]}" \
            PYTHONUNBUFFERED=1 /bin/bash -c "cd $cdir && exec wstest -m fuzzingclient -s spec.json" \
            >>"$dir/wstest.log" 2>&1 &
        tpid=$!
        wait "$tpid" || status=$?
        tpid=""
        if [[ -f $CHROOT$cdir/reports/$i/index.json ]]; then
            mv "$CHROOT$cdir/reports/$i" "$dir/reports/$i"
            done_chunks=$((done_chunks + 1))
        fi
        if ((status == 124 || status == 137)); then
            result="timed out after ${RUN_TIMEOUT}s in chunk $chunk"
            break
        elif ((status != 0)); then
            result="wstest exit $status in chunk $chunk"
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            result="the server exited during chunk $chunk"
            break
        fi
    done
    local elapsed=$((SECONDS - start))
    stop
    ((done_chunks == ${#chunks[@]})) || result="$result; $done_chunks of ${#chunks[@]} chunks reported"
    printf '%s %s %s\n' "$elapsed" "$(fmt_secs "$elapsed")" "$result" >"$dir/status.txt"
    note "$name: $result in $(fmt_secs "$elapsed")"
}

RUN_START=$SECONDS
pids=()
# Each run_server stops its own server and wstest when signalled.
trap 'kill -TERM "${pids[@]}" 2>/dev/null; wait; exit 130' INT
trap 'kill -TERM "${pids[@]}" 2>/dev/null; wait; exit 143' TERM
for name in "${SERVERS[@]}"; do
    while (($(jobs -rp | wc -l) >= JOBS)); do wait -n || true; done
    run_server "$name" &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p" || true; done

# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------
"$PY" "$REPO/scripts/autobahn_report.py" "$OUT" >"$OUT/autobahn.md"
echo
echo "==== autobahn: stage times ===="
((${#STAGES[@]} == 0)) || printf '%s\n' "${STAGES[@]}"
for name in "${SERVERS[@]}"; do
    read -r _ took result <"$OUT/$name/status.txt" 2>/dev/null || { took="-"; result="not run"; }
    printf '  %-52s %8s  %s\n' "wstest: $name" "$took" "$result"
done
printf '  %-52s %8s\n' "servers (--jobs $JOBS)" "$(fmt_secs $((SECONDS - RUN_START)))"
printf '  %-52s %8s\n' "total" "$(fmt_secs $((SECONDS - TOTAL_START)))"
echo "==== autobahn: summary ===="
"$PY" "$REPO/scripts/autobahn_report.py" --summary "$OUT"
echo "report: $OUT/autobahn.md"
if ((GATE)); then
    "$PY" "$REPO/scripts/autobahn_report.py" --gate "$OUT"
fi
