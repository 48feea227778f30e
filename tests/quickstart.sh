#!/usr/bin/env bash
# `make run`: the quick start. Local control plane up, CRDs installed, the examples
# applied, and the operator running in the foreground with the shipped rules.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
tests/cluster/up.sh
export KUBECONFIG="$repo/target/cluster/kubeconfig"
cargo build --release --quiet
kubectl apply -f deploy/crds/
kubectl wait --for=condition=Established crd --all --timeout=60s >/dev/null
kubectl apply -f examples/
echo "quickstart: operator starting; in another shell: export KUBECONFIG=$KUBECONFIG; kubectl get websites,myapps"
exec target/release/ruleop run --rules rules/
