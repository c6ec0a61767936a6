#!/usr/bin/env bash
# Installs what the build and the test bed need and a fresh machine lacks.
# Idempotent and quiet when everything is there.
set -euo pipefail

# Debian packages: openssl (test-bed certificates), util-linux (unshare for
# per-pod /tmp, flock for the build cache), busybox (exec'd commands may call
# it), curl, cmake (praxis), python3 (the strict TLS client of the tests).
missing=()
for pair in openssl:openssl unshare:util-linux flock:util-linux busybox:busybox curl:curl cmake:cmake python3:python3; do
  command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
done
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
