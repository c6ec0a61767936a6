#!/usr/bin/env bash
# Starts the test bed in the background on loopback: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kwok (fake nodes and pods) and
# pod-exec-sync. Returns once the API answers and the nodes are Ready.
# Running it again while the test bed is up leaves the one cluster as it is.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

etcd_port=${TESTBED_ETCD_PORT:-23790}
apiserver_port=${TESTBED_APISERVER_PORT:-16443}
kwok_port=${TESTBED_KWOK_PORT:-10247}
service_cidr=10.96.0.0/16
pod_cidr=10.244.0.0/16

"$here/build.sh"

if all_running; then
  if "$bin/kubectl" --kubeconfig "$kubeconfig" get --raw /readyz >/dev/null 2>&1; then
    echo "testbed: already up (KUBECONFIG=$kubeconfig)"
    exit 0
  fi
fi
# Anything half-started from before goes first, so there is only ever one cluster.
"$here/down.sh" >/dev/null

mkdir -p "$pki" "$logs" "$run" "$tb/etcd" "$tb/pods" "$tb/exec-shim"

# --- certificates and keys (made once, kept across restarts) ---------------
if [[ ! -f "$pki/admin.crt" ]]; then
  openssl genrsa -out "$pki/ca.key" 2048 2>/dev/null
  openssl req -x509 -new -key "$pki/ca.key" -subj "/CN=pontoon-testbed-ca" -days 3650 -out "$pki/ca.crt"
  issue() { # name subject [subjectAltName]
    local name=$1 subject=$2 san=${3:-}
    openssl genrsa -out "$pki/$name.key" 2048 2>/dev/null
    openssl req -new -key "$pki/$name.key" -subj "$subject" -out "$pki/$name.csr"
    local ext="$pki/$name.ext"
    { echo "basicConstraints=CA:FALSE"
      echo "keyUsage=digitalSignature,keyEncipherment"
      echo "extendedKeyUsage=serverAuth,clientAuth"
      [[ -n "$san" ]] && echo "subjectAltName=$san"
    } > "$ext"
    openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
      -days 3650 -extfile "$ext" -out "$pki/$name.crt" 2>/dev/null
    rm -f "$pki/$name.csr" "$ext"
  }
  issue apiserver "/CN=kube-apiserver" \
    "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  issue kwok "/CN=kwok" "IP:127.0.0.1,DNS:localhost"
  issue admin "/O=system:masters/CN=testbed-admin"
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
fi

"$bin/kubectl" config set-cluster testbed --kubeconfig "$kubeconfig" \
  --server "https://127.0.0.1:$apiserver_port" --certificate-authority "$pki/ca.crt" --embed-certs >/dev/null
"$bin/kubectl" config set-credentials admin --kubeconfig "$kubeconfig" \
  --client-certificate "$pki/admin.crt" --client-key "$pki/admin.key" --embed-certs >/dev/null
"$bin/kubectl" config set-context testbed --kubeconfig "$kubeconfig" --cluster testbed --user admin >/dev/null
"$bin/kubectl" config use-context testbed --kubeconfig "$kubeconfig" >/dev/null
kubectl() { "$bin/kubectl" --kubeconfig "$kubeconfig" "$@"; }

# --- control plane ---------------------------------------------------------
start etcd "$bin/etcd" \
  --name testbed --data-dir "$tb/etcd" \
  --listen-client-urls "http://127.0.0.1:$etcd_port" --advertise-client-urls "http://127.0.0.1:$etcd_port" \
  --listen-peer-urls "http://127.0.0.1:$((etcd_port + 10))" \
  --initial-advertise-peer-urls "http://127.0.0.1:$((etcd_port + 10))" \
  --initial-cluster "testbed=http://127.0.0.1:$((etcd_port + 10))" \
  --listen-metrics-urls "http://127.0.0.1:$((etcd_port + 20))" \
  --quota-backend-bytes 2147483648 --unsafe-no-fsync
wait_until 30 "etcd to answer" curl -fsS "http://127.0.0.1:$etcd_port/health"

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
  --profiling=false
wait_until 90 "kube-apiserver to be ready" kubectl get --raw /readyz

# kwok reads per-pod Exec objects (made by pod-exec-sync) from the API.
kubectl apply --server-side -f "$tb/share/kwok.x-k8s.io_execs.yaml" >/dev/null
wait_until 30 "the kwok Exec CRD" kubectl wait --for condition=Established crd/execs.kwok.x-k8s.io --timeout 5s

start kube-controller-manager "$bin/kube-controller-manager" \
  --kubeconfig "$kubeconfig" --bind-address 127.0.0.1 --secure-port 0 \
  --leader-elect=false --controllers '*' \
  --service-account-private-key-file "$pki/sa.key" --root-ca-file "$pki/ca.crt" \
  --cluster-signing-cert-file "$pki/ca.crt" --cluster-signing-key-file "$pki/ca.key" \
  --kube-api-qps 500 --kube-api-burst 1000 \
  --concurrent-gc-syncs 10
start kube-scheduler "$bin/kube-scheduler" \
  --kubeconfig "$kubeconfig" --bind-address 127.0.0.1 --secure-port 0 --leader-elect=false \
  --kube-api-qps 500 --kube-api-burst 1000

# --- fake nodes and pods ---------------------------------------------------
# Exec'd commands find the shim first (see exec-shim.sh) under every name.
for dir in /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
  [[ -d "$dir" ]] || continue
  for exe in "$dir"/*; do
    name=${exe##*/}
    [[ -x "$exe" && ! -e "$tb/exec-shim/$name" ]] && ln -s "$here/exec-shim.sh" "$tb/exec-shim/$name"
  done
done
start kwok env "PATH=$tb/exec-shim:$PATH" "TESTBED_REAL_PATH=$PATH" "$bin/kwok" \
  --kubeconfig "$kubeconfig" --config "$here/stages.yaml" \
  --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
  --enable-crds Exec \
  --node-ip 127.0.0.1 --node-port "$kwok_port" --server-address "127.0.0.1:$kwok_port" \
  --tls-cert-file "$pki/kwok.crt" --tls-private-key-file "$pki/kwok.key" \
  --cidr "$pod_cidr" --node-lease-duration-seconds 40
start pod-exec-sync "$bin/pod-exec-sync" --kubeconfig "$kubeconfig" --root "$tb/pods"

kubectl apply --server-side -f "$here/nodes.yaml" >/dev/null
wait_until 60 "the nodes to be Ready" kubectl wait --for condition=Ready node --all --timeout 5s
wait_until 30 "the default service account" kubectl get serviceaccount default -n default

echo "testbed: up; export KUBECONFIG=$kubeconfig (kubectl: $bin/kubectl)"
