#!/usr/bin/env bash
# The agent beside its peers on a busy host (issue 14's "Done means"):
# builds the OpenTelemetry eBPF profiler from the Go module proxy and a
# small OTLP receiver for it, makes sure perf is there, builds kiln-agent
# and peer_bench, and runs peer_bench (load-tests/src/bin/peer_bench.rs says
# what it measures). Needs root, clang, Go and cargo.
#
#   sudo scripts/peer-bench.sh [peer_bench flags: --seconds 30 --runs 2 ...]
#   sudo scripts/peer-bench.sh --workload java   (a Java workload on OpenJDK 17)
#
# The profiler is built into a cache directory, never into the repo:
#   KILN_PEERS_DIR         default ~/.cache/kiln-peers
#   OTEL_PROFILER_VERSION  default v0.0.202610 (the newest version the Go
#                          module proxy serves here; it has no version list
#                          for this module, so the version is pinned)
#   CARGO_TARGET_DIR       where kiln-agent and peer_bench are built
#                          (default: target)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
peers=${KILN_PEERS_DIR:-$HOME/.cache/kiln-peers}
version=${OTEL_PROFILER_VERSION:-v0.0.202610}
module=go.opentelemetry.io/ebpf-profiler
target=${CARGO_TARGET_DIR:-$repo/target}

if [ "$(id -u)" != 0 ]; then
	echo "peer-bench: run as root (the profilers load eBPF programs and sample the whole host)" >&2
	exit 1
fi

case "$(uname -m)" in
x86_64) goarch=amd64 ;;
aarch64) goarch=arm64 ;;
*) echo "peer-bench: no eBPF object of the OpenTelemetry profiler for $(uname -m)" >&2; exit 1 ;;
esac

# --- The OpenTelemetry eBPF profiler -------------------------------------
otel_dir=$peers/ebpf-profiler-$version
otel_bin=$otel_dir/bin/ebpf-profiler
receiver_bin=$otel_dir/bin/kiln-peer-receiver
export GOFLAGS=-mod=mod GOTOOLCHAIN=local
# The checksum database is not reachable through the proxy here; the
# module's dependencies are still checked against its own go.sum.
export GONOSUMDB=$module

if [ ! -x "$otel_bin" ]; then
	echo "peer-bench: building the OpenTelemetry eBPF profiler $version into $otel_dir"
	mkdir -p "$otel_dir"
	dl=$(mktemp -d)
	src_dir=$(cd "$dl" && go mod download -json "$module@$version" |
		python3 -c 'import json,sys; d=json.load(sys.stdin); print(d.get("Dir") or sys.exit(d.get("Error", "no Dir")))')
	rmdir "$dl"
	rm -rf "$otel_dir/src"
	cp -r "$src_dir" "$otel_dir/src"
	chmod -R u+w "$otel_dir/src"
	# Its eBPF object ships prebuilt in the module: nothing to build with
	# clang.
	if [ ! -s "$otel_dir/src/support/ebpf/tracer.ebpf.$goarch" ]; then
		echo "peer-bench: $module@$version ships no support/ebpf/tracer.ebpf.$goarch" >&2
		exit 1
	fi
	# Two fatal start-up steps become warnings (see the script).
	python3 "$repo/scripts/peer-bench/patch-otel-profiler.py" "$otel_dir/src"
	gofmt -w "$otel_dir/src/rlimit/rlimit.go" "$otel_dir/src/tracer/tracer.go"
	mkdir -p "$otel_dir/bin"
	(cd "$otel_dir/src" && go build -o "$otel_bin.tmp" .)
	mv "$otel_bin.tmp" "$otel_bin"
fi

# The receiver is built inside the profiler's module, so that it decodes
# with the very pdata and gRPC versions the profiler sends with; always
# rebuilt (a second or two) so that an edit to it counts.
mkdir -p "$otel_dir/src/cmd/kiln-peer-receiver"
cp "$repo/scripts/peer-bench/receiver/main.go" "$otel_dir/src/cmd/kiln-peer-receiver/main.go"
(cd "$otel_dir/src" && go build -o "$receiver_bin" ./cmd/kiln-peer-receiver)

# The profiler attaches through tracefs.
if [ ! -e /sys/kernel/tracing/events ]; then
	mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null ||
		echo "peer-bench: could not mount tracefs on /sys/kernel/tracing; the OpenTelemetry profiler may not start" >&2
fi

# --- perf ------------------------------------------------------------------
profilers=kiln,kiln-no-symbols,otel,perf
if ! command -v perf >/dev/null; then
	echo "peer-bench: installing perf (Debian's linux-perf)"
	if ! apt-get install -y linux-perf >/dev/null; then
		apt-get update >/dev/null && apt-get install -y linux-perf >/dev/null || true
	fi
fi
perf_check=$(mktemp)
if ! command -v perf >/dev/null; then
	echo "peer-bench: SKIPPING the perf column: perf is not installed and apt-get install linux-perf failed"
	profilers=kiln,kiln-no-symbols,otel
elif ! perf record -F 19 -a -g -o "$perf_check" -- sleep 0.2 >/dev/null 2>"$perf_check.err"; then
	echo "peer-bench: SKIPPING the perf column: $(perf version 2>&1) refuses this kernel ($(uname -r)): $(tail -n 3 "$perf_check.err" | tr '\n' ' ')"
	profilers=kiln,kiln-no-symbols,otel
fi
rm -f "$perf_check" "$perf_check.err"

# --- Kiln ------------------------------------------------------------------
(cd "$repo" && CARGO_TARGET_DIR=$target cargo build --release -p kiln-agent --bin kiln-agent -p kiln-load-tests --bin peer_bench)

exec "$target/release/peer_bench" \
	--profilers "$profilers" \
	--kiln-agent "$target/release/kiln-agent" \
	--otel-profiler "$otel_bin" \
	--otel-receiver "$receiver_bin" \
	"$@"
