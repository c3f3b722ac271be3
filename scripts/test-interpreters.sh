#!/usr/bin/env bash
# Run ferrule's whole test suite under CPython 3.13 and 3.14 in a Debian sid chroot.
#
# For each interpreter: a fresh venv in the chroot; `maturin build --release` of a copy of the
# checkout, or with --wheels DIR the manylinux wheel scripts/build-wheels.sh left in DIR for it;
# scripts/check_wheel.py installs that wheel alone into another fresh venv and serves the example
# app from it; then the wheel with its test extras goes into the venv and `python -m pytest tests
# -q` runs (the suite runs every scenario on asyncio and on uvloop); with --task-suites, beside
# it, CPython's own task suites with ferrule's task factory (scripts/task_suites.py) on both loops.
#
# The chroot lives outside the checkout and is reused between runs; the cargo registry, the pip
# cache and one cargo target dir per interpreter persist inside it. Needs root (debootstrap,
# chroot, mount) and network access to the Debian mirror, crates.io and PyPI.
# Run with --help for options.
# Functions run through traps and run_phase look unreachable to shellcheck:
# shellcheck disable=SC2317
set -euo pipefail

ALL_PYTHONS=(3.13 3.14)
# Bump SETUP_VERSION when the chroot setup changes in a way the package list does not show.
SETUP_VERSION=1
PACKAGES=(
    python3.13-dev python3.13-venv
    python3.14-dev python3.14-venv
    gcc libc6-dev rustc cargo ca-certificates
    procps # pgrep: tests find a server's worker processes with it
    haproxy # the PROXY protocol's client in tests/http/test_proxy_protocol.py
    curl # a real client in the compression and static-file tests
    # test.test_asyncio and test_context, which Debian leaves out of the interpreter: the task
    # suites (--task-suites) run them
    libpython3.13-testsuite libpython3.14-testsuite
)

