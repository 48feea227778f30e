//! What of a child the watch cache keeps: only what reconcile, status and pruning read.
//! The comparison with the rendered object reads the fields the templates write; readiness
//! reads `status`, `spec.replicas` and the metadata; everything else the API server adds
//! (a Deployment's pod-template defaults, a Service's cluster IPs...) is memory only, and is
//! dropped as each object enters the cache. A kind whose live objects a rule reads freely
//! (a `readyWhen`, `observed.<id>` in a template, a status field or expression reading
//! more than its `status` and `metadata`) is kept whole. Pure.

use crate::rules::compile::{FieldSource, Node, Source};
use crate::rules::{CompiledChild, CompiledRule};
use serde_json::Value;
use std::collections::BTreeMap;

/// The shape of what to keep of a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keep {
    /// All of it.
    All,
    /// Of a mapping, these fields (each with what to keep of it); of a list, the same of
    /// each element; a scalar is kept.
    Fields(BTreeMap<String, Keep>),
}

impl Keep {
    fn union(self, other: Keep) -> Keep {
        match (self, other) {
            (Keep::Fields(mut a), Keep::Fields(b)) => {
                for (k, v) in b {
                    let merged = match a.remove(&k) {
                        Some(old) => old.union(v),
                        None => v,
                    };
                    a.insert(k, merged);
                }
                Keep::Fields(a)
            }
            _ => Keep::All,
        }
    }

