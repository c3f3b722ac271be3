# shellcheck shell=bash
# What the h2load-driven scripts share (instructions.sh, syscalls.sh); sourced, not run.

# Waits until URL answers, trying TRIES times PAUSE seconds apart.
wait_serving() {
    local url=$1 tries=$2 pause=$3
    for _ in $(seq "$tries"); do
        curl -s -o /dev/null "$url" && return
        sleep "$pause"
    done
}

# Sets BODY to h2load's arguments for TARGET: /echo gets a 10 KiB POST body written in DIR
# (h2load POSTs a file's contents), any other path none.
body_for() {
    local target=$1 dir=$2
    BODY=()
    if [ "$target" = "/echo" ]; then
        head -c 10240 /dev/zero | tr '\0' x > "$dir/body"
        BODY=(-d "$dir/body")
    fi
}
