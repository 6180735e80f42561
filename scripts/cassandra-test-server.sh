#!/usr/bin/env bash
# A throwaway CQL server for tests: Apache Cassandra, one node on
# 127.0.0.1. The ScyllaDB profile store's conformance suite runs against it
# (ScyllaDB itself cannot be installed on Kiln's CI machines; Cassandra
# speaks the same CQL for the plain tables the store uses).
#
#   scripts/cassandra-test-server.sh install     # fetch Cassandra (once); prints its lib dir
#   scripts/cassandra-test-server.sh version     # prints the Cassandra version it runs
#   scripts/cassandra-test-server.sh start DIR   # install, configure (once), start; prints the address
#   scripts/cassandra-test-server.sh url DIR     # prints the address of the running server
#   scripts/cassandra-test-server.sh stop DIR    # stops it (the data stays in DIR)
#
# The address is `127.0.0.1:PORT`, the form KILN_TEST_SCYLLA takes:
#
#   export KILN_TEST_SCYLLA="$(scripts/cassandra-test-server.sh start /tmp/kiln-cassandra)"
#   cargo test -p kiln-storage --test scylla_conformance
#
# Cassandra is not downloaded as a release tarball: its jar
# (org.apache.cassandra:cassandra-all) and runtime dependencies come from
# Maven Central with `mvn dependency:copy-dependencies` (through a tiny
# generated pom) into $KILN_TOOLS_DIR/cassandra-VERSION/lib (default
# ~/.cache/kiln; 100 jars, about 70 MB, and as much in ~/.m2): some 15
# seconds with an empty ~/.m2, 7 with Maven's own plugins there, nothing
# when already installed. It runs on Java 17 or newer, found through
# JAVA_HOME or PATH.
#
# DIR holds cassandra.yaml (free native and storage ports on 127.0.0.1,
# one token, small memtables, no authentication), logback.xml, the data,
# commit log, saved caches and hints directories, cassandra.log, the pid
# and the port. The JVM gets a 512 MiB to 1 GiB heap, no JMX port, and the
# module flags of Cassandra's own conf/jvm17-server.options. A start takes
# some 6 to 12 seconds on two cores; stop sends SIGTERM (Cassandra drains
# and flushes, some 7 seconds) and waits for it.
set -euo pipefail

readonly VERSION=5.0.9
readonly FIRST_NATIVE_PORT=19042
readonly FIRST_STORAGE_PORT=17000
# How long a start may take before we give up (Cassandra 5 on two busy
# cores: 6 to 12 seconds; a slow disk or a loaded machine can take many
# times that).
readonly START_TIMEOUT_S=180

readonly PRODUCT=Cassandra
readonly SERVER_NAME=cassandra-test-server
# shellcheck source=lib/test-server.sh
source "$(dirname "$0")/lib/test-server.sh"
# shellcheck source=lib/maven-server.sh
source "$(dirname "$0")/lib/maven-server.sh"

readonly TOOLS="${KILN_TOOLS_DIR:-$HOME/.cache/kiln}"
readonly HOME_DIR="$TOOLS/cassandra-$VERSION"
readonly LIB="$HOME_DIR/lib"

usage() {
    echo "usage: $0 install|version | $0 start|stop|url DIR" >&2
    exit 2
}

# Milliseconds since the epoch, for the timings printed on stderr.

cmd_install() {
    maven_install org.apache.cassandra cassandra-all
}

