# shellcheck shell=bash disable=SC2034  # it sets variables for the scripts that source it
# What the h2load-driven scripts share (instructions.sh, syscalls.sh); sourced, not run.

# Reads the options both scripts take first, `[--ferrule-path DIR] [--h2]`: sets FERRULE_PATH,
# CLIENTS (h2load's connections: HTTP/1.1 -c50, or with --h2 HTTP/2 without TLS -c10 -m10, as
# the HTTP/2 hello benchmark) and OPTION_COUNT, how many arguments they took, for the caller to
# shift.
load_options() {
    FERRULE_PATH="" CLIENTS=(--h1 -c 50) OPTION_COUNT=0
    if [ "${1:-}" = "--ferrule-path" ]; then FERRULE_PATH=$2; OPTION_COUNT=2; shift 2; fi
    if [ "${1:-}" = "--h2" ]; then CLIENTS=(-c 10 -m 10); OPTION_COUNT=$((OPTION_COUNT + 1)); fi
}

# A port nothing listens on now: with a fixed one, two runs at once measured each other's server
# (the second ferrule failed to bind, and the first answered its load).
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

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
