//! The least RBAC a set of rules needs, derived from the rules alone: read and watch the
//! watched kinds and write their status; `update` on their `finalizers` (a child's
//! `blockOwnerDeletion` needs it where the OwnerReferencesPermissionEnforcement admission
//! plugin is on); full control of each child kind; get/list/watch of the kinds of the
//! existing objects a rule reads; Events on the custom resources; the
//! leader Lease and the inventory ConfigMap in the operator's own namespace. Nothing else.

use crate::operator::inventory::INVENTORY;
use crate::rules::CompiledRule;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

/// Where the operator runs and under which ServiceAccount.
#[derive(Debug, Clone)]
pub struct Target {
    pub name: String,
    pub service_account: String,
    pub operator_namespace: String,
    /// Roles in this namespace instead of a ClusterRole.
    pub namespace: Option<String>,
    /// (group, resource, version) of watched kinds whose CRD has no status subresource:
    /// ruleop writes their status through the object itself.
    pub without_status_subresource: BTreeSet<(String, String, String)>,
    /// Grant what `--install-crds` needs.
    pub install_crds: bool,
}

/// (group, plural, version) of every CRD version among `crds` that serves no status
/// subresource.
pub fn without_status_subresource(crds: &[Value]) -> BTreeSet<(String, String, String)> {
    crds.iter()
        .filter(|c| c["kind"] == "CustomResourceDefinition")
        .flat_map(|c| {
            let group = c["spec"]["group"].as_str().unwrap_or_default().to_string();
            let plural = c["spec"]["names"]["plural"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            c["spec"]["versions"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|v| v.pointer("/subresources/status").is_none())
                .filter_map(move |v| {
                    Some((
                        group.clone(),
                        plural.clone(),
                        v["name"].as_str()?.to_string(),
                    ))
                })
        })
        .collect()
}

const READ: &[&str] = &["get", "list", "watch"];
const CHILD: &[&str] = &[
    "get", "list", "watch", "create", "update", "patch", "delete",
];
const STATUS: &[&str] = &["get", "patch", "update"];
const FINALIZERS: &[&str] = &["update"];
const EVENTS: &[&str] = &["create", "patch"];
const LEASES: &[&str] = &["get", "list", "watch", "create", "update", "patch"];

/// The resource name of a kind, as the API server guesses it when it has nothing better
/// (lowercase plural). Discovery gives the truth at run time; this is for generating RBAC
/// with no cluster, and agrees with it for every built-in kind.
pub fn plural_of(kind: &str) -> String {
    let k = kind.to_lowercase();
    if k.ends_with("endpoints") {
        return k;
    }
    if let Some(stem) = k.strip_suffix('y')
        && !stem.ends_with(['a', 'e', 'i', 'o', 'u'])
    {
        return format!("{stem}ies");
    }
    if k.ends_with('s')
        || k.ends_with('x')
        || k.ends_with('z')
        || k.ends_with("ch")
        || k.ends_with("sh")
    {
        return format!("{k}es");
    }
    format!("{k}s")
}

/// (group, resource) → verbs.
fn permissions(
    rules: &[Arc<CompiledRule>],
    t: &Target,
) -> BTreeMap<(String, String), BTreeSet<&'static str>> {
    let mut p: BTreeMap<(String, String), BTreeSet<&'static str>> = BTreeMap::new();
    let mut add = |g: &str, r: String, verbs: &[&'static str]| {
        p.entry((g.to_string(), r))
            .or_default()
            .extend(verbs.iter().copied());
    };
    for rule in rules {
        add(&rule.watch.group, rule.watch.resource.clone(), READ);
        let w = &rule.watch;
        if t.without_status_subresource.contains(&(
            w.group.clone(),
            w.resource.clone(),
            w.version.clone(),
        )) {
            add(&w.group, w.resource.clone(), STATUS);
        }
        add(
            &rule.watch.group,
            format!("{}/status", rule.watch.resource),
            STATUS,
        );
        add(
            &rule.watch.group,
            format!("{}/finalizers", rule.watch.resource),
            FINALIZERS,
        );
        // ruleop's finalizers (ordered deletion, orphaned children) are set on the resource
        // itself, and must be releasable whatever the rule asks now: a rule that drops
        // `deletion: Ordered` still has resources holding its finalizer.
        add(&w.group, w.resource.clone(), &["patch"]);
        for c in &rule.children {
            add(c.group(), plural_of(&c.kind), CHILD);
        }
        // Existing objects are only read (and watched, to follow their changes).
        for e in &rule.existing {
            add(e.group(), plural_of(&e.kind), READ);
        }
    }
    add("events.k8s.io", "events".into(), EVENTS);
    p
}

