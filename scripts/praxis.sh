#!/usr/bin/env bash
# Builds the Praxis proxy (crates.io praxis-proxy, binary `praxis`) into the
# per-user cache once and prints the binary's path:
#
#   ${PONTOON_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pontoon}/praxis-<version>/bin/praxis
#
# A second run, or a fresh clone on the same machine, compiles nothing. The
# build (about 7 minutes on two cores) uses its own target dir inside the cache
# entry, not the shared CARGO_TARGET_DIR, and removes it once the binary is
# installed. One build at a time per machine (flock). Needs cmake, a C
# compiler, make, pkg-config and OpenSSL's headers (scripts/deps.sh).
set -euo pipefail

version=0.7.5
cache_root=${PONTOON_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/pontoon}
entry=$cache_root/praxis-$version
binary=$entry/bin/praxis

if [[ ! -x "$binary" ]]; then
  command -v cargo >/dev/null || { echo "praxis: Rust (cargo) is required to build praxis" >&2; exit 1; }
  mkdir -p "$cache_root"
  exec 9>"$cache_root/.praxis.lock"
  flock 9
  if [[ ! -x "$binary" ]]; then
    echo "praxis: building praxis-proxy $version into $entry (once; ~7 minutes on two cores)" >&2
    start=$(date +%s)
    partial=$(mktemp -d "$entry.partial.XXXXXX")
    chmod 755 "$partial"
    trap 'rm -rf "$partial"' EXIT
    # --locked: the crate's own Cargo.lock; the target dir lives (and dies)
    # with this partial entry, so a failed build leaves nothing behind. Flags
    # meant for the repository's own build (coverage, sanitizers) stay out.
    # opt-level 1: this binary only serves the test bed's traffic (tests, the
    # conformance suite), where it is nowhere near a bottleneck, and LLVM's
    # full optimisation was most of a cold CI run's praxis build.
    env -u RUSTFLAGS -u CARGO_ENCODED_RUSTFLAGS -u CARGO_BUILD_TARGET \
      CARGO_PROFILE_RELEASE_OPT_LEVEL=1 \
      CARGO_TARGET_DIR="$partial/target" cargo install --locked --quiet \
      praxis-proxy --version "$version" --root "$partial" >&2
    rm -rf "$partial/target" "$partial/.crates.toml" "$partial/.crates2.json"
    "$partial/bin/praxis" --version >/dev/null
    rm -rf "$entry"
    mv -T "$partial" "$entry"
    trap - EXIT
    echo "praxis: built in $(( $(date +%s) - start ))s" >&2
  fi
  exec 9>&-
fi
echo "$binary"
