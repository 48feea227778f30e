//! What a rule may do: the permissions it needs, derived from the rule alone (every kind it
//! watches, makes or reads, with the verbs ruleop uses on each), and whether the identity it
//! runs as holds them, asked of the API server before the rule starts ([`review`]).
//!
//! Owns: the derivation `ruleop rbac` prints RBAC from ([`needs`], [`policy_rules`]), and
//! the pre-flight check of a rule's ServiceAccount. Uses: `rules` (the compiled rule) and
//! the kube client. Used by: `operator` (the pre-flight, before a rule with a
//! ServiceAccount starts) and `rbac`.

pub mod authority;
pub mod review;

use crate::rules::CompiledRule;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

pub const READ: &[&str] = &["get", "list", "watch"];
pub const CHILD: &[&str] = &[
    "get", "list", "watch", "create", "update", "patch", "delete",
];
pub const STATUS: &[&str] = &["get", "patch", "update"];
pub const FINALIZERS: &[&str] = &["update"];
pub const EVENTS: &[&str] = &["create", "patch"];

/// (group, resource) → verbs.
pub type Permissions = BTreeMap<(String, String), BTreeSet<&'static str>>;

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

/// Adds what `rule` needs to `p`: read and watch the watched kind and write its status;
/// `update` on its `finalizers` (a child's `blockOwnerDeletion` needs it where the
/// OwnerReferencesPermissionEnforcement admission plugin is on); `patch` on the resource
/// itself (ruleop's finalizers, and the status of a kind without a status subresource);
/// full control of each child kind; get/list/watch of the kinds of the existing objects
/// it reads; Events. `resource(group, kind)` names a kind's resource ([`plural_of`]
/// offline, discovery at run time); `status_on_object`: the watched kind has no status
/// subresource.
pub fn add_needs(
    p: &mut Permissions,
    rule: &CompiledRule,
    status_on_object: bool,
    resource: &dyn Fn(&str, &str) -> String,
) {
    let mut add = |g: &str, r: String, verbs: &[&'static str]| {
        p.entry((g.to_string(), r))
            .or_default()
            .extend(verbs.iter().copied());
    };
    let w = &rule.watch;
    add(&w.group, w.resource.clone(), READ);
    if status_on_object {
        add(&w.group, w.resource.clone(), STATUS);
    }
    add(&w.group, format!("{}/status", w.resource), STATUS);
    add(&w.group, format!("{}/finalizers", w.resource), FINALIZERS);
    // ruleop's finalizers (ordered deletion, orphaned children) are set on the resource
    // itself, and must be releasable whatever the rule asks now: a rule that drops
    // `deletion: Ordered` still has resources holding its finalizer.
    add(&w.group, w.resource.clone(), &["patch"]);
    for c in &rule.children {
        add(c.group(), resource(c.group(), &c.kind), CHILD);
    }
    // Existing objects are only read (and watched, to follow their changes).
    for e in &rule.existing {
        add(e.group(), resource(e.group(), &e.kind), READ);
    }
    add("events.k8s.io", "events".into(), EVENTS);
}

/// RBAC policy rules granting `perms`: one per (group, verbs), resources merged and sorted.
pub fn policy_rules(perms: &Permissions) -> Vec<Value> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn policy_rules_merge_resources_with_the_same_verbs() {
        let mut p = Permissions::new();
        p.entry(("".into(), "services".into()))
            .or_default()
            .extend(CHILD);
        p.entry(("".into(), "configmaps".into()))
            .or_default()
            .extend(CHILD);
        p.entry(("".into(), "secrets".into()))
            .or_default()
            .extend(READ);
        let rules = policy_rules(&p);
        assert_eq!(rules.len(), 2, "{rules:?}");
        assert!(rules.contains(&json!({"apiGroups": [""], "resources": ["configmaps", "services"], "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]})));
    }
}
