#!/usr/bin/env bash
# A throwaway Apache Kafka broker for tests: one KRaft node (broker and
# controller in one JVM) on 127.0.0.1. The Kafka bus tests run against it
# beside tansu (scripts/kafka-test-server.sh), which the rest of the
# distributed tests use: tansu speaks Kafka's protocol, this is Kafka.
#
#   scripts/apache-kafka-test-server.sh install     # fetch Kafka (once); prints its lib dir
#   scripts/apache-kafka-test-server.sh version     # prints the Kafka version it runs
#   scripts/apache-kafka-test-server.sh start DIR   # install, configure (once), start; prints the bus URL
#   scripts/apache-kafka-test-server.sh url DIR     # prints the URL of the running broker
#   scripts/apache-kafka-test-server.sh stop DIR    # stops it (the data stays in DIR)
#
# The URL is `kafka://127.0.0.1:PORT`, the form KILN_TEST_KAFKA takes:
#
#   export KILN_TEST_KAFKA="$(scripts/apache-kafka-test-server.sh start /tmp/kiln-apache-kafka)"
#   cargo test -p kiln-ingest-bus --test kafka
#
# Kafka is not downloaded as a release tarball: its broker jar
# (org.apache.kafka:kafka_2.13, main class kafka.Kafka) and runtime
# dependencies, plus log4j's SLF4J binding for a readable log, come from
# Maven Central with `mvn dependency:copy-dependencies` (through a tiny
# generated pom) into $KILN_TOOLS_DIR/apache-kafka-VERSION/lib (default
# ~/.cache/kiln; 45 jars, about 43 MB, and as much in ~/.m2): 6 to 9
# seconds with Maven's own plugins in ~/.m2, nothing when already
# installed. It runs on Java 17 or newer, found through JAVA_HOME or PATH.
#
# DIR holds server.properties (one node, process.roles=broker,controller,
# a PLAINTEXT listener and a controller listener on free ports of
# 127.0.0.1, replication factor and min.insync.replicas 1), log4j2.properties,
# the data (formatted once with kafka.tools.StorageTool, under a random
# cluster id), kafka.log, the pid and the ports. Topics are not
# auto-created: the bus creates its topic itself, with the partition count
# its URL names (a metadata request must not create it with the broker's
# default count first). The broker takes records up to the bus's limit
# (64 MiB: message.max.bytes). The JVM gets a 512 MiB heap. A start takes
# some 5 to 10 seconds on two cores; the broker counts as up when it
# answers a Kafka ApiVersions request on its listener, which it does only
# once it has caught up with the metadata log and is unfenced. stop sends
# SIGTERM (a controlled shutdown, some 3 seconds) and waits for it.
#
# One node cannot show what the bus's acks=all guards against: Kafka caps
# a partition's effective min.insync.replicas at its replica count, so a
# lone broker acknowledges every acks=all write. That takes a cluster of
# two or more with a broker down.
set -euo pipefail

readonly VERSION=4.4.0
# log4j-core's version in Kafka's own dependencies, for its SLF4J binding
# (Kafka's pom leaves the binding to the release tarball).
readonly LOG4J_VERSION=2.25.5
readonly FIRST_PORT=19192
readonly FIRST_CONTROLLER_PORT=19292
# Partitions of a topic created without a count (the bus always names one).
readonly PARTITIONS=8
# The bus's default record limit (64 MiB) plus its producer's framing room.
readonly MESSAGE_MAX_BYTES=$(((64 << 20) + (1 << 16)))
# How long a start may take before we give up (5 to 10 seconds on two
# busy cores; a loaded machine can take many times that).
readonly START_TIMEOUT_S=120

readonly PRODUCT=Kafka
readonly SERVER_NAME=apache-kafka-test-server
# shellcheck source=lib/test-server.sh
source "$(dirname "$0")/lib/test-server.sh"
# shellcheck source=lib/maven-server.sh
source "$(dirname "$0")/lib/maven-server.sh"

