# Sourced by the scripts that test ferrule in a Debian chroot (test-interpreters.sh,
# test-arm64.sh): mounting what the tests need inside it, and taking it down again. The caller
# sets CHROOT and defines die().
# shellcheck shell=bash

MOUNTED=()
mounts_under() { # mount points at or below $1, deepest first
    awk -v root="$1" '{ gsub(/\\040/, " ", $2); if ($2 == root || index($2, root "/") == 1) print $2 }' \
        /proc/self/mounts | sort -r
}
mount_chroot() {
    local dev
    if ! mountpoint -q "$CHROOT/proc"; then
        mount -t proc proc "$CHROOT/proc" || die "cannot mount proc in the chroot"
        MOUNTED+=("$CHROOT/proc")
    fi
    mkdir -p "$CHROOT/dev/shm"
    if ! mountpoint -q "$CHROOT/dev/shm"; then
        mount -t tmpfs -o mode=1777,nosuid,nodev tmpfs "$CHROOT/dev/shm" || die "cannot mount /dev/shm in the chroot"
        MOUNTED+=("$CHROOT/dev/shm")
    fi
    # Pseudo-terminals (tests run the server with its stderr on one): a devpts instance of the
    # chroot's own (newinstance: nothing shared with the host's), reached through /dev/ptmx.
    mkdir -p "$CHROOT/dev/pts"
    if ! mountpoint -q "$CHROOT/dev/pts"; then
        mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$CHROOT/dev/pts" \
            || die "cannot mount devpts in the chroot"
        MOUNTED+=("$CHROOT/dev/pts")
    fi
    if [[ ! -L $CHROOT/dev/ptmx ]]; then
        rm -f "$CHROOT/dev/ptmx"
        ln -s pts/ptmx "$CHROOT/dev/ptmx"
    fi
    # debootstrap normally creates the device nodes; bind single nodes from the host if not.
    # (Never bind the whole /dev: mounts made under it could propagate back to the host.)
    for dev in null zero full random urandom tty; do
        if [[ ! -c $CHROOT/dev/$dev ]] && [[ -c /dev/$dev ]]; then
            rm -f "$CHROOT/dev/$dev"
            touch "$CHROOT/dev/$dev"
            mount --bind "/dev/$dev" "$CHROOT/dev/$dev" || die "cannot bind /dev/$dev"
            MOUNTED+=("$CHROOT/dev/$dev")
        fi
    done
}
unmount_chroot() {
    local m i
    for ((i = ${#MOUNTED[@]} - 1; i >= 0; i--)); do
        m="${MOUNTED[i]}"
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || echo "warning: could not unmount $m" >&2
    done
    MOUNTED=()
}

wipe_chroot() {
    local m
    # Anything still mounted below the chroot (e.g. left by a killed run) goes first, so that
    # rm never descends into a host filesystem.
    for m in $(mounts_under "$CHROOT"); do
        umount "$m" 2>/dev/null || umount -l "$m" || die "cannot unmount $m"
    done
    [[ -z $(mounts_under "$CHROOT") ]] || die "something is still mounted under $CHROOT"
    rm -rf --one-file-system "$CHROOT"
}

host_mirror() {
    local uri=""
    if [[ -r /etc/apt/sources.list.d/debian.sources ]]; then
        uri="$(awk 'tolower($1) == "uris:" { print $2; exit }' /etc/apt/sources.list.d/debian.sources)"
    fi
    if [[ -z $uri ]] && [[ -r /etc/apt/sources.list ]]; then
        uri="$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' \
            /etc/apt/sources.list)"
    fi
    # The security archive is no use for sid.
    [[ -n $uri && $uri != *debian-security* ]] && echo "$uri" || echo http://deb.debian.org/debian
}
