#!/usr/bin/env bash
# Sets up and runs every test tier of Kiln. Prints one line per tier saying
# whether it ran or was skipped, and why.
#
#   KILN_FUZZ_SECONDS=N   seconds per fuzz target in the fuzz smoke tier
#                         (default 10; 0 skips the tier)
set -euo pipefail
cd "$(dirname "$0")/.."

tier() { printf '\n== TIER %-22s %s\n' "$1" "$2"; }

# A CI run builds everything once, from nothing: incremental-compilation
# caches would only cost disk (about 9 GiB for this workspace).
# Nor does it need our own crates' full debug info: line tables keep
# file:line in a backtrace at a fraction of the disk.
if [ -n "${CI:-}" ]; then
  export CARGO_INCREMENTAL=0
  export CARGO_PROFILE_DEV_DEBUG=line-tables-only
fi
# A run from nothing took 15 GiB at its peak with dependencies' debug
# info (a CI run failed with a full disk); without it, and with line
# tables only for our crates, 4.5 GiB through the unit tests. Say up front
# how much room there is.
target_dir="${CARGO_TARGET_DIR:-target}"
mkdir -p "$target_dir"
free_gib=$(df -P -BG "$target_dir" | awk 'NR == 2 { sub("G", "", $4); print $4 }')
tier "disk" "${free_gib} GiB free for $target_dir (a run from nothing takes about 8 GiB)"
if [ "$free_gib" -lt 20 ]; then
  echo "test.sh: warning: only ${free_gib} GiB free under $target_dir; the build may fail with 'No space left on device'" >&2
fi

scripts/setup-tests.sh

tier "format" "RUN (cargo fmt --check)"
cargo fmt --all -- --check

tier "lint" "RUN (cargo clippy --all-targets -D warnings)"
cargo clippy --workspace --all-targets --locked -- -D warnings

tier "layers" "RUN (scripts/check-layers.py: no import circle between a crate's top-level modules)"
python3 scripts/check-layers.py

tier "lean build" "RUN (kiln without its distributed engines, as scripts/up.sh builds it)"
cargo clippy --locked -p kiln --no-default-features -- -D warnings
cargo test --locked -p kiln-actors --lib backends

tier "wasm32" "RUN (kiln-model builds for wasm32-unknown-unknown)"
cargo build --locked -p kiln-model --no-default-features --target wasm32-unknown-unknown

# A throwaway PostgreSQL for the distributed-store tests (storage's
# postgres_conformance reads KILN_TEST_POSTGRES; without it they skip).
pg_dir="${TMPDIR:-/tmp}/kiln-test-pg"
if KILN_TEST_POSTGRES="$(scripts/pg-test-server.sh start "$pg_dir")"; then
  export KILN_TEST_POSTGRES
  trap 'scripts/pg-test-server.sh stop "$pg_dir" >/dev/null 2>&1 || true' EXIT
  tier "distributed: postgres" "RUN (PostgreSQL at $KILN_TEST_POSTGRES: ProfileStore, sealed-hour and MetadataStore conformance)"
else
  echo "test.sh: could not start PostgreSQL (scripts/pg-test-server.sh); see the messages above" >&2
  exit 1
fi

# A throwaway S3 server (Garage) for the S3 object store's tests (storage's
# s3_conformance reads KILN_TEST_S3 and the AWS_* keys; without them they skip).
s3_dir="${TMPDIR:-/tmp}/kiln-test-s3"
if s3_env="$(scripts/s3-test-server.sh start "$s3_dir")"; then
  eval "$s3_env"
  trap 'scripts/pg-test-server.sh stop "$pg_dir" >/dev/null 2>&1 || true; scripts/s3-test-server.sh stop "$s3_dir" >/dev/null 2>&1 || true' EXIT
  tier "distributed: s3" "RUN (Garage at $KILN_TEST_S3: ObjectStore conformance, multipart, within unit+integration)"
