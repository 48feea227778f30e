#!/usr/bin/env bash
# Control-plane self-test: a second cluster starts beside the first one (no fixed ports),
# up.sh run again on it reports it up and exits 0, its node is Ready, and down.sh leaves
# no process and no listening port behind. Prints what it saw; exits 1 on any failure.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="$(mktemp -d)/cluster"
export RULEOP_CLUSTER_DIR="$dir"
fail() { echo "selftest: FAIL: $*" >&2; RULEOP_CLUSTER_DIR="$dir" "$here/down.sh" >/dev/null 2>&1 || true; exit 1; }

"$here/up.sh" 2>&1 | grep '^\[up\]' || fail "up.sh failed"
# shellcheck disable=SC1091
source "$dir/ports.env"
ports=("$ETCD_PORT" "$ETCD_PEER_PORT" "$APISERVER_PORT" "$KCM_PORT" "$SCHEDULER_PORT" "$KWOK_PORT")
mapfile -t pids < <(cat "$dir"/pids/*.pid)
[ "${#pids[@]}" = 5 ] || fail "expected 5 pids, got ${#pids[@]}"

out="$("$here/up.sh" 2>&1)" || fail "second up.sh exited non-zero"
grep -q 'already up' <<<"$out" || fail "second up.sh did not report the cluster up: $out"

status="$(kubectl --kubeconfig "$dir/kubeconfig" get node kwok-node-0 -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')"
[ "$status" = True ] || fail "node not Ready: $status"

"$here/down.sh" 2>&1
for p in "${pids[@]}"; do
  if kill -0 "$p" 2>/dev/null; then fail "process $p still running after down.sh"; fi
done
listening="$(ss -Htln 2>/dev/null || netstat -tln 2>/dev/null || true)"
for port in "${ports[@]}"; do
  if grep -q ":$port\b" <<<"$listening"; then fail "port $port still listening after down.sh"; fi
done
[ ! -e "$dir" ] || fail "$dir not removed"
echo "selftest: second cluster up beside the first, idempotent up, node Ready; down.sh left no process (${pids[*]}) and no port (${ports[*]})"
echo "selftest: 1 passed, 0 failed"
