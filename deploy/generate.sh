#!/usr/bin/env bash
# Regenerates deploy/crds/ (`ruleop crd`, the Rule kind's by `ruleop crd --rule-kind`), deploy/rbac.yaml (`ruleop rbac`) and
# deploy/rules-configmap.yaml from rules/, and examples/rules.yaml (the rules as Rule objects).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
cargo run --quiet -- crd --rules rules/website.yaml >deploy/crds/websites.sre.example.com.yaml
cargo run --quiet -- crd --rules rules/myapp.yaml >deploy/crds/myapps.myscheme.example.com.yaml
cargo run --quiet -- crd --rule-kind >deploy/crds/rules.ruleop.dev.yaml
cargo run --quiet -- rbac --rules rules/ --crd deploy/crds/websites.sre.example.com.yaml --crd deploy/crds/myapps.myscheme.example.com.yaml >deploy/rbac.yaml
{
  echo "# Generated from rules/ by deploy/generate.sh. Do not edit: regenerate."
  kubectl create configmap ruleop-rules --namespace ruleop-system --from-file=rules/ --dry-run=client -o yaml
} >deploy/rules-configmap.yaml
cargo run --quiet -- rule --rules rules/ >examples/rules.yaml
echo "regenerated deploy/crds/, deploy/rbac.yaml, deploy/rules-configmap.yaml and examples/rules.yaml"
