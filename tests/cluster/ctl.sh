#!/usr/bin/env bash
# Stops or (re)starts one component of a running local cluster, for fault tests:
#   ctl.sh stop|kill|start COMPONENT     (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok)
# `stop` sends SIGTERM and waits; `kill` sends SIGKILL; `start` runs the command up.sh used.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
dir="${RULEOP_CLUSTER_DIR:-$repo/target/cluster}"
action="${1:?usage: ctl.sh stop|kill|start COMPONENT}"
name="${2:?usage: ctl.sh stop|kill|start COMPONENT}"
pidfile="$dir/pids/$name.pid"
case "$action" in
  stop|kill)
    [ -f "$pidfile" ] || { echo "ctl: no pid for $name" >&2; exit 1; }
    pid="$(cat "$pidfile")"
    sig=TERM; [ "$action" = kill ] && sig=KILL
    kill -"$sig" "$pid" 2>/dev/null || true
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid"; fi
    ;;
  start)
    [ -f "$dir/cmd/$name" ] || { echo "ctl: no saved command for $name" >&2; exit 1; }
    # shellcheck disable=SC2046
    setsid bash -c "exec $(cat "$dir/cmd/$name")" >>"$dir/logs/$name.log" 2>&1 </dev/null &
    echo $! >"$pidfile"
    ;;
  *) echo "ctl: unknown action $action" >&2; exit 1 ;;
esac
