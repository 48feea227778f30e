#!/usr/bin/env bash
# Builds the manual (docs/, the book of `book.toml`) as a site in target/book/ with mdBook,
# installed once from crates.io into $RULEOP_CACHE/tools (keyed by its version).
#   docs/build.sh            # build target/book/index.html
#   docs/build.sh serve      # serve it on localhost:3000, rebuilt on every change
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=../tests/cluster/versions.sh
source "$root/tests/cluster/versions.sh"
MDBOOK_VERSION=0.5.4
dir="$RULEOP_CACHE/tools/mdbook-$MDBOOK_VERSION"
if [ ! -x "$dir/bin/mdbook" ]; then
  mkdir -p "$RULEOP_CACHE/tools"
  exec 9>"$RULEOP_CACHE/tools/.build.lock"
  flock 9
  if [ ! -x "$dir/bin/mdbook" ]; then
    echo "[docs] installing mdBook $MDBOOK_VERSION (first time only)" >&2
    cargo install mdbook --version "$MDBOOK_VERSION" --locked --root "$dir.tmp" --quiet
    mv "$dir.tmp" "$dir"
  fi
fi
cd "$root"
if [ "${1:-build}" = serve ]; then
  exec "$dir/bin/mdbook" serve
fi
"$dir/bin/mdbook" build
echo "[docs] the manual: $root/target/book/index.html" >&2
