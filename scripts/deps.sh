#!/usr/bin/env bash
# Installs what the build and the test bed need and a fresh machine lacks.
# Idempotent and quiet when everything is there.
set -euo pipefail

# Debian packages: openssl (test-bed certificates), util-linux (unshare for
# per-pod /tmp and the traffic tests' network namespaces, nsenter, flock for
# the build cache), iproute2 (ip, in those namespaces), busybox (exec'd
# commands may call it), curl (the test bed; requests in the traffic tests),
# python3 (the strict TLS client of the tests); nftables, iptables and
# conntrack (kube-proxy in the test bed's network namespace); to build praxis
# (scripts/praxis.sh): cmake and make (zlib-ng, jemalloc), gcc, pkg-config
# and libssl-dev (openssl-sys links the system's OpenSSL).
have() { # COMMAND: on PATH, or in an sbin directory a non-root PATH may lack
  command -v "$1" >/dev/null 2>&1 || [[ -x "/usr/sbin/$1" || -x "/sbin/$1" ]]
}
missing=()
for pair in openssl:openssl unshare:util-linux nsenter:util-linux flock:util-linux ip:iproute2 \
  busybox:busybox curl:curl python3:python3 nft:nftables iptables:iptables conntrack:conntrack cmake:cmake make:make cc:gcc pkg-config:pkg-config; do
  have "${pair%%:*}" || missing+=("${pair#*:}")
done
[[ -e /usr/include/openssl/ssl.h ]] || missing+=(libssl-dev)
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}" >&2
  sudo=""; [[ $(id -u) -eq 0 ]] || sudo=sudo
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

command -v go >/dev/null || { echo "deps: Go is required (the test bed is built from Go modules)" >&2; exit 1; }
command -v cargo >/dev/null || { echo "deps: Rust (rustup) is required" >&2; exit 1; }
if ! rustup target list --installed | grep -qx wasm32-wasip2; then
  echo "deps: adding the wasm32-wasip2 target" >&2
  rustup target add wasm32-wasip2
fi
