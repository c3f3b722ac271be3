#!/usr/bin/env bash
# Build a CPython 3.11 linked against musl, as Alpine's is, so that a musllinux wheel can be
# installed and served on this (glibc) machine: the interpreter and its zlib, libffi and OpenSSL
# are compiled from Debian's source packages with Debian's musl-gcc, into a prefix kept between
# runs (about 10 minutes on 2 cores, once).
#
#   scripts/musl-python.sh          prints the interpreter's path (building it if need be)
#
# Needs root (apt-get) and Debian's mirror, for the musl-tools package and the sources.
set -euo pipefail

PREFIX="${FERRULE_MUSL_PYTHON:-/var/cache/ferrule-musl-python}"
PYTHON="$PREFIX/bin/python3.11"
die() { echo "musl-python: $*" >&2; exit 2; }
note() { printf '[%s] musl-python: %s\n' "$(date +%T)" "$*" >&2; }

# One build at a time (CI starts one early, in the background): a second waits for the first.
mkdir -p "$(dirname "$PREFIX")"
exec 9>"$PREFIX.lock"
flock -n 9 || { note "another build of $PREFIX is under way; waiting for it"; flock 9; }

# Built already, and it runs on musl: nothing to do.
if [[ -x $PYTHON ]] && "$PYTHON" -c 'import platform, ssl, sys; sys.exit(platform.libc_ver()[0] == "glibc")' 2>/dev/null; then
    echo "$PYTHON"
    exit 0
fi
[[ $EUID -eq 0 ]] || die "must run as root (apt-get)"
start=$SECONDS
if ! command -v musl-gcc >/dev/null; then
    note "installing musl-tools"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq musl-tools >/dev/null
fi

SRC="$PREFIX.src"
rm -rf "$SRC" "$PREFIX"
mkdir -p "$SRC"
# The sources of the packages the host's apt knows (a deb-src entry for its release, for this
# run only).
release="$(. /etc/os-release && echo "$VERSION_CODENAME")"
sources=/etc/apt/sources.list.d/ferrule-musl-python-src.sources
trap 'rm -f "$sources"' EXIT
cat >"$sources" <<EOF2
Types: deb-src
URIs: http://deb.debian.org/debian
Suites: $release
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF2
apt-get update -qq
(cd "$SRC" && apt-get source -qq --download-only python3.11 zlib libffi openssl >/dev/null 2>&1) ||
    die "apt-get source failed (is the mirror reachable?)"
rm -f "$sources"
apt-get update -qq >/dev/null 2>&1 || true

# musl-gcc is gcc with musl's specs, and answers gcc's -print-multiarch (x86_64-linux-gnu), which
# CPython's configure refuses beside musl's triplet, and from which its setup.py would add glibc's
# include dir: this wrapper leaves that question unanswered.
mkdir -p "$SRC/bin"
cat >"$SRC/bin/musl-cc" <<'EOF2'
#!/bin/sh
case "$1" in -print-multiarch | --print-multiarch) exit 0 ;; esac
exec musl-gcc "$@"
EOF2
# CPython's setup.py adds the host's multiarch include dir (glibc's) when dpkg-architecture names
# it: here it names none. pkg-config sees only what is built here.
printf '#!/bin/sh\nexit 1\n' >"$SRC/bin/dpkg-architecture"
chmod +x "$SRC/bin/musl-cc" "$SRC/bin/dpkg-architecture"
export CC="$SRC/bin/musl-cc" PATH="$SRC/bin:$PATH"
export PKG_CONFIG_LIBDIR="$PREFIX/lib/pkgconfig:$PREFIX/lib64/pkgconfig"
# musl-gcc leaves the host's /usr/include out, and with it the kernel's headers (linux/*.h,
# asm/*.h), which libffi and CPython include: linked in, as Alpine's linux-headers has them.
mkdir -p "$PREFIX/include"
ln -sfn /usr/include/linux "$PREFIX/include/linux"
ln -sfn /usr/include/asm-generic "$PREFIX/include/asm-generic"
ln -sfn "/usr/include/$(gcc -dumpmachine)/asm" "$PREFIX/include/asm"
jobs="$(nproc)"
orig_tarball() { # orig_tarball GLOB: upstream's tarball in SRC (not its .asc signature)
    # shellcheck disable=SC2086 # GLOB is a glob
    ls "$SRC"/$1 | grep -v '\.asc$' | head -n 1
}
build() { # build NAME ORIG-TARBALL-GLOB CONFIGURE-ARGS...: unpack upstream's tarball, install to PREFIX
    local name="$1" tarball
    tarball="$(orig_tarball "$2")"
    shift 2
    note "building $name"
    mkdir -p "$SRC/$name"
    tar -C "$SRC/$name" --strip-components=1 -xf "$tarball"
    (cd "$SRC/$name" && ./configure --prefix="$PREFIX" "$@" >"$SRC/$name.log" 2>&1 &&
        make -j"$jobs" >>"$SRC/$name.log" 2>&1 && make install >>"$SRC/$name.log" 2>&1) ||
        { tail -n 30 "$SRC/$name.log" >&2; die "$name failed to build (log: $SRC/$name.log)"; }
}
CFLAGS="-fPIC -O2" build zlib 'zlib_*.orig.tar.*' --static
CFLAGS="-fPIC -I$PREFIX/include" build libffi 'libffi_*.orig.tar.*' --disable-shared --disable-docs
# OpenSSL has its own configure script, and its `make install` writes the manuals too.
note "building openssl"
mkdir -p "$SRC/openssl"
tar -C "$SRC/openssl" --strip-components=1 -xf "$(orig_tarball 'openssl_*.orig.tar.*')"
(cd "$SRC/openssl" && ./config --prefix="$PREFIX" --libdir=lib no-shared no-tests \
    -I"$PREFIX/include" >"$SRC/openssl.log" 2>&1 &&
    make -j"$jobs" build_libs >>"$SRC/openssl.log" 2>&1 && make install_dev >>"$SRC/openssl.log" 2>&1) ||
    { tail -n 30 "$SRC/openssl.log" >&2; die "openssl failed to build (log: $SRC/openssl.log)"; }
CPPFLAGS="-I$PREFIX/include" LDFLAGS="-L$PREFIX/lib -L$PREFIX/lib64" \
    build python 'python3.11_*.orig.tar.*' --with-ensurepip=no --disable-test-modules \
    --with-openssl="$PREFIX"
# pip for venvs, from the wheel CPython bundles (ensurepip needs no network).
"$PYTHON" -m ensurepip --default-pip >/dev/null
"$PYTHON" -c 'import platform, zlib, ctypes, ssl, asyncio; assert platform.libc_ver()[0] != "glibc"' ||
    die "the interpreter built but is not a musl one with zlib, ctypes and ssl"
rm -rf "$SRC"
note "built in $((SECONDS - start)) s"
echo "$PYTHON"
