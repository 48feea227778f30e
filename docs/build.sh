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
mdbook="$("$root/tests/tools/cargo-tool.sh" mdbook "$MDBOOK_VERSION")"
cd "$root"
if [ "${1:-build}" = serve ]; then
  exec "$mdbook" serve
fi
"$mdbook" build
echo "[docs] the manual: $root/target/book/index.html" >&2
