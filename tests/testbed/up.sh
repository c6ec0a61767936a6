#!/usr/bin/env bash
# Starts the test bed in the background on loopback: etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler, kwok (fake nodes and pods) and
# pod-exec-sync; as root also its network namespace with kube-proxy, CoreDNS
# and pod-runner, which really runs the pods of the images in
# process-images.yaml. Returns once the API answers and the nodes are Ready.
# Running it again while the test bed is up leaves the one cluster as it is,
# unless that was started from other binaries, certificates or settings than
# the checkout's: then it is restarted with them (etcd's data is kept).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

pod_cidr=10.244.0.0/16
# The cluster DNS server's address: the pods' gateway in the test bed's
# network namespace (see make_network).
cluster_dns=169.254.1.1
# LoadBalancer ingress addresses (stages.yaml gives them out).
load_balancer_cidr=10.97.0.0/16

# The recipe of the certificates below; raise it whenever make_pki changes:
# up.sh then replaces an older pki/ and restarts a test bed serving it.
pki_version=2

# make_pki: a CA and certificates as a kubeadm cluster issues them, so that
# strict verifiers (OpenSSL's X509_STRICT, Python 3.13's default context)
# accept them. The CA: basicConstraints critical CA:TRUE, keyUsage critical
# keyCertSign, cRLSign, digitalSignature, a subjectKeyIdentifier. Each leaf:
# basicConstraints critical CA:FALSE, keyUsage critical digitalSignature,
# keyEncipherment, one extendedKeyUsage (serverAuth for the API server and
# kwok, clientAuth for admin), an authorityKeyIdentifier, and a
# subjectAltName for servers. The version is written last: a half-made pki/
# is made again.
make_pki() {
  rm -rf "$pki"
  mkdir -p "$pki"
  openssl genrsa -out "$pki/ca.key" 2048 2>/dev/null
  printf '%s\n' '[req]' 'distinguished_name = dn' 'x509_extensions = ca' '[dn]' '[ca]' \
    'basicConstraints = critical, CA:TRUE' \
    'keyUsage = critical, digitalSignature, keyCertSign, cRLSign' \
    'subjectKeyIdentifier = hash' > "$pki/ca.cnf"
  openssl req -x509 -new -config "$pki/ca.cnf" -key "$pki/ca.key" -subj "/CN=pontoon-testbed-ca" \
    -days 3650 -sha256 -out "$pki/ca.crt"
  rm -f "$pki/ca.cnf"
  issue() { # NAME SUBJECT EXTENDED-KEY-USAGE [SUBJECT-ALT-NAME]
    local name=$1 subject=$2 usage=$3 san=${4:-}
    openssl genrsa -out "$pki/$name.key" 2048 2>/dev/null
    openssl req -new -key "$pki/$name.key" -subj "$subject" -out "$pki/$name.csr"
    { echo "basicConstraints = critical, CA:FALSE"
      echo "keyUsage = critical, digitalSignature, keyEncipherment"
      echo "extendedKeyUsage = $usage"
      echo "subjectKeyIdentifier = hash"
      echo "authorityKeyIdentifier = keyid:always"
      [[ -z "$san" ]] || echo "subjectAltName = $san"
    } > "$pki/$name.ext"
    openssl x509 -req -in "$pki/$name.csr" -CA "$pki/ca.crt" -CAkey "$pki/ca.key" -CAcreateserial \
      -days 3650 -sha256 -extfile "$pki/$name.ext" -out "$pki/$name.crt" 2>/dev/null
    rm -f "$pki/$name.csr" "$pki/$name.ext"
  }
  issue apiserver "/CN=kube-apiserver" serverAuth \
    "IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  issue kwok "/CN=kwok" serverAuth "IP:127.0.0.1,DNS:localhost"
  issue admin "/O=system:masters/CN=testbed-admin" clientAuth
  openssl genrsa -out "$pki/sa.key" 2048 2>/dev/null
  openssl rsa -in "$pki/sa.key" -pubout -out "$pki/sa.pub" 2>/dev/null
  echo "$pki_version" > "$pki/version"
}

