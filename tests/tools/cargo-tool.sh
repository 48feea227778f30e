#!/usr/bin/env bash
# A tool from crates.io, installed once into $RULEOP_CACHE/tools (keyed by its version):
#   tests/tools/cargo-tool.sh CRATE VERSION [BINARY]    # prints the binary's path
# Used by `make docs` (mdBook) and `make release` (cargo-cyclonedx).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../cluster/versions.sh
source "$here/../cluster/versions.sh"
crate="${1:?usage: cargo-tool.sh CRATE VERSION [BINARY]}"
version="${2:?usage: cargo-tool.sh CRATE VERSION [BINARY]}"
bin="${3:-$crate}"
dir="$RULEOP_CACHE/tools/$crate-$version"
if [ ! -x "$dir/bin/$bin" ]; then
  mkdir -p "$RULEOP_CACHE/tools"
  exec 9>"$RULEOP_CACHE/tools/.build.lock"
  flock 9
  if [ ! -x "$dir/bin/$bin" ]; then
    echo "[tools] installing $crate $version (first time only)" >&2
    cargo install "$crate" --version "$version" --locked --root "$dir.tmp" --quiet
    mv "$dir.tmp" "$dir"
  fi
fi
echo "$dir/bin/$bin"
