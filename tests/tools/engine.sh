#!/usr/bin/env bash
# The container engine the image test runs ruleop's image in (tests/image.rs).
#   engine.sh start   # prints "started" when it started dockerd (stop it after), "running"
#                     # when one already answers, or "none: <why>" when there is none
#   engine.sh stop    # stops the dockerd `start` started
# When no engine answers and dockerd is missing, Debian's docker.io is installed (as root,
# with apt-get): dockerd, containerd and runc. Base images are never pulled: the test
# assembles its image from local files.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../cluster/versions.sh
source "$here/../cluster/versions.sh"
state="$RULEOP_CACHE/engine"
mkdir -p "$state"

answers() { docker info >/dev/null 2>&1; }

start() {
  if answers; then echo running; return; fi
  if ! command -v dockerd >/dev/null; then
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
      echo "none: no dockerd, and docker.io cannot be installed here (needs root and apt-get)"; return
    fi
    echo "[engine] installing docker.io from Debian's packages" >&2
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends docker.io >"$state/apt.log" 2>&1; then
      DEBIAN_FRONTEND=noninteractive apt-get update >>"$state/apt.log" 2>&1
      DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends docker.io >>"$state/apt.log" 2>&1 ||
        { echo "none: installing docker.io failed (see $state/apt.log)"; return; }
    fi
  fi
  command -v docker >/dev/null || { echo "none: no docker client"; return; }
  dockerd >"$state/dockerd.log" 2>&1 &
  echo $! >"$state/dockerd.pid"
  for _ in $(seq 1 60); do
    if answers; then echo started; return; fi
    sleep 0.5
  done
  echo "none: dockerd did not answer within 30 s (see $state/dockerd.log)"
}

stop() {
  [ -f "$state/dockerd.pid" ] || return 0
  pid="$(cat "$state/dockerd.pid")"
  kill "$pid" 2>/dev/null
  for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
  rm -f "$state/dockerd.pid"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  *) echo "usage: engine.sh start|stop" >&2; exit 2 ;;
esac
