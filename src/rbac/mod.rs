//! The least RBAC a set of rules needs, derived from the rules alone: read and watch the
//! watched kinds and write their status; `update` on their `finalizers` (a child's
//! `blockOwnerDeletion` needs it where the OwnerReferencesPermissionEnforcement admission
//! plugin is on); full control of each child kind; get/list/watch of the kinds of the
//! existing objects a rule reads; Events on the custom resources; the
//! leader Lease and the inventory ConfigMap in the operator's own namespace. Nothing else.

use crate::access::{self, policy_rules};
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
    /// (group, kind) → resource name, from the CRDs given: a kind not there is named by
    /// its guessed plural ([`plural_of`]).
    pub plurals: BTreeMap<(String, String), String>,
}

/// (group, kind) → plural of every CRD among `crds`.
pub fn plurals(crds: &[Value]) -> BTreeMap<(String, String), String> {
    crds.iter()
        .filter(|c| c["kind"] == "CustomResourceDefinition")
        .filter_map(|c| {
            let names = &c["spec"]["names"];
            Some((
                (
                    c["spec"]["group"].as_str()?.to_string(),
                    names["kind"].as_str()?.to_string(),
                ),
                names["plural"].as_str()?.to_string(),
            ))
        })
        .collect()
}

impl Target {
    /// The resource name of a kind: its CRD's plural, else the guessed one.
    fn resource(&self, group: &str, kind: &str) -> String {
        self.plurals
            .get(&(group.to_string(), kind.to_string()))
            .cloned()
            .unwrap_or_else(|| plural_of(kind))
    }

    /// What `rule` needs, its kinds named as the CRDs given name them.
    fn needs(&self, rule: &CompiledRule) -> access::Permissions {
        let mut p = access::Permissions::new();
        access::add_needs(&mut p, rule, status_on_object(rule, self), &|g, k| {
            self.resource(g, k)
        });
        p
    }
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

const LEASES: &[&str] = &["get", "list", "watch", "create", "update", "patch"];

pub use crate::access::plural_of;

/// (group, resource) → verbs, for every rule.
fn permissions(rules: &[Arc<CompiledRule>], t: &Target) -> access::Permissions {
    let mut p = access::Permissions::new();
    for rule in rules {
        for (k, verbs) in t.needs(rule) {
            p.entry(k).or_default().extend(verbs);
        }
        // A Deployment let go (`onRemove: Orphan`): ruleop's annotations are taken off its
        // ReplicaSets too, which its controller copied them to (best effort, not required).
        let orphans_deployments = rule.children.iter().any(|c| {
            c.group() == "apps"
                && c.kind == "Deployment"
                && c.on_remove == crate::rules::spec::OnRemove::Orphan
        });
        if orphans_deployments {
            p.entry(("apps".into(), "replicasets".into()))
                .or_default()
                .extend(["list", "patch"]);
        }
    }
    p
}

/// Whether the rule's watched kind has no status subresource (its status is written
/// through the object).
fn status_on_object(rule: &CompiledRule, t: &Target) -> bool {
    let w = &rule.watch;
    t.without_status_subresource
        .contains(&(w.group.clone(), w.resource.clone(), w.version.clone()))
}

/// A Role and its RoleBinding in `namespace`, or (None) a ClusterRole and its
/// ClusterRoleBinding, named `name`, granting `rules` to `subjects`.
fn role_and_binding(
    namespace: Option<&str>,
    name: &str,
    rules: Vec<Value>,
    subjects: &Value,
) -> [Value; 2] {
    let (role, binding, meta) = match namespace {
        None => ("ClusterRole", "ClusterRoleBinding", json!({"name": name})),
        Some(ns) => (
            "Role",
            "RoleBinding",
            json!({"name": name, "namespace": ns}),
        ),
    };
    [
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": role, "metadata": meta, "rules": rules}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": binding, "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role, "name": name}, "subjects": subjects}),
    ]
}

/// For each rule that names a ServiceAccount: the account, a Role (or ClusterRole) with
/// exactly what the rule needs and its binding; and for ruleop's own account,
/// `impersonate` on exactly those accounts (a Role in each of their namespaces).
fn identities(rules: &[Arc<CompiledRule>], t: &Target, ruleop: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    let mut accounts: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for rule in rules {
        let Some(id) = &rule.identity else { continue };
        if accounts.entry(&id.namespace).or_default().insert(&id.name) {
            out.push(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": id.name, "namespace": id.namespace}}));
        }
        let subject =
            json!([{"kind": "ServiceAccount", "name": id.name, "namespace": id.namespace}]);
        let name = format!("{}-rule-{}", t.name, rule.name);
        let perms = t.needs(rule);
        out.extend(role_and_binding(
            t.namespace.as_deref(),
            &name,
            policy_rules(&perms),
            &subject,
        ));
        // ruleop defines its kind for it (its CRD, its conversions) only while the
        // account may update that CRD, by name.
        let defines = (t.install_crds && rule.crd.is_some()) || rule.conversion.is_some();
        if let Some(crd) = rule.crd_name().filter(|_| defines) {
            let define = format!("{name}-define");
            out.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": define},
                "rules": [{"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "resourceNames": [crd], "verbs": ["update"]}]}));
            out.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": define},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": define}, "subjects": subject}));
        }
    }
    for (ns, names) in accounts {
        let rules = vec![
            json!({"apiGroups": [""], "resources": ["serviceaccounts"], "resourceNames": names, "verbs": ["impersonate"]}),
        ];
        out.extend(role_and_binding(
            Some(ns),
            &format!("{}-impersonate", t.name),
            rules,
            ruleop,
        ));
    }
    out
}

