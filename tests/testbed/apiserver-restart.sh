#!/usr/bin/env bash
# apiserver-restart.sh [SECONDS]: stops the test bed's kube-apiserver (SIGTERM,
# SIGKILL after 5 s), leaves it down for SECONDS (default 5), starts it again
# as up.sh does and returns once it answers /readyz. etcd keeps running, so
# nothing is lost: what clients see is an outage, as in a control-plane
# upgrade or a crashed API server.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

down=${1:-5}
pid=$(running kube-apiserver) || { echo "apiserver-restart: kube-apiserver is not running (tests/testbed/up.sh)" >&2; exit 1; }
kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid"
for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
kill -KILL -- "-$pid" 2>/dev/null || true
echo "apiserver-restart: kube-apiserver stopped at $(date +%T.%N | cut -c1-12); down for ${down}s"
sleep "$down"
start_apiserver
wait_until 90 "kube-apiserver to be ready" "$bin/kubectl" --kubeconfig "$kubeconfig" get --raw /readyz
echo "apiserver-restart: kube-apiserver ready again at $(date +%T.%N | cut -c1-12)"
