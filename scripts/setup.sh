#!/usr/bin/env bash
# Installs what building and running Kiln needs on a fresh machine (Rust's
# wasm32 target and wasm-bindgen for the UI, a C toolchain, clang and
# libbpf-dev for the agent's eBPF program): what `scripts/up.sh` needs, and
# nothing only the tests use (scripts/setup-tests.sh adds that).
# Idempotent: what is already there is left alone. Run as root (or with
# sudo available) for the Debian packages.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '== setup: %s\n' "$*"; }

if ! command -v cargo >/dev/null; then
  echo "setup: cargo not found; install Rust with rustup first (https://rustup.rs)" >&2
  exit 1
fi

say "the wasm32 target (the web UI)"
rustup target add wasm32-unknown-unknown >/dev/null

# Debian packages:
# - a C toolchain for -sys crates (zstd, librdkafka);
# - clang, libbpf-dev and bpftool for the agent's eBPF programs (agent/build.rs
#   compiles them with clang and links them with bpftool);
# - libiberty-dev: GNU's C++ demangler, the one c++filt runs, which the
#   symbolizer links statically (symbolizer-workers/build.rs).
need_apt=()
command -v cc >/dev/null || need_apt+=(build-essential)
command -v pkg-config >/dev/null || need_apt+=(pkg-config)
command -v clang >/dev/null || need_apt+=(clang)
[ -f /usr/include/bpf/bpf_helpers.h ] || need_apt+=(libbpf-dev)
command -v bpftool >/dev/null || [ -x /usr/sbin/bpftool ] || need_apt+=(bpftool)
[ -f /usr/include/libiberty/demangle.h ] || need_apt+=(libiberty-dev)
if [ ${#need_apt[@]} -gt 0 ]; then
  say "apt packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi
# The web UI's build (scripts/build-ui.sh): wasm-bindgen-cli at exactly the
# wasm-bindgen version of Cargo.lock (the CLI refuses modules of another
# version). `--locked` first; without it when the registry no longer has a
# version the CLI's own lock file pins.
wasm_bindgen="$(grep -A1 '^name = "wasm-bindgen"$' Cargo.lock | sed -n 's/^version = "\(.*\)"/\1/p')"
if [ -n "$wasm_bindgen" ] && [ "$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')" != "$wasm_bindgen" ]; then
  say "wasm-bindgen-cli $wasm_bindgen (the version in Cargo.lock)"
  cargo install --locked wasm-bindgen-cli --version "$wasm_bindgen" ||
    cargo install wasm-bindgen-cli --version "$wasm_bindgen"
fi
say "done"
