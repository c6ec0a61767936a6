#!/usr/bin/env bash
# `make image-context`: assembles in OUT (default target/image-context) exactly
# what the Containerfile copies: the operator binary (release build, or BINARY),
# and the bundled provider modules (built, or copied from PROVIDERS).
#   scripts/image-context.sh [OUT] [BINARY] [PROVIDERS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:-target/image-context}
binary=${2:-}
providers=${3:-}
target=${CARGO_TARGET_DIR:-target}
if [[ -z $binary ]]; then
  cargo build --quiet --release --locked -p pontoon
  binary=$target/release/pontoon
fi
if [[ -z $providers ]]; then
  scripts/providers.sh dist/providers
  providers=dist/providers
fi
rm -rf "$out"
mkdir -p "$out/providers"
cp Containerfile "$out/"
cp "$binary" "$out/pontoon"
cp "$providers"/*.wasm "$out/providers/"
echo "image context: $out ($(ls "$out/providers" | tr '\n' ' '))" >&2
