#!/usr/bin/env bash
# Runs every fuzz target for a few seconds (default 30): the batch decoder,
# each import parser, the CUPTI activity buffer parser and the GPU
# library's snapshot frame reader (gpu_*), and the symbol readers. Installs
# cargo-fuzz and the nightly toolchain it needs when they are missing.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-30}"
shift || true

if ! rustup toolchain list | grep -q '^nightly'; then
  echo "== fuzz: installing the nightly toolchain"
  rustup toolchain install nightly --profile minimal
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== fuzz: installing cargo-fuzz"
  cargo install --locked cargo-fuzz
fi

cd fuzz
echo "== fuzz: building the targets"
cargo +nightly fuzz build
targets=("$@")
[ ${#targets[@]} -gt 0 ] || mapfile -t targets < <(cargo +nightly fuzz list)
log=$(mktemp)
for target in "${targets[@]}"; do
  if [ "$target" = scan_decode ] && [ "${KILN_FUZZ_ACTORS:-0}" != 1 ]; then
    # It links kiln-actors and so librdkafka, which does not build under
    # AddressSanitizer: it needs a build of its own without a sanitizer
    # (fuzz/README.md), minutes and gigabytes this smoke run does not spend.
    echo "== fuzz: scan_decode: SKIP (needs its own unsanitized build of kiln-actors; KILN_FUZZ_ACTORS=1 runs it; its seeds decode in actors/tests/fuzz_seeds.rs)"
    continue
  fi
  extra=()
  [ "$target" = scan_decode ] && extra=(-s none --features actors --target-dir target-none)
  # Seed corpora live in fuzz/seeds/<target> (committed); the working
  # corpus in fuzz/corpus/<target> is not. An input that runs past 2
  # minutes fails as a hang (libFuzzer's default waits 20).
  mkdir -p "corpus/$target"
  seeds=()
  [ -d "seeds/$target" ] && seeds=("seeds/$target")
  if cargo +nightly fuzz run "${extra[@]}" "$target" "corpus/$target" "${seeds[@]}" -- \
      -max_total_time="$seconds" -timeout=120 -rss_limit_mb=2048 -print_final_stats=1 >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
    echo "== fuzz: $target: ${seconds}s, $runs inputs, no crash"
  else
    tail -n 40 "$log" >&2
    echo "fuzz: $target failed (crashing input in fuzz/artifacts/$target/)" >&2
    exit 1
  fi
done
