//! Which rendered children refer to which (pure): a child that reads another
//! (`rendered.<id>`, `observed.<id>`, `after`) or names it (a string of its object that is
//! another child's name: a volume's ConfigMap, an Ingress's Service, an HPA's target, a
//! selector's value) refers to it. Such a child is not applied while the one it refers to
//! is not ruleop's (`NotOwned`): it would mount, route to or scale an object ruleop never
//! wrote. Its own name and namespace are not references (a Deployment and its Service
//! often share a name).

use super::model::Rendered;
use crate::rules::CompiledRule;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};

/// For each of `children` (by index), the others it refers to (indexes into `children`).
pub fn references(rule: &CompiledRule, children: &[Rendered]) -> Vec<BTreeSet<usize>> {
    let mut by_id: HashMap<&str, Vec<usize>> = HashMap::new();
    let mut by_name: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, c) in children.iter().enumerate() {
        by_id.entry(c.id.as_str()).or_default().push(i);
        by_name.entry(c.name.as_str()).or_default().push(i);
    }
    children
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let mut refs = BTreeSet::new();
            if let Some(child) = rule.children.iter().find(|k| k.id == c.id) {
                let reads = &child.reads;
                for j in reads
                    .rendered
                    .iter()
                    .chain(&reads.observed)
                    .chain(&child.after)
                {
                    if let Some(k) = rule.children.get(*j) {
                        refs.extend(by_id.get(k.id.as_str()).into_iter().flatten());
                    }
                }
            }
            named(&c.object, &mut |s| {
                if s != c.name {
                    refs.extend(by_name.get(s).into_iter().flatten());
                }
            });
            refs.remove(&i);
            refs
        })
        .collect()
}

/// Every string of `object` but its own `metadata.name` and `metadata.namespace`.
fn named(object: &Value, seen: &mut dyn FnMut(&str)) {
    fn walk(v: &Value, seen: &mut dyn FnMut(&str)) {
        match v {
            Value::String(s) => seen(s),
            Value::Array(items) => items.iter().for_each(|i| walk(i, seen)),
            Value::Object(m) => m.values().for_each(|i| walk(i, seen)),
            _ => {}
        }
    }
    let Some(top) = object.as_object() else {
        return;
    };
    for (k, v) in top {
        if k == "metadata"
            && let Some(meta) = v.as_object()
        {
            meta.iter()
                .filter(|(k, _)| !matches!(k.as_str(), "name" | "namespace"))
                .for_each(|(_, v)| walk(v, seen));
        } else {
            walk(v, seen);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testing::rule;
    use serde_json::json;

    const RULE: &str = "name: site\nwatch: {group: x.io, version: v1, resource: sites}\nchildren:\n  - id: files\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"{{ name }}-files\"}}\n  - id: web\n    template:\n      apiVersion: apps/v1\n      kind: Deployment\n      metadata: {name: \"{{ name }}-web\"}\n      spec:\n        selector: {matchLabels: {app: \"{{ name }}\"}}\n        template:\n          metadata: {labels: {app: \"{{ name }}\"}}\n          spec:\n            containers: [{name: web, image: nginx}]\n            volumes: [{name: f, configMap: {name: \"{{ name }}-files\"}}]\n  - id: svc\n    template: {apiVersion: v1, kind: Service, metadata: {name: \"{{ name }}-web\"}, spec: {selector: {app: \"{{ name }}\"}}}\n  - id: hpa\n    template: {apiVersion: autoscaling/v2, kind: HorizontalPodAutoscaler, metadata: {name: \"{{ name }}-hpa\"}, spec: {scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: \"{{ rendered.web.metadata.name }}\"}, maxReplicas: 3}}\n";

    #[test]
    fn a_child_refers_to_what_it_reads_or_names_not_to_what_shares_its_name() {
        let r = rule(RULE);
        let cr = json!({"apiVersion": "x.io/v1", "kind": "Site",
            "metadata": {"name": "blog", "namespace": "ns", "uid": "u"}, "spec": {}});
        let children = crate::render::render(&r, &cr).unwrap();
        let ids: Vec<&str> = children.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["files", "web", "svc", "hpa"]);
        let refs = references(&r, &children);
        assert!(refs[0].is_empty(), "{refs:?}");
        assert_eq!(
            refs[1],
            BTreeSet::from([0]),
            "the volume's ConfigMap: {refs:?}"
        );
        assert!(
            refs[2].is_empty(),
            "the Service shares the Deployment's name: {refs:?}"
        );
        assert!(refs[3].contains(&1), "the HPA reads rendered.web: {refs:?}");
    }
}
