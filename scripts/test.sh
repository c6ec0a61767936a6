#!/usr/bin/env bash
# `make test`: unit and integration tests against the test bed. Starts the
# test bed if it is not running and stops it afterwards (only if it started it).
#
# A test that cannot have its environment here (not root, say) records a
# skip (pontoon_tests::skip, into PONTOON_TEST_SKIPS): cargo counts it as
# passed, this script as skipped, and lists it with its reason. Under
# CI=true, where the environment is promised, such a test fails instead, and
# so does a conformance suite that cannot run.

# summary CARGO_LOG TEST_SKIPS SUITE_SKIPS SUITE_FAILURES: the skipped and
# failed-to-run lines (`<test>: <reason>`), then one closing line over every
# test binary (cargo prints one per binary). TEST_SKIPS are cargo tests that
# recorded a skip (in cargo's passed); SUITE_* are this script's own suites
# (in no cargo count).
summary() {
  local log=$1 test_skips=$2 suite_skips=$3 suite_failures=$4
  sort "$test_skips" | sed 's/^/skipped: /'
  sed 's/^/skipped: /' "$suite_skips"
  sed 's/^/failed: /' "$suite_failures"
  awk -v test_skips="$(wc -l <"$test_skips")" -v suite_skips="$(wc -l <"$suite_skips")" \
      -v suite_failures="$(wc -l <"$suite_failures")" '
    /^test result:/ { passed += $4; failed += $6; ignored += $8 }
    END { printf "tests: %d passed, %d failed, %d skipped\n", passed - test_skips,
            failed + suite_failures, ignored + test_skips + suite_skips }' "$log"
}

# Sourced (to check `summary` on a sample log): the function only.
[[ "${BASH_SOURCE[0]}" == "$0" ]] || return 0

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
test_skips=$(mktemp)
suite_skips=$(mktemp)
suite_failures=$(mktemp)
export PONTOON_TEST_SKIPS=$test_skips
status=0
KUBECONFIG="$kubeconfig" cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$log" || status=$?
# Pontoon's data plane is a cargo workspace of its own (dataplane/Cargo.toml).
cargo test --manifest-path dataplane/Cargo.toml --locked --no-fail-fast 2>&1 | tee -a "$log" || status=$?
# Then the official Gateway API conformance suite against the same operator
# (it needs the test bed's process pods, hence root).
conformance=""
if can_run_processes; then
  conformance_log=$(mktemp)
  scripts/gateway-conformance.sh 2>&1 | tee "$conformance_log" || status=1
  conformance=$(grep '^conformance: GATEWAY-' "$conformance_log" || echo "conformance: did not run to the end")
  rm -f "$conformance_log"
else
  reason="not root (the suite's traffic needs the test bed's network namespace)"
  if [[ "${CI:-}" == true ]]; then
    echo "gateway-conformance: CI=true promises its environment, but it is missing here: $reason" >>"$suite_failures"
    conformance="conformance: did not run: $reason"
    status=1
  else
    echo "gateway-conformance: $reason" >>"$suite_skips"
    conformance="conformance: skipped: $reason"
  fi
fi
if [[ -n "$started" ]]; then
  trap - EXIT
  "$testbed/down.sh"
fi
summary "$log" "$test_skips" "$suite_skips" "$suite_failures"
echo "$conformance"
rm -f "$log" "$test_skips" "$suite_skips" "$suite_failures"
exit "$status"
