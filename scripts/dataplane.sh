#!/usr/bin/env bash
# Builds Pontoon's data plane (dataplane/, binary `pontoon-dataplane`: Praxis
# with Pontoon's filters) and installs it where the test bed's pod-runner
# finds the program of the data-plane image, printing its path:
#
#   .testbed/dataplane/pontoon-dataplane
#
# The dev profile (Praxis and its dependencies at opt-level 1, as
# scripts/praxis.sh builds stock praxis): it serves the test bed's traffic.
# It is its own cargo workspace (see dataplane/Cargo.toml) and builds into
# the shared CARGO_TARGET_DIR, so a second run compiles only what changed.
# The binary is renamed into place, never overwritten, so pods running the
# previous one keep running it.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# Without CARGO_TARGET_DIR, the root workspace's target/ (not one of its
# own under dataplane/), so that one directory holds every build.
target=${CARGO_TARGET_DIR:-$root/target}
out=$root/.testbed/dataplane
cargo build --quiet --locked --manifest-path "$root/dataplane/Cargo.toml" --target-dir "$target" >&2
mkdir -p "$out"
cp "$target/debug/pontoon-dataplane" "$out/.pontoon-dataplane.new"
mv -f "$out/.pontoon-dataplane.new" "$out/pontoon-dataplane"
echo "$out/pontoon-dataplane"
