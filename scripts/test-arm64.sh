#!/usr/bin/env bash
# Prove the aarch64 Linux wheels on an arm64 Debian under emulation (qemu-user through
# binfmt_misc): each wheel is installed alone with pip into a fresh venv of the chroot's own
# CPython, which has no compiler, and serves the example app (scripts/check_wheel.py); then the
# smoke tests run against it (`pytest -m smoke`: the bridge tests, the example app over
# HTTP/1.1, HTTP/2 and a WebSocket, workers and the metrics region they share).
#
# The chroot is Debian bookworm (CPython 3.11) by default, or sid (3.13 and 3.14) with
# --suite sid. It lives outside the checkout and is reused between runs, with its pip cache.
# Needs root (debootstrap, chroot, mount, binfmt_misc) and the Debian mirror and PyPI.
# Run with --help for options.
# shellcheck disable=SC2317 # functions run through traps look unreachable
set -euo pipefail

usage() {
    cat <<EOF2
Usage: scripts/test-arm64.sh [options]

Install each aarch64 manylinux wheel in DIR for the chroot's interpreters, alone and with no
compiler at hand, into an arm64 Debian chroot run under qemu; serve the example app from it;
then run the smoke tests (pytest -m smoke) against it. Must run as root.

Options:
  --wheels DIR   where the wheels are (default dist)
  --suite NAME   bookworm (CPython 3.11, the default) or sid (3.13 and 3.14)
  --chroot DIR   the chroot (default /var/cache/ferrule-arm64-SUITE)
  --no-tests     stop after check_wheel.py
  --no-check     skip check_wheel.py (scripts/build-wheels.sh has run it on these wheels)
  --prepare      only build the chroot (if need be) and exit: no wheels needed
  -h, --help     show this help

Environment:
  FERRULE_ARM64_TEST_TIMEOUT  seconds allowed for one interpreter's smoke tests (default 1800)
  FERRULE_HOST_CA             CA bundle copied into the chroot
                              (default /etc/ssl/certs/ca-certificates.crt)
EOF2
}
die() { echo "test-arm64: $*" >&2; exit 2; }
note() { printf '[%s] test-arm64: %s\n' "$(date +%T)" "$*"; }

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WHEEL_DIR="$REPO/dist"
SUITE=bookworm
CHROOT=""
NO_TESTS=0
NO_CHECK=0
PREPARE=0
TEST_TIMEOUT="${FERRULE_ARM64_TEST_TIMEOUT:-1800}"
while (($#)); do
    case "$1" in
        --wheels) (($# >= 2)) || die "--wheels needs a directory"; WHEEL_DIR="$2"; shift 2 ;;
        --suite) (($# >= 2)) || die "--suite needs a name"; SUITE="$2"; shift 2 ;;
        --chroot) (($# >= 2)) || die "--chroot needs a directory"; CHROOT="$2"; shift 2 ;;
        --no-tests) NO_TESTS=1; shift ;;
        --no-check) NO_CHECK=1; shift ;;
        --prepare) PREPARE=1; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done
case "$SUITE" in
    bookworm) PYTHONS=(3.11) ;;
    sid) PYTHONS=(3.13 3.14) ;;
    *) die "--suite is bookworm or sid, not $SUITE" ;;
