//! The cluster a test's steps change: the custom resource and the objects in it, changed
//! as the API server would change them (a merge patch of the resource bumps its
//! generation when its spec changes; children applied as server-side apply would leave
//! them). Every object given by a test is checked for its shape first: a test with a
//! malformed object fails with a message, never a panic.

use crate::render::Plan;
use crate::ruletest::spec::Step;
use serde_json::{Map, Value, json};
use std::collections::HashMap;

/// What the steps of one test change.
#[derive(Debug, Default)]
pub struct Cluster {
    pub resource: Value,
    pub live: Vec<Value>,
    /// What the last `applyChildren` applied of each child, by (apiVersion, kind, name):
    /// fields it no longer renders are removed, as server-side apply removes the fields
    /// its manager stops setting.
    applied: HashMap<(String, String, String), Value>,
}

/// Whether `o` is an object with an apiVersion, a kind and a name; why not, if not.
pub fn check_object(o: &Value, what: &str) -> Result<(), String> {
    let named = o["apiVersion"].is_string()
        && o["kind"].is_string()
        && o.pointer("/metadata/name").is_some_and(Value::is_string);
    if o.is_object() && named {
        Ok(())
    } else {
        Err(format!(
            "{what}: an object needs `apiVersion`, `kind` and `metadata.name` (strings)"
        ))
    }
}

/// Checks the resource's shape: an object whose `metadata` (when given) is a mapping.
fn check_resource(r: &Value) -> Result<(), String> {
    match r {
        Value::Object(m)
            if m.get("metadata")
                .is_none_or(|x| x.is_object() || x.is_null()) =>
        {
            Ok(())
        }
        _ => Err("the resource must be a mapping with `metadata` a mapping".into()),
    }
}

impl Cluster {
    /// The resource (given the namespace `default`, a uid and generation 1 when it has
    /// none) and the objects in the cluster from the start.
    pub fn new(resource: &Value, observed: &[Value]) -> Result<Cluster, String> {
        check_resource(resource)?;
        for (i, o) in observed.iter().enumerate() {
            check_object(o, &format!("observed[{i}]"))?;
        }
        let mut r = resource.clone();
        let meta = r
            .as_object_mut()
            .map(|m| m.entry("metadata").or_insert_with(|| json!({})))
            .and_then(Value::as_object_mut)
            .ok_or("the resource has no metadata mapping")?;
        meta.entry("namespace").or_insert_with(|| json!("default"));
        meta.entry("uid")
            .or_insert_with(|| json!("00000000-0000-0000-0000-000000000001"));
        meta.entry("generation").or_insert_with(|| json!(1));
        Ok(Cluster {
            resource: r,
            live: observed.to_vec(),
            applied: HashMap::new(),
        })
    }

    /// What a step changes: the resource, then the objects in the cluster, in the order
    /// `resource`, `applyChildren`, `apply`, `patch`, `delete`.
    pub fn change(&mut self, step: &Step, last: Option<&Plan>) -> Result<(), String> {
        if let Some(patch) = &step.resource {
            self.patch_resource(patch)?;
        }
        if step.apply_children {
            let plan = last.ok_or("`applyChildren`: the step before rendered no children")?;
            self.apply_children(plan);
        }
        for (i, o) in step.apply.iter().enumerate() {
            check_object(o, &format!("apply[{i}]"))?;
            put(&mut self.live, o.clone());
        }
        for p in &step.patch {
            let object = p.object();
            let Some(o) = self.live.iter_mut().find(|o| object.is(o)) else {
                return Err(format!(
                    "`patch`: no {} {} in the cluster (it holds: {})",
                    p.kind,
                    p.name,
                    self.holds()
                ));
            };
            json_patch::merge(o, &p.merge);
            check_object(o, &format!("`patch` of {} {}", p.kind, p.name))?;
        }
        for d in &step.delete {
            let before = self.live.len();
            self.live.retain(|o| !d.is(o));
            if self.live.len() == before {
                return Err(format!(
                    "`delete`: no {} {} in the cluster (it holds: {})",
                    d.kind,
                    d.name,
                    self.holds()
                ));
            }
        }
        Ok(())
    }

    /// A merge patch of the resource; its generation goes up when anything but its
    /// metadata and status changed, as the API server counts it.
    fn patch_resource(&mut self, patch: &Value) -> Result<(), String> {
        let before = without_metadata_and_status(&self.resource);
        let mut next = self.resource.clone();
        json_patch::merge(&mut next, patch);
        check_resource(&next).map_err(|e| format!("`resource`: {e}"))?;
        if without_metadata_and_status(&next) != before {
            bump_generation(&mut next);
        }
        self.resource = next;
        Ok(())
    }

