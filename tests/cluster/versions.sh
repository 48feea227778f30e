# shellcheck shell=bash
# Pinned versions of the local control plane, and where their binaries are cached.
# Sourced by build.sh, up.sh and down.sh. Binaries are keyed by version, so bumping a
# version here builds the new one once and leaves the old cache alone.
K8S_VERSION="${K8S_VERSION:-v1.36.3}"
ETCD_VERSION="${ETCD_VERSION:-v3.6.16}"
KWOK_VERSION="${KWOK_VERSION:-v0.8.0}"

RULEOP_CACHE="${RULEOP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ruleop}"
K8S_BIN="$RULEOP_CACHE/k8s/$K8S_VERSION/bin"
ETCD_BIN="$RULEOP_CACHE/etcd/$ETCD_VERSION/bin"
KWOK_BIN="$RULEOP_CACHE/kwok/$KWOK_VERSION/bin"
KWOK_STAGES="$RULEOP_CACHE/kwok/$KWOK_VERSION/stages"