else
  echo "test.sh: could not start the S3 server (scripts/s3-test-server.sh); see the messages above" >&2
  exit 1
fi

# A throwaway Kafka-protocol broker (tansu, in memory) for the Kafka bus
# tests and the distributed-mode test (separate gateway, worker and query
# processes on Kafka and PostgreSQL); they read KILN_TEST_KAFKA and skip
# without it. The stop is chained onto the EXIT trap set above.
kafka_dir="${TMPDIR:-/tmp}/kiln-test-kafka"
if KILN_TEST_KAFKA="$(scripts/kafka-test-server.sh start "$kafka_dir")"; then
  export KILN_TEST_KAFKA
  on_exit="$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT$/\1/")"
  trap "${on_exit:+$on_exit; }scripts/kafka-test-server.sh stop \"$kafka_dir\" >/dev/null 2>&1 || true" EXIT
  tier "distributed: kafka" "RUN (tansu at $KILN_TEST_KAFKA: Kafka bus tests; gateway, 2 workers (one SIGKILLed), 2 query nodes sharing scans on their own peer listeners (--peers, one SIGKILLed) on Kafka + PostgreSQL, tenants and keys in PostgreSQL, records signed with the bus key; an agent's spooled batches through the gateway; within unit+integration)"
else
  echo "test.sh: could not start the Kafka broker (scripts/kafka-test-server.sh); see the messages above" >&2
  exit 1
fi

# A throwaway CQL server for the ScyllaDB profile store's conformance
# suite (storage's scylla_conformance reads KILN_TEST_SCYLLA and skips
# without it): Apache Cassandra from Maven Central, as ScyllaDB cannot be
# installed here. A KILN_TEST_SCYLLA set beforehand (a real ScyllaDB node)
# is used instead. The stop is chained onto the EXIT trap.
if [ -n "${KILN_TEST_SCYLLA:-}" ]; then
  tier "distributed: scylla" "RUN (the CQL node at $KILN_TEST_SCYLLA from the environment: ScyllaDB ProfileStore conformance, within unit+integration)"
else
  cassandra_dir="${TMPDIR:-/tmp}/kiln-test-cassandra"
  cassandra_version="$(scripts/cassandra-test-server.sh version)"
  if KILN_TEST_SCYLLA="$(scripts/cassandra-test-server.sh start "$cassandra_dir")"; then
    export KILN_TEST_SCYLLA
    on_exit="$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT$/\1/")"
    trap "${on_exit:+$on_exit; }scripts/cassandra-test-server.sh stop \"$cassandra_dir\" >/dev/null 2>&1 || true" EXIT
    tier "distributed: scylla" "RUN (Apache Cassandra $cassandra_version from Maven Central at $KILN_TEST_SCYLLA, standing in for ScyllaDB: ScyllaDB ProfileStore conformance over CQL, within unit+integration)"
  else
    unset KILN_TEST_SCYLLA
    tier "distributed: scylla" "SKIP (Apache Cassandra $cassandra_version could not be installed or started (scripts/cassandra-test-server.sh; see the messages above), and ScyllaDB cannot be installed here; set KILN_TEST_SCYLLA to a CQL node to run)"
  fi
fi

if [ "$(id -u)" -eq 0 ]; then
  if command -v podman >/dev/null; then
    podman_note="container names from a real Podman container (agent/tests/podman.rs; it skips, saying why, if Podman cannot run one here)"
  else
    podman_note="container names on runtimes' state files only: no podman (scripts/setup-tests.sh installs it), so agent/tests/podman.rs skips"
  fi
  tier "ebpf agent" "RUN (root: the agent's tests load its eBPF program on this kernel, within unit+integration; Java stacks on HotSpot 11, 17, 21 and 25: every JDK under /usr/lib/jvm and ~/.cache/kiln-jdks; JIT frames named from perf maps of Node.js and a JVM (agent/tests/perf_map.rs); $podman_note)"
  tier "regions" "RUN (root: two regions in network namespaces, each with its own PostgreSQL, tansu broker, object store, gateway, worker and query node, 40 ms apart through a delaying relay, as tc netem is not in every kernel: forwarding, residency byte for byte, the tenant directory, global symbols pulled across regions, region loss with an agent spooling until its return; kiln/tests/regions.rs, run after unit+integration with its output shown)"
