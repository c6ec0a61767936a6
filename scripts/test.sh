#!/usr/bin/env bash
# `make test`: unit and integration tests against the test bed. Starts the
# test bed if it is not running and stops it afterwards (only if it started it).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
testbed=tests/testbed
source "$testbed/lib.sh"

# The traffic tests run the real praxis: build it first (once per machine,
# cached; see scripts/praxis.sh), not inside a test's time.
scripts/praxis.sh >/dev/null

started=""
all_running || started=1
"$testbed/up.sh"
[[ -z "$started" ]] || trap '"$testbed/down.sh"' EXIT

log=$(mktemp)
status=0
KUBECONFIG="$kubeconfig" cargo test --workspace --locked 2>&1 | tee "$log" || status=$?
if [[ -n "$started" ]]; then
  trap - EXIT
  "$testbed/down.sh"
fi
# One closing line over every test binary (cargo prints one per binary).
awk '/^test result:/ { passed += $4; failed += $6; ignored += $8 }
     END { printf "tests: %d passed, %d failed, %d skipped\n", passed, failed, ignored }' "$log"
rm -f "$log"
exit "$status"
