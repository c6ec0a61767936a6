#!/usr/bin/env bash
# `make run`: the test bed, the CRDs, the bundled providers and the operator,
# then a sample Deployment with a GefyraBridgeMount on it, whose state
# transitions are printed until ACTIVE. The operator runs until Ctrl-C.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source tests/testbed/lib.sh
export KUBECONFIG=$kubeconfig
k() { "$bin/kubectl" "$@"; }
target=${CARGO_TARGET_DIR:-target}

tests/testbed/up.sh
echo "run: building pontoon and the bundled providers" >&2
cargo build --quiet --locked -p pontoon
scripts/providers.sh dist/providers
pontoon=$target/debug/pontoon
# For a second terminal: `source .testbed/env` puts this checkout's kubectl,
# helm and pontoon on the PATH and points KUBECONFIG at the test bed.
printf 'export KUBECONFIG=%q\nexport PATH=%q:%q:"$PATH"\n' \
  "$kubeconfig" "$bin" "$(cd "$(dirname "$pontoon")" && pwd)" >"$tb/env"
"$pontoon" crds | k apply --server-side --force-conflicts -f - >/dev/null

k create namespace gefyra --dry-run=client -o yaml | k apply -f - >/dev/null
k create namespace demo --dry-run=client -o yaml | k apply -f - >/dev/null
k apply -f - >/dev/null <<'YAML'
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: demo, labels: {app: web}}
spec:
  replicas: 3
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers:
      - name: app
        image: nginx:1.27
        ports: [{containerPort: 80, name: http}]
YAML

log=$logs/operator.log
# --single-tenant: the test bed has one user, who may patch and exec every
# pod anyway; a shared cluster runs the chart's admission policies instead.
# Where the test bed runs process pods (as root), developers' relays run
# this very pontoon (`pontoon bridge`): the test bed's image for it.
relay=()
if [[ -f "$run/netns" ]]; then
  cp -f "$pontoon" "$pod_bin/.pontoon.$$" && mv -f "$pod_bin/.pontoon.$$" "$pod_bin/pontoon"
  relay=(--relay-image testbed.pontoon.dev/pontoon:relay)
fi
"$pontoon" run --single-tenant --namespace gefyra --providers dist/providers --cache-dir "$tb/module-cache" "${relay[@]}" >"$log" 2>&1 &
operator=$!
# Ctrl-C reaches the operator too, which may be gone before this runs: under
# `set -e` a failing kill or wait would end the trap (and `make run`) with 1.
trap 'kill "$operator" 2>/dev/null || true; wait "$operator" 2>/dev/null || true; echo; echo "operator stopped; the test bed keeps running (make testbed-down stops it)"' EXIT
trap 'exit 0' INT TERM

# A fresh mount each time, so its transitions can be watched from the start.
if k -n gefyra get gefyrabridgemount web-mount >/dev/null 2>&1; then
  k -n gefyra delete gefyrabridgemount web-mount --wait=true >/dev/null
fi

cat <<EOF2

Pontoon is running (log: $log). In another terminal, in this directory:
  source .testbed/env
  kubectl -n gefyra get gbridgemounts
  kubectl -n gefyra describe gbridgemount web-mount
  kubectl -n demo get pods -o custom-columns=POD:.metadata.name,IMAGE:.spec.containers[0].image

Creating GefyraBridgeMount gefyra/web-mount on deployment/web (container app):
EOF2
k apply -f - >/dev/null <<'YAML'
apiVersion: gefyra.dev/v1
kind: gefyrabridgemount
metadata: {name: web-mount, namespace: gefyra}
targetNamespace: demo
target: deployment/web
targetContainer: app
provider: carrier2mount
providerParameter: {}
YAML

# Every state the mount entered, from its stateTransitions, as they appear.
transitions='{{range $state, $at := .stateTransitions}}{{$at}} {{$state}}{{"\n"}}{{end}}'
printed=0
deadline=$(( $(date +%s) + 120 ))
while :; do
  state=$(k -n gefyra get gefyrabridgemount web-mount -o jsonpath='{.state}' 2>/dev/null || true)
  mapfile -t lines < <(k -n gefyra get gefyrabridgemount web-mount -o go-template="$transitions" 2>/dev/null | sort)
  for line in "${lines[@]:printed}"; do
    printf '  %-11s %s\n' "${line#* }" "${line%% *}"
  done
  printed=${#lines[@]}
  if [[ "$state" == ACTIVE || "$state" == ERROR ]]; then
    k -n gefyra get gefyrabridgemount web-mount \
      -o jsonpath='  Ready: {.status.conditions[?(@.type=="Ready")].reason}: {.status.conditions[?(@.type=="Ready")].message}{"\n"}'
    break
  fi
  if (( $(date +%s) > deadline )); then echo "run: the mount did not become ACTIVE in 120 s; see $log" >&2; break; fi
  kill -0 "$operator" 2>/dev/null || { echo "run: the operator stopped; see $log" >&2; exit 1; }
  sleep 0.2
done
echo
k -n demo get pods -o custom-columns='POD:.metadata.name,IMAGE:.spec.containers[0].image,READY:.status.containerStatuses[0].ready'
echo
echo "The operator keeps running; Ctrl-C stops it (deleting the mount first restores the Deployment:"
echo "  kubectl -n gefyra delete gbridgemount web-mount)."
wait "$operator"