/// The CRDs of the rules' watched kinds (`<resource>.<group>`), which each rule follows
/// for changes of its schema.
fn followed_crds(rules: &[Arc<CompiledRule>]) -> Vec<String> {
    let names: BTreeSet<String> = rules
        .iter()
        .filter(|r| !r.watch.group.is_empty())
        .map(|r| r.watch.crd_name())
        .collect();
    names.into_iter().collect()
}

/// The CRDs of the rules' kinds in several versions, by name.
fn converted_crds(rules: &[Arc<CompiledRule>]) -> Vec<String> {
    rules
        .iter()
        .filter(|r| r.conversion.is_some())
        .filter_map(|r| r.crd_name().map(str::to_string))
        .collect()
}

/// What the storage migration of the rules' kinds in several versions needs (none when
/// there is no such kind): each CRD's status patched by name (`storedVersions` trimmed),
/// each kind listed and written again, and StorageVersionMigrations asked for, followed
/// and taken back.
fn migration_grants(rules: &[Arc<CompiledRule>]) -> Vec<Value> {
    let crds = converted_crds(rules);
    if crds.is_empty() {
        return Vec::new();
    }
    let mut grants = vec![
        json!({"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions/status"], "resourceNames": crds, "verbs": ["patch"]}),
        json!({"apiGroups": ["storagemigration.k8s.io"], "resources": ["storageversionmigrations"], "verbs": ["create", "get", "delete"]}),
    ];
    for r in rules.iter().filter(|r| r.conversion.is_some()) {
        grants.push(json!({"apiGroups": [r.watch.group], "resources": [r.watch.resource], "verbs": ["list", "update"]}));
    }
    grants
}

