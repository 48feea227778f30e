#!/usr/bin/env bash
# `make test`: every test, against the real local control plane.
#  1. builds (once) and starts the control plane unless this clone's is already up;
#  2. runs the Rust unit and integration tests (KUBECONFIG points at it), in lanes;
#  3. runs the control-plane self-test (a second cluster beside the first, then down.sh
#     must leave no process and no port behind);
#  4. stops the cluster if it started it.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
kubeconfig="$repo/target/cluster/kubeconfig"

# The build and the control planes the tests start (four at once in the fault tests,
# each with etcd's 64 MB log segments) need a few GB; say so before they fail one by one.
need_mb=4096
for d in "$repo" "${TMPDIR:-/tmp}"; do
  free_mb=$(df -Pm -- "$d" 2>/dev/null | awk 'NR == 2 { print $4 }') || true
  [ -n "$free_mb" ] || continue
  if [ "$free_mb" -lt "$need_mb" ]; then
    echo "make test: warning: ${free_mb} MB free under $d; the tests need about $need_mb MB" >&2
  fi
done

started=0
if ! { [ -f "$kubeconfig" ] && kubectl --kubeconfig "$kubeconfig" get --raw /readyz >/dev/null 2>&1; }; then
  tests/cluster/up.sh
  started=1
fi
# A K8S_VERSION asked for (tests/compat.sh) is the version of the cluster the tests meet.
if [ -n "${K8S_VERSION:-}" ]; then
  serving="$(kubectl --kubeconfig "$kubeconfig" version -o json 2>/dev/null | sed -n 's/.*"gitVersion": "\(v[^"]*\)".*/\1/p' | tail -1)"
  if [ "$serving" != "$K8S_VERSION" ]; then
    echo "make test: the cluster up in target/cluster serves Kubernetes $serving, not K8S_VERSION=$K8S_VERSION: stop it first (make cluster-down)" >&2
    exit 1
  fi
fi
# The container engine the image test needs (installed and started when the machine has
# none; stopped after if started here).
engine="$(tests/tools/engine.sh start)"
case "$engine" in
  none:*)
    export RULEOP_NO_ENGINE="${engine#none: }"
    echo "make test: no container engine (${RULEOP_NO_ENGINE}): the image test is skipped" >&2
    ;;
esac
cleanup() {
  if [ "$started" = 1 ]; then tests/cluster/down.sh; fi
  if [ "$engine" = started ]; then tests/tools/engine.sh stop; fi
}
trap cleanup EXIT

export KUBECONFIG="$kubeconfig"
export RUST_BACKTRACE=1
cargo build --bins --quiet
# Unit and integration tests (benches are built by `make lint` and run by `make bench`).
# The churn test replays one seed in `make test` (a new one each run only when
# RULEOP_CHURN_STEPS is set, as `make test-long` does), so a new user's run is the one CI ran.
if [ -z "${RULEOP_CHURN_STEPS:-}" ]; then
  export RULEOP_CHURN_SEED="${RULEOP_CHURN_SEED:-15438652324353167050}"
fi
# Side by side in lanes (tests/lanes.sh says which run together and why);
# RULEOP_TEST_LANES=1 runs them one after another.
tests/lanes.sh
tests/cluster/selftest.sh
