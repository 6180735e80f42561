#!/usr/bin/env bash
# Assembles the GPU check kit in ./gpucheck (never committed): builds the
# release libkiln_cuda.so and kiln, copies the kit's scripts and sources in,
# and installs scripts/gpucheck/snapdump in place of the kit's stand-in
# decoder (whose Rust sources are then not built). Then, on a machine with
# an NVIDIA GPU: bash gpucheck/device.sh (or e2e.sh, pcs.sh).
#
#   scripts/gpucheck/prepare.sh [KIT_DIR]    (default ../shared/gpucheck)
set -euo pipefail
cd "$(dirname "$0")/../.."
kit=${1:-../shared/gpucheck}
if [ ! -f "$kit/device.sh" ]; then
  echo "prepare.sh: $kit is not the GPU check kit (no device.sh in it)" >&2
  exit 1
fi

# Without clang and bpftool the agent builds without its eBPF program, and
# field.sh's end-to-end step then finds kiln up with no local agent.
if ! command -v clang >/dev/null || ! { command -v bpftool >/dev/null || [ -x /usr/sbin/bpftool ]; }; then
  echo "prepare.sh: clang or bpftool is missing, so kiln's agent would be built without eBPF" >&2
  echo "  (apt-get install clang libbpf-dev bpftool, or scripts/setup.sh)" >&2
  exit 1
fi

echo "== gpucheck: building release kiln-gpu and kiln"
cargo build --release -p kiln-gpu -p kiln

exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qxF /gpucheck/ "$exclude" 2>/dev/null || echo /gpucheck/ >>"$exclude"

mkdir -p gpucheck
# The kit's files are read-only; a second run copies over them.
chmod -R u+w gpucheck
for f in "$kit"/*; do
  [ "$(basename "$f")" = snapdump ] && continue
  cp -R "$f" gpucheck/
done
chmod -R u+w gpucheck
rm -rf gpucheck/snapdump
cp scripts/gpucheck/snapdump gpucheck/snapdump
chmod 755 gpucheck/snapdump
cp target/release/libkiln_cuda.so target/release/kiln gpucheck/
if command -v strip >/dev/null; then
  strip gpucheck/kiln gpucheck/libkiln_cuda.so
else
  echo "prepare.sh: no strip here; the binaries keep their debug info" >&2
fi
ls -la gpucheck/kiln gpucheck/libkiln_cuda.so gpucheck/snapdump
echo "== gpucheck: ready; on the GPU machine run: bash gpucheck/device.sh"
