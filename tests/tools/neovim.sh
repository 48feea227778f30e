#!/usr/bin/env bash
# The editor the language server is tried in (tests/neovim.rs): prints the path of `nvim`,
# installing Debian's `neovim` package when the machine has none and can (root, apt-get),
# or "none: <why>".
set -uo pipefail
if command -v nvim >/dev/null; then command -v nvim; exit 0; fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "none: no nvim, and Debian's neovim cannot be installed here (needs root and apt-get)"; exit 0
fi
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=../cluster/versions.sh
source "$here/../cluster/versions.sh"
mkdir -p "$RULEOP_CACHE/tools"
exec 9>"$RULEOP_CACHE/tools/.apt.lock"
flock 9
if ! command -v nvim >/dev/null; then
  echo "[tools] installing neovim from Debian's packages" >&2
  if ! DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends neovim >"$RULEOP_CACHE/tools/neovim-apt.log" 2>&1; then
    DEBIAN_FRONTEND=noninteractive apt-get update >>"$RULEOP_CACHE/tools/neovim-apt.log" 2>&1
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends neovim >>"$RULEOP_CACHE/tools/neovim-apt.log" 2>&1 ||
      { echo "none: installing neovim failed (see $RULEOP_CACHE/tools/neovim-apt.log)"; exit 0; }
  fi
fi
command -v nvim