else
  tier "ebpf agent" "RUN, and it will fail: the agent's tests need root (or CAP_BPF and CAP_PERFMON)"
  tier "regions" "RUN, and it will fail: kiln/tests/regions.rs makes network namespaces, which needs root"
fi

tier "gpu: real CUDA" "SKIP (needs an NVIDIA GPU: scripts/gpucheck/prepare.sh, then scripts/gpucheck/field.sh on one; without one, within unit+integration: libkiln_cuda.so under a fake CUPTI that enforces CUPTI's PC-sampling rules, a C host through a stand-in libcupti to kiln-agent --no-ebpf and a backend, NVML through a stand-in libnvidia-ml)"
if pyroscope_cache="$(scripts/pyroscope-clients.sh install 2>/dev/null)"; then
  pyroscope_sdks="the official Pyroscope SDKs pyroscope-io and pyroscope-go (in $pyroscope_cache) pushing to kiln up (kiln/tests/pyroscope.rs)"
else
  pyroscope_sdks="not the Pyroscope SDK tests: scripts/pyroscope-clients.sh could not install pyroscope-io or pyroscope-go, and kiln/tests/pyroscope.rs skips them saying why"
fi
if mcp_cache="$(scripts/mcp-client.sh install 2>/dev/null)"; then
  mcp_sdk="the official MCP Python SDK mcp 2.3.0 (in $mcp_cache) as the client of /mcp (kiln/tests/mcp.rs)"
else
  mcp_sdk="not the MCP SDK test: scripts/mcp-client.sh could not install mcp 2.3.0 from PyPI, and kiln/tests/mcp.rs skips it saying why (under CI it fails)"
fi
if [ "$(id -u)" -ne 0 ]; then
  otel_client="not the OpenTelemetry profiler client test: it loads eBPF, which needs root"
elif otelcol="$(scripts/otel-collector.sh 2>/dev/null | tail -1)"; then
  otel_client="the OpenTelemetry eBPF profiler in its collector ($otelcol) sending over gRPC and HTTP to kiln up (kiln/tests/otel_profiler.rs)"
else
  otel_client="not the OpenTelemetry profiler client test: scripts/otel-collector.sh could not build the collector, and kiln/tests/otel_profiler.rs skips saying why"
fi
tier "unit+integration" "RUN (every crate's tests, end-to-end tests of kiln up; as root, kiln up on a full tmpfs (kiln/tests/full_disk.rs); $pyroscope_sdks; $mcp_sdk; $otel_client)"
regions_test=tenants_live_in_their_home_region_and_are_served_from_any
if command -v cargo-nextest >/dev/null; then
  # Without backtraces a failing test's output ends with its panic
  # message, which is the part a CI log keeps.
  RUST_BACKTRACE=0 cargo nextest run --workspace --locked --no-fail-fast \
    -E 'not (package(kiln) & binary(regions))'
  # nextest does not run doctests.
  cargo test --workspace --locked --doc
else
  cargo test --workspace --locked --no-fail-fast -- --skip "$regions_test"
fi
# The regions test on its own, its output shown: it says what it checked.
cargo test --locked -p kiln --test regions -- --nocapture

