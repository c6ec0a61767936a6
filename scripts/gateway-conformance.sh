#!/usr/bin/env bash
# `make gateway-conformance`: the official Gateway API conformance suite
# (profiles GATEWAY-HTTP, GATEWAY-GRPC, GATEWAY-TLS and GATEWAY-TCP, from the
# Go module tests/conformance pins) against Pontoon on the test bed, whose
# process pods really run the suite's echo servers (HTTP, gRPC, TLS, TCP) and
# Pontoon's data planes (pontoon-dataplane). Starts the test bed and the operator (its
# Gateway controllers only), creates the GatewayClass `pontoon`, passes the
# features its status reports, prints the suite's summary and leaves the
# report in .testbed/conformance-report.yaml.
#
#   CONFORMANCE_ARGS      more flags for the suite, e.g. --run-test HTTPRouteSimpleSameNamespace
#                         (tests to skip: CONFORMANCE_SKIP)
#   CONFORMANCE_PROFILES  the profiles to run (default GATEWAY-HTTP,GATEWAY-GRPC,GATEWAY-TLS,GATEWAY-TCP)
#   CONFORMANCE_SKIP      tests not run (default none)
#   CONFORMANCE_CHANNEL   the Gateway API CRDs' channel installed (default experimental:
#                         the HTTPRouteRetry features' tests need a rule's `retry`, a field
#                         of the experimental channel's HTTPRoute; `standard` runs the
#                         suite on the CRDs the chart installs, without those tests)
#
# With --publish (what `make gateway-conformance` passes), a run that passes
# every profile on a committed tree also files its report the way Gateway
# API's conformance/reports/ keeps them, in docs/conformance/ (see
# publish_report below); `make test` runs without it and leaves docs alone.

# conformance_summary REPORT: `conformance: <PROFILE> core N passed, ...`
# for each profile of the suite's report, sorted by profile.
conformance_summary() {
  awk '
    /^profiles:/ { inside = 1; next }
    /^[a-zA-Z]/ { inside = 0 }
    !inside { next }
    /^- core:/ { section = "c"; split("", v) }
    /^  extended:/ { section = "e" }
    /^      (Passed|Failed|Skipped):/ { key = $1; sub(":", "", key); v[section key] = $2 }
    /^  name:/ {
      printf "conformance: %s core %d passed, %d failed, %d skipped; extended %d passed, %d failed, %d skipped\n",
        $2, v["cPassed"], v["cFailed"], v["cSkipped"], v["ePassed"], v["eFailed"], v["eSkipped"]
    }' "$1" | sort
}

# publish_report REPORT DIR: files REPORT as DIR/<channel>-<version>-<mode>-report.yaml
# (Gateway API's naming; one report per release of Pontoon, so an earlier
# report of the same release, at another commit, is replaced) and writes
# DIR/README.md: the table of reports and how to reproduce them.
publish_report() {
  local report=$1 dir=$2 channel version mode
  channel=$(sed -n 's/^gatewayAPIChannel: //p' "$report")
  version=$(sed -n 's/^  version: //p' "$report")
  mode=$(sed -n 's/^mode: //p' "$report")
  mkdir -p "$dir"
  rm -f "$dir/$channel-${version%%+*}"+*"-$mode-report.yaml"
  cp "$report" "$dir/$channel-$version-$mode-report.yaml"
  {
    echo "# Pontoon"
    echo
    echo "Pontoon's Gateway API controllers (\`pontoon run --controllers gateway-api\`) with Pontoon's"
    echo "data plane (\`pontoon-dataplane\`: Praxis 0.7.5 and Pontoon's filters). Reports as the Gateway"
    echo "API conformance suite wrote them, unmodified."
    echo
    echo "## Table of Contents"
    echo
    echo "|API channel|Implementation version|Mode|Report|"
    echo "|-----------|----------------------|----|------|"
    local file name
    for file in "$dir"/*-report.yaml; do
      name=${file##*/}
      echo "|$(sed -n 's/^gatewayAPIChannel: //p' "$file")|$(sed -n 's/^  version: //p' "$file")|$(sed -n 's/^mode: //p' "$file")|[$(sed -n 's/^  version: //p' "$file") report](./$name)|"
    done
    echo
    echo "## Reproduce"
    echo
    echo "As root (the suite's traffic goes through the test bed's network namespace), in a clone"
    echo "of Pontoon at the commit after the version's \`+\`:"
    echo
    echo '```sh'
    echo "make gateway-conformance"
    echo '```'
    echo
    echo "It starts the test bed (a real kube-apiserver, kwok nodes, and process pods that really"
    echo "run the suite's echo servers and each Gateway's Praxis), runs \`pontoon run --controllers"
    echo "gateway-api\`, creates the GatewayClass \`pontoon\`, runs the suite for the features its"
    echo "\`status.supportedFeatures\` lists (profiles GATEWAY-HTTP, GATEWAY-GRPC, GATEWAY-TLS and"
    echo "GATEWAY-TCP) on the"
    echo "Gateway API's experimental-channel CRDs (\`pontoon crds --channel experimental\`: the"
    echo "HTTPRouteRetry features need a rule's \`retry\`), and files the report here"
    echo "(scripts/gateway-conformance.sh --publish)."
  } >"$dir/README.md"
}

