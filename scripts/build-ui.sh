#!/usr/bin/env bash
# Builds Kiln's web UI into frontend/dist/ (index.html, style.css, the
# wasm-bindgen JS and WebAssembly), which `kiln up` serves at /.
# Needs the wasm32 target and wasm-bindgen-cli at the wasm-bindgen version of
# Cargo.lock (scripts/setup.sh installs both).
set -euo pipefail
cd "$(dirname "$0")/.."

target_dir="${CARGO_TARGET_DIR:-target}"
want="$(grep -A1 '^name = "wasm-bindgen"$' Cargo.lock | sed -n 's/^version = "\(.*\)"/\1/p')"
have="$(wasm-bindgen --version 2>/dev/null | awk '{print $2}')"
if [ "$have" != "$want" ]; then
  echo "build-ui: wasm-bindgen ${have:-is missing}, Cargo.lock needs $want: run scripts/setup.sh" >&2
  exit 1
fi

cargo build --locked --release --target wasm32-unknown-unknown -p kiln-frontend
rm -rf frontend/dist.tmp
mkdir -p frontend/dist.tmp
wasm-bindgen --target web --no-typescript --out-dir frontend/dist.tmp \
  "$target_dir/wasm32-unknown-unknown/release/kiln_frontend.wasm"
cp frontend/index.html frontend/static/* frontend/dist.tmp/
# Swap in whole, so a running `kiln up` never serves a half-written UI.
rm -rf frontend/dist
mv frontend/dist.tmp frontend/dist
echo "build-ui: frontend/dist ($(du -sh frontend/dist | cut -f1))"
