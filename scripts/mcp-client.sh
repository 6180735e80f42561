#!/usr/bin/env bash
# Installs the official MCP Python SDK (mcp 2.3.0, PyPI) that
# kiln/tests/mcp.rs drives Kiln's MCP server with (kiln/tests/mcp_client.py),
# in a virtual environment under ~/.cache/kiln-mcp (KILN_MCP_CACHE), and
# prints that directory (its venv/bin/python runs the client).
#
# Idempotent: nothing is fetched when the pinned version is there.
#
#   scripts/mcp-client.sh install
set -euo pipefail
cd "$(dirname "$0")/.."
cache="${KILN_MCP_CACHE:-$HOME/.cache/kiln-mcp}"
mcp=2.3.0

install() {
  if [ -x "$cache/venv/bin/python" ] &&
    "$cache/venv/bin/python" -c "import mcp, importlib.metadata as m; assert m.version('mcp') == '$mcp'" 2>/dev/null; then
    return
  fi
  command -v python3 >/dev/null || { echo "mcp-client: no python3 on PATH" >&2; return 1; }
  mkdir -p "$cache"
  rm -rf "$cache/venv"
  python3 -m venv "$cache/venv" >&2
  "$cache/venv/bin/python" -m pip install --quiet --disable-pip-version-check "mcp==$mcp" >&2
}

case "${1:-install}" in
  install) install; echo "$cache" ;;
  *) echo "usage: $0 install" >&2; exit 2 ;;
esac
