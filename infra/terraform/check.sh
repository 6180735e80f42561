#!/usr/bin/env bash
# Checks Kiln's Terraform (infra/terraform) without a cloud account:
#
#   1. fmt         `tofu fmt -check -recursive`: canonical formatting (and
#                  every file parses as HCL);
#   2. crosscheck  crosscheck.py: every variable declared with a description
#                  and a type and used, every module input wired, every module
#                  output used (see its docstring);
#   3. checkov     `checkov -d infra/terraform`: no failed check; the only
#                  skips are in place (#checkov:skip=CKV_…:reason);
#   4. user-data   the nodes' boot script, rendered by tofu for each role
#                  (tests/user-data), passes `bash -n`.
#
# `tofu validate` is not run: it needs the hashicorp/aws provider, which
# can neither be downloaded here (no registry) nor built from the Go module
# proxy (it serves no version of github.com/hashicorp/terraform-provider-aws
# newer than v1.60.0, from 2019). docs/deploy.md says what that leaves
# unchecked.
#
# Runs every check, prints one summary line each, and exits 1 if any failed.
# Tools come from scripts/setup-infra-tests.sh (KILN_TOFU, KILN_CHECKOV,
# KILN_HCL2_PYTHON); when they are not set, it is run first.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

if [ -z "${KILN_TOFU:-}" ] || [ -z "${KILN_CHECKOV:-}" ] || [ -z "${KILN_HCL2_PYTHON:-}" ]; then
  exports="$("$repo/scripts/setup-infra-tests.sh")" || exit 1
  eval "$exports"
fi

failed=0
summary=()
log="$(mktemp -d)"
trap 'rm -rf "$log"' EXIT

# tofu needs no CLI configuration here, and a TF_CLI_CONFIG_FILE naming a
# missing file only adds a warning to everything it prints.
export TF_CLI_CONFIG_FILE=/dev/null

# 1. Formatting.
started=$SECONDS
if "$KILN_TOFU" fmt -check -recursive -diff "$here" >"$log/fmt" 2>&1; then
  files=$(find "$here" -name '*.tf' -not -path '*/.terraform/*' | wc -l)
  summary+=("fmt        ok: $files .tf files formatted as \`tofu fmt\` writes them ($("$KILN_TOFU" version 2>/dev/null | head -1); $((SECONDS - started)) s)")
else
  cat "$log/fmt"
  summary+=("fmt        FAILED: files above differ from \`tofu fmt\` (or do not parse); run: $KILN_TOFU fmt -recursive infra/terraform")
  failed=1
fi

# 2. The cross-check.
started=$SECONDS
if "$KILN_HCL2_PYTHON" "$here/crosscheck.py" "$here" >"$log/crosscheck" 2>&1; then
  summary+=("crosscheck $(tail -1 "$log/crosscheck" | sed 's/^crosscheck: //') ($((SECONDS - started)) s)")
else
  cat "$log/crosscheck"
  summary+=("crosscheck $(tail -1 "$log/crosscheck" | sed 's/^crosscheck: //')")
  failed=1
fi

# 3. checkov, offline (--skip-download: nothing to fetch from Prisma Cloud).
started=$SECONDS
"$KILN_CHECKOV" -d "$here" --quiet --compact --skip-download --output json >"$log/checkov.json" 2>"$log/checkov.err"
checkov_status=$?
counts="$("$KILN_HCL2_PYTHON" - "$log/checkov.json" <<'PY'
import json, sys
try:
    reports = json.load(open(sys.argv[1]))
except ValueError:
    print("unreadable"); sys.exit(0)
if isinstance(reports, dict):
    reports = [reports]
passed = failed = skipped = 0
for report in reports:
    # A framework with nothing to scan reports only its counts.
    summary = report.get("summary", {})
    passed += summary.get("passed", 0)
    # A file checkov cannot parse is left out of the scan: count it failed.
    failed += summary.get("failed", 0) + summary.get("parsing_errors", 0)
    skipped += summary.get("skipped", 0)
    for path in report.get("results", {}).get("parsing_errors", []):
        print(f"FAIL checkov could not parse {path}", file=sys.stderr)
    for check in report.get("results", {}).get("failed_checks", []):
        print(f"FAIL {check['check_id']} {check['resource']} {check['file_path']}:{check['file_line_range']}: {check['check_name']}", file=sys.stderr)
print(f"{passed} {failed} {skipped}")
PY
)"
read -r passed failed_checks skipped <<<"$counts"
if [ "$checkov_status" -eq 0 ] && [ "${failed_checks:-x}" = "0" ] && [ "${passed:-0}" -gt 0 ]; then
  summary+=("checkov    ok: $passed passed, 0 failed, $skipped skipped in place with a reason (checkov $("$KILN_CHECKOV" --version); $((SECONDS - started)) s)")
else
  cat "$log/checkov.err" >&2
  # The human-readable report of what failed.
  "$KILN_CHECKOV" -d "$here" --quiet --compact --skip-download 2>&1 | tail -200
  summary+=("checkov    FAILED: ${failed_checks:-?} failed checks (exit $checkov_status); fix them or skip one in place: #checkov:skip=CKV_…:reason")
  failed=1
fi

# 4. The boot script nodes run, rendered as the region module renders it
# (no provider needed), must be valid bash for every role.
started=$SECONDS
export TF_DATA_DIR="$log/tofu-data"
if "$KILN_TOFU" -chdir="$here/tests/user-data" apply -auto-approve -input=false \
     -no-color -state="$log/user-data.tfstate" >"$log/user-data" 2>&1 &&
   "$KILN_TOFU" -chdir="$here/tests/user-data" output -no-color \
     -state="$log/user-data.tfstate" -json user_data >"$log/user-data.json" 2>>"$log/user-data" &&
   "$KILN_HCL2_PYTHON" - "$log/user-data.json" >"$log/user-data-findings" 2>&1 <<'PY'
import json, subprocess, sys
scripts = json.load(open(sys.argv[1]))
bad = []
for role in ("gateway", "worker", "query"):
    if role not in scripts:
        bad.append(f"{role}: not rendered")
        continue
    check = subprocess.run(["bash", "-n"], input=scripts[role].encode(), capture_output=True)
    if check.returncode != 0:
        bad.append(f"{role}: {check.stderr.decode().strip()}")
print("\n".join(bad))
sys.exit(1 if bad else 0)
PY
then
  summary+=("user-data  ok: the boot script of gateway, worker and query renders and passes bash -n ($((SECONDS - started)) s)")
else
  if [ -s "$log/user-data-findings" ]; then cat "$log/user-data-findings"; else cat "$log/user-data"; fi
  summary+=("user-data  FAILED: see above (modules/region/templates/node.sh.tftpl, tests/user-data)")
  failed=1
fi
unset TF_DATA_DIR

echo
for line in "${summary[@]}"; do
  echo "terraform: $line"
done
exit "$failed"
