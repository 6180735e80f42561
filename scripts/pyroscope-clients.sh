#!/usr/bin/env bash
# Installs the official Pyroscope SDKs that kiln/tests/pyroscope.rs runs
# as clients, into ~/.cache/kiln-pyroscope (KILN_PYROSCOPE_CACHE):
#
# - pyroscope-io 1.4.0 (PyPI, a manylinux wheel with its Rust profiler) in
#   a virtual environment: venv/bin/python;
# - the pyroscope-go v1.5.0 program kiln/tests/workloads/pyroscope-go
#   (github.com/grafana/pyroscope-go from the Go module proxy, checked
#   against the committed go.sum), built as bin/pyroscope-shares.
#
# Idempotent: nothing is fetched when both are there.
#
#   scripts/pyroscope-clients.sh install   # prints the cache directory
#   scripts/pyroscope-clients.sh python|go # installs one
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${KILN_PYROSCOPE_CACHE:-$HOME/.cache/kiln-pyroscope}"
pyroscope_io=1.4.0

python() {
  if [ -x "$cache/venv/bin/python" ] &&
    "$cache/venv/bin/python" -c "import pyroscope, importlib.metadata as m; assert m.version('pyroscope-io') == '$pyroscope_io'" 2>/dev/null; then
    return
  fi
  mkdir -p "$cache"
  rm -rf "$cache/venv"
  python3 -m venv "$cache/venv" >&2
  "$cache/venv/bin/python" -m pip install --quiet --disable-pip-version-check "pyroscope-io==$pyroscope_io" >&2
}

go_program() {
  local src="$PWD/kiln/tests/workloads/pyroscope-go"
  local bin="$cache/bin/pyroscope-shares"
  # Built again when the program changed since.
  if [ -x "$bin" ] && [ "$bin" -nt "$src/main.go" ] && [ "$bin" -nt "$src/go.sum" ]; then
    return
  fi
  command -v go >/dev/null || { echo "pyroscope-clients: no go on PATH (pyroscope-go needs Go >= 1.25)" >&2; return 1; }
  mkdir -p "$cache/bin"
  # The checksum database may not be reachable; the committed go.sum
  # checks what the proxy sends.
  (cd "$src" && GOFLAGS=-mod=readonly GOSUMDB=off \
    go build -o "$bin" . >&2)
}

case "${1:-install}" in
  install) python; go_program; echo "$cache" ;;
  python) python; echo "$cache" ;;
  go) go_program; echo "$cache" ;;
  *) echo "usage: $0 install|python|go" >&2; exit 2 ;;
esac
