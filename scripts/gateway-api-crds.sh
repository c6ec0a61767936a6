#!/usr/bin/env bash
# Refreshes charts/pontoon/files/gateway-api/{standard,experimental}/ from the
# Go module sigs.k8s.io/gateway-api (its config/crd/standard/ and
# config/crd/experimental/), at the version the Rust `gateway-api` crate is
# generated from. The module comes from the Go module proxy through the
# ordinary module cache, checked against the checksum database like any
# module. Usage: scripts/gateway-api-crds.sh [VERSION]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

version=${1:-v1.6.3}

command -v go >/dev/null || { echo "gateway-api-crds: Go is required" >&2; exit 1; }
# Outside any module, so the repository's go.mod files play no part.
info=$(cd / && GOFLAGS=-mod=mod go mod download -json "sigs.k8s.io/gateway-api@$version")
dir=$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p' <<<"$info")

# The CRDs of the group gateway.networking.k8s.io only: the module's
# safe-upgrades ValidatingAdmissionPolicy (gateway.networking.k8s.io_vap_safeupgrades.yaml)
# is not a CRD, and the experimental channel's gateway.networking.x-k8s.io
# kinds (XBackendTrafficPolicy, XMesh, ...) are nothing Pontoon reads. Both
# channels so hold the same kinds, the experimental one with its fields.
for channel in standard experimental; do
  src=$dir/config/crd/$channel
  out=charts/pontoon/files/gateway-api/$channel
  [[ -d "$src" ]] || { echo "gateway-api-crds: $src does not exist" >&2; exit 1; }
  rm -rf "$out"
  mkdir -p "$out"
  for file in "$src"/gateway.networking.k8s.io_*.yaml; do
    grep -q '^kind: CustomResourceDefinition$' "$file" || continue
    install -m 0644 "$file" "$out/"
  done
  echo "gateway-api-crds: $(ls "$out" | wc -l) $channel-channel CRDs of sigs.k8s.io/gateway-api $version in $out"
done
