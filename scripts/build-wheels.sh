#!/usr/bin/env bash
# Build ferrule's release artefacts and prove each one: manylinux_2_17 x86_64 wheels for CPython
# 3.11, 3.12, 3.13 and 3.14, and an sdist, into dist/.
#
# The wheels: `maturin build --release --strip --zig --compatibility manylinux2014`, with maturin
# and zig (the `ziglang` package) in a venv of their own. zig links against glibc 2.17's symbol
# versions, so no container image is needed; and since a zig build is a cross build to maturin,
# an interpreter it cannot run comes from its bundled sysconfig. Each interpreter needs its own
# compile of ferrule and its fat-LTO link, both on one thread, so two maturin runs (each with
# its own cargo target dir, and half of the interpreters) share the work by default.
# The proof, for each wheel: `auditwheel show` finds it consistent with manylinux_2_17_x86_64
# (no glibc symbol newer than 2.17, no library outside the manylinux set); `twine check --strict`
# passes and every classifier is a valid one; and scripts/check_wheel.py installs it alone into a
# fresh venv of its interpreter, imports it and serves the example app from it: 3.11 (and 3.12,
# where an interpreter is found) on this machine, 3.13 and 3.14 in the Debian sid chroot of
# scripts/test-interpreters.sh (as root). A wheel no interpreter could check is moved to
# target/untested-wheels/, not left in dist/ beside the tested ones. The sdist is installed into
# a fresh venv, which builds it from source with this machine's cargo, and serves the same way.
# Run with --help for options.
set -euo pipefail

ALL_PYTHONS=(3.11 3.12 3.13 3.14)
CHROOT_PYTHONS=(3.13 3.14) # the interpreters scripts/test-interpreters.sh has
POLICY=manylinux_2_17_x86_64
# The tools, pinned to the versions this script was proven with.
TOOLS_REQUIREMENTS=(maturin==1.16.0 ziglang==0.17.1 auditwheel==6.8.2 twine==7.0.0
    trove-classifiers==2026.9.21.13)

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

Build release wheels tagged $POLICY for CPython ${ALL_PYTHONS[*]} and an sdist into
dist/, then check each: auditwheel, twine check, and an install into a fresh venv of its
interpreter that serves the example app. Exits non-zero if any build or check fails.