# fingerprint: what the test bed is started from (binaries, certificates,
# ports, this recipe). A running test bed started from anything else is
# restarted, so `up.sh` always ends with what the checkout says.
fingerprint() {
  { echo "ports $etcd_port $apiserver_port $kwok_port"
    # Not the echo backend's: tests run it themselves, the cluster never does.
    find "$bin" "$tb/share" -maxdepth 1 -name '.*.key' ! -name .echo-backend.key -print0 |
      sort -z | xargs -0 -r cat
    (cd "$here" && sha256sum up.sh lib.sh stages.yaml nodes.yaml process-images.yaml audit-policy.yaml)
    ! can_run_processes || "$root/scripts/praxis.sh"
    (cd "$pki" && sha256sum version ./*.crt ./*.pub)
  } | sha256sum | cut -c1-16
}

"$here/build.sh"
# Process pods of stock Praxis's image run the real praxis, and those of
# Pontoon's data-plane image the data plane built from this checkout.
! can_run_processes || "$root/scripts/praxis.sh" >/dev/null
! can_run_processes || dataplane=$("$root/scripts/dataplane.sh")

# --- certificates and keys (kept across restarts, remade by a new recipe) ---
if [[ "$(cat "$pki/version" 2>/dev/null)" != "$pki_version" ]]; then
  [[ ! -e "$pki" ]] || echo "testbed: replacing the certificates in $pki (made by an older recipe)" >&2
  make_pki
fi

wanted=$(fingerprint)
if all_running; then
  if [[ "$(cat "$run/fingerprint" 2>/dev/null)" != "$wanted" ]]; then
    echo "testbed: restarting: it runs from other binaries, certificates or settings than these" >&2
  elif "$bin/kubectl" --kubeconfig "$kubeconfig" get --raw /readyz >/dev/null 2>&1; then
    echo "testbed: already up (KUBECONFIG=$kubeconfig)"
    exit 0
  fi
fi
# Anything half-started from before goes first, so there is only ever one cluster.
"$here/down.sh" >/dev/null
rm -f "$run/fingerprint"

mkdir -p "$logs" "$run" "$tb/etcd" "$tb/pods" "$tb/exec-shim"

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

start_apiserver
wait_until 90 "kube-apiserver to be ready" kubectl get --raw /readyz

# kwok reads per-pod Exec, PortForward and Logs objects (made by
# pod-exec-sync) from the API.
kubectl apply --server-side -f "$tb/share/kwok.x-k8s.io_execs.yaml" >/dev/null
"$bin/pod-exec-sync" crds | kubectl apply --server-side -f - >/dev/null
wait_until 30 "the kwok Exec CRD" kubectl wait --for condition=Established crd/execs.kwok.x-k8s.io --timeout 5s
wait_until 30 "the kwok PortForward CRD" kubectl wait --for condition=Established crd/portforwards.kwok.x-k8s.io --timeout 5s
wait_until 30 "the kwok Logs CRD" kubectl wait --for condition=Established crd/logs.kwok.x-k8s.io --timeout 5s

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
# Exec'd commands find the shim first (see exec-shim.sh) under every name,
# the host's and pod-bin's; the shim runs them with the host's PATH and, after
# it, pod-bin: what the pods' images would hold (e.g. carrier2) is found by a
# direct exec and from an exec'd shell alike, and the host never sees it.
# The links are made afresh when they lead to another checkout's shim.
if [[ "$(readlink "$tb/exec-shim/sh" || true)" != "$here/exec-shim.sh" ]]; then
  rm -rf "$tb/exec-shim"
  mkdir -p "$tb/exec-shim"
fi
for dir in "$pod_bin" /usr/local/sbin /usr/local/bin /usr/sbin /usr/bin /sbin /bin; do
  [[ -d "$dir" ]] || continue
  for exe in "$dir"/*; do
    name=${exe##*/}
    [[ -x "$exe" && ! -e "$tb/exec-shim/$name" ]] && ln -s "$here/exec-shim.sh" "$tb/exec-shim/$name"
  done
done
case "$pod_bin/" in
  /tmp/*) echo "testbed: warning: $pod_bin is under /tmp, which exec'd commands cannot see; set PONTOON_CACHE_DIR elsewhere" >&2 ;;
esac
# kwok hands out pod IPs from the start of its range each time it starts,
# blind to the IPs that pods from before still hold; so each start takes the
# next /20 of the pod range, and a process pod never shares its IP.
generation=$(( ($(cat "$run/pod-range" 2>/dev/null || echo 15) + 1) % 16 ))
echo "$generation" > "$run/pod-range"
start kwok env "PATH=$tb/exec-shim:$PATH" "TESTBED_REAL_PATH=$PATH:$pod_bin" "$bin/kwok" \
  --kubeconfig "$kubeconfig" --config "$here/stages.yaml" \
  --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
  --enable-crds Exec --enable-crds PortForward --enable-crds Logs \
  --node-ip 127.0.0.1 --node-port "$kwok_port" --server-address "127.0.0.1:$kwok_port" \
  --tls-cert-file "$pki/kwok.crt" --tls-private-key-file "$pki/kwok.key" \
  --cidr "10.244.$((generation * 16)).0/20" --node-lease-duration-seconds 40

# --- the network the process pods share -------------------------------------
# One namespace, its own address (the pods' gateway) on its loopback device:
# the Service and load-balancer ranges are routed there from that address,
# and kube-proxy's NAT sends them on to the pods' veths. Nothing in it
# reaches the host's network.
make_network() {
  ip netns add "$netns"
  ip -n "$netns" -batch - <<EOF
link set lo up
addr add 169.254.1.1/32 dev lo
route add $service_cidr dev lo src 169.254.1.1
route add $load_balancer_cidr dev lo src 169.254.1.1
EOF
  in_netns sh -c 'echo 1 > /proc/sys/net/ipv4/ip_forward'
  # A load-balancer address kube-proxy has not programmed yet (its rules
  # follow a new Service by a second or so, while the test bed hands out
  # load-balancer addresses at once) would take a TCP connection down the
  # route above to nowhere: its conntrack entry, made without NAT, then
  # holds every retransmission of that SYN, and the client hangs until its
  # own timeout. Refuse it instead, as an unready load balancer does, so the
  # client's next attempt meets kube-proxy's rules. (An unprogrammed
  # ClusterIP is kube-proxy's own to drop, as in any cluster.)
  #
  # Hairpin: a pod reaching itself through a Service (the relay checks its
  # own Service so). Each node's kube-proxy masquerades such connections
  # for the endpoints on its node, so that the pod's answer comes back
  # through the NAT; the test bed's one kube-proxy is one node's
  # (kwok-node-0), so the pod-runner lists every pod here (`podIP .
  # podIP`, added as it wires a pod and removed as it unwires it) and this
  # table masquerades them, whichever node they are on.
  in_netns nft -f - <<EOF
table inet pontoon-testbed {
  set hairpin {
    type ipv4_addr . ipv4_addr
  }
  chain hairpin-masquerade {
    type nat hook postrouting priority srcnat + 10; policy accept;
    ct status dnat ip saddr . ip daddr @hairpin masquerade
  }
  chain unprogrammed-output {
    type filter hook output priority filter + 10; policy accept;
    ip daddr $load_balancer_cidr meta l4proto tcp ct status & dnat == 0 reject with tcp reset
  }
  chain unprogrammed-forward {
    type filter hook forward priority filter + 10; policy accept;
    ip daddr $load_balancer_cidr meta l4proto tcp ct status & dnat == 0 reject with tcp reset
  }
}
EOF
}
process_images=()
process_pods=()
rm -f "$run/netns"
if can_run_processes; then
  make_network
  # For tests: where to send traffic to pods and Services.
  echo "$netns" > "$run/netns"
  process_images=(--images "$here/process-images.yaml")
  # Port-forwards to process pods enter the pods' namespaces, named after
  # it; their logs (`kubectl logs`) are the CRI-format ones pod-runner
  # writes under its --logs.
  process_pods=(--netns "$netns" --logs "$logs/pods")
  praxis=$("$root/scripts/praxis.sh")
  mkdir -p "$logs/pods"
  # The API server is relayed into the namespace at the same address, so
  # kube-proxy and clients there use the same kubeconfig.
  start pod-runner "$bin/pod-runner" --kubeconfig "$kubeconfig" "${process_images[@]}" \
    --bin-dirs "$bin:$pod_bin:${praxis%/*}:${dataplane%/*}" --state "$tb/process-pods" --logs "$logs/pods" \
    --netns "$netns" --api-relay "127.0.0.1:$apiserver_port" \
    --exec-root "$tb/pods" --dns "$cluster_dns" --token-refresh 30s
  wait_until 30 "the API server inside the network namespace" \
    in_netns "$bin/kubectl" --kubeconfig "$kubeconfig" get --raw /readyz
  # Cluster DNS, as a cluster's CoreDNS serves it (Services, headless
  # Services' pods, pods by IP), on the pods' gateway address, which every
  # pod's resolv.conf names (pod-runner --dns). Nothing else is answered:
  # nothing outside the test bed is reachable from its pods anyway.
  cat > "$run/Corefile" <<EOF
cluster.local:53 {
    bind $cluster_dns
    ready 127.0.0.1:8181
    errors
    kubernetes cluster.local {
        kubeconfig $kubeconfig testbed
        pods insecure
    }
}
EOF
  start coredns nsenter --net="/run/netns/$netns" -- "$bin/coredns" -conf "$run/Corefile"
  start kube-proxy nsenter --net="/run/netns/$netns" -- "$bin/kube-proxy" \
    --kubeconfig "$kubeconfig" --hostname-override kwok-node-0 --proxy-mode nftables \
    --cluster-cidr "$pod_cidr" --conntrack-max-per-core 0 --nodeport-addresses 169.254.1.1/32 \
    --healthz-bind-address 127.0.0.1:10256 --metrics-bind-address 127.0.0.1:10249
else
  echo "testbed: not root: no network namespace, so pods of process images are only faked, like every other" >&2
fi
start pod-exec-sync "$bin/pod-exec-sync" --kubeconfig "$kubeconfig" --root "$tb/pods" "${process_images[@]}" "${process_pods[@]}"

kubectl apply --server-side -f "$here/nodes.yaml" >/dev/null
wait_until 60 "the nodes to be Ready" kubectl wait --for condition=Ready node --all --timeout 5s
wait_until 30 "the default service account" kubectl get serviceaccount default -n default
if can_run_processes; then
  wait_until 30 "kube-proxy to be healthy" in_netns curl -fsS http://127.0.0.1:10256/healthz
  wait_until 30 "CoreDNS to be ready" in_netns curl -fsS http://127.0.0.1:8181/ready
fi

echo "$wanted" > "$run/fingerprint"
echo "testbed: up; export KUBECONFIG=$kubeconfig (kubectl: $bin/kubectl)"