usage() {
    cat <<EOF
Usage: scripts/test-interpreters.sh [options]

Build ferrule from this checkout and run the whole test suite (asyncio and uvloop) under
CPython ${ALL_PYTHONS[*]} inside a Debian sid chroot. Exits non-zero if any interpreter's
build or tests fail. Must run as root.

Options:
  --python X.Y     run only this interpreter (repeatable; default: ${ALL_PYTHONS[*]})
  --rebuild        delete and recreate the chroot first
  --chroot DIR     chroot directory        (env FERRULE_SID_CHROOT, default /var/cache/ferrule-sid)
  --log-dir DIR    where the logs go       (env FERRULE_INTERP_LOGS, default /tmp/ferrule-interp-logs)
  --committed      test the committed tree (git archive HEAD) instead of the working tree
  --wheels DIR     install the wheel for each interpreter from DIR (ferrule-*-cpXY-cpXY-manylinux*.whl, as
                   scripts/build-wheels.sh leaves them) instead of building one in the chroot
  --no-tests       stop after checking each interpreter's wheel (scripts/check_wheel.py)
  --ignore PATH    leave this test directory or file out (repeatable; pytest's --ignore)
  --smoke-only X.Y run only the smoke tests (pytest -m smoke) under this interpreter (repeatable)
  --task-suites X.Y beside this interpreter's tests, also run CPython's task suites with
                   ferrule's task factory on asyncio and on uvloop (scripts/task_suites.py;
                   repeatable); a test that fails with the factory only fails the interpreter
  --prepare        only set up the chroot (if need be) and exit
  --verbose        also stream setup/build output (always in the logs)
  --shell          set up the chroot, copy the source, then open a shell in it (no tests)
  -h, --help       show this help

Environment:
  FERRULE_SID_MIRROR    Debian mirror (default: the host's first deb URI, else deb.debian.org)
  FERRULE_HOST_CA       CA bundle copied into the chroot (default /etc/ssl/certs/ca-certificates.crt)
  FERRULE_TEST_TIMEOUT  seconds allowed for one interpreter's pytest run (default 1500)

By default the source copied in is the working tree as git sees it (tracked and untracked
files, minus .gitignore'd ones such as target/), so uncommitted changes are tested.
EOF
}

die() { echo "test-interpreters: $*" >&2; exit 2; }

# ---------------------------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------------------------
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHROOT="${FERRULE_SID_CHROOT:-/var/cache/ferrule-sid}"
LOG_DIR="${FERRULE_INTERP_LOGS:-/tmp/ferrule-interp-logs}"
HOST_CA="${FERRULE_HOST_CA:-/etc/ssl/certs/ca-certificates.crt}"
TEST_TIMEOUT="${FERRULE_TEST_TIMEOUT:-1500}"
MIRROR="${FERRULE_SID_MIRROR:-}"
PYTHONS=()
REBUILD=0
VERBOSE=0
SHELL_ONLY=0
COMMITTED=0
WHEEL_DIR=""
NO_TESTS=0
IGNORE=()
SMOKE_ONLY=" "
TASK_SUITES=" "
PREPARE=0

while (($#)); do
    case "$1" in
        --python) (($# >= 2)) || die "--python needs a version"; PYTHONS+=("${2#python}"); shift 2 ;;
        --python=*) v="${1#--python=}"; PYTHONS+=("${v#python}"); shift ;;
        --rebuild) REBUILD=1; shift ;;
        --chroot) (($# >= 2)) || die "--chroot needs a directory"; CHROOT="$2"; shift 2 ;;
        --log-dir) (($# >= 2)) || die "--log-dir needs a directory"; LOG_DIR="$2"; shift 2 ;;
        --committed) COMMITTED=1; shift ;;
        --wheels) (($# >= 2)) || die "--wheels needs a directory"; WHEEL_DIR="$2"; shift 2 ;;
        --no-tests) NO_TESTS=1; shift ;;
        --ignore) (($# >= 2)) || die "--ignore needs a path"; IGNORE+=("--ignore=$2"); shift 2 ;;
        --smoke-only) (($# >= 2)) || die "--smoke-only needs a version"; SMOKE_ONLY+="$2 "; shift 2 ;;
        --task-suites) (($# >= 2)) || die "--task-suites needs a version"; TASK_SUITES+="$2 "; shift 2 ;;
        --prepare) PREPARE=1; shift ;;
        --verbose) VERBOSE=1; shift ;;
        --shell) SHELL_ONLY=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done
((${#PYTHONS[@]})) || PYTHONS=("${ALL_PYTHONS[@]}")
for v in "${PYTHONS[@]}"; do
    [[ " ${ALL_PYTHONS[*]} " == *" $v "* ]] || die "unsupported --python $v (choose from ${ALL_PYTHONS[*]})"
done

[[ $EUID -eq 0 ]] || die "must run as root (debootstrap, chroot and mount need it)"
[[ $CHROOT == /* ]] || die "the chroot path must be absolute: $CHROOT"
CHROOT="${CHROOT%/}"
case "$CHROOT" in
    "" | / | /bin | /boot | /dev | /etc | /home | /lib* | /opt | /proc | /root | /run | /sbin | /srv | /sys | /tmp | /usr | /var | /var/cache)
        die "refusing to use $CHROOT as the chroot" ;;
esac
case "$CHROOT/" in "$REPO"/*) die "the chroot must live outside the checkout ($REPO)" ;; esac
[[ -r $HOST_CA ]] || die "no CA bundle at $HOST_CA (set FERRULE_HOST_CA)"
mkdir -p "$LOG_DIR"
LOG_DIR="$(cd "$LOG_DIR" && pwd)"
if [[ -n $WHEEL_DIR ]]; then
    [[ -d $WHEEL_DIR ]] || die "no wheel directory $WHEEL_DIR"
    WHEEL_DIR="$(cd "$WHEEL_DIR" && pwd)"
fi

# Paths inside the chroot.
C_CA=/etc/ssl/ferrule-host-ca.crt   # the host's bundle (trusts whatever the host trusts)
C_CACHE=/var/cache/ferrule          # persists: cargo home, pip cache, cargo target dirs
C_SRC=/build/src                    # re-copied every run
BOOTSTRAP_MARKER="$CHROOT/.ferrule-debootstrap-done"
READY_MARKER="$CHROOT/.ferrule-chroot-ready"
SETUP_ID="v$SETUP_VERSION minbase sid: ${PACKAGES[*]}"

# ---------------------------------------------------------------------------------------------
# Helpers: timing, logging, mounts
# ---------------------------------------------------------------------------------------------
PHASE_LINES=()
fmt_secs() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
record() { # record NAME SECONDS STATUS
    PHASE_LINES+=("$(printf '  %-46s %8s  %s' "$1" "$(fmt_secs "$2")" "$3")")
    printf '[%s] %s: %s in %s\n' "$(date +%T)" "$1" "$3" "$(fmt_secs "$2")"
}
note() { printf '[%s] %s\n' "$(date +%T)" "$*"; }

# run_phase NAME LOG CMD...: run CMD with its output in LOG (and on stdout with --verbose);
# record the time taken; on failure show the end of the log. Returns CMD's status.
run_phase() {
    local name="$1" log="$2" start=$SECONDS status=0
    shift 2
    note "$name ... (log: $log)"
    if ((VERBOSE)); then
        "$@" 2>&1 | tee -a "$log" || status=$?
    else
        "$@" >>"$log" 2>&1 || status=$?
    fi
    if ((status == 0)); then
        record "$name" $((SECONDS - start)) ok
    else
        record "$name" $((SECONDS - start)) "FAILED (exit $status)"
        echo "---- last 40 lines of $log ----"
        tail -n 40 "$log" | sed 's/^/    /'
        echo "----"
    fi
    return "$status"
}

# The environment inside the chroot is built from scratch: nothing leaks in from the host
# (in particular not PIP_FIND_LINKS, which names a host directory).
CHROOT_ENV=(
    HOME=/root
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
    LANG=C.UTF-8 LC_ALL=C.UTF-8 TERM=dumb
    DEBIAN_FRONTEND=noninteractive
    "SSL_CERT_FILE=$C_CA" "PIP_CERT=$C_CA" "REQUESTS_CA_BUNDLE=$C_CA" "CURL_CA_BUNDLE=$C_CA"
    "CARGO_HTTP_CAINFO=$C_CA"
    "CARGO_HOME=$C_CACHE/cargo" CARGO_TERM_COLOR=never CARGO_NET_RETRY=5
    "PIP_CACHE_DIR=$C_CACHE/pip" PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
    PIP_DEFAULT_TIMEOUT=180 PIP_PROGRESS_BAR=off
    RUST_BACKTRACE=1
)
in_chroot() { # in_chroot SCRIPT: run a bash script inside the chroot with CHROOT_ENV
    chroot "$CHROOT" /usr/bin/env -i "${CHROOT_ENV[@]}" /bin/bash -euo pipefail -c "$1"
}

# shellcheck source=scripts/chroot.sh
source "$(dirname "${BASH_SOURCE[0]}")/chroot.sh"
cleanup() {
    local status=$?
    unmount_chroot
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------------------------------------
# Setup
# ---------------------------------------------------------------------------------------------
TOTAL_START=$SECONDS
SETUP_LOG="$LOG_DIR/setup.log"
: >"$SETUP_LOG"

# One run at a time per chroot.
mkdir -p "$(dirname "$CHROOT")"
exec 9>"$CHROOT.lock"
if ! flock -n 9; then
    note "another run is using $CHROOT; waiting for it"
    flock 9
fi

note "chroot: $CHROOT   logs: $LOG_DIR   interpreters: ${PYTHONS[*]}"

if ((REBUILD)) && [[ -e $CHROOT ]]; then
    note "--rebuild: deleting $CHROOT"
    wipe_chroot
fi

if [[ ! -f $BOOTSTRAP_MARKER ]]; then
    if ! command -v debootstrap >/dev/null; then
        run_phase "host: install debootstrap" "$SETUP_LOG" \
            bash -c 'apt-get update && apt-get install -y debootstrap' || exit 1
    fi
    [[ -e $CHROOT ]] && { note "incomplete chroot at $CHROOT; recreating it"; wipe_chroot; }
    MIRROR="${MIRROR:-$(host_mirror)}"
    note "mirror: $MIRROR"
    run_phase "debootstrap (minbase sid)" "$SETUP_LOG" \
        debootstrap --variant=minbase sid "$CHROOT" "$MIRROR" || exit 1
    date -u +%FT%TZ >"$BOOTSTRAP_MARKER"
fi

# Refreshed every run: the host's DNS setup and CA bundle may change.
rm -f "$CHROOT/etc/resolv.conf"
cp -L /etc/resolv.conf "$CHROOT/etc/resolv.conf"
mkdir -p "$CHROOT/etc/ssl"
cp -L "$HOST_CA" "$CHROOT$C_CA"
# The sid Release file on the mirror can be past its Valid-Until date.
cat >"$CHROOT/etc/apt/apt.conf.d/99ferrule" <<'EOF'
Acquire::Check-Valid-Until "false";
Acquire::Retries "3";
APT::Install-Recommends "false";
EOF

mount_chroot

if [[ ! -f $READY_MARKER ]] || [[ "$(head -n 1 "$READY_MARKER")" != "$SETUP_ID" ]]; then
    rm -f "$READY_MARKER"
    run_phase "apt: install interpreters, their test suites, gcc, rustc, cargo, procps, haproxy, curl" "$SETUP_LOG" \
        in_chroot "apt-get update && apt-get install -y ${PACKAGES[*]} && apt-get clean" || exit 1
    {
        echo "$SETUP_ID"
        # shellcheck disable=SC2016 # $v expands inside the chroot
        in_chroot 'rustc --version; cargo --version; for v in '"${ALL_PYTHONS[*]}"'; do python$v -VV; done'
        date -u +%FT%TZ
    } >"$READY_MARKER.tmp"
    mv "$READY_MARKER.tmp" "$READY_MARKER"
else
    note "reusing the chroot (set up $(tail -n 1 "$READY_MARKER"); --rebuild to recreate it)"
fi
sed -n '2,$p' "$READY_MARKER" | sed '$d' | sed 's/^/    /'

# The source: the working tree as git sees it (so uncommitted and new files are tested),
# without ignored files such as target/. Without git, the tree minus the usual build outputs.
# Extracted with fresh mtimes (tar -m): cargo decides what to rebuild by mtime, and the cached
# target dirs may hold a build of another checkout whose files are newer than this one's.
copy_source() {
    rm -rf "$CHROOT$C_SRC"
    mkdir -p "$CHROOT$C_SRC"
    if ((COMMITTED)); then
        git -c safe.directory='*' -C "$REPO" archive --format=tar HEAD | tar -C "$CHROOT$C_SRC" -xmf -
    elif git -c safe.directory='*' -C "$REPO" rev-parse --git-dir >/dev/null 2>&1; then
        git -c safe.directory='*' -C "$REPO" ls-files -z --cached --others --exclude-standard |
            (cd "$REPO" && while IFS= read -r -d '' f; do [[ -e $f || -L $f ]] && printf '%s\0' "$f"; done) |
            tar -C "$REPO" --null --no-recursion -T - -cf - |
            tar -C "$CHROOT$C_SRC" -xmf -
    else
        tar -C "$REPO" --exclude=./target --exclude=./.git --exclude=./.venv --exclude=./dist \
            --exclude='__pycache__' --exclude='*.so' -cf - . | tar -C "$CHROOT$C_SRC" -xmf -
    fi
    [[ -f $CHROOT$C_SRC/pyproject.toml && -d $CHROOT$C_SRC/tests ]]
}
((PREPARE)) && exit 0
run_phase "copy source into the chroot" "$SETUP_LOG" copy_source || exit 1
if ((COMMITTED)); then
    source_desc="committed tree of $(git -c safe.directory='*' -C "$REPO" rev-parse --short HEAD)"
else
    source_desc="working tree of $(git -c safe.directory='*' -C "$REPO" describe --always --dirty 2>/dev/null ||
        echo "$REPO")"
fi
note "source: $source_desc, $(find "$CHROOT$C_SRC/tests" -name 'test_*.py' | wc -l) test modules"

if ((SHELL_ONLY)); then
    note "shell in the chroot (source in $C_SRC, venvs in /build/venv-X.Y); exit to leave"
    chroot "$CHROOT" /usr/bin/env -i "${CHROOT_ENV[@]}" /bin/bash -l || true
    exit 0
fi

# ---------------------------------------------------------------------------------------------
# Per interpreter: venv, build + install, tests
# ---------------------------------------------------------------------------------------------
declare -A RESULT SUMMARY TASK_LINES
FAILED=0
for v in "${PYTHONS[@]}"; do
    venv="/build/venv-$v"
    build_log="$LOG_DIR/build-py$v.log"
    test_log="$LOG_DIR/tests-py$v.log"
    : >"$build_log"
    : >"$test_log"
    rm -f "$LOG_DIR/junit-py$v.xml"

    # A fresh venv every run. The wheel: the one build-wheels.sh made (--wheels), or `maturin
    # build --release` into a target dir kept per interpreter (so dependencies compile only once).
    # check_wheel.py installs that wheel alone into another fresh venv and serves the example app
    # from it; then the wheel goes into the test venv with its test extras.
    wheels="/build/wheels-py$v"
    rm -rf "${CHROOT:?}$wheels"
    if [[ -n $WHEEL_DIR ]]; then
        tag="cp${v/./}"
        found=()
        # This machine's own manylinux wheel (DIR may hold other platforms' too).
        for w in "$WHEEL_DIR"/ferrule-*-"$tag-$tag"-manylinux*_"$(uname -m)".whl; do
            [[ -f $w ]] && found+=("$w")
        done
        if ((${#found[@]} != 1)); then
            echo "test-interpreters: ${#found[@]} $tag wheels in $WHEEL_DIR, expected one" | tee -a "$build_log"
            RESULT[$v]="FAILED (no wheel)"
            SUMMARY[$v]="no tests run; see $build_log"
            FAILED=1
            continue
        fi
        mkdir -p "$CHROOT$wheels"
        cp "${found[0]}" "$CHROOT$wheels/"
        step="py$v: venv + check ${found[0]##*/}"
        make_wheel="python$v -m venv $venv"
        check_args="--stripped"
    else
        step="py$v: venv + maturin build + check wheel"
        check_args=""
        make_wheel="python$v -m venv $venv
        $venv/bin/python -m pip install 'maturin>=1.8,<2'
        cd $C_SRC
        CARGO_TARGET_DIR=$C_CACHE/target-py$v $venv/bin/maturin build --release \\
            --interpreter $venv/bin/python --out $wheels"
    fi
    # The test dependencies come from a wheelhouse kept in the chroot for this interpreter and
    # this pyproject.toml, installed with --no-index; pip downloads (and builds) them only when
    # there is none yet, or it no longer satisfies the extras.
    deps_key="$(sha256sum "$CHROOT$C_SRC/pyproject.toml" | cut -c1-16)"
    wheelhouse="$C_CACHE/wheelhouse-py$v-$deps_key"
    install_test_deps="
        for old in $C_CACHE/wheelhouse-py$v-*; do [[ \$old == $wheelhouse ]] || rm -rf \$old; done
        if ! $venv/bin/python -m pip install --no-index --find-links $wheelhouse \"\$wheel[test]\"; then
            echo 'test-interpreters: no wheelhouse for these test extras yet; pip downloads them'
            rm -rf $wheelhouse $wheelhouse.tmp
            $venv/bin/python -m pip wheel --wheel-dir $wheelhouse.tmp \"\$wheel[test]\"
            rm -f $wheelhouse.tmp/ferrule-*.whl
            mv $wheelhouse.tmp $wheelhouse
            $venv/bin/python -m pip install --no-index --find-links $wheelhouse \"\$wheel[test]\"
        fi
        $venv/bin/python -c 'import sys, ferrule, uvloop; print(sys.version); print(\"ferrule\", ferrule.__file__); print(\"uvloop\", uvloop.__version__)'"
    if ((NO_TESTS)); then
        install_test_deps=""
    else
        step="$step + install"
    fi
    if ! run_phase "$step" "$build_log" in_chroot "
        rm -rf $venv
        $make_wheel
        cd $C_SRC
        wheel=\$(ls $wheels/ferrule-*.whl)
        python$v scripts/check_wheel.py $check_args \$wheel
        $install_test_deps
    "; then
        RESULT[$v]="FAILED (build/install)"
        SUMMARY[$v]="no tests run; see $build_log"
        FAILED=1
        continue
    fi
    tail -n 3 "$build_log" | sed 's/^/    /'
    if ((NO_TESTS)); then
        RESULT[$v]="PASSED (wheel check only, --no-tests)"
        continue
    fi

    # CPython's own task suites with the task factory, against the wheel just installed; its
    # venv has uvloop (the test extras require it). Both loops run beside the tests: the suites
    # mostly wait on their timers, and task_suites.py runs a test that failed under that load
    # again alone.
    suite_pids=()
    if [[ $TASK_SUITES == *" $v "* ]]; then
        note "py$v: CPython's task suites with the task factory, asyncio and uvloop, beside the tests (logs: $LOG_DIR/task-suites-py$v-*.log)"
        suites_start=$SECONDS
        for loop in asyncio uvloop; do
            timeout --kill-after=30 "$TEST_TIMEOUT" chroot "$CHROOT" /usr/bin/env -i "${CHROOT_ENV[@]}" \
                /bin/bash -c "cd $C_SRC && exec $venv/bin/python scripts/task_suites.py --loop $loop \
                    --log /build/task-suites-py$v-$loop.out" >"$LOG_DIR/task-suites-py$v-$loop.log" 2>&1 &
            suite_pids+=($!)
        done
    fi

    marker=""
    [[ $SMOKE_ONLY == *" $v "* ]] && marker="-m smoke"
    note "py$v: pytest ${marker:+($marker) }(log: $test_log)"
    start=$SECONDS
    status=0
    timeout --kill-after=30 "$TEST_TIMEOUT" chroot "$CHROOT" /usr/bin/env -i "${CHROOT_ENV[@]}" \
        /bin/bash -c "cd $C_SRC && exec $venv/bin/python -m pytest tests -q -p no:cacheprovider ${IGNORE[*]} $marker \
            --junitxml=/build/junit-py$v.xml" 2>&1 | tee "$test_log" || status=$?
    elapsed=$((SECONDS - start))
    cp "$CHROOT/build/junit-py$v.xml" "$LOG_DIR/junit-py$v.xml" 2>/dev/null || true

    summary="$(grep -E '(passed|failed|error|skipped|no tests ran).* in [0-9.]+s' "$test_log" | tail -n 1 |
        sed -E 's/^=+ //; s/ =+$//')"
    if ((status == 124 || status == 137)); then
        summary="timed out after ${TEST_TIMEOUT}s${summary:+; last: $summary}"
    fi
    SUMMARY[$v]="${summary:-no pytest summary line (pytest exit $status); see $test_log}"
    if ((status == 0)); then
        RESULT[$v]=PASSED
        record "py$v: tests" "$elapsed" ok
    else
        RESULT[$v]="FAILED (tests, exit $status)"
        record "py$v: tests" "$elapsed" "FAILED (exit $status)"
        FAILED=1
    fi

    if ((${#suite_pids[@]})); then
        status=0
        for pid in "${suite_pids[@]}"; do wait "$pid" || status=$?; done
        for loop in asyncio uvloop; do
            cp "$CHROOT/build/task-suites-py$v-$loop.out" "$LOG_DIR/" 2>/dev/null || true
            # The whole report: counts, failures, tests passed alone, a hang's stacks.
            TASK_LINES[$v]+="$(grep . "$LOG_DIR/task-suites-py$v-$loop.log" ||
                echo "no summary from task_suites.py on $loop")"$'\n'
        done
        printf '%s' "${TASK_LINES[$v]}" | sed 's/^/    /'
        if ((status == 0)); then
            record "py$v: task suites (asyncio, uvloop), beside the tests" $((SECONDS - suites_start)) ok
        else
            record "py$v: task suites (asyncio, uvloop), beside the tests" $((SECONDS - suites_start)) "FAILED (exit $status)"
            [[ ${RESULT[$v]} == PASSED ]] && RESULT[$v]="FAILED (task suites, exit $status)"
            FAILED=1
        fi
    fi
done

# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------
echo
echo "==== test-interpreters: timings ===="
printf '%s\n' "${PHASE_LINES[@]}"
printf '  %-46s %8s\n' "total" "$(fmt_secs $((SECONDS - TOTAL_START)))"
echo "==== test-interpreters: results ===="
for v in "${PYTHONS[@]}"; do
    printf 'python%s: %s -- %s\n' "$v" "${RESULT[$v]:-not run}" "${SUMMARY[$v]:-}"
    [[ -n ${TASK_LINES[$v]:-} ]] && printf '%s' "${TASK_LINES[$v]}" | sed 's/^/    /'
done
echo "logs: $LOG_DIR"
exit "$FAILED"
