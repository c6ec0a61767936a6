#!/usr/bin/env bash
# Builds the test bed's binaries from the pinned Go modules (go.mod / go.sum)
# into a per-user cache keyed by a hash of the pins, then installs them into
# .testbed/bin. A second run, or a fresh clone on the same machine, finds the
# cache and compiles nothing.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
dest=${TESTBED_DIR:-$root/.testbed}/bin

# Everything that decides what gets built is part of the key.
key=$(cd "$here" && cat go.mod go.sum build.sh podexec/*.go | sha256sum | cut -c1-16)
cache=${PONTOON_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pontoon}/testbed/$key

binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok helm pod-exec-sync)

complete() {
  local b
  for b in "${binaries[@]}"; do [[ -x "$cache/bin/$b" ]] || return 1; done
  [[ -f "$cache/share/kwok.x-k8s.io_execs.yaml" ]]
}

if ! complete; then
  command -v go >/dev/null || { echo "testbed: Go is required to build the test bed" >&2; exit 1; }
  echo "testbed: building binaries into $cache (first time only; this takes a while)" >&2
  start=$(date +%s)
  work="$cache.partial"
  rm -rf "$work"
  mkdir -p "$work/bin" "$work/share"
  cd "$here"
  flags=(-trimpath -ldflags "-s -w")
  go build "${flags[@]}" -o "$work/bin/etcd" go.etcd.io/etcd/server/v3
  go build "${flags[@]}" -o "$work/bin/pod-exec-sync" ./podexec
  go build "${flags[@]}" -o "$work/bin/kwok" sigs.k8s.io/kwok/cmd/kwok
  go build "${flags[@]}" -o "$work/bin/helm" helm.sh/helm/v3/cmd/helm
  # Stamp the release, as Kubernetes' own build does: clients (helm's
  # kubeVersion checks among them) read it from /version.
  kube=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
  minor=${kube#v1.}; minor=${minor%%.*}
  stamp=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    stamp+=" -X $pkg.gitVersion=$kube -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
    go build -trimpath -ldflags "-s -w$stamp" -o "$work/bin/$cmd" "k8s.io/kubernetes/cmd/$cmd"
  done
  kwok_dir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  cp "$kwok_dir/kustomize/crd/bases/kwok.x-k8s.io_execs.yaml" "$work/share/"
  rm -rf "$cache"
  mv "$work" "$cache"
  echo "testbed: built in $(( $(date +%s) - start ))s" >&2
fi

# Install into the checkout unless it already holds this exact build.
if [[ "$(cat "$dest/.key" 2>/dev/null)" != "$key" ]]; then
  mkdir -p "$dest"
  cp -f "$cache"/bin/* "$dest/"
  mkdir -p "$dest/../share"
  cp -f "$cache"/share/* "$dest/../share/"
  echo "$key" > "$dest/.key"
fi
