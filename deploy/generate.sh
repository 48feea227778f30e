#!/usr/bin/env bash
# Regenerates deploy/crds/ (`ruleop crd`, the Rule kind's by `ruleop crd --rule-kind`), deploy/rbac.yaml (`ruleop rbac`) and
# deploy/rules-configmap.yaml from rules/, examples/rules.yaml (the rules as Rule objects), and the
# per-rule form in examples/per-rule/ (each shipped rule as a Rule running as its own ServiceAccount,
# ruleop-<rule> in ruleop-system, and `ruleop rbac --per-rule` for them), and the Helm chart's
# generated parts (charts/ruleop/crds/ and files/).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
cargo run --quiet -- crd --rules rules/website.yaml >deploy/crds/websites.sre.example.com.yaml
cargo run --quiet -- crd --rules rules/myapp.yaml >deploy/crds/myapps.myscheme.example.com.yaml
cargo run --quiet -- crd --rule-kind >deploy/crds/rules.ruleop.dev.yaml
cargo run --quiet -- rbac --rules rules/ --crd deploy/crds/websites.sre.example.com.yaml --crd deploy/crds/myapps.myscheme.example.com.yaml >deploy/rbac.yaml
{
  echo "# Generated from rules/ by deploy/generate.sh. Do not edit: regenerate."
  kubectl create configmap ruleop-rules --namespace ruleop-system --from-file=rules/ --dry-run=client -o yaml |
    kubectl label --local -f - app.kubernetes.io/name=ruleop -o yaml
} >deploy/rules-configmap.yaml
cargo run --quiet -- rule --rules rules/ >examples/rules.yaml
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/rules"
for f in rules/*.yaml; do
  name="$(sed -n 's/^name: *//p' "$f" | head -1)"
  { cat "$f"; echo "serviceAccount: {name: ruleop-$name, namespace: ruleop-system}"; } >"$tmp/rules/$(basename "$f")"
done
per_rule() { (cd "$tmp" && cargo run --quiet --manifest-path "$repo/Cargo.toml" -- "$@"); }
# Only the rules' own accounts and roles, and ruleop's `impersonate` on them: the rest of what
# `rbac --per-rule` prints is the base's (the overlay shrinks its ClusterRole ruleop).
per_rule rbac --per-rule --rules rules/ --crd "$repo/deploy/crds/websites.sre.example.com.yaml" --crd "$repo/deploy/crds/myapps.myscheme.example.com.yaml" |
  awk 'BEGIN { RS = "---\n"; ORS = "" } NR == 1 { print; next } /\n  name: ruleop-(rule-|impersonate)|^apiVersion: v1\nkind: ServiceAccount/ { print "---\n" $0 }' >examples/per-rule/rbac.yaml
per_rule rule --rules rules/ >examples/per-rule/rules.yaml
# The Helm chart's generated parts: the CRDs, the shipped rules, their RBAC (with the
# CRD roles, which the chart renders only with installCRDs) and the admission policies.
chart=charts/ruleop
rm -f "$chart"/crds/*.yaml "$chart"/files/rules/*.yaml
mkdir -p "$chart/crds" "$chart/files/rules"
cp deploy/crds/*.yaml "$chart/crds/"
cp rules/*.yaml "$chart/files/rules/"
cp deploy/admission-policy.yaml "$chart/files/admission-policy.yaml"
cp deploy/monitoring/prometheus-rule.yaml deploy/monitoring/dashboard.json "$chart/files/"
cargo run --quiet -- rbac --install-crds --rules rules/ --crd deploy/crds/websites.sre.example.com.yaml --crd deploy/crds/myapps.myscheme.example.com.yaml >"$chart/files/rbac.yaml"
echo "regenerated deploy/crds/, deploy/rbac.yaml, deploy/rules-configmap.yaml, examples/rules.yaml, examples/per-rule/ and charts/ruleop/{crds,files}/"
