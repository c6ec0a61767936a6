#!/usr/bin/env bash
# Builds the test bed's binaries into a per-user cache and installs them into
# the test bed's directory (.testbed/ unless TESTBED_DIR says otherwise). Each
# part of the cache is keyed by exactly what decides its contents, so a second
# run, or a fresh clone on the same machine, compiles nothing:
#
#   platform  etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
#             kube-proxy, kubectl, kwok, helm (and kwok's Exec CRD): keyed by go.mod,
#             go.sum and the recipe build_platform below. ~5 minutes on two
#             cores; rebuilt only when a pin or that recipe changes.
#   tools     the test bed's own small programs, one cache entry each, keyed
#             by go.mod, go.sum and the program's own sources; seconds:
#               pod-exec-sync  (podexec/)   -> bin/
#               carrier2       (carrier2/)  -> pod-bin (on the PATH of pods' exec only; see lib.sh)
#               echo-backend   (echo/)      -> bin/ (traffic tests run it themselves,
#                                              in their network namespaces)
#               pod-runner     (podrun/)    -> bin/ (runs the process pods; see
#                                              process-images.yaml)
#   conformance the Gateway API conformance suite (gateway-conformance.test)
#             and its echo server (echo-basic, a process image), from the
#             module tests/conformance; keyed by its go.mod, go.sum and the
#             recipe build_conformance; a minute or two.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

platform_binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubectl kwok helm)

