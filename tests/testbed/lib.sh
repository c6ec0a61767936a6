# Shared by build.sh, up.sh, down.sh and scripts/test.sh: where the test bed lives, its
# processes and their pid files.
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
tb=${TESTBED_DIR:-$root/.testbed}
bin=$tb/bin pki=$tb/pki logs=$tb/logs run=$tb/run
kubeconfig=$tb/kubeconfig
etcd_port=${TESTBED_ETCD_PORT:-23790}
apiserver_port=${TESTBED_APISERVER_PORT:-16443}
kwok_port=${TESTBED_KWOK_PORT:-10247}
service_cidr=10.96.0.0/16
# The per-user cache of built binaries (see build.sh).
cache_root=${PONTOON_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pontoon}/testbed
# Programs only pods' exec sees (on its PATH, not the host's): stand-ins for
# what the pods' images would hold, e.g. carrier2. They live in the cache,
# one directory per test bed, not in the test bed's directory: an exec'd
# command gets its pod's own /tmp bound over /tmp, which hides a checkout
# that lives under /tmp (as a CI clone may).
pod_bin=$cache_root/pod-bin/$(printf '%s' "$tb" | sha256sum | cut -c1-12)

# The test bed's network namespace (an `ip netns` name, one per test bed):
# where kube-proxy programs Services and the process pods' veths end, with
# the pods' own namespaces named after it (see podrun/).
netns=pontoon-$(printf '%s' "$tb" | sha256sum | cut -c1-8)

components=(coredns kube-proxy pod-runner pod-exec-sync kwok kube-scheduler kube-controller-manager kube-apiserver etcd)
# What runs only where the test bed can make network namespaces (as root).
optional_components=(coredns kube-proxy pod-runner)

# start NAME COMMAND...: runs COMMAND in its own session, logging to logs/NAME.log.
start() {
  local name=$1; shift
  setsid "$@" >>"$logs/$name.log" 2>&1 < /dev/null &
  echo $! > "$run/$name.pid"
}

# running NAME: the pid of NAME if its process is alive.
running() {
  local pid
  pid=$(cat "$run/$1.pid" 2>/dev/null) || return 1
  kill -0 "$pid" 2>/dev/null && echo "$pid"
}

all_running() {
  local c
  for c in "${components[@]}"; do
    [[ " ${optional_components[*]} " == *" $c "* ]] && ! can_run_processes && continue
    running "$c" >/dev/null || return 1
  done
}

# can_run_processes: whether process pods can run here (network namespaces
# need root).
can_run_processes() { [[ $(id -u) -eq 0 ]]; }

# in_netns COMMAND...: runs COMMAND in the test bed's network namespace.
in_netns() { nsenter --net="/run/netns/$netns" -- "$@"; }

# wait_until SECONDS WHAT COMMAND...: retries COMMAND until it succeeds.
wait_until() {
  local limit=$1 what=$2; shift 2
  local deadline=$(( $(date +%s) + limit ))
  until "$@" >/dev/null 2>&1; do
    if (( $(date +%s) >= deadline )); then
      echo "testbed: gave up after ${limit}s waiting for $what; logs in $logs/" >&2
      return 1
    fi
    sleep 0.5
  done
}

# start_apiserver: kube-apiserver as up.sh starts it (apiserver-restart.sh
# starts it again the same way).
start_apiserver() {
  start kube-apiserver "$bin/kube-apiserver" \
    --etcd-servers "http://127.0.0.1:$etcd_port" \
    --bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$apiserver_port" \
    --tls-cert-file "$pki/apiserver.crt" --tls-private-key-file "$pki/apiserver.key" \
    --client-ca-file "$pki/ca.crt" \
    --service-account-issuer https://kubernetes.default.svc.cluster.local \
    --service-account-key-file "$pki/sa.pub" --service-account-signing-key-file "$pki/sa.key" \
    --service-cluster-ip-range "$service_cidr" \
    --authorization-mode RBAC --allow-privileged=true \
    --kubelet-client-certificate "$pki/admin.crt" --kubelet-client-key "$pki/admin.key" \
    --kubelet-preferred-address-types InternalIP \
    --audit-policy-file "$here/audit-policy.yaml" --audit-log-path "$logs/audit.log" \
    --audit-log-format json --audit-log-maxsize 200 --audit-log-maxbackup 1 \
    --profiling=false
}
