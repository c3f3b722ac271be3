#!/usr/bin/env bash
# `cargo clippy -D warnings` on the core for the systems this machine cannot run: macOS on arm64
# and x86_64, so that what sits behind `cfg(not(target_os = "linux"))` is compiled and linted
# too; musl, whose libc bindings differ from glibc's (struct fields, deprecated aliases); and
# aarch64 Linux, whose C types differ (c_char is unsigned there). Cross-checking compiles C
# (ring, mimalloc) for the target: zig's clang does it, from the
# `ziglang` package in the wheel tools' venv (made here if it is not there).
#
#   scripts/clippy-targets.sh [TRIPLE...]
#       default: every target a wheel is built for but this machine's own: aarch64 Linux,
#       musl Linux, macOS on arm64 and x86_64
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
TOOLS="${FERRULE_WHEEL_TOOLS:-$REPO/target/wheel-tools}"
TARGET_DIR="${CARGO_TARGET_DIR:-$REPO/target}/cross"
TRIPLES=("$@")
((${#TRIPLES[@]})) || TRIPLES=(aarch64-unknown-linux-gnu x86_64-unknown-linux-musl aarch64-apple-darwin x86_64-apple-darwin)

if [[ ! -x $TOOLS/bin/python ]] || ! "$TOOLS/bin/python" -c 'import ziglang' 2>/dev/null; then
    [[ -x $TOOLS/bin/python ]] || python3 -m venv "$TOOLS"
    PIP_DISABLE_PIP_VERSION_CHECK=1 "$TOOLS/bin/python" -m pip install --quiet ziglang==0.17.1
fi

mkdir -p "$TARGET_DIR/zig-cc"
for triple in "${TRIPLES[@]}"; do
    rustup target list --installed | grep -qx "$triple" || rustup target add "$triple"
    arch="${triple%%-*}"
    case "$triple" in
        *-apple-darwin) zig_target="$arch-macos" ;;
        *-linux-musl) zig_target="$arch-linux-musl" ;;
        *-linux-gnu) zig_target="$arch-linux-gnu" ;;
        *) echo "clippy-targets: no zig target for $triple" >&2; exit 2 ;;
    esac
    # cc-rs passes clang's own --target, which zig's driver refuses; zig is told with -target.
    cc="$TARGET_DIR/zig-cc/$triple-cc"
    cat >"$cc" <<EOF2
#!/usr/bin/env bash
args=()
for a; do case \$a in --target=*) ;; *) args+=("\$a") ;; esac; done
exec "$TOOLS/bin/python" -m ziglang cc -target $zig_target "\${args[@]}"
EOF2
    chmod +x "$cc"
    echo "clippy-targets: $triple"
    # A musl target links statically unless told otherwise, and then makes no extension module.
    rustflags=""
    [[ $triple == *-musl ]] && rustflags="-C target-feature=-crt-static"
    triple_var="${triple//-/_}"
    env "CC_$triple_var=$cc" "CARGO_TARGET_${triple_var^^}_RUSTFLAGS=$rustflags" \
        PYO3_CROSS_PYTHON_VERSION=3.11 CARGO_TARGET_DIR="$TARGET_DIR" \
        cargo clippy --quiet -p ferrule -p ferrule-python --all-targets --target "$triple" -- -D warnings
done