/// The RBAC objects, in apply order. A rule that names a ServiceAccount runs as it: what
/// it needs is granted to that account alone, never to ruleop's own.
pub fn manifests(rules: &[Arc<CompiledRule>], t: &Target) -> Vec<Value> {
    let subject = json!([{"kind": "ServiceAccount", "name": t.service_account, "namespace": t.operator_namespace}]);
    let own: Vec<Arc<CompiledRule>> = rules
        .iter()
        .filter(|r| r.identity.is_none())
        .cloned()
        .collect();
    let mut perms = permissions(&own, t);
    // Events on the Rules (a rollout's), and on the resources of ruleop's own rules.
    perms
        .entry(("events.k8s.io".into(), "events".into()))
        .or_default()
        .extend(access::EVENTS);
    let mut out = Vec::new();
    out.extend(role_and_binding(
        t.namespace.as_deref(),
        &t.name,
        policy_rules(&perms),
        &subject,
    ));
    if t.install_crds {
        // Only the CRDs of these rules, by name, and the Rule kind's (ruleop applies it too);
        // listing the kinds' resources (to check a change against what is stored) is already
        // granted above, and listing Rules below.
        let mut names: Vec<String> = rules
            .iter()
            .filter_map(|r| r.crd_name().map(str::to_string))
            .collect();
        names.push(crate::rules::object::CRD_NAME.to_string());
        let crds = format!("{}-crds", t.name);
        out.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": crds},
            "rules": [
                {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "resourceNames": names, "verbs": ["get", "patch", "list", "watch"]},
                {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["create"]},
            ]}));
        // A kind in several versions: its storage migrated.
        if let Some(list) = out.last_mut().and_then(|c| c["rules"].as_array_mut()) {
            list.extend(migration_grants(rules));
        }
        out.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": crds},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": crds}, "subjects": subject}));
    }
    // A kind in several versions whose CRD others apply: ruleop's CA kept in its
    // conversion webhook (the CRD watched, and patched, by name).
    let converted = converted_crds(rules);
    if !t.install_crds && !converted.is_empty() {
        // ...and its storage migrated, as with `--install-crds`.
        let ca = format!("{}-conversion", t.name);
        let mut grants = vec![
            json!({"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "resourceNames": converted, "verbs": ["get", "list", "watch", "patch"]}),
        ];
        grants.extend(migration_grants(rules));
        out.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": ca},
            "rules": grants}));
        out.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": ca},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ca}, "subjects": subject}));
    }
    // The Rule objects it serves, whatever the scope of the rest: Rules are cluster-scoped.
    let rule_objects = format!("{}-rules", t.name);
    out.push(json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": rule_objects},
        "rules": [
            {"apiGroups": [crate::rules::object::GROUP], "resources": [crate::rules::object::PLURAL], "verbs": ["get", "list", "patch", "watch"]},
            {"apiGroups": [crate::rules::object::GROUP], "resources": [format!("{}/status", crate::rules::object::PLURAL)], "verbs": ["patch"]},
        ]}));
    // The Rule webhook's configuration (`--webhook-addr`), by name: `deploy/webhook.yaml`
    // ships it and ruleop writes its CA bundle; no `create` (which no `resourceNames` can
    // narrow: it would let a leaked token register a webhook that receives every Secret).
    // Whether a Rule's author holds the right the Rule demands is asked of the API server
    // (SubjectAccessReviews).
    if let Some(rules) = out.last_mut().and_then(|r| r["rules"].as_array_mut()) {
        rules.push(json!({"apiGroups": ["admissionregistration.k8s.io"], "resources": ["validatingwebhookconfigurations"], "resourceNames": [t.name], "verbs": ["get", "patch"]}));
        rules.push(json!({"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]}));
        // Who may scrape /metrics (`--metrics-auth kubernetes`): the caller's token.
        rules.push(json!({"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]}));
        // Each watched kind's CRD followed for schema changes, by name (read only).
        let followed = followed_crds(&own);
        if !followed.is_empty() {
            rules.push(json!({"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "resourceNames": followed, "verbs": ["get", "list", "watch"]}));
        }
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
    out.extend(identities(rules, t, &subject));
    // Each object says whose it is (the standard label: `kubectl get -l` finds them all).
    for o in &mut out {
        o["metadata"]["labels"] = json!({"app.kubernetes.io/name": "ruleop"});
    }
    out
}

#[cfg(test)]
mod tests;