# The Kafka bus tests again, against Apache Kafka itself (one KRaft node,
# from Maven Central: scripts/apache-kafka-test-server.sh) rather than
# tansu: the broker the bus meets in production, which enforces what tansu
# only echoes (topic limits). The distributed tests stay on tansu (they
# would double the run). Started only for this tier, stopped after it; the
# stop is also chained onto the EXIT trap, for a failing run.
akafka_dir="${TMPDIR:-/tmp}/kiln-test-apache-kafka"
akafka_version="$(scripts/apache-kafka-test-server.sh version)"
if akafka_url="$(scripts/apache-kafka-test-server.sh start "$akafka_dir")"; then
  on_exit="$(trap -p EXIT | sed -E "s/^trap -- '(.*)' EXIT$/\1/")"
  trap "${on_exit:+$on_exit; }scripts/apache-kafka-test-server.sh stop \"$akafka_dir\" >/dev/null 2>&1 || true" EXIT
  tier "distributed: apache kafka" "RUN (Apache Kafka $akafka_version (KRaft, one node) from Maven Central at $akafka_url: Kafka bus tests)"
  KILN_TEST_KAFKA="$akafka_url" cargo test --locked -p kiln-ingest-bus --test kafka
  scripts/apache-kafka-test-server.sh stop "$akafka_dir"
  # The fault suite starts (and kills) an Apache Kafka broker and a
  # PostgreSQL server of its own, in temporary directories; it runs only
  # with KILN_TEST_FAULTS=1, so the unit+integration tier skips it. About
  # 1.5 minutes.
  tier "distributed: faults" "RUN (Apache Kafka $akafka_version and PostgreSQL of its own, gateway, 2 workers and a query node, a fleet sending through the agent's sink and spool: the broker SIGKILLed and restarted, the gateway SIGKILLed while posting and another started on its port, PostgreSQL restarted; after each, per-stack totals exact against what was accepted, the spool drained, lag 0, the roles' /metrics; kiln/tests/faults.rs, its figures shown)"
  KILN_TEST_FAULTS=1 cargo test --locked -p kiln --test faults -- --nocapture
else
  tier "distributed: apache kafka" "SKIP (Apache Kafka $akafka_version could not be installed or started (scripts/apache-kafka-test-server.sh; see the messages above); the Kafka bus tests ran against tansu only)"
  tier "distributed: faults" "SKIP (Apache Kafka $akafka_version could not be installed or started: kiln/tests/faults.rs kills and restarts a broker of its own)"
fi

fuzz_seconds="${KILN_FUZZ_SECONDS:-10}"
if [ "$fuzz_seconds" = "0" ]; then
  tier "fuzz smoke" "SKIP (KILN_FUZZ_SECONDS=0)"
elif ! { rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal; }; then
  tier "fuzz smoke" "SKIP (cargo-fuzz needs a nightly toolchain and none could be installed)"
else
  tier "fuzz smoke" "RUN (${fuzz_seconds}s per target, cargo-fuzz on nightly)"
  scripts/fuzz.sh "$fuzz_seconds"
fi

# The Terraform deployment (infra/terraform): formatting, the HCL
# cross-check and checkov. OpenTofu is built from the Go module proxy and
# checkov comes from PyPI (scripts/setup-infra-tests.sh: minutes the first
# time, then nothing). No `tofu validate`: the AWS provider can neither be
# downloaded nor built from the Go module proxy here.
tier "terraform" "RUN (tofu fmt, HCL cross-check, checkov; not tofu validate: no AWS provider here)"
infra_tools="$(scripts/setup-infra-tests.sh)"
eval "$infra_tools"
infra/terraform/check.sh
# The web UI in headless Chromium: build it, then frontend/e2e's tests
# (Node's playwright-core driving Debian's chromium against a real kiln up;
# screenshots in test-output/browser/).
tier "browser" "RUN (scripts/build-ui.sh, then frontend/e2e in headless $(chromium --version 2>/dev/null | head -1))"
scripts/build-ui.sh
cargo build --locked -p kiln
(cd frontend/e2e && npm ci --no-audit --no-fund && npm test)
echo
echo "== all tiers that ran passed"
