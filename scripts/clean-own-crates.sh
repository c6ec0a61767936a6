#!/usr/bin/env bash
# Drops the build artifacts of this repository's own crates from a shared
# CARGO_TARGET_DIR, keeping the (slow to build) dependencies.
#
# Why: cargo names the artifacts of path crates relative to their workspace,
# so with a target directory shared between checkouts (CI clones, a second
# work tree), another checkout's build of *our* crates can look fresh and be
# tested in place of this checkout's code.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
target=${CARGO_TARGET_DIR:-target}

members() { # manifest -> "-p a -p b ..."
  cargo metadata --no-deps --format-version 1 --manifest-path "$1" \
    | python3 -c 'import json,sys; print(" ".join("-p " + p["name"] for p in json.load(sys.stdin)["packages"]))'
}

# shellcheck disable=SC2046
cargo clean -q $(members Cargo.toml)
# The bundled providers (scripts/providers.sh) are built for wasm32 too.
# shellcheck disable=SC2046
cargo clean -q --target wasm32-wasip2 --profile wasm-release $(members Cargo.toml)
# shellcheck disable=SC2046
cargo clean -q --manifest-path tests/modules/Cargo.toml --target-dir "$target/test-modules" \
  $(members tests/modules/Cargo.toml) -p pontoon-provider-sdk
# Pontoon's data plane, a workspace of its own (dataplane/), in the profiles
# it is built with: dev (the test bed) and release (the bench).
cargo clean -q --manifest-path dataplane/Cargo.toml -p pontoon-dataplane
cargo clean -q --manifest-path dataplane/Cargo.toml --release -p pontoon-dataplane