readonly TOOLS="${KILN_TOOLS_DIR:-$HOME/.cache/kiln}"
readonly HOME_DIR="$TOOLS/apache-kafka-$VERSION"
readonly LIB="$HOME_DIR/lib"

usage() {
    echo "usage: $0 install|version | $0 start|stop|url DIR" >&2
    exit 2
}

# Milliseconds since the epoch, for the timings printed on stderr.

# Kafka's pom brings no logging binding: without one, kafka.log stays
# empty.
cmd_install() {
    maven_install org.apache.kafka kafka_2.13 "    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j-impl</artifactId>
      <version>$LOG4J_VERSION</version>
    </dependency>"
}

# Whether a Kafka broker answers on port $1: an ApiVersions request (v0,
# correlation id 1, empty client id) must get a reply with correlation id
# 1 and error code 0 back.
kafka_answers() {
    local reply
    reply=$(timeout 5 bash -c '
        exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
        printf "\x00\x00\x00\x0a\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00" >&3
        head -c 10 <&3 | od -An -tx1
    ' _ "$1" 2>/dev/null) || return 1
    # Size (4 bytes, skipped), correlation id 1, error code 0.
    [[ $(echo $reply | cut -d' ' -f5-) == "00 00 00 01 00 00" ]]
}

is_running() {
    [[ -f $DIR/pid && -f $DIR/port ]] && kill -0 "$(cat "$DIR/pid")" 2>/dev/null &&
        kafka_answers "$(cat "$DIR/port")"
}

write_config() {
    local port=$1 controller_port=$2
    cat >"$DIR/server.properties" <<EOF
# Written by scripts/apache-kafka-test-server.sh: a single-node KRaft
# Kafka for tests, on loopback.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$controller_port
listeners=PLAINTEXT://127.0.0.1:$port,CONTROLLER://127.0.0.1:$controller_port
advertised.listeners=PLAINTEXT://127.0.0.1:$port
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs=$DIR/data
# One node: every replication factor and minimum ISR is 1.
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
# Fewer internal partitions than the defaults (50): quicker to create.
offsets.topic.num.partitions=8
transaction.state.log.num.partitions=4
# The bus creates its topic itself, with its own partition count.
auto.create.topics.enable=false
num.partitions=$PARTITIONS
# The bus's record limit.
message.max.bytes=$MESSAGE_MAX_BYTES
# A group's first member gets its partitions at once.
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
log.retention.hours=24
EOF
    cat >"$DIR/log4j2.properties" <<EOF
# Written by scripts/apache-kafka-test-server.sh: INFO to stdout (kafka.log).
appender.stdout.type=Console
appender.stdout.name=STDOUT
appender.stdout.layout.type=PatternLayout
appender.stdout.layout.pattern=[%d] %p %m (%c)%n
rootLogger.level=INFO
rootLogger.appenderRef.stdout.ref=STDOUT
logger.kafka.name=kafka
logger.kafka.level=INFO
logger.state.name=state.change.logger
logger.state.level=WARN
EOF
}

cmd_start() {
    local total_started java lib
    total_started=$(now_ms)
    java=$(java_bin)
    lib=$(cmd_install)
    mkdir -p "$DIR" || die "could not create $DIR"
    DIR=$(cd "$DIR" && pwd)
    if is_running; then
        echo "kafka://127.0.0.1:$(cat "$DIR/port")"
        return 0
    fi
    # A broker of ours that still runs but does not answer: stop it first.
    if [[ -f $DIR/pid ]] && kill -0 "$(cat "$DIR/pid")" 2>/dev/null; then
        cmd_stop
    fi

    local jvm_flags=(
        -Xms256m -Xmx512m
        # Kafka's own bin/kafka-run-class.sh flags.
        -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -XX:InitiatingHeapOccupancyPercent=35
        -XX:+ExplicitGCInvokesConcurrent -XX:+ExitOnOutOfMemoryError
        -Djava.awt.headless=true
        -XX:+PerfDisableSharedMem
        -Dlog4j2.configurationFile="$DIR/log4j2.properties"
        -Dkafka.logs.dir="$DIR"
    )

    # Another process may take a free port before Kafka binds it: try a
    # few times, each with ports found free just before. A broker started
    # again in the same DIR first tries the ports it had, so that clients
    # holding its URL find it again.
    local port controller_port attempt pid waited started cluster_id
    for attempt in 1 2 3; do
        if [[ $attempt -eq 1 && -f $DIR/port && -f $DIR/controller_port ]] &&
            ! port_in_use "$(cat "$DIR/port")" && ! port_in_use "$(cat "$DIR/controller_port")"; then
            port=$(cat "$DIR/port")
            controller_port=$(cat "$DIR/controller_port")
        else
            port=$(free_port "$FIRST_PORT")
            controller_port=$(free_port "$FIRST_CONTROLLER_PORT")
        fi
        write_config "$port" "$controller_port"
        started=$(now_ms)
        # The log directory is formatted once, under a cluster id of its
        # own (22 characters of URL-safe base64, as `kafka-storage.sh
        # random-uuid` prints); a restart keeps the data.
        if [[ ! -f $DIR/data/meta.properties ]]; then
            cluster_id=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=')
            rm -rf "$DIR/data"
            if ! "$java" -Xmx256m -XX:TieredStopAtLevel=1 \
                -Dlog4j2.configurationFile="$DIR/log4j2.properties" -cp "$lib/*" \
                kafka.tools.StorageTool format --cluster-id "$cluster_id" \
                --config "$DIR/server.properties" >"$DIR/format.log" 2>&1; then
                cat "$DIR/format.log" >&2
                die "could not format $DIR/data (kafka.tools.StorageTool format)"
            fi
            echo "$cluster_id" >"$DIR/cluster_id"
        fi
        # setsid: the broker outlives this script and the shell that ran it.
        setsid "$java" "${jvm_flags[@]}" -cp "$lib/*" \
            kafka.Kafka "$DIR/server.properties" \
            >"$DIR/kafka.log" 2>&1 </dev/null &
        pid=$!
        echo "$pid" >"$DIR/pid"
        for ((waited = 0; waited < START_TIMEOUT_S * 5; waited++)); do
            kill -0 "$pid" 2>/dev/null || break
            port_in_use "$port" && kafka_answers "$port" && break
            sleep 0.2
        done
        if kill -0 "$pid" 2>/dev/null && kafka_answers "$port"; then
            break
        fi
        kill "$pid" 2>/dev/null || true
        wait_gone "$pid" 100 || kill -9 "$pid" 2>/dev/null || true
        rm -f "$DIR/pid"
        grep -E ' (ERROR|FATAL) |Exception' "$DIR/kafka.log" | tail -n 15 >&2 || true
        [[ $attempt -lt 3 ]] || die "Kafka did not start; see $DIR/kafka.log"
        echo "$SERVER_NAME: start on ports $port/$controller_port failed, trying other ports" >&2
    done
    echo "$port" >"$DIR/port"
    echo "$controller_port" >"$DIR/controller_port"
    echo "$SERVER_NAME: Kafka $VERSION answers at 127.0.0.1:$port after $(($(now_ms) - started)) ms (start command: $(($(now_ms) - total_started)) ms)" >&2
    echo "kafka://127.0.0.1:$port"
}

cmd_url() { print_url kafka://; }

case ${1:-} in
install)
    [[ $# -eq 1 ]] || usage
    cmd_install
    ;;
version)
    [[ $# -eq 1 ]] || usage
    echo "$VERSION"
    ;;
start | stop | url)
    [[ $# -eq 2 ]] || usage
    DIR=$2
    "cmd_$1"
    ;;
*) usage ;;
esac