esac
CHROOT="${CHROOT:-/var/cache/ferrule-arm64-$SUITE}"
[[ $EUID -eq 0 ]] || die "must run as root (debootstrap, chroot, mount and binfmt_misc need it)"
[[ $CHROOT == /* && $CHROOT != / ]] || die "the chroot path must be absolute: $CHROOT"
if ((!PREPARE)); then
    [[ -d $WHEEL_DIR ]] || die "no wheel directory $WHEEL_DIR"
    WHEEL_DIR="$(cd "$WHEEL_DIR" && pwd)"
fi

# What the smoke tests import, beside ferrule (the rest of the test extras stays out: under
# emulation every install is slow, and no compiler is there to build one from source).
TEST_DEPS=(pytest pytest-timeout pytest-xdist httpx h2 websockets uvloop cryptography
    prometheus-client anyio sniffio)
# They are installed once into a venv kept in the chroot (named by this list), and each run
# puts only the new wheel into it: under emulation pip takes a minute over them. That the
# wheel installs alone into a fresh venv is check_wheel.py's to prove.
DEPS_KEY=$(printf '%s\n' "${TEST_DEPS[@]}" | sha1sum | cut -c1-12)
PACKAGES="python3-venv,ca-certificates,procps"
case "$SUITE" in
    bookworm) PACKAGES="python3,$PACKAGES" ;;
    sid) PACKAGES="python3.13-venv,python3.14-venv,$PACKAGES" ;;
esac

# One run at a time per chroot (each lays /build anew).
mkdir -p "$(dirname "$CHROOT")"
exec 9>"$CHROOT.lock"
flock -n 9 || { note "another run is using $CHROOT; waiting for it"; flock 9; }

# shellcheck source=scripts/chroot.sh
source "$REPO/scripts/chroot.sh"
trap 'status=$?; unmount_chroot; exit $status' EXIT

# The emulator: qemu-user-static registers itself with binfmt_misc, which must be mounted.
start=$SECONDS
if ! command -v qemu-aarch64-static >/dev/null || ! command -v debootstrap >/dev/null; then
    note "installing qemu-user-static and debootstrap"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-user-static binfmt-support debootstrap >/dev/null
fi
mountpoint -q /proc/sys/fs/binfmt_misc || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
[[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]] || update-binfmts --enable qemu-aarch64
[[ -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]] || die "qemu-aarch64 is not registered with binfmt_misc"

if [[ ! -f $CHROOT/.ferrule-ready ]] || [[ "$(cat "$CHROOT/.ferrule-ready")" != "$PACKAGES" ]]; then
    [[ -e $CHROOT ]] && wipe_chroot
    note "debootstrap --arch arm64 $SUITE into $CHROOT (minutes under emulation)"
    debootstrap --arch arm64 --variant=minbase --include="$PACKAGES" "$SUITE" "$CHROOT" "$(host_mirror)" \
        >/tmp/ferrule-arm64-debootstrap.log 2>&1 || {
        tail -n 20 /tmp/ferrule-arm64-debootstrap.log
        die "debootstrap failed"
    }
    echo "$PACKAGES" >"$CHROOT/.ferrule-ready"
fi
cp -L /etc/resolv.conf "$CHROOT/etc/resolv.conf"
# The host's CA bundle: pip in the chroot trusts whatever the host trusts.
cp -L "${FERRULE_HOST_CA:-/etc/ssl/certs/ca-certificates.crt}" "$CHROOT/etc/ssl/ferrule-host-ca.crt"
mount_chroot
note "chroot ready in $((SECONDS - start)) s: $(chroot "$CHROOT" uname -m), $(chroot "$CHROOT" /bin/sh -c 'ls /usr/bin/python3.* | tr "\n" " "')"
if chroot "$CHROOT" /bin/sh -c 'command -v cc gcc clang rustc' >/dev/null 2>&1; then
    die "the chroot has a compiler: a wheel's install would not prove it needs none"
fi
((PREPARE)) && exit 0

# What the tests need of the checkout: the tests, the example app, check_wheel.py, the pytest
# settings. Fresh every run.
rm -rf "$CHROOT/build"
mkdir -p "$CHROOT/build/src" "$CHROOT/build/wheels"
git -c safe.directory='*' -C "$REPO" ls-files -z --cached --others --exclude-standard -- \
    tests examples scripts/check_wheel.py pyproject.toml README.md |
    tar -C "$REPO" --null -T - -cf - | tar -C "$CHROOT/build/src" -xmf -

CHROOT_ENV=(HOME=/root LANG=C.UTF-8 TERM=dumb PATH=/usr/local/bin:/usr/bin:/bin
    PIP_CACHE_DIR=/var/cache/ferrule-pip PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_PROGRESS_BAR=off
    PIP_CERT=/etc/ssl/ferrule-host-ca.crt SSL_CERT_FILE=/etc/ssl/ferrule-host-ca.crt)
in_chroot() { # in_chroot SCRIPT
    chroot "$CHROOT" /usr/bin/env -i "${CHROOT_ENV[@]}" /bin/bash -euo pipefail -c "$1"
}

FAILED=0
RESULTS=()
for v in "${PYTHONS[@]}"; do
    tag="cp${v/./}"
    wheels=("$WHEEL_DIR"/ferrule-*-"$tag-$tag"-manylinux*_aarch64.whl)
    [[ -f ${wheels[0]} ]] || die "no $tag aarch64 manylinux wheel in $WHEEL_DIR"
    wheel="${wheels[0]##*/}"
    cp "${wheels[0]}" "$CHROOT/build/wheels/"
    start=$SECONDS
    note "python$v: check_wheel.py $wheel"
    if ((NO_CHECK)); then
        note "python$v: skipped (--no-check)"
    elif ! in_chroot "cd /build/src && python$v scripts/check_wheel.py --stripped /build/wheels/$wheel"; then
        RESULTS+=("python$v: $wheel FAILED check_wheel.py")
        FAILED=1
        continue
    fi
    ((NO_CHECK)) || RESULTS+=("python$v: $wheel installs alone and serves the example app ($((SECONDS - start)) s)")
    ((NO_TESTS)) && continue
    start=$SECONDS
    note "python$v: the smoke tests (pytest -m smoke)"
    status=0
    timeout --kill-after=30 "$TEST_TIMEOUT" chroot "$CHROOT" /usr/bin/env -i "${CHROOT_ENV[@]}" \
        /bin/bash -euo pipefail -c "
            venv=/opt/ferrule-smoke-$v-$DEPS_KEY
            if [ ! -e \$venv/.complete ]; then
                rm -rf /opt/ferrule-smoke-$v-*
                python$v -m venv \$venv
                \$venv/bin/pip install -q ${TEST_DEPS[*]}
                touch \$venv/.complete
            fi
            \$venv/bin/pip uninstall -q -y ferrule 2>/dev/null || true
            \$venv/bin/pip install -q /build/wheels/$wheel
            cd /build/src
            files=\$(grep -rlE 'pytest.mark.smoke|pytestmark = pytest.mark.smoke' tests --include='test_*.py')
            exec \$venv/bin/python -m pytest -m smoke -q -p no:cacheprovider --timeout 600 \
                -n 2 tests/bridge \$files" 2>&1 | tee "/tmp/ferrule-arm64-tests-py$v.log" || status=$?
    summary="$(grep -E '(passed|failed).* in [0-9.]+s' "/tmp/ferrule-arm64-tests-py$v.log" | tail -n 1)"
    if ((status == 0)); then
        RESULTS+=("python$v: smoke tests: ${summary:-?} (with the install, $((SECONDS - start)) s)")
    else
        RESULTS+=("python$v: smoke tests FAILED (exit $status): ${summary:-see /tmp/ferrule-arm64-tests-py$v.log}")
        FAILED=1
    fi
done

echo "==== test-arm64 ($SUITE, $(chroot "$CHROOT" uname -m) under qemu) ===="
printf '%s\n' "${RESULTS[@]}"
exit "$FAILED"
