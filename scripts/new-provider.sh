#!/usr/bin/env bash
# `make new-provider NAME=my-provider DIR=/path`: a provider crate of your own,
# outside this repository, started from providers/template. The crate is its
# own workspace (the template's release profile for modules, the SDK by path
# from this checkout, this repository's Cargo.lock so it builds with the
# versions the SDK is tested with). The crate name is the provider name
# (`metadata().name`) and, with `-` as `_`, the module's file name.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
name=${1:-}
dir=${2:-}
if [[ ! "$name" =~ ^[a-z][a-z0-9-]*[a-z0-9]$ ]]; then
  echo "new-provider: NAME must be a crate name in lower case with '-' (e.g. NAME=my-provider), got '${name}'" >&2
  exit 2
fi
if [[ -z "$dir" ]]; then
  echo "new-provider: DIR is missing: where the crate goes (e.g. DIR=../$name)" >&2
  exit 2
fi
if [[ -e "$dir" ]]; then
  echo "new-provider: $dir exists; choose another DIR (nothing was written)" >&2
  exit 1
fi

mkdir -p "$dir"
cp -r "$repo/providers/template/src" "$dir/"
cp "$repo/Cargo.lock" "$dir/"
# The workspace's module profile, exactly as the bundled providers use it.
profile=$(awk '/^\[profile\.wasm-release\]$/ { on = 1 } on && /^$/ { exit } on' "$repo/Cargo.toml")
serde_json=$(sed -n 's/^serde_json = \(".*"\)$/\1/p' "$repo/Cargo.toml")
cat >"$dir/Cargo.toml" <<EOF
[package]
# The provider's name (metadata().name) and its module, ${name//-/_}.wasm.
name = "$name"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
crate-type = ["cdylib"]

[dependencies]
pontoon-provider-sdk = { path = "$repo/providers/sdk", features = ["bridge-mount"] }
serde_json = $serde_json

[lints.clippy]
unwrap_used = "deny"
expect_used = "deny"

$profile

# A workspace of its own, not a member of an enclosing one.
[workspace]
EOF
echo "new-provider: $name in $dir; build it with" >&2
echo "  cd $dir && cargo build --profile wasm-release --target wasm32-wasip2" >&2
echo "  -> target/wasm32-wasip2/wasm-release/${name//-/_}.wasm" >&2
