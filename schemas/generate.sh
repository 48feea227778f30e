#!/usr/bin/env bash
# Regenerates schemas/kubernetes.json: the OpenAPI schemas of the built-in kinds ruleop
# checks child templates against (`ruleop check`), taken from the API server of the
# control plane the project builds (tests/cluster/up.sh), without descriptions, and only
# what the kinds of these API versions reach (cluster-scoped ones too: a rule making one is
# refused for that before its schema matters). Shipped in the binary.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
export KUBECONFIG="${KUBECONFIG:-$repo/target/cluster/kubeconfig}"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
for gv in api/v1 apis/apps/v1 apis/batch/v1 apis/networking.k8s.io/v1 apis/policy/v1 \
  apis/autoscaling/v1 apis/autoscaling/v2 apis/rbac.authorization.k8s.io/v1 \
  apis/coordination.k8s.io/v1 apis/discovery.k8s.io/v1 apis/storage.k8s.io/v1; do
  kubectl get --raw "/openapi/v3/$gv" >"$tmp/$(echo "$gv" | tr / _).json"
done
version="$(kubectl version -o json | python3 -c 'import json,sys; print(json.load(sys.stdin)["serverVersion"]["gitVersion"])')"
python3 - "$tmp" "$version" >schemas/kubernetes.json <<'PY'
import json, os, sys
folder, version = sys.argv[1], sys.argv[2]
schemas, kinds = {}, {}
for f in sorted(os.listdir(folder)):
    doc = json.load(open(os.path.join(folder, f)))
    for name, s in doc.get("components", {}).get("schemas", {}).items():
        schemas[name] = s
        for gvk in s.get("x-kubernetes-group-version-kind", []):
            av = gvk["version"] if not gvk["group"] else gvk["group"] + "/" + gvk["version"]
            if not name.endswith("List") and "spec" in s.get("properties", {}) or name.split(".")[-1] in ("ConfigMap", "Secret", "ServiceAccount", "Role", "RoleBinding", "Endpoints", "EndpointSlice", "Event", "PodTemplate", "ControllerRevision", "CSIStorageCapacity"):
                kinds[av + " " + gvk["kind"]] = name
KEEP = {"type", "properties", "items", "additionalProperties", "required", "enum", "format",
        "allOf", "$ref", "x-kubernetes-int-or-string", "x-kubernetes-preserve-unknown-fields"}
def strip(s):
    if isinstance(s, dict):
        return {k: strip(v) for k, v in s.items() if k in KEEP or k in ("properties",)} if "properties" not in s else \
            {**{k: strip(v) for k, v in s.items() if k in KEEP and k != "properties"}, "properties": {p: strip(v) for p, v in s["properties"].items()}}
    if isinstance(s, list):
        return [strip(x) for x in s]
    return s
reach, todo = {}, list(kinds.values())
while todo:
    n = todo.pop()
    if n in reach or n not in schemas:
        continue
    reach[n] = strip(schemas[n])
    text = json.dumps(reach[n])
    i = 0
    while True:
        i = text.find('"#/components/schemas/', i)
        if i < 0:
            break
        j = text.find('"', i + 1)
        todo.append(text[i + len('"#/components/schemas/'):j])
        i = j
json.dump({"kubernetes": version, "kinds": dict(sorted(kinds.items())), "schemas": dict(sorted(reach.items()))}, sys.stdout, separators=(",", ":"), sort_keys=True)
PY
echo "regenerated schemas/kubernetes.json ($version, $(wc -c <schemas/kubernetes.json) bytes)"
