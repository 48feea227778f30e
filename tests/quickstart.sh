#!/usr/bin/env bash
# `make run`: the quick start. Local control plane up, CRDs installed (the Rule kind's
# too), the shipped rules applied as Rule objects (examples/rules.yaml) with the examples,
# and the operator running in the foreground, serving them.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
tests/cluster/up.sh
export KUBECONFIG="$repo/target/cluster/kubeconfig"
cargo build --release --quiet
kubectl apply -f deploy/crds/
kubectl wait --for=condition=Established crd --all --timeout=60s >/dev/null
kubectl apply -f examples/
echo "quickstart: operator starting; in another shell: export KUBECONFIG=$KUBECONFIG; kubectl get rules,websites,myapps"
exec target/release/ruleop run