    /// The children the step before rendered, as server-side apply would leave them: the
    /// rendered fields over the object there (what others set stays, its uid too), the
    /// fields the last apply set and this one does not removed, the generation up when
    /// the spec changed; a new object gets a uid and generation 1.
    fn apply_children(&mut self, plan: &Plan) {
        for c in &plan.children {
            let key = (c.api_version.clone(), c.kind.clone(), c.name.clone());
            let rendered = c.object.clone();
            let next = match self.live.iter().find(|x| same(x, &rendered)) {
                Some(there) => {
                    let mut merged = there.clone();
                    if let Some(prev) = self.applied.get(&key) {
                        remove_dropped(&mut merged, prev, &rendered);
                    }
                    json_patch::merge(&mut merged, &rendered);
                    if without_metadata_and_status(&merged) != without_metadata_and_status(there) {
                        bump_generation(&mut merged);
                    }
                    merged
                }
                None => {
                    let mut o = rendered.clone();
                    if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
                        let uid = format!("uid-{}-{}", c.kind.to_lowercase(), c.name);
                        meta.insert("uid".into(), json!(uid));
                        meta.insert("generation".into(), json!(1));
                    }
                    o
                }
            };
            self.applied.insert(key, rendered);
            put(&mut self.live, next);
        }
    }

    /// What the cluster holds, for a message: `Deployment shop, Secret shop-db`.
    fn holds(&self) -> String {
        if self.live.is_empty() {
            return "nothing".into();
        }
        self.live
            .iter()
            .map(|o| {
                format!(
                    "{} {}",
                    o["kind"].as_str().unwrap_or("?"),
                    o["metadata"]["name"].as_str().unwrap_or("?")
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn without_metadata_and_status(o: &Value) -> Value {
    let mut m: Map<String, Value> = o.as_object().cloned().unwrap_or_default();
    m.remove("metadata");
    m.remove("status");
    Value::Object(m)
}

fn bump_generation(o: &mut Value) {
    let g = o
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    if let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("generation".into(), json!(g.saturating_add(1)));
    }
}

/// Removes from `o` the fields `prev` set that `next` does not (mappings key by key;
/// a list is the manager's whole and is replaced by the merge).
fn remove_dropped(o: &mut Value, prev: &Value, next: &Value) {
    let (Some(o), Some(prev)) = (o.as_object_mut(), prev.as_object()) else {
        return;
    };
    for (k, pv) in prev {
        match next.get(k) {
            None => {
                o.remove(k);
            }
            Some(nv) => {
                if let Some(ov) = o.get_mut(k) {
                    remove_dropped(ov, pv, nv);
                }
            }
        }
    }
}

/// Whether two objects are one: the same apiVersion, kind and name.
pub fn same(x: &Value, o: &Value) -> bool {
    x["apiVersion"] == o["apiVersion"]
        && x["kind"] == o["kind"]
        && x["metadata"]["name"] == o["metadata"]["name"]
}

/// Adds `o` to the cluster, replacing the object of the same apiVersion, kind and name.
fn put(live: &mut Vec<Value>, o: Value) {
    match live.iter_mut().find(|x| same(x, &o)) {
        Some(x) => *x = o,
        None => live.push(o),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::Rendered;

    fn child(replicas: i64, extra: Option<(&str, &str)>) -> Rendered {
        let mut labels = json!({"app": "a"});
        if let Some((k, v)) = extra {
            labels[k] = json!(v);
        }
        let object = json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "a", "labels": labels}, "spec": {"replicas": replicas}});
        Rendered {
            id: "d".into(),
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "a".into(),
            namespace: "default".into(),
            hash: String::new(),
            item: None,
            size: 0,
            object,
        }
    }

    fn plan(c: Rendered) -> Plan {
        Plan {
            children: vec![c],
            waiting: Vec::new(),
        }
    }

    #[test]
    fn applied_children_keep_their_uid_and_status_and_count_spec_changes() {
        let mut cl = Cluster::new(&json!({"metadata": {"name": "r"}}), &[]).unwrap();
        cl.apply_children(&plan(child(2, Some(("tier", "web")))));
        let uid = cl.live[0]["metadata"]["uid"].clone();
        assert_eq!(cl.live[0]["metadata"]["generation"], 1);
        cl.live[0]["status"] = json!({"observedGeneration": 1, "readyReplicas": 2});
        // The same render again: nothing changes.
        cl.apply_children(&plan(child(2, Some(("tier", "web")))));
        assert_eq!(cl.live[0]["metadata"]["generation"], 1);
        // A new replica count and a label dropped: generation 2, the label gone.
        cl.apply_children(&plan(child(3, None)));
        let o = &cl.live[0];
        assert_eq!(o["metadata"]["uid"], uid);
        assert_eq!(o["metadata"]["generation"], 2);
        assert_eq!(o["metadata"]["labels"], json!({"app": "a"}));
        assert_eq!(o["status"]["readyReplicas"], 2, "the status stays");
    }

    #[test]
    fn malformed_objects_and_resources_are_errors_not_panics() {
        assert!(Cluster::new(&json!([]), &[]).is_err());
        assert!(Cluster::new(&json!({"metadata": 5}), &[]).is_err());
        assert!(Cluster::new(&json!({}), &[json!("x")]).is_err());
        let mut cl = Cluster::new(&json!({"metadata": {"name": "r"}}), &[]).unwrap();
        let step = Step {
            resource: Some(json!({"metadata": "x"})),
            ..Default::default()
        };
        assert!(cl.change(&step, None).is_err());
        let step = Step {
            resource: Some(json!({"spec": {"a": 1}})),
            ..Default::default()
        };
        cl.change(&step, None).unwrap();
        assert_eq!(cl.resource["metadata"]["generation"], 2);
        let step = Step {
            resource: Some(json!({"metadata": {"labels": {"x": "y"}}})),
            ..Default::default()
        };
        cl.change(&step, None).unwrap();
        assert_eq!(cl.resource["metadata"]["generation"], 2, "metadata only");
    }
}