    /// Drops from `v` what is not to be kept.
    pub fn apply(&self, v: &mut Value) {
        let Keep::Fields(fields) = self else { return };
        match v {
            Value::Object(m) => {
                m.retain(|k, _| fields.contains_key(k));
                for (k, sub) in m.iter_mut() {
                    if let Some(keep) = fields.get(k) {
                        keep.apply(sub);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|i| self.apply(i)),
            _ => {}
        }
    }
}

/// What a template writes, as a shape.
fn of_node(node: &Node) -> Keep {
    match node {
        Node::Map(entries) => {
            let mut fields = BTreeMap::new();
            for (key, value) in entries {
                let crate::rules::compile::Key::Literal(k) = key else {
                    return Keep::All;
                };
                fields.insert(k.clone(), of_node(value));
            }
            Keep::Fields(fields)
        }
        Node::Seq(items) => items
            .iter()
            .map(of_node)
            .reduce(Keep::union)
            .unwrap_or(Keep::All),
        Node::Each(each) => of_node(&each.1),
        Node::Literal(v) => of_literal(v),
        Node::Expr(_) | Node::Text(_) => Keep::All,
    }
}

fn of_literal(v: &Value) -> Keep {
    match v {
        Value::Object(m) => {
            Keep::Fields(m.iter().map(|(k, v)| (k.clone(), of_literal(v))).collect())
        }
        Value::Array(items) => items
            .iter()
            .map(of_literal)
            .reduce(Keep::union)
            .unwrap_or(Keep::All),
        _ => Keep::All,
    }
}

/// What readiness and pruning read of every child, besides what the templates write
/// (`spec.replicas`, `spec.type`, `status`).
fn always() -> Keep {
    let mut spec = BTreeMap::new();
    // Read by the built-in readiness of Deployments and StatefulSets, and of Services.
    spec.insert("replicas".to_string(), Keep::All);
    spec.insert("type".to_string(), Keep::All);
    let mut fields = BTreeMap::new();
    fields.insert("spec".to_string(), Keep::Fields(spec));
    fields.insert("status".to_string(), Keep::All);
    Keep::Fields(fields)
}

/// Whether the rule reads child `ix`'s live object beyond its `status` and `metadata`.
fn read_freely(rule: &CompiledRule, ix: usize) -> bool {
    let child = &rule.children[ix];
    if child.ready_when.is_some() || rule.children.iter().any(|c| c.reads.observed.contains(&ix)) {
        return true;
    }
    let narrow = |rest: &str| {
        ["status", "metadata"].iter().any(|p| {
            rest == *p || rest.starts_with(&format!("{p}.")) || rest.starts_with(&format!("{p}["))
        })
    };
    let path_reads = rule.fields.iter().any(|f| match &f.source {
        FieldSource::Path {
            from: Source::Child(i),
            text,
            ..
        } if *i == ix => {
            // `$..x` reaches anywhere: the kind is read freely.
            let rest = text.trim_start_matches('$');
            rest.contains("..") || !narrow(rest.trim_start_matches('.'))
        }
        _ => false,
    });
    let expressions = rule
        .fields
        .iter()
        .filter_map(|f| match &f.source {
            FieldSource::Value(e) => Some(e),
            _ => None,
        })
        .chain(rule.ready.as_ref());
    let prefix = format!("children.{}", child.id);
    let expr_reads = expressions
        .flat_map(|e| rule.program.expression_paths(e))
        .any(|p| {
            p == "children"
                || p == prefix
                || p.strip_prefix(&format!("{prefix}."))
                    .is_some_and(|rest| !narrow(rest))
        });
    path_reads || expr_reads
}

/// What to keep of the objects of `api_version`/`kind` any of `rules` makes (the
/// revisions of one rule that render its resources at once, in a rollout).
pub fn for_rules(rules: &[&CompiledRule], api_version: &str, kind: &str) -> Keep {
    rules
        .iter()
        .map(|r| for_kind(r, api_version, kind))
        .reduce(Keep::union)
        .unwrap_or(Keep::All)
}

/// What to keep of the objects of `api_version`/`kind` the rule makes (of the object's
/// content besides `apiVersion`, `kind` and `metadata`).
pub fn for_kind(rule: &CompiledRule, api_version: &str, kind: &str) -> Keep {
    let of_kind = |c: &&CompiledChild| c.api_version == api_version && c.kind == kind;
    let mut keep = always();
    for (ix, c) in rule.children.iter().enumerate().filter(|(_, c)| of_kind(c)) {
        if read_freely(rule, ix) {
            return Keep::All;
        }
        keep = keep.union(of_node(&c.template));
    }
    match keep {
        Keep::Fields(mut f) => {
            for k in ["apiVersion", "kind", "metadata"] {
                f.remove(k);
            }
            // A Secret's `stringData` is stored as `data` (and never returned): what the
            // comparison reads of it is there.
            if api_version == "v1"
                && kind == "Secret"
                && let Some(strings) = f.get("stringData").cloned()
            {
                let data = match f.remove("data") {
                    Some(d) => d.union(strings),
                    None => strings,
                };
                f.insert("data".into(), data);
            }
            Keep::Fields(f)
        }
        all => all,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testing::rule;
    use serde_json::json;

    #[test]
    fn a_secrets_string_data_is_kept_as_the_data_it_is_stored_as() {
        let r = rule(
            "name: s\nwatch: {group: x.io, version: v1, resource: ws}\nchildren:\n  - id: s\n    template: {apiVersion: v1, kind: Secret, metadata: {name: \"{{ name }}\"}, stringData: {a: b}}\n",
        );
        let mut live = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x"},
            "data": {"a": "Yg==", "other": "eA=="}, "type": "Opaque"});
        for_kind(&r, "v1", "Secret").apply(&mut live);
        assert_eq!(live["data"], json!({"a": "Yg=="}));
    }

    const RULE: &str = "name: w\nwatch: {group: x.io, version: v1, resource: ws}\nchildren:\n  - id: d\n    template:\n      apiVersion: apps/v1\n      kind: Deployment\n      metadata: {name: \"{{ name }}\"}\n      spec:\n        selector: {matchLabels: \"{{ labels }}\"}\n        template:\n          spec:\n            containers:\n              - name: app\n                image: \"{{ spec.image }}\"\n                ports: [{containerPort: 80}]\n  - id: s\n    template:\n      apiVersion: v1\n      kind: Service\n      metadata: {name: \"{{ name }}\"}\n      spec: {ports: [{port: 80}]}\nstatus:\n  fields:\n    - {name: ready, from: d, path: $.status.readyReplicas, type: integer}\n";

    #[test]
    fn only_what_the_templates_write_readiness_and_status_read_is_kept() {
        let r = rule(RULE);
        let keep = for_kind(&r, "apps/v1", "Deployment");
        let mut live = json!({
            "spec": {"replicas": 2, "revisionHistoryLimit": 10, "selector": {"matchLabels": {"a": "b"}},
                "strategy": {"type": "RollingUpdate"},
                "template": {"metadata": {"labels": {"a": "b"}}, "spec": {"dnsPolicy": "ClusterFirst",
                    "containers": [{"name": "app", "image": "nginx", "imagePullPolicy": "Always",
                        "terminationMessagePath": "/dev/termination-log", "ports": [{"containerPort": 80, "protocol": "TCP"}]}]}}},
            "status": {"readyReplicas": 2, "conditions": [{"type": "Available"}]}});
        keep.apply(&mut live);
        assert_eq!(
            live,
            json!({"spec": {"replicas": 2, "selector": {"matchLabels": {"a": "b"}},
                "template": {"spec": {"containers": [{"name": "app", "image": "nginx", "ports": [{"containerPort": 80}]}]}}},
                "status": {"readyReplicas": 2, "conditions": [{"type": "Available"}]}})
        );
        let mut svc = json!({"spec": {"clusterIP": "10.0.0.1", "type": "LoadBalancer", "ports": [{"port": 80, "targetPort": 80}]}});
        for_kind(&r, "v1", "Service").apply(&mut svc);
        assert_eq!(
            svc,
            json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}})
        );
    }

    #[test]
    fn a_kind_read_beyond_status_and_metadata_is_kept_whole() {
        let observed = RULE.replace(
            "      spec: {ports: [{port: 80}]}\n",
            "      spec: {ports: [{port: 80}]}\n  - id: c\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: \"{{ name }}\"}\n      data: {ip: \"{{ observed.s.spec.clusterIP }}\"}\n",
        );
        assert_eq!(for_kind(&rule(&observed), "v1", "Service"), Keep::All);
        const FIELD: &str =
            "    - {name: ready, from: d, path: $.status.readyReplicas, type: integer}\n";
        // (what replaces what, whether the Deployments are then kept whole)
        let cases = [
            ("$.status.readyReplicas", "$.spec.replicas", true),
            ("$.status.readyReplicas", "$..status.readyReplicas", true),
            (
                FIELD,
                "    - {name: ready, value: children.d.spec.paused, type: boolean}\n",
                true,
            ),
            (
                FIELD,
                "    - {name: ready, value: children.d.status.readyReplicas, type: integer}\n",
                false,
            ),
            (
                "  - id: s\n",
                "    readyWhen: child.spec.paused\n  - id: s\n",
                true,
            ),
        ];
        for (from, to, whole) in cases {
            let keep = for_kind(&rule(&RULE.replace(from, to)), "apps/v1", "Deployment");
            assert_eq!(keep == Keep::All, whole, "{to}");
        }
    }
}