# build_platform DIR: compiles the platform into DIR/bin and DIR/share. Its
# text is part of the platform's key: edit it and the platform is rebuilt.
build_platform() {
  local out=$1 flags=(-trimpath -ldflags "-s -w")
  mkdir -p "$out/bin" "$out/share"
  go build "${flags[@]}" -o "$out/bin/etcd" go.etcd.io/etcd/server/v3
  # kwok copies an exec's stdin into the command's stdin pipe but never
  # closes that pipe, so a command reading to the end of its input (`busybox
  # sh` given a script on stdin, `cat`) never ends. A kubelet closes it when
  # the client's stdin ends; kwok does too with this one-line fix, built from
  # a patched copy of the pinned module (the module cache stays untouched).
  local src=$out/kwok-src kwok_dir
  # `go list -m` names the module's directory only once it is downloaded
  # (on a fresh machine nothing is).
  go mod download sigs.k8s.io/kwok
  kwok_dir=$(go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
  [[ -d "$kwok_dir" ]] || { echo "testbed: cannot find the kwok module's sources" >&2; return 1; }
  cp -r "$kwok_dir" "$src"
  chmod -R u+w "$src"
  sed -i 's|^\(\t*\)_, _ = io.Copy(inPipe, opt.In)$|&\n\1_ = inPipe.Close()|' "$src/pkg/utils/exec/exec.go"
  grep -q '_ = inPipe.Close()' "$src/pkg/utils/exec/exec.go" ||
    { echo "testbed: kwok's pkg/utils/exec/exec.go changed; update its patch in build.sh" >&2; return 1; }
  cp go.mod "$out/kwok.mod"
  cp go.sum "$out/kwok.sum"
  go mod edit -modfile "$out/kwok.mod" -replace "sigs.k8s.io/kwok=$src"
  go build "${flags[@]}" -modfile "$out/kwok.mod" -o "$out/bin/kwok" sigs.k8s.io/kwok/cmd/kwok
  rm -rf "$src" "$out/kwok.mod" "$out/kwok.sum"
  go build "${flags[@]}" -o "$out/bin/helm" helm.sh/helm/v3/cmd/helm
  # Stamp the release, as Kubernetes' own build does: clients (helm's
  # kubeVersion checks among them) read it from /version.
  local kube minor stamp="" pkg cmd
  kube=$(go list -m -f '{{.Version}}' k8s.io/kubernetes)
  minor=${kube#v1.}; minor=${minor%%.*}
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    stamp+=" -X $pkg.gitVersion=$kube -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  for cmd in kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubectl; do
    go build -trimpath -ldflags "-s -w$stamp" -o "$out/bin/$cmd" "k8s.io/kubernetes/cmd/$cmd"
  done
  cp "$kwok_dir/kustomize/crd/bases/kwok.x-k8s.io_execs.yaml" "$out/share/"
}

# build_conformance DIR: the suite as a test binary and its echo server,
# from tests/conformance (pinned to the Gateway API release Pontoon ships).
build_conformance() {
  local out=$1
  mkdir -p "$out"
  (cd ../conformance &&
    go build -trimpath -ldflags "-s -w" -o "$out/echo-basic" sigs.k8s.io/gateway-api/conformance/echo-basic &&
    go test -c -trimpath -o "$out/gateway-conformance.test" sigs.k8s.io/gateway-api/conformance)
}

# build_tool PACKAGE NAME DIR: one of the test bed's own programs, built
# into DIR/NAME once its unit tests (if any) pass.
build_tool() {
  local package=$1 name=$2 out=$3
  if compgen -G "$package/*_test.go" >/dev/null; then
    go test -count=1 "./$package/" >&2
  fi
  go build -trimpath -ldflags "-s -w" -o "$out/$name" "./$package"
}

# The keys: what decides each part, hashed.
# CoreDNS, the test bed's cluster DNS: its own module (coredns/), so that its
# dependencies never move the pins of the Kubernetes build.
build_coredns() {
  local out=$1
  mkdir -p "$out"
  (cd coredns && go build -trimpath -ldflags "-s -w" -o "$out/coredns" .)
}

hash16() { sha256sum | cut -c1-16; }
platform_key() {
  { cat go.mod go.sum; declare -f build_platform; } | hash16
}
tool_key() { # PACKAGE
  { cat go.mod go.sum; declare -f build_tool; sha256sum "$1"/*.go internal/*/*.go; } | hash16
}
coredns_key() {
  { cat coredns/go.mod coredns/go.sum coredns/*.go; declare -f build_coredns; } | hash16
}
conformance_key() {
  { cat ../conformance/go.mod ../conformance/go.sum; declare -f build_conformance; } | hash16
}

# cached DIR BUILDER ARGS...: unless DIR exists, runs `BUILDER ARGS... WORK`
# in tests/testbed and moves WORK to DIR. One build at a time per machine
# (flock), so parallel runs never compile the same thing twice.
cached() {
  local dir=$1; shift
  [[ -e "$dir" ]] && return 0
  command -v go >/dev/null || { echo "testbed: Go is required to build the test bed" >&2; exit 1; }
  mkdir -p "${dir%/*}"
  exec 9>"$cache_root/.lock"
  flock 9
  if [[ ! -e "$dir" ]]; then
    partial=$(mktemp -d "$dir.partial.XXXXXX")
    "$@" "$partial"
    mv -T "$partial" "$dir"
    partial=""
  fi
  exec 9>&-
}
partial=""
trap '[[ -z "$partial" ]] || rm -rf "$partial"' EXIT

# install_into UNIT KEY DEST FILES...: copies FILES into DEST unless its marker
# DEST/.UNIT.key holds KEY and none of them was replaced since (by an older
# checkout's build.sh, say). Each file is replaced by a rename, so a process
# starting it meanwhile sees the old or the new one, never half.
install_into() {
  local unit=$1 key=$2 dest=$3 file marker; shift 3
  marker=$dest/.$unit.key
  if [[ "$(cat "$marker" 2>/dev/null)" == "$key" ]]; then
    local current=1
    for file in "$@"; do
      [[ -f "$dest/${file##*/}" && ! "$dest/${file##*/}" -nt "$marker" ]] || current=""
    done
    [[ -z "$current" ]] || return 0
  fi
  mkdir -p "$dest"
  for file in "$@"; do
    cp -f "$file" "$dest/.${file##*/}.new"
    mv -f "$dest/.${file##*/}.new" "$dest/${file##*/}"
  done
  echo "$key" > "$marker"
}

cd "$here"
mkdir -p "$cache_root"

platform_key=$(platform_key)
platform=$cache_root/platform-$platform_key
if [[ ! -e "$platform" ]]; then
  echo "testbed: building etcd, Kubernetes, kwok and helm into $platform (once per pin set; this takes a while)" >&2
  start=$(date +%s)
  cached "$platform" build_platform
  echo "testbed: built in $(( $(date +%s) - start ))s" >&2
fi
pod_exec_sync_key=$(tool_key podexec)
cached "$cache_root/tools/pod-exec-sync-$pod_exec_sync_key" build_tool podexec pod-exec-sync
carrier2_key=$(tool_key carrier2)
cached "$cache_root/tools/carrier2-$carrier2_key" build_tool carrier2 carrier2
echo_backend_key=$(tool_key echo)
cached "$cache_root/tools/echo-backend-$echo_backend_key" build_tool echo echo-backend
pod_runner_key=$(tool_key podrun)
cached "$cache_root/tools/pod-runner-$pod_runner_key" build_tool podrun pod-runner
coredns_key=$(coredns_key)
if [[ ! -e "$cache_root/coredns-$coredns_key" ]]; then
  echo "testbed: building CoreDNS (once per pin set)" >&2
fi
cached "$cache_root/coredns-$coredns_key" build_coredns
conformance_key=$(conformance_key)
if [[ ! -e "$cache_root/conformance-$conformance_key" ]]; then
  echo "testbed: building the Gateway API conformance suite and echo-basic (once per pin set)" >&2
fi
cached "$cache_root/conformance-$conformance_key" build_conformance

rm -f "$bin/.key" # the marker of the single cache key before
install_into platform "$platform_key" "$bin" "${platform_binaries[@]/#/$platform/bin/}"
install_into platform "$platform_key" "$tb/share" "$platform"/share/*
install_into pod-exec-sync "$pod_exec_sync_key" "$bin" "$cache_root/tools/pod-exec-sync-$pod_exec_sync_key/pod-exec-sync"
install_into carrier2 "$carrier2_key" "$pod_bin" "$cache_root/tools/carrier2-$carrier2_key/carrier2"
install_into echo-backend "$echo_backend_key" "$bin" "$cache_root/tools/echo-backend-$echo_backend_key/echo-backend"
install_into pod-runner "$pod_runner_key" "$bin" "$cache_root/tools/pod-runner-$pod_runner_key/pod-runner"
install_into coredns "$coredns_key" "$bin" "$cache_root/coredns-$coredns_key/coredns"
install_into conformance "$conformance_key" "$bin" "$cache_root/conformance-$conformance_key/echo-basic" \
  "$cache_root/conformance-$conformance_key/gateway-conformance.test"
