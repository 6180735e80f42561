#!/usr/bin/env bash
# Installs what the Terraform checks (infra/terraform/check.sh) need, and
# prints `export` lines naming them, for `eval "$(scripts/setup-infra-tests.sh)"`:
#
#   KILN_TOFU         OpenTofu, built from its Go module (no Terraform or
#                     OpenTofu release can be downloaded here; the Go module
#                     proxy serves OpenTofu's source). `go install …@version`
#                     refuses it (its go.mod has a replace directive), so it
#                     is built inside the downloaded module instead.
#   KILN_CHECKOV      checkov, from PyPI, in a virtual environment of its own.
#   KILN_HCL2_PYTHON  a Python with python-hcl2, from PyPI, in another one:
#                     checkov pins bridgecrew's fork (bc-python-hcl2), which
#                     installs the same `hcl2` package, so the two cannot
#                     share an environment.
#
# Versions are pinned below; each tool goes to a directory named after its
# version, so a new pin installs beside the old one. Idempotent: a run with
# everything in place checks three files and prints only the exports.
# Progress goes to stderr. Cold, the OpenTofu build takes about 4 minutes
# on 2 cores (plus its download); warm, well under a second.
#
#   KILN_TOOLS_DIR   where the tools go (default ~/.cache/kiln)
set -euo pipefail

TOFU_VERSION=1.12.6
CHECKOV_VERSION=3.3.30
PYTHON_HCL2_VERSION=8.1.4

tools="${KILN_TOOLS_DIR:-$HOME/.cache/kiln}"
tofu_dir="$tools/tofu-$TOFU_VERSION"
checkov_venv="$tools/checkov-$CHECKOV_VERSION"
hcl2_venv="$tools/python-hcl2-$PYTHON_HCL2_VERSION"

say() { printf '== setup-infra-tests: %s\n' "$*" >&2; }
die() { printf 'setup-infra-tests: %s\n' "$*" >&2; exit 1; }

mkdir -p "$tools"

# --- OpenTofu -------------------------------------------------------------
if [ ! -x "$tofu_dir/tofu" ]; then
  command -v go >/dev/null || die "OpenTofu is built with Go, and there is no go command (scripts/setup-tests.sh installs one)"
  # OpenTofu 1.12 needs Go 1.26; a Go of 1.21 or later fetches that
  # toolchain from the module proxy by itself (GOTOOLCHAIN=auto).
  go_minor="$(go env GOVERSION 2>/dev/null | sed -nE 's/^go1\.([0-9]+).*/\1/p')"
  [ -n "$go_minor" ] && [ "$go_minor" -ge 21 ] ||
    die "building OpenTofu needs Go 1.21 or later (found: $(go version)); install a newer Go"
  say "building OpenTofu $TOFU_VERSION from the Go module proxy (a few minutes, once)"
  started=$SECONDS
  module_dir="$(cd "$tools" && go mod download -json "github.com/opentofu/opentofu@v$TOFU_VERSION" |
    sed -nE 's/^[[:space:]]*"Dir": "(.*)",?$/\1/p')"
  [ -d "$module_dir" ] || die "could not download github.com/opentofu/opentofu@v$TOFU_VERSION from the Go module proxy"
  mkdir -p "$tofu_dir"
  # The build's output (a line per module downloaded) goes to a log,
  # shown only when the build fails.
  if ! (cd "$module_dir" && GOTOOLCHAIN="${GOTOOLCHAIN:-auto}" go build -trimpath \
    -ldflags "-s -w -X github.com/opentofu/opentofu/version.dev=no" \
    -o "$tofu_dir/tofu.new" ./cmd/tofu) >"$tofu_dir/build.log" 2>&1; then
    tail -n 40 "$tofu_dir/build.log" >&2
    die "building OpenTofu failed (whole log: $tofu_dir/build.log)"
  fi
  mv "$tofu_dir/tofu.new" "$tofu_dir/tofu"
  say "OpenTofu $TOFU_VERSION built in $((SECONDS - started)) s: $tofu_dir/tofu"
fi

# --- Python tools -----------------------------------------------------------
# venv PACKAGE==VERSION DIR: a virtual environment at DIR holding exactly
# that pin; remade when a previous install did not finish.
venv() {
  local pin="$1" dir="$2"
  [ -f "$dir/.installed" ] && return 0
  say "installing $pin from PyPI into $dir"
  rm -rf "$dir"
  python3 -m venv "$dir" || die "python3 -m venv failed (Debian: apt-get install python3-venv)"
  "$dir/bin/pip" install --quiet --disable-pip-version-check "$pin" ||
    die "pip could not install $pin; see the messages above"
  touch "$dir/.installed"
}
command -v python3 >/dev/null || die "the checks need python3"
venv "checkov==$CHECKOV_VERSION" "$checkov_venv"
venv "python-hcl2==$PYTHON_HCL2_VERSION" "$hcl2_venv"

printf 'export KILN_TOFU=%q\n' "$tofu_dir/tofu"
printf 'export KILN_CHECKOV=%q\n' "$checkov_venv/bin/checkov"
printf 'export KILN_HCL2_PYTHON=%q\n' "$hcl2_venv/bin/python"