/// Policy rules, one per (group, verbs), resources merged and sorted.
fn policy_rules(perms: &BTreeMap<(String, String), BTreeSet<&'static str>>) -> Vec<Value> {
    let mut grouped: BTreeMap<(String, Vec<&str>), Vec<String>> = BTreeMap::new();
    for ((g, r), verbs) in perms {
        grouped
            .entry((g.clone(), verbs.iter().copied().collect()))
            .or_default()
            .push(r.clone());
    }
    grouped
        .into_iter()
        .map(|((g, verbs), resources)| json!({"apiGroups": [g], "resources": resources, "verbs": verbs}))
        .collect()
}

/// The RBAC objects, in apply order.
pub fn manifests(rules: &[Arc<CompiledRule>], t: &Target) -> Vec<Value> {
    let subject = json!([{"kind": "ServiceAccount", "name": t.service_account, "namespace": t.operator_namespace}]);
    let rules_json = policy_rules(&permissions(rules, t));
    let mut out = Vec::new();
    match &t.namespace {
        None => {
            out.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": t.name}, "rules": rules_json}));
            out.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": t.name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": t.name}, "subjects": subject}));
        }
        Some(ns) => {
            out.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": t.name, "namespace": ns}, "rules": rules_json}));
            out.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": t.name, "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": t.name}, "subjects": subject}));
        }
    }
    if t.install_crds && rules.iter().any(|r| r.crd.is_some()) {
        // (With no schema there is no CRD to install: an empty `resourceNames` would
        // grant every CRD, so nothing is granted.)
        // Only the CRDs of these rules, by name; listing the kinds' resources (to check
        // a change against what is stored) is already granted above.
        let names: Vec<String> = rules
            .iter()
            .filter_map(|r| {
                r.crd.as_ref()?["metadata"]["name"]
                    .as_str()
                    .map(str::to_string)
            })
            .collect();
        let crds = format!("{}-crds", t.name);
        out.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": crds},
            "rules": [
                {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "resourceNames": names, "verbs": ["get", "patch"]},
                {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["create"]},
            ]}));
        out.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": crds},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": crds}, "subjects": subject}));
    }
    // The Rule objects it serves, whatever the scope of the rest: Rules are cluster-scoped.
    let rule_objects = format!("{}-rules", t.name);
    out.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": rule_objects},
        "rules": [
            {"apiGroups": [crate::rules::object::GROUP], "resources": [crate::rules::object::PLURAL], "verbs": ["get", "list", "patch", "watch"]},
            {"apiGroups": [crate::rules::object::GROUP], "resources": [format!("{}/status", crate::rules::object::PLURAL)], "verbs": ["patch"]},
        ]}));
    // The Rule webhook's configuration (`--webhook-addr`), by name; an apply that
    // creates it asks `create` too.
    if let Some(rules) = out.last_mut().and_then(|r| r["rules"].as_array_mut()) {
        rules.push(json!({"apiGroups": ["admissionregistration.k8s.io"], "resources": ["validatingwebhookconfigurations"], "resourceNames": [t.name], "verbs": ["get", "patch"]}));
        rules.push(json!({"apiGroups": ["admissionregistration.k8s.io"], "resources": ["validatingwebhookconfigurations"], "verbs": ["create"]}));
    }
    out.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": rule_objects},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": rule_objects}, "subjects": subject}));
    let lease = format!("{}-leader-election", t.name);
    out.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": lease, "namespace": t.operator_namespace},
        "rules": [
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": LEASES},
            {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [INVENTORY], "verbs": ["get", "update"]},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
            {"apiGroups": ["apps"], "resources": ["controllerrevisions"], "verbs": ["create", "delete", "get", "list"]},
            {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [format!("{}-webhook-tls", t.name)], "verbs": ["get", "update"]},
            {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        ]}));
    out.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": lease, "namespace": t.operator_namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": lease}, "subjects": subject}));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The operator as `deploy/` runs it, cluster-wide.
    fn target() -> Target {
        Target {
            name: "ruleop".into(),
            service_account: "ruleop".into(),
            operator_namespace: "ruleop-system".into(),
            namespace: None,
            without_status_subresource: BTreeSet::new(),
            install_crds: false,
        }
    }

    #[test]
    fn plurals_match_the_api_servers_for_built_in_kinds() {
        for (k, p) in [
            ("Deployment", "deployments"),
            ("Service", "services"),
            ("ConfigMap", "configmaps"),
            ("Ingress", "ingresses"),
            ("NetworkPolicy", "networkpolicies"),
            ("StatefulSet", "statefulsets"),
            ("Endpoints", "endpoints"),
            ("PodDisruptionBudget", "poddisruptionbudgets"),
            ("Gateway", "gateways"),
        ] {
            assert_eq!(plural_of(k), p);
        }
    }

    #[test]
    fn the_website_rule_needs_exactly_its_kinds() {
        let (rules, errors) = crate::rules::load_str(
            include_str!("../rules/website.yaml"),
            std::path::Path::new("w.yaml"),
        );
        assert!(errors.is_empty());
        let t = target();
        let m = manifests(&rules, &t);
        let role = &m[0]["rules"];
        let has = |g: &str, r: &str, v: &str| {
            role.as_array().unwrap().iter().any(|x| {
                x["apiGroups"][0] == g
                    && x["resources"].as_array().unwrap().iter().any(|y| y == r)
                    && x["verbs"].as_array().unwrap().iter().any(|y| y == v)
            })
        };
        assert!(has("sre.example.com", "websites", "watch"));
        assert!(
            !has("sre.example.com", "websites", "update"),
            "the custom resource itself is read-only"
        );
        assert!(has("sre.example.com", "websites/status", "patch"));
        assert!(
            has("sre.example.com", "websites/finalizers", "update"),
            "blockOwnerDeletion under OwnerReferencesPermissionEnforcement"
        );
        assert!(has("apps", "deployments", "delete"));
        assert!(has("", "services", "create"));
        assert!(
            !has("", "configmaps", "get"),
            "nothing the rule does not make"
        );
        assert!(has("events.k8s.io", "events", "create"));
        assert_eq!(
            m[2]["kind"], "ClusterRole",
            "the Rule objects, cluster-scoped"
        );
        assert_eq!(m[2]["rules"][0]["resources"], json!(["rules"]));
        assert_eq!(m[2]["rules"][1]["verbs"], json!(["patch"]));
        assert_eq!(
            m[4]["kind"], "Role",
            "the Lease is only in the operator's namespace"
        );
    }

    #[test]
    fn install_crds_grants_only_the_rules_crds_and_nothing_without_a_schema() {
        let load = |text: &str| crate::rules::load_str(text, std::path::Path::new("r.yaml")).0;
        let t = Target {
            install_crds: true,
            ..target()
        };
        let m = manifests(&load(include_str!("../rules/website.yaml")), &t);
        let crds = m
            .iter()
            .find(|x| x["metadata"]["name"] == "ruleop-crds")
            .expect("a ClusterRole for CRDs");
        assert_eq!(
            crds["rules"][0]["resourceNames"],
            json!(["websites.sre.example.com"])
        );
        // No schema: no CRD to install, and no (unbounded) grant.
        let m = manifests(
            &load(include_str!("../tests/fixtures/microservice/rules.yaml")),
            &t,
        );
        assert!(m.iter().all(|x| x["metadata"]["name"] != "ruleop-crds"));
    }

    #[test]
    fn existing_objects_are_only_read() {
        let (rules, errors) = crate::rules::load_str(
            include_str!("../tests/fixtures/microservice/rules.yaml"),
            std::path::Path::new("m.yaml"),
        );
        assert!(errors.is_empty(), "{errors:?}");
        let t = target();
        let role = manifests(&rules, &t)[0]["rules"].clone();
        let secrets: Vec<&Value> = role
            .as_array()
            .unwrap()
            .iter()
            .filter(|x| {
                x["apiGroups"][0] == ""
                    && x["resources"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|y| y == "secrets")
            })
            .collect();
        assert_eq!(secrets.len(), 1, "{role}");
        assert_eq!(secrets[0]["verbs"], json!(["get", "list", "watch"]));
    }

    #[test]
    fn a_kind_without_a_status_subresource_gets_patch_on_the_resource_itself() {
        let (rules, _) = crate::rules::load_str(
            include_str!("../rules/myapp.yaml"),
            std::path::Path::new("m.yaml"),
        );
        let crd: Value =
            serde_yaml::from_str(include_str!("../tests/fixtures/origin/myapp-crd.yaml")).unwrap();
        let t = Target {
            without_status_subresource: without_status_subresource(&[crd]),
            ..target()
        };
        let role = manifests(&rules, &t)[0]["rules"].clone();
        let patch_myapps = role.as_array().unwrap().iter().any(|x| {
            x["apiGroups"][0] == "myscheme.example.com"
                && x["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|y| y == "myapps")
                && x["verbs"].as_array().unwrap().iter().any(|y| y == "patch")
        });
        assert!(patch_myapps, "{role}");
    }

    #[test]
    fn every_watched_resource_gets_patch_so_finalizers_can_always_be_released() {
        // Neither rule asks for ordered deletion or orphaned children now; resources may
        // still carry a finalizer an earlier version of the rule put on.
        let (rules, _) = crate::rules::load_str(
            include_str!("../rules/website.yaml"),
            std::path::Path::new("w.yaml"),
        );
        let role = manifests(&rules, &target())[0]["rules"].clone();
        let patch = role.as_array().unwrap().iter().any(|x| {
            x["apiGroups"][0] == "sre.example.com"
                && x["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|y| y == "websites")
                && x["verbs"].as_array().unwrap().iter().any(|y| y == "patch")
        });
        assert!(patch, "{role}");
    }
}
