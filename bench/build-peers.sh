#!/usr/bin/env bash
# Builds the peers that `make bench` measures, from the registries only, into target/bench:
#   controller-runtime: bench/controller-runtime (Go module proxy)
#   kopf:               bench/kopf in a virtualenv (PyPI)
#   kro:                sigs' kro controller (Go module proxy), if it builds here
# Each step is skipped when its output exists. A peer that cannot be built leaves a reason
# in target/bench/<peer>-absent.txt, which the benchmark prints.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$repo/target/bench"
mkdir -p "$out/bin"
log() { printf '[peers] %s\n' "$*" >&2; }

if [ ! -x "$out/bin/website-operator" ]; then
  log "building the controller-runtime WebSite operator"
  (cd "$repo/bench/controller-runtime" && go build -o "$out/bin/website-operator" .) \
    || echo "go build of bench/controller-runtime failed" >"$out/controller-runtime-absent.txt"
fi

if [ ! -x "$out/venv/bin/python" ] || ! "$out/venv/bin/python" -c 'import kopf' 2>/dev/null; then
  log "installing kopf into $out/venv"
  python3 -m venv "$out/venv" && "$out/venv/bin/pip" install -q -r "$repo/bench/kopf/requirements.txt" \
    || echo "pip install of kopf failed" >"$out/kopf-absent.txt"
fi

KRO_VERSION=v0.9.4
if [ ! -e "$out/kro-absent.txt" ] && [ ! -x "$out/bin/kro-controller" ]; then
  log "building kro $KRO_VERSION"
  if GOBIN="$out/bin.kro" go install "github.com/kubernetes-sigs/kro/cmd/controller@$KRO_VERSION" 2>"$out/kro-build.log"; then
    mv "$out/bin.kro/controller" "$out/bin/kro-controller"
  else
    echo "kro $KRO_VERSION does not build from the module proxy here: $(tail -n 3 "$out/kro-build.log" | tr '\n' ' ')" >"$out/kro-absent.txt"
  fi
fi
log "peers ready in $out"
