#!/usr/bin/env bash
# A throwaway Kafka-protocol broker for tests: tansu, in memory, on
# loopback. The Kafka bus tests and the distributed-mode tests run against
# it.
#
#   scripts/kafka-test-server.sh start DIR   # start; prints the bus URL
#   scripts/kafka-test-server.sh url DIR     # prints the URL of the running broker
#   scripts/kafka-test-server.sh stop DIR    # stops it (its data was in memory)
#
# Started again in the same DIR, the broker takes its old port if it is
# still free (with no data: it was in memory).
#
# The broker keeps its pid, port and log under DIR and listens on
# 127.0.0.1 only, on a free port. It starts with the topic `kiln-ingest`
# (8 partitions); tests that want a topic of their own name it in the URL
# and the bus creates it. The URL is `kafka://127.0.0.1:PORT`, the form
# KILN_TEST_KAFKA takes:
#
#   export KILN_TEST_KAFKA="$(scripts/kafka-test-server.sh start /tmp/kiln-kafka)"
#
# tansu comes from `cargo install --locked tansu --features dynostore`
# (scripts/setup-tests.sh runs it when tansu is missing; the in-memory storage
# engine needs the dynostore feature).
set -euo pipefail

readonly FIRST_PORT=19092
readonly TOPIC=kiln-ingest
readonly PARTITIONS=8

readonly SERVER_NAME=kafka-test-server
# shellcheck source=lib/test-server.sh
source "$(dirname "$0")/lib/test-server.sh"

usage() {
    echo "usage: $0 start|stop|url DIR" >&2
    exit 2
}

is_running() {
    [[ -f $DIR/pid && -f $DIR/port ]] && kill -0 "$(cat "$DIR/pid")" 2>/dev/null &&
        port_in_use "$(cat "$DIR/port")"
}

cmd_start() {
    local tansu
    tansu=$(find_installed tansu) ||
        die "tansu is not installed: cargo install --locked tansu --features dynostore (scripts/setup-tests.sh does it)"
    mkdir -p "$DIR" || die "could not create $DIR"
    DIR=$(cd "$DIR" && pwd)
    if is_running; then
        echo "kafka://127.0.0.1:$(cat "$DIR/port")"
        return 0
    fi

    # Another process may take the free port before tansu binds it: try a
    # few times, each with a port found free just before. A broker started
    # again in the same DIR first tries the port it had, so that clients
    # holding its URL find it again (the agent's Kafka outage test).
    local port attempt pid waited
    for attempt in 1 2 3; do
        if [[ $attempt -eq 1 && -f $DIR/port ]] && ! port_in_use "$(cat "$DIR/port")"; then
            port=$(cat "$DIR/port")
        else
            port=$(free_port "$FIRST_PORT")
        fi
        local listener="tcp://127.0.0.1:$port"
        # setsid: the broker outlives this script and the shell that ran it.
        setsid "$tansu" broker \
            --listener-url "$listener" \
            --advertised-listener-url "$listener" \
            --storage-engine memory://tansu/ \
            >"$DIR/tansu.log" 2>&1 </dev/null &
        pid=$!
        for ((waited = 0; waited < 150; waited++)); do
            port_in_use "$port" && break
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.2
        done
        if kill -0 "$pid" 2>/dev/null && port_in_use "$port"; then
            break
        fi
        kill "$pid" 2>/dev/null || true
        [[ $attempt -lt 3 ]] || die "tansu did not start; see $DIR/tansu.log"
        echo "kafka-test-server: start on port $port failed, trying another port" >&2
    done
    echo "$pid" >"$DIR/pid"
    echo "$port" >"$DIR/port"

    "$tansu" topic create --broker "tcp://127.0.0.1:$port" --partitions "$PARTITIONS" "$TOPIC" \
        >>"$DIR/tansu.log" 2>&1 || die "could not create topic $TOPIC; see $DIR/tansu.log"
    echo "kafka://127.0.0.1:$port"
}

cmd_stop() {
    [[ -d $DIR ]] || die "$DIR does not exist"
    if [[ -f $DIR/pid ]] && kill -0 "$(cat "$DIR/pid")" 2>/dev/null; then
        local pid
        pid=$(cat "$DIR/pid")
        kill "$pid"
        for _ in $(seq 50); do
            kill -0 "$pid" 2>/dev/null || break
            sleep 0.1
        done
        kill -9 "$pid" 2>/dev/null || true
        rm -f "$DIR/pid"
    else
        echo "kafka-test-server: no broker running in $DIR" >&2
    fi
}

cmd_url() {
    [[ -d $DIR ]] || die "$DIR does not exist"
    DIR=$(cd "$DIR" && pwd)
    is_running || die "no broker running in $DIR (start it with: $0 start $DIR)"
    echo "kafka://127.0.0.1:$(cat "$DIR/port")"
}

[[ $# -eq 2 ]] || usage
DIR=$2
case $1 in
start) cmd_start ;;
stop) cmd_stop ;;
url) cmd_url ;;
*) usage ;;
esac