# Whether the server on port $1 answers CQL: a protocol v4 OPTIONS request
# must get a SUPPORTED response (opcode 0x06) back.
cql_answers() {
    local reply
    reply=$(timeout 5 bash -c '
        exec 3<>"/dev/tcp/127.0.0.1/$1" || exit 1
        printf "\x04\x00\x00\x00\x05\x00\x00\x00\x00" >&3
        head -c 5 <&3 | od -An -tx1
    ' _ "$1" 2>/dev/null) || return 1
    # Version 0x84 (a v4 response), flags, stream 0, opcode 0x06.
    [[ $(echo $reply) == "84 00 00 00 06" ]]
}

is_running() {
    [[ -f $DIR/pid && -f $DIR/port ]] && kill -0 "$(cat "$DIR/pid")" 2>/dev/null &&
        cql_answers "$(cat "$DIR/port")"
}

write_config() {
    local native_port=$1 storage_port=$2
    cat >"$DIR/cassandra.yaml" <<EOF
# Written by scripts/cassandra-test-server.sh: a single-node Cassandra for
# tests, on loopback, with small memtables and no authentication.
cluster_name: kiln-test
num_tokens: 1
initial_token: 0
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "127.0.0.1:$storage_port"
listen_address: 127.0.0.1
rpc_address: 127.0.0.1
storage_port: $storage_port
native_transport_port: $native_port
start_native_transport: true
authenticator: AllowAllAuthenticator
authorizer: AllowAllAuthorizer
role_manager: CassandraRoleManager
data_file_directories:
  - $DIR/data
commitlog_directory: $DIR/commitlog
saved_caches_directory: $DIR/saved_caches
hints_directory: $DIR/hints
cdc_raw_directory: $DIR/cdc_raw
commitlog_sync: periodic
commitlog_sync_period: 10000ms
commitlog_segment_size: 8MiB
commitlog_total_space: 256MiB
memtable_heap_space: 64MiB
memtable_offheap_space: 64MiB
key_cache_size: 8MiB
counter_cache_size: 4MiB
concurrent_reads: 8
concurrent_writes: 8
concurrent_counter_writes: 8
concurrent_compactors: 1
auto_snapshot: false
snapshot_before_compaction: false
hinted_handoff_enabled: false
dynamic_snitch: false
# The tests write unlogged single-partition batches of 200 rows.
batch_size_warn_threshold: 256KiB
batch_size_fail_threshold: 1MiB
read_request_timeout: 10000ms
range_request_timeout: 20000ms
write_request_timeout: 10000ms
counter_write_request_timeout: 10000ms
request_timeout: 20000ms
EOF
    cat >"$DIR/logback.xml" <<EOF
<!-- Written by scripts/cassandra-test-server.sh: INFO to stdout, which goes to cassandra.log. -->
<configuration>
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%-5level [%thread] %date{ISO8601} %F:%L - %msg%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="STDOUT"/></root>
</configuration>
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
        echo "127.0.0.1:$(cat "$DIR/port")"
        return 0
    fi
    # A server of ours that still runs but does not answer: stop it first.
    if [[ -f $DIR/pid ]] && kill -0 "$(cat "$DIR/pid")" 2>/dev/null; then
        cmd_stop
    fi
    mkdir -p "$DIR/data" "$DIR/commitlog" "$DIR/saved_caches" "$DIR/hints" "$DIR/cdc_raw" "$DIR/triggers"

    # The module flags of Cassandra 5.0's conf/jvm17-server.options (its
    # JPMS section), which the release's bin/cassandra passes on Java 17.
    local jvm_flags=(
        -Xms512m -Xmx1g -Xss256k
        -XX:+UseG1GC -XX:+ParallelRefProcEnabled -XX:MaxTenuringThreshold=1
        -XX:G1HeapRegionSize=16m -XX:MaxGCPauseMillis=300
        -XX:+HeapDumpOnOutOfMemoryError -XX:HeapDumpPath="$DIR" -XX:+ExitOnOutOfMemoryError
        -XX:+PerfDisableSharedMem -XX:TieredStopAtLevel=1
        -Djava.net.preferIPv4Stack=true
        -Djdk.attach.allowAttachSelf=true
        --add-exports java.base/jdk.internal.misc=ALL-UNNAMED
        --add-exports java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED
        --add-exports java.rmi/sun.rmi.registry=ALL-UNNAMED
        --add-exports java.rmi/sun.rmi.server=ALL-UNNAMED
        --add-exports java.sql/java.sql=ALL-UNNAMED
        --add-exports java.base/java.lang.ref=ALL-UNNAMED
        --add-exports jdk.unsupported/sun.misc=ALL-UNNAMED
        --add-exports jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED
        --add-exports jdk.attach/sun.tools.attach=ALL-UNNAMED
        --add-opens java.base/java.lang.module=ALL-UNNAMED
        --add-opens java.base/jdk.internal.loader=ALL-UNNAMED
        --add-opens java.base/jdk.internal.ref=ALL-UNNAMED
        --add-opens java.base/jdk.internal.reflect=ALL-UNNAMED
        --add-opens java.base/jdk.internal.math=ALL-UNNAMED
        --add-opens java.base/jdk.internal.module=ALL-UNNAMED
        --add-opens java.base/jdk.internal.util.jar=ALL-UNNAMED
        --add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED
        --add-opens java.base/sun.nio.ch=ALL-UNNAMED
        --add-opens java.base/java.io=ALL-UNNAMED
        --add-opens java.base/java.lang.reflect=ALL-UNNAMED
        --add-opens jdk.compiler/com.sun.tools.javac=ALL-UNNAMED
        --add-opens java.base/java.lang=ALL-UNNAMED
        --add-opens java.base/java.util=ALL-UNNAMED
        -Dio.netty.tryReflectionSetAccessible=true
        -Dio.netty.allocator.useCacheForAllThreads=true
        -Dio.netty.allocator.maxOrder=11
        # What bin/cassandra and cassandra-env.sh add: jamm measures
        # memtable sizes; the rest places the server's files under DIR.
        -javaagent:"$lib/jamm-0.4.0.jar"
        -Dcassandra-foreground=yes
        -Dcassandra.config="file://$DIR/cassandra.yaml"
        -Dcassandra.storagedir="$DIR"
        -Dcassandra.logdir="$DIR"
        -Dcassandra.triggers_dir="$DIR/triggers"
        -Dlogback.configurationFile="file://$DIR/logback.xml"
        # A lone test node: no waiting for a ring or for gossip to settle.
        -Dcassandra.ring_delay_ms=0
        -Dcassandra.skip_wait_for_gossip_to_settle=0
        -Dcassandra.superuser_setup_delay_ms=0
        -Dcassandra.auto_bootstrap=false
        -Dcassandra.load_ring_state=false
    )
    # -XX:TieredStopAtLevel=1 (C1 only) trades peak speed, which a test
    # node never reaches, for a quicker start on two cores.

    # Another process may take a free port before Cassandra binds it: try
    # a few times, each with ports found free just before. A server
    # started again in the same DIR first tries the ports it had (its
    # system tables remember its storage port).
    local native_port storage_port attempt pid waited started
    for attempt in 1 2 3; do
        if [[ $attempt -eq 1 && -f $DIR/port && -f $DIR/storage_port ]] &&
            ! port_in_use "$(cat "$DIR/port")" && ! port_in_use "$(cat "$DIR/storage_port")"; then
            native_port=$(cat "$DIR/port")
            storage_port=$(cat "$DIR/storage_port")
        else
            native_port=$(free_port "$FIRST_NATIVE_PORT")
            storage_port=$(free_port "$FIRST_STORAGE_PORT")
        fi
        write_config "$native_port" "$storage_port"
        started=$(now_ms)
        # setsid: the server outlives this script and the shell that ran it.
        setsid "$java" "${jvm_flags[@]}" -cp "$lib/*" \
            org.apache.cassandra.service.CassandraDaemon \
            >"$DIR/cassandra.log" 2>&1 </dev/null &
        pid=$!
        echo "$pid" >"$DIR/pid"
        for ((waited = 0; waited < START_TIMEOUT_S * 2; waited++)); do
            kill -0 "$pid" 2>/dev/null || break
            port_in_use "$native_port" && cql_answers "$native_port" && break
            sleep 0.5
        done
        if kill -0 "$pid" 2>/dev/null && cql_answers "$native_port"; then
            break
        fi
        kill "$pid" 2>/dev/null || true
        wait_gone "$pid" 100
        rm -f "$DIR/pid"
        grep -E '^(ERROR|WARN)|Exception' "$DIR/cassandra.log" | tail -n 15 >&2 || true
        [[ $attempt -lt 3 ]] || die "Cassandra did not start; see $DIR/cassandra.log"
        echo "$SERVER_NAME: start on port $native_port failed, trying other ports" >&2
    done
    echo "$native_port" >"$DIR/port"
    echo "$storage_port" >"$DIR/storage_port"
    echo "$SERVER_NAME: Cassandra $VERSION answers CQL at 127.0.0.1:$native_port after $(($(now_ms) - started)) ms (start command: $(($(now_ms) - total_started)) ms)" >&2
    echo "127.0.0.1:$native_port"
}

cmd_url() { print_url ""; }

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
