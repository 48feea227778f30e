#!/usr/bin/env bash
# Stops every process that up.sh started for this cluster (by pid) and removes its state.
# Logs are kept in <cluster dir>-logs for a post-mortem.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
dir="${RULEOP_CLUSTER_DIR:-$repo/target/cluster}"
log() { printf '[down] %s\n' "$*" >&2; }
[ -d "$dir" ] || { log "no cluster in $dir"; exit 0; }

stopped=0
# Reverse start order: clients first, etcd last.
for name in kwok kube-scheduler kube-controller-manager kube-apiserver etcd; do
  f="$dir/pids/$name.pid"
  [ -f "$f" ] || continue
  pid="$(cat "$f")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null || true
    stopped=$((stopped + 1))
  fi
done
if [ -d "$dir/logs" ]; then
  rm -rf "$dir-logs" && cp -r "$dir/logs" "$dir-logs"
fi
rm -rf "$dir"
log "stopped $stopped process(es); removed $dir"