Options:
  --python X.Y        build and check only this interpreter's wheel (repeatable)
  --out DIR           where the artefacts go          (env FERRULE_DIST, default dist)
  --jobs N            maturin runs at once, each building some of the wheels (default 2)
  --target-dir DIR    where the cargo target dirs go: DIR/wheels-1 .. DIR/wheels-N and
                      DIR/sdist (env FERRULE_WHEELS_TARGET, default target/manylinux)
  --sdist-target-dir DIR
                      cargo target dir for the build from the sdist (env FERRULE_SDIST_TARGET);
                      target/, where \`pip install .\` builds, has the same dependencies compiled
  --no-chroot         do not check the ${CHROOT_PYTHONS[*]} wheels in the sid chroot (which needs
                      root); a host interpreter checks them if there is one
  --no-sdist-check    build the sdist but do not build and serve it from source
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
USE_CHROOT=1
SDIST_CHECK=1
BUILD=1
JOBS=2
while (($#)); do
    case "$1" in
        --python) (($# >= 2)) || die "--python needs a version"; PYTHONS+=("${2#python}"); shift 2 ;;
        --python=*) v="${1#--python=}"; PYTHONS+=("${v#python}"); shift ;;
        --out) (($# >= 2)) || die "--out needs a directory"; OUT="$2"; shift 2 ;;
        --target-dir) (($# >= 2)) || die "--target-dir needs a directory"; TARGET="$2"; shift 2 ;;
        --sdist-target-dir) (($# >= 2)) || die "--sdist-target-dir needs a directory"; SDIST_TARGET="$2"; shift 2 ;;
        --no-chroot) USE_CHROOT=0; shift ;;
        --no-sdist-check) SDIST_CHECK=0; shift ;;
        --check-only) BUILD=0; shift ;;
        --jobs) (($# >= 2)) || die "--jobs needs a number"; JOBS="$2"; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; die "unknown argument: $1" ;;
    esac
done
((${#PYTHONS[@]})) || PYTHONS=("${ALL_PYTHONS[@]}")
[[ $JOBS =~ ^[1-9][0-9]*$ ]] || die "--jobs takes a positive number, not $JOBS"
((JOBS <= ${#PYTHONS[@]})) || JOBS=${#PYTHONS[@]}
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
    rm -f "$OUT"/ferrule-*.whl "$OUT"/ferrule-*.tar.gz
    rm -rf "$UNTESTED"
    build_wheels() { # build_wheels JOB X.Y...: one maturin run, its output lines tagged
        local job="$1" v args=()
        shift
        for v; do args+=(-i "python$v"); done
        CARGO_TARGET_DIR="$TARGET/wheels-$job" maturin build --release --strip --zig \
            --compatibility manylinux2014 "${args[@]}" --out "$OUT" 2>&1 | sed -u "s/^/[$*] /"
    }
    build_all() { # JOBS maturin runs at once, the interpreters dealt out among them
        local job i pids=() status=0 group
        for ((job = 1; job <= JOBS; job++)); do
            group=()
            for ((i = job - 1; i < ${#PYTHONS[@]}; i += JOBS)); do group+=("${PYTHONS[i]}"); done
            note "maturin run $job: ${group[*]} (cargo target dir: $TARGET/wheels-$job)"
            build_wheels "$job" "${group[@]}" &
            pids+=($!)
        done
        for i in "${pids[@]}"; do wait "$i" || status=1; done
        return "$status"
    }
    timed "maturin build (${#PYTHONS[@]} wheels, $JOBS at once)" build_all
    timed "maturin sdist" maturin sdist --out "$OUT"
fi

shopt -s nullglob
WHEELS=()
for v in "${PYTHONS[@]}"; do
    found=("$OUT"/ferrule-*-"cp${v/./}-cp${v/./}"-*.whl)
    ((${#found[@]} == 1)) || die "expected one cp${v/./} wheel in $OUT, found ${#found[@]}"
    WHEELS+=("${found[0]}")
done
SDISTS=("$OUT"/ferrule-*.tar.gz)
shopt -u nullglob
((${#SDISTS[@]} == 1)) || die "expected one sdist in $OUT, found ${#SDISTS[@]}"
SDIST="${SDISTS[0]}"

# ---------------------------------------------------------------------------------------------
# Checks
# ---------------------------------------------------------------------------------------------
FAILED=0
declare -A AUDIT TESTED

# auditwheel: the policy every wheel must be consistent with.
audit() {
    local wheel out verdict
    for wheel in "${WHEELS[@]}"; do
        out="$(auditwheel show "$wheel" 2>&1)" || true
        verdict="$(tr -s ' \n' ' ' <<<"$out" |
            sed -n 's/.*is consistent with the following platform tag: "\([^"]*\)".*/\1/p')"
        if [[ $verdict == "$POLICY" ]]; then
            AUDIT[$wheel]="$verdict"
        else
            AUDIT[$wheel]="FAILED (${verdict:-no verdict})"
            echo "$out" >&2
            FAILED=1
        fi
    done
}
note "auditwheel show"
timed "auditwheel show" audit

# twine: the metadata and the README render as an index shows them; classifiers exist.
check_metadata() {
    twine --no-color check --strict "${WHEELS[@]}" "$SDIST" &&
        "$TOOLS/bin/python" - "$SDIST" <<'EOF'
import sys, tarfile
from email.parser import Parser
from trove_classifiers import classifiers

with tarfile.open(sys.argv[1]) as tar:
    member = next(m for m in tar.getmembers() if m.name.count("/") == 1 and m.name.endswith("/PKG-INFO"))
    metadata = Parser().parsestr(tar.extractfile(member).read().decode())
unknown = [c for c in metadata.get_all("Classifier", []) if c not in classifiers]
if unknown:
    sys.exit(f"unknown classifiers (an index rejects the upload): {unknown}")
print(f"{len(metadata.get_all('Classifier', []))} classifiers, all known")
EOF
}
note "twine check --strict, classifiers"
timed "twine check, classifiers" check_metadata || FAILED=1

# Each wheel into a fresh venv of its interpreter.
wheel_for() { # wheel_for X.Y: the wheel built for that interpreter
    local w tag="cp${1/./}"
    for w in "${WHEELS[@]}"; do
        if [[ ${w##*/} == *"-$tag-$tag-"* ]]; then echo "$w"; fi
    done
}
chroot_pythons=()
chroot_tags=()
for v in "${PYTHONS[@]}"; do
    wheel="$(wheel_for "$v")"
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
            TESTED[$(wheel_for "$v")]="installs and serves under ${version##* } (sid chroot)"
        else
            TESTED[$(wheel_for "$v")]="FAILED in the sid chroot (see above)"
            FAILED=1
        fi
    done
fi

# The sdist: built from source by pip in a fresh venv, with cargo; the target dir is kept so that
# a second run only recompiles ferrule's own crates.
if ((SDIST_CHECK)); then
    py="$(host_python 3.11)"
    [[ -n $py ]] || py="$(command -v python3)"
    note "check_wheel.py on the sdist with $py (builds it from source; cargo target dir: $SDIST_TARGET)"
    if timed "check sdist (pip builds it, release)" \
        env CARGO_TARGET_DIR="$SDIST_TARGET" "$py" scripts/check_wheel.py "$SDIST"; then
        TESTED[$SDIST]="builds from source and serves under $("$py" -c 'import platform; print(platform.python_version())') (host)"
    else
        TESTED[$SDIST]="FAILED to build from source or serve"
        FAILED=1
    fi
else
    TESTED[$SDIST]="not built from source (--no-sdist-check)"
fi

# A wheel nothing could install is not presented beside the tested ones.
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
for f in "${WHEELS[@]}" "$SDIST"; do
    [[ -f $f ]] || f2="$UNTESTED/${f##*/}"
    size="$(stat -c %s "${f2:-$f}")"
    unset f2
    printf '%s\n    %s MB; auditwheel: %s; %s\n' "${f##*/}" "$(awk -v s="$size" 'BEGIN { printf "%.2f", s / 1e6 }')" \
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
