#!/usr/bin/env bash
# A throwaway S3 server for tests: Garage, one node on 127.0.0.1. The S3
# object store's conformance suite and the distributed-mode tests run
# against it.
#
#   scripts/s3-test-server.sh start DIR   # configure (once), start; prints the env
#   scripts/s3-test-server.sh env DIR     # prints the env of the running server
#   scripts/s3-test-server.sh stop DIR    # stops it (the data stays in DIR)
#
# The printed env is shell code, one `export NAME='value'` a line:
#
#   KILN_TEST_S3=s3://kiln-test?endpoint=http://127.0.0.1:PORT&region=garage
#   AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY   (a key allowed on the bucket)
#
# so that `eval "$(scripts/s3-test-server.sh start /tmp/kiln-s3)"` sets up
# a shell for `cargo test -p kiln-storage --test s3_conformance`.
#
# DIR holds garage.toml (a fresh rpc_secret, free ports), the metadata
# (sqlite) and data directories, the log and the pid. The first start lays
# out the single-node cluster (zone dc1, 1 GB), creates the bucket
# `kiln-test` and the key `kiln-test-key`, and allows the key to read, write
# and own the bucket. Garage itself comes from `cargo install --locked
# garage` (scripts/setup-tests.sh does that when it is missing).
set -euo pipefail

readonly BUCKET=kiln-test
readonly KEY_NAME=kiln-test-key
readonly REGION=garage
readonly FIRST_PORT=13900

readonly SERVER_NAME=s3-test-server
# shellcheck source=lib/test-server.sh
source "$(dirname "$0")/lib/test-server.sh"

usage() {
    echo "usage: $0 start|stop|env DIR" >&2
    exit 2
}

g() {
    "$GARAGE" -c "$DIR/garage.toml" "$@"
}

is_running() {
    [[ -f $DIR/garage.pid ]] && kill -0 "$(cat "$DIR/garage.pid")" 2>/dev/null
}

write_config() {
    local rpc_port s3_port secret
    rpc_port=$(free_port "$FIRST_PORT")
    s3_port=$(free_port $((rpc_port + 1)))
    secret=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
    umask 077
    cat >"$DIR/garage.toml" <<EOF
# Written by scripts/s3-test-server.sh: a single-node Garage for tests.
metadata_dir = "$DIR/meta"
data_dir = "$DIR/data"
db_engine = "sqlite"
replication_factor = 1

rpc_bind_addr = "127.0.0.1:$rpc_port"
rpc_public_addr = "127.0.0.1:$rpc_port"
rpc_secret = "$secret"

[s3_api]
s3_region = "$REGION"
api_bind_addr = "127.0.0.1:$s3_port"
root_domain = ".s3.garage.localhost"
EOF
    echo "$s3_port" >"$DIR/s3_port"
}

start_server() {
    # Not through `g`: a function in the background runs in a subshell,
    # and $! would be the subshell's pid, not the server's.
    "$GARAGE" -c "$DIR/garage.toml" server >>"$DIR/garage.log" 2>&1 &
    echo $! >"$DIR/garage.pid"
    local i
    for ((i = 0; i < 100; i++)); do
        is_running || die "garage exited at start; see $DIR/garage.log"
        if g status >/dev/null 2>&1 && port_in_use "$(cat "$DIR/s3_port")"; then
            return 0
        fi
        sleep 0.2
    done
    die "garage did not answer within 20 s; see $DIR/garage.log"
}

# Lays out the cluster and creates the bucket and key; run once per DIR.
# The commands' output goes to DIR/init.log.
initialize() {
    local log=$DIR/init.log node_id key_id secret info
    step() {
        g "$@" >>"$log" 2>&1 || die "'garage $*' failed; see $log"
    }
    step status
    node_id=$(g node id -q 2>>"$log" | cut -d@ -f1)
    [[ -n $node_id ]] || die "could not read the node id (garage node id); see $log"
    step layout assign -z dc1 -c 1G "$node_id"
    step layout apply --version 1
    step bucket create "$BUCKET"
    step key create "$KEY_NAME"
    # Read back rather than parse `key create`, whose output may hide the
    # secret in some versions.
    info=$(g key info --show-secret "$KEY_NAME" 2>>"$log") ||
        die "'garage key info' failed; see $log"
    key_id=$(grep -oE 'GK[0-9a-f]+' <<<"$info" | head -n 1)
    secret=$(awk -F': *' 'tolower($1) ~ /secret key/ { print $2; exit }' <<<"$info" | tr -d ' ')
    [[ -n $key_id && -n $secret ]] || die "could not read the key from 'garage key info': $info"
    step bucket allow --read --write --owner "$BUCKET" --key "$KEY_NAME"
    {
        echo "export KILN_TEST_S3='s3://$BUCKET?endpoint=http://127.0.0.1:$(cat "$DIR/s3_port")&region=$REGION'"
        echo "export AWS_ACCESS_KEY_ID='$key_id'"
        echo "export AWS_SECRET_ACCESS_KEY='$secret'"
    } >"$DIR/env"
}

cmd_start() {
    GARAGE=$(find_installed garage) ||
        die "garage is not installed: run scripts/setup-tests.sh (cargo install --locked garage)"
    mkdir -p "$DIR" || die "could not create $DIR"
    DIR=$(cd "$DIR" && pwd)
    if is_running && [[ -f $DIR/env ]]; then
        cat "$DIR/env"
        return 0
    fi
    if [[ ! -f $DIR/env ]]; then
        # A directory left half-initialized by an earlier failure: start over.
        rm -rf "$DIR/meta" "$DIR/data" "$DIR/garage.toml" "$DIR/init.log"
        write_config
        start_server
        initialize
    else
        start_server
    fi
    cat "$DIR/env"
}

cmd_stop() {
    [[ -d $DIR ]] || die "$DIR does not exist"
    if is_running; then
        local pid i
        pid=$(cat "$DIR/garage.pid")
        kill "$pid"
        for ((i = 0; i < 50; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        rm -f "$DIR/garage.pid"
    else
        echo "s3-test-server: no server running in $DIR" >&2
    fi
}

cmd_env() {
    [[ -d $DIR ]] || die "$DIR does not exist"
    is_running && [[ -f $DIR/env ]] ||
        die "no server running in $DIR (start it with: $0 start $DIR)"
    cat "$DIR/env"
}

[[ $# -eq 2 ]] || usage
DIR=$2
case $1 in
start) cmd_start ;;
stop) cmd_stop ;;
env) cmd_env ;;
*) usage ;;
esac
