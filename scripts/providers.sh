#!/usr/bin/env bash
# `make providers`: builds every bundled provider module (release, wasm32-wasip2)
# and copies the components into OUT_DIR (default dist/providers).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
out=${1:-dist/providers}
target=${CARGO_TARGET_DIR:-target}
# The crates under providers/ that become a module (the SDK is a library).
bundled=(carrier2mount standard-filters tunnel)

args=()
for crate in "${bundled[@]}"; do args+=(-p "$crate"); done
# Flags meant for the host build (coverage, sanitizers) break wasm.
env -u RUSTFLAGS -u CARGO_ENCODED_RUSTFLAGS \
  cargo build --quiet --locked --profile wasm-release --target wasm32-wasip2 "${args[@]}"
mkdir -p "$out"
for crate in "${bundled[@]}"; do
  # cargo names the component after the crate, `-` becoming `_`.
  cp -f "$target/wasm32-wasip2/wasm-release/${crate//-/_}.wasm" "$out/"
done
echo "providers: ${bundled[*]} -> $out" >&2