# Sourced (to check `conformance_summary` on a sample report): the function only.
[[ "${BASH_SOURCE[0]}" == "$0" ]] || return 0

set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
publish=false
[[ "${1:-}" != --publish ]] || publish=true
source tests/testbed/lib.sh
export KUBECONFIG=$kubeconfig
k() { "$bin/kubectl" "$@"; }
target=${CARGO_TARGET_DIR:-target}

can_run_processes ||
  { echo "conformance: needs root: the suite's traffic goes through the test bed's network namespace" >&2; exit 1; }
tests/testbed/up.sh
echo "conformance: building pontoon and the bundled modules" >&2
cargo build --quiet --locked -p pontoon
scripts/providers.sh dist/providers >/dev/null
pontoon=$target/debug/pontoon
# Every Gateway API CRD of one channel: the suite reads the channel from
# their annotations, and refuses CRDs of two channels.
channel=${CONFORMANCE_CHANNEL:-experimental}
"$pontoon" crds --channel "$channel" | k apply --server-side --force-conflicts -f - >/dev/null

log=$logs/conformance-operator.log
"$pontoon" run --controllers gateway-api --providers dist/providers --cache-dir "$tb/module-cache" \
  --metrics-addr 127.0.0.1:0 >"$log" 2>&1 &
operator=$!
trap 'kill "$operator" 2>/dev/null || true; wait "$operator" 2>/dev/null || true' EXIT

k apply -f - >/dev/null <<'YAML'
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: pontoon}
spec:
  controllerName: pontoon.dev/gateway-controller
YAML
k wait --for=condition=Accepted gatewayclass/pontoon --timeout=60s >/dev/null
features=$(k get gatewayclass pontoon -o jsonpath='{range .status.supportedFeatures[*]}{.name}{","}{end}')
features=${features%,}
if [[ "$channel" == standard ]]; then
  # A rule's `retry` is the experimental channel's: on the standard CRDs
  # the API server drops it, so the retry features cannot be shown.
  features=$(tr , '\n' <<<"$features" | grep -v '^HTTPRouteRetry' | paste -sd , -)
fi
echo "conformance: GatewayClass pontoon accepted ($channel channel); supported features: $features" >&2

# The implementation's version, a semver as the reports need: the release in
# Cargo.toml, and the commit as build metadata (`-dirty` when the tree has
# changes beyond docs/conformance, which a published report never has).
release=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
version="v$release+$commit"
if [[ -n "$(git status --porcelain -- . ':!docs/conformance' 2>/dev/null)" ]]; then
  version="$version-dirty"
fi
report=$tb/conformance-report.yaml
rm -f "$report"
start=$(date +%s)
status=0
# In the test bed's network namespace: the Gateways' addresses are reachable
# there, and the API server is relayed there at its usual address.
# GatewayStaticAddresses asks for one address the test bed's load balancer
# gives (its range is 10.97.0.0/16, tests/testbed/stages.yaml) and one it
# does not.
in_netns "$bin/gateway-conformance.test" -test.run '^TestConformance$' -test.v -test.timeout 60m \
  --gateway-class pontoon \
  --conformance-profiles "${CONFORMANCE_PROFILES:-GATEWAY-HTTP,GATEWAY-GRPC,GATEWAY-TLS,GATEWAY-TCP}" \
  --supported-features "$features" --skip-tests "${CONFORMANCE_SKIP-}" \
  --usable-address 10.97.255.254 --unusable-address 10.98.0.1 \
  --organization pontoon --project pontoon --url https://github.com/pontoon-dev/pontoon \
  --version "$version" --contact https://github.com/pontoon-dev/pontoon/issues/new \
  --report-output "$report" ${CONFORMANCE_ARGS:-} >"$logs/conformance.log" 2>&1 || status=$?
elapsed=$(( $(date +%s) - start ))

# The summary: the verdict of each test that ran, then the report's profile
# (which lists the skipped ones).
grep -E '^\s*--- (PASS|FAIL): TestConformance/[^/ ]+ ' "$logs/conformance.log" |
  sed -E 's/^\s*--- //' || true
[[ ! -f "$report" ]] || sed -n '/^profiles:/,$p' "$report" | grep -v '^    - Mesh'
# One closing line per profile, from the report. Its profiles come in any
# order, each item's `name:` after its figures (keys sorted), and a profile
# without extended tests has no `extended:` section.
[[ ! -f "$report" ]] || conformance_summary "$report"
echo "conformance: ${elapsed}s; log $logs/conformance.log, report $report" >&2
if $publish; then
  if [[ "$status" != 0 || ! -f "$report" ]]; then
    echo "conformance: not published: the suite did not pass" >&2
  elif [[ "$version" == *-dirty ]]; then
    echo "conformance: not published: the tree has uncommitted changes (commit them and run again)" >&2
  else
    gateway_api=$(sed -n 's/^gatewayAPIVersion: v\([0-9]*\.[0-9]*\).*/v\1/p' "$report")
    publish_report "$report" "docs/conformance/$gateway_api/pontoon-pontoon"
    echo "conformance: report filed in docs/conformance/$gateway_api/pontoon-pontoon/" >&2
  fi
fi
exit "$status"
