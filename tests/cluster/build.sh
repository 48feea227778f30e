#!/usr/bin/env bash
# Builds the local control plane from Go modules served by the module proxy, once:
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok (+ its stages).
# Output is cached outside the clone, keyed by version (see versions.sh); a second run
# finds everything in place and returns at once. Nothing is vendored into the repo.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.sh
source "$here/versions.sh"

log() { printf '[build] %s\n' "$*" >&2; }
command -v go >/dev/null || { log "go is required to build the control plane"; exit 1; }

mkdir -p "$RULEOP_CACHE"
# One builder at a time per cache (two clones may start together).
exec 9>"$RULEOP_CACHE/.build.lock"
flock 9

start=$(date +%s)
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
export CGO_ENABLED=0

build_kubernetes() {
  local bins=(kube-apiserver kube-controller-manager kube-scheduler)
  local b missing=0
  for b in "${bins[@]}"; do [ -x "$K8S_BIN/$b" ] || missing=1; done
  [ "$missing" = 0 ] && { log "kubernetes $K8S_VERSION: cached in $K8S_BIN"; return; }
  log "kubernetes $K8S_VERSION: building ${bins[*]} (first time only; ~15-25 min on 2 cores)"
  local src="$RULEOP_CACHE/k8s/$K8S_VERSION/src"
  rm -rf "$src" && mkdir -p "$src"
  local minor="${K8S_VERSION#v1.}"; minor="${minor%%.*}"
  local staging_version="v0.${K8S_VERSION#v1.}"
  # k8s.io/kubernetes requires each staging module at v0.0.0 and replaces it with a
  # local path (./staging/...) that does not exist outside its own repo. Derive the list
  # from those replace lines of its go.mod, as the proxy serves it, and pin each to the
  # published v0.N.M instead.
  local modfile
  modfile="$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
  [ -f "$modfile" ] || { log "could not download k8s.io/kubernetes@$K8S_VERSION go.mod"; exit 1; }
  mapfile -t staging < <(grep -E '^\s*k8s\.io/\S+ => \./staging/' "$modfile" | awk '{print $1}' | sort -u)
  [ "${#staging[@]}" -gt 20 ] || { log "found only ${#staging[@]} staging modules in $modfile"; exit 1; }
  log "kubernetes: ${#staging[@]} staging modules pinned to $staging_version"
  {
    echo "module ruleop.local/kube-build"
    echo
    echo "go $(sed -n 's/^go //p' "$modfile")"
    echo
    echo "require k8s.io/kubernetes $K8S_VERSION"
    echo
    echo "replace ("
    for m in "${staging[@]}"; do echo "	$m => $m $staging_version"; done
    echo ")"
  } >"$src/go.mod"
  {
    echo "//go:build tools"
    echo
    echo "package tools"
    echo
    echo "import ("
    for b in "${bins[@]}"; do echo "	_ \"k8s.io/kubernetes/cmd/$b\""; done
    echo ")"
  } >"$src/tools.go"
  (cd "$src" && go mod tidy >/dev/null)
  local ld="-s -w"
  ld+=" -X k8s.io/component-base/version.gitVersion=$K8S_VERSION"
  ld+=" -X k8s.io/component-base/version.gitMajor=1"
  ld+=" -X k8s.io/component-base/version.gitMinor=$minor"
  ld+=" -X k8s.io/component-base/version.gitTreeState=clean"
  ld+=" -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION"
  ld+=" -X k8s.io/client-go/pkg/version.gitMajor=1"
  ld+=" -X k8s.io/client-go/pkg/version.gitMinor=$minor"
  local out="$RULEOP_CACHE/k8s/$K8S_VERSION/bin.tmp"
  rm -rf "$out" && mkdir -p "$out"
  for b in "${bins[@]}"; do
    log "kubernetes: go build $b"
    (cd "$src" && go build -trimpath -ldflags "$ld" -o "$out/$b" "k8s.io/kubernetes/cmd/$b")
  done
  rm -rf "$K8S_BIN" && mv "$out" "$K8S_BIN"
}

build_etcd() {
  [ -x "$ETCD_BIN/etcd" ] && { log "etcd $ETCD_VERSION: cached in $ETCD_BIN"; return; }
  log "etcd $ETCD_VERSION: building"
  # go install fails on go.etcd.io/etcd/server/v3 (relative replaces); build its main
  # package from a module of our own instead.
  local src="$RULEOP_CACHE/etcd/$ETCD_VERSION/src"
  rm -rf "$src" && mkdir -p "$src"
  printf 'module ruleop.local/etcd-build\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" >"$src/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "go.etcd.io/etcd/server/v3"\n' >"$src/tools.go"
  (cd "$src" && go mod tidy >/dev/null)
  local out="$RULEOP_CACHE/etcd/$ETCD_VERSION/bin.tmp"
  rm -rf "$out" && mkdir -p "$out"
  (cd "$src" && go build -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3)
  rm -rf "$ETCD_BIN" && mv "$out" "$ETCD_BIN"
}

build_kwok() {
  if [ -x "$KWOK_BIN/kwok" ] && [ -d "$KWOK_STAGES" ]; then
    log "kwok $KWOK_VERSION: cached in $KWOK_BIN"; return
  fi
  log "kwok $KWOK_VERSION: building"
  local out="$RULEOP_CACHE/kwok/$KWOK_VERSION/bin.tmp"
  rm -rf "$out" && mkdir -p "$out"
  GOBIN="$out" go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  # kwok refuses to start without Stage objects; they ship inside the module.
  local dir
  dir="$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/.*"Dir": "\(.*\)".*/\1/p')"
  local stages="$RULEOP_CACHE/kwok/$KWOK_VERSION/stages.tmp"
  rm -rf "$stages" && mkdir -p "$stages"
  # The "fast" stage set: nodes Ready at once, pods Running/Ready as soon as scheduled.
  for s in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
           pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
    local f="$dir/kustomize/stage/$s.yaml"
    [ -f "$f" ] || { log "kwok stage $f not found"; exit 1; }
    cp "$f" "$stages/$(basename "$s").yaml" && chmod u+w "$stages/$(basename "$s").yaml"
  done
  rm -rf "$KWOK_BIN" "$KWOK_STAGES"
  mv "$out" "$KWOK_BIN" && mv "$stages" "$KWOK_STAGES"
}

build_etcd
build_kwok
build_kubernetes
log "control plane binaries ready in $(( $(date +%s) - start ))s"
