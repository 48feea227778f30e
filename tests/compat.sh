#!/usr/bin/env bash
# Every suite again, on an older Kubernetes minor (`make test-long` runs it for the versions
# of docs/operating/releases.md's table):
#   tests/compat.sh v1.34.4
# Builds that control plane once from Go modules (cached by version, as the default one is),
# then runs `make test`'s runner with it: the shared cluster and every cluster a test starts
# of its own are of that version.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
version="${1:?usage: compat.sh v1.N.M}"
export K8S_VERSION="$version"
tests/cluster/build.sh
echo "[compat] every suite on Kubernetes $version" >&2
tests/run.sh
