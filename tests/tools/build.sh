#!/usr/bin/env bash
# Builds a Go tool the tests use, from its folder under tests/tools/ (its go.mod and go.sum
# pin every module, served by the module proxy), once: cached in $RULEOP_CACHE/tools,
# keyed by the folder's content. Prints the binary's path.
# A folder with Go files builds them; one with only a go.mod builds the package its `tool`
# directive names (a tool as its module ships it).
#   tests/tools/build.sh kstatus    # sigs.k8s.io/cli-utils' kstatus, as Flux computes it
#   tests/tools/build.sh helm       # helm.sh/helm/v4's helm
#   tests/tools/build.sh promtool   # Prometheus' promtool
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../cluster/versions.sh
source "$here/../cluster/versions.sh"
tool="${1:?usage: build.sh TOOL}"
src="$here/$tool"
[ -f "$src/go.mod" ] || { echo "no tool $tool in $here" >&2; exit 1; }
pkg=.
if ! compgen -G "$src/*.go" >/dev/null; then
  pkg="$(awk '$1 == "tool" { print $2 }' "$src/go.mod")"
fi
key="$(cat "$src"/go.mod "$src"/go.sum $(compgen -G "$src/*.go" || true) | sha256sum | cut -c1-16)"
out="$RULEOP_CACHE/tools/$tool-$key"
if [ ! -x "$out" ]; then
  mkdir -p "$RULEOP_CACHE/tools"
  exec 9>"$RULEOP_CACHE/tools/.build.lock"
  flock 9
  if [ ! -x "$out" ]; then
    echo "[tools] building $tool (first time only)" >&2
    (cd "$src" && CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly" go build -o "$out.tmp" "$pkg")
    mv "$out.tmp" "$out"
  fi
fi
echo "$out"
