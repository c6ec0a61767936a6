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
KUBECONFIG="$kubeconfig" cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$log" || status=$?
# Then the official Gateway API conformance suite against the same operator
# (it needs the test bed's process pods, hence root).
conformance=""
if can_run_processes; then
  conformance_log=$(mktemp)
  scripts/gateway-conformance.sh 2>&1 | tee "$conformance_log" || status=1
  conformance=$(grep '^conformance: GATEWAY-HTTP' "$conformance_log" || echo "conformance: did not run to the end")
  rm -f "$conformance_log"
else
  conformance="conformance: skipped: not root (the suite's traffic needs the test bed's network namespace)"
fi
if [[ -n "$started" ]]; then
  trap - EXIT
  "$testbed/down.sh"
fi
# One closing line over every test binary (cargo prints one per binary).
awk '/^test result:/ { passed += $4; failed += $6; ignored += $8 }
     END { printf "tests: %d passed, %d failed, %d skipped\n", passed, failed, ignored }' "$log"
echo "$conformance"
rm -f "$log"
exit "$status"
