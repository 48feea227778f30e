//! What a rule would change for one resource, against the objects there now: children
//! created, changed (a unified diff of the fields the rule writes), deleted (or released,
//! for `onRemove: Orphan`), or left waiting; and whether a pod template changes (the pods
//! would restart). Pure: `ruleop diff` feeds it the cluster's objects, or another rule's
//! render.

use crate::render::{HASH_ANNOTATION, ON_REMOVE_ANNOTATION, Plan};
use serde_json::Value;

/// One object as a diff names it: `Deployment my-blog-web`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Named {
    pub kind: String,
    pub name: String,
}

impl std::fmt::Display for Named {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.kind, self.name)
    }
}

fn named(o: &Value) -> Named {
    Named {
        kind: o["kind"].as_str().unwrap_or_default().to_string(),
        name: o["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    }
}

/// A child whose fields change.
#[derive(Debug, Clone, PartialEq)]
pub struct Changed {
    pub object: Named,
    /// A unified diff of the fields the rule writes: as they are, then as they would be.
    pub diff: String,
    /// Its pod template changes: its pods would be replaced.
    pub pod_template: bool,
}

/// What a rule would do to one resource's children.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ResourceDiff {
    pub created: Vec<Named>,
    pub changed: Vec<Changed>,
    pub deleted: Vec<Named>,
    /// Objects of children removed with `onRemove: Orphan`: left in place, no longer ruleop's.
    pub released: Vec<Named>,
    /// Children that would wait, and why (their objects stay as they are).
    pub waiting: Vec<(String, String)>,
    /// Why it would not render at all.
    pub error: Option<String>,
}

impl ResourceDiff {
    /// Whether anything would change.
    pub fn touches(&self) -> bool {
        !(self.created.is_empty()
            && self.changed.is_empty()
            && self.deleted.is_empty()
            && self.released.is_empty())
    }

    pub fn pod_templates(&self) -> usize {
        self.changed.iter().filter(|c| c.pod_template).count()
    }
}

/// `o` without what the comparison leaves out: the hash of the last render (it changes
/// with every render) and the status.
fn comparable(o: &Value) -> Value {
    let mut o = o.clone();
    if let Some(a) = o
        .pointer_mut("/metadata/annotations")
        .and_then(Value::as_object_mut)
    {
        a.remove(HASH_ANNOTATION);
        if a.is_empty()
            && let Some(m) = o.get_mut("metadata").and_then(Value::as_object_mut)
        {
            m.remove("annotations");
        }
    }
    if let Some(m) = o.as_object_mut() {
        m.remove("status");
    }
    o
}

/// Where a kind keeps its pod template: workloads, and a CronJob's Jobs.
const POD_TEMPLATES: &[&str] = &["/spec/template", "/spec/jobTemplate/spec/template"];

/// Whose fields `before` holds: a live object (ruleop's are those its managedFields entry
/// names), or another render (all of them are the rule's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Before {
    Live,
    Render,
}

/// What changes from `before` (the object as it is) to `after` (as the rule renders it),
/// on the fields `after` sets and on those the rule set before and no longer does (a
/// server-side apply removes them); None when nothing does.
pub fn change(before: &Value, after: &Value, whose: Before) -> Option<Changed> {
    let after = comparable(after);
    let mut now = crate::apply::project(&after, &comparable(before));
    let set_before = match whose {
        Before::Live => owned(before),
        Before::Render => Some(before.clone()),
    };
    if let Some(set) = set_before {
        add_missing(&mut now, &comparable(&set));
    }
    if now == after {
        return None;
    }
    let a = serde_yaml::to_string(&now).unwrap_or_default();
    let b = serde_yaml::to_string(&after).unwrap_or_default();
    let diff = similar::TextDiff::from_lines(&a, &b)
        .unified_diff()
        .header("now", "after")
        .to_string();
    Some(Changed {
        object: named(&after),
        diff,
        pod_template: POD_TEMPLATES
            .iter()
            .any(|p| after.pointer(p).is_some() && now.pointer(p) != after.pointer(p)),
    })
}

/// The fields of `live` that ruleop's last apply set (its managedFields entry), with the
/// values `live` holds; None without such an entry.
fn owned(live: &Value) -> Option<Value> {
    let entry = live["metadata"]["managedFields"]
        .as_array()?
        .iter()
        .find(|m| m["manager"] == crate::render::FIELD_MANAGER && m["operation"] == "Apply")?;
    Some(pick(&entry["fieldsV1"], live))
}

/// The part of `live` that `fields` (a managedFields `fieldsV1` set) names.
fn pick(fields: &Value, live: &Value) -> Value {
    let Some(f) = fields.as_object() else {
        return live.clone();
    };
    match live {
        Value::Object(l) => {
            let named: serde_json::Map<String, Value> = f
                .iter()
                .filter_map(|(k, sub)| {
                    let name = k.strip_prefix("f:")?;
                    Some((name.to_string(), pick(sub, l.get(name)?)))
                })
                .collect();
            // A map with no field named is owned whole (an atomic map).
            if named.is_empty() && !f.keys().any(|k| k.starts_with("f:")) {
                live.clone()
            } else {
                Value::Object(named)
            }
        }
        Value::Array(items) => {
            let keyed: Vec<(&str, &Value)> = f
                .iter()
                .filter(|(k, _)| k.starts_with("k:") || k.starts_with("v:"))
                .map(|(k, sub)| (k.as_str(), sub))
                .collect();
            // A list with no item named is owned whole (an atomic list).
            if keyed.is_empty() {
                return live.clone();
            }
            let one = |item: &Value| {
                keyed.iter().find_map(|(k, sub)| match k.split_at(2) {
                    ("k:", key) => {
                        let key: Value = serde_json::from_str(key).ok()?;
                        key.as_object()?
                            .iter()
                            .all(|(n, v)| item.get(n) == Some(v))
                            .then(|| pick(sub, item))
                    }
                    (_, value) => {
                        let value: Value = serde_json::from_str(value).ok()?;
                        (item == &value).then(|| item.clone())
                    }
                })
            };
            Value::Array(items.iter().filter_map(one).collect())
        }
        _ => live.clone(),
    }
}

/// Adds to `now` what `set` has and it lacks (map keys; list items past its end).
fn add_missing(now: &mut Value, set: &Value) {
    match (now, set) {
        (Value::Object(n), Value::Object(s)) => {
            for (k, v) in s {
                match n.get_mut(k) {
                    Some(nv) => add_missing(nv, v),
                    None => {
                        n.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (Value::Array(n), Value::Array(s)) => {
            for (i, v) in s.iter().enumerate() {
                match n.get_mut(i) {
                    Some(nv) => add_missing(nv, v),
                    None => n.push(v.clone()),
                }
            }
        }
        _ => {}
    }
}

/// What `plan` (a render of the resource) would do to `live` (its children now; for
/// another rule's render, that render's objects, `whose` says which).
pub fn compare(plan: &Plan, live: &[Value], whose: Before) -> ResourceDiff {
    let mut d = ResourceDiff::default();
    let same = |r: &crate::render::Rendered, o: &Value| {
        o["apiVersion"] == r.api_version.as_str()
            && o["kind"] == r.kind.as_str()
            && o["metadata"]["name"] == r.name.as_str()
    };
    for c in &plan.children {
        match live.iter().find(|o| same(c, o)) {
            None => d.created.push(named(&c.object)),
            Some(o) => d.changed.extend(change(o, &c.object, whose)),
        }
    }
    let waits = |o: &Value| {
        let child = o["metadata"]["labels"][crate::render::CHILD_LABEL].as_str();
        plan.waiting.iter().any(|w| Some(w.id.as_str()) == child)
    };
    for o in live {
        if plan.children.iter().any(|c| same(c, o)) || waits(o) {
            continue;
        }
        if o["metadata"]["annotations"][ON_REMOVE_ANNOTATION] == "Orphan" {
            d.released.push(named(o));
        } else {
            d.deleted.push(named(o));
        }
    }
    d.waiting = plan
        .waiting
        .iter()
        .map(|w| (w.id.clone(), w.reason.clone()))
        .collect();
    d
}

/// The totals over many resources.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    pub resources: usize,
    pub touched: usize,
    pub created: usize,
    pub changed: usize,
    pub deleted: usize,
    pub released: usize,
    pub waiting: usize,
    pub errors: usize,
    pub pod_templates: usize,
}

impl Summary {
    pub fn add(&mut self, d: &ResourceDiff) {
        self.resources += 1;
        self.touched += usize::from(d.touches());
        self.created += d.created.len();
        self.changed += d.changed.len();
        self.deleted += d.deleted.len();
        self.released += d.released.len();
        self.waiting += d.waiting.len();
        self.errors += usize::from(d.error.is_some());
        self.pod_templates += d.pod_templates();
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} resource(s), {} touched; objects: {} created, {} changed, {} deleted, {} released, {} waiting; {} render error(s); pod templates changed (pods that would restart): {}",
            self.resources,
            self.touched,
            self.created,
            self.changed,
            self.deleted,
            self.released,
            self.waiting,
            self.errors,
            self.pod_templates
        )
    }
}

/// A unified diff of `want` against `have`, as YAML.
pub fn yaml(want: &Value, have: &Value) -> String {
    let a = serde_yaml::to_string(want).unwrap_or_default();
    let b = serde_yaml::to_string(have).unwrap_or_default();
    similar::TextDiff::from_lines(&a, &b)
        .unified_diff()
        .header("expected", "actual")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::render::{Rendered, Waiting};
    use serde_json::json;

    fn deployment(image: &str, label: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"tier": label, crate::render::CHILD_LABEL: "d"},
                         "annotations": {HASH_ANNOTATION: image}},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "c", "image": image}]}}}})
    }

    fn rendered(o: Value) -> Rendered {
        Rendered {
            id: "d".into(),
            api_version: "apps/v1".into(),
            kind: o["kind"].as_str().unwrap().into(),
            name: o["metadata"]["name"].as_str().unwrap().into(),
            namespace: "n".into(),
            hash: String::new(),
            item: None,
            size: 0,
            object: o,
        }
    }

    #[test]
    fn an_image_change_changes_the_pod_template_and_a_label_change_does_not() {
        let mut live = deployment("nginx:1", "web");
        live["status"] = json!({"readyReplicas": 2});
        live["spec"]["strategy"] = json!({"type": "RollingUpdate"});
        let same = Plan {
            children: vec![rendered(deployment("nginx:1", "web"))],
            waiting: vec![],
        };
        assert!(
            !compare(&same, &[live.clone()], Before::Live).touches(),
            "only what the rule writes counts"
        );
        let image = compare(
            &Plan {
                children: vec![rendered(deployment("nginx:2", "web"))],
                waiting: vec![],
            },
            &[live.clone()],
            Before::Live,
        );
        assert_eq!(image.pod_templates(), 1);
        assert!(
            image.changed[0].diff.contains("+      - image: nginx:2"),
            "{}",
            image.changed[0].diff
        );
        let label = compare(
            &Plan {
                children: vec![rendered(deployment("nginx:1", "api"))],
                waiting: vec![],
            },
            &[live],
            Before::Live,
        );
        assert_eq!((label.changed.len(), label.pod_templates()), (1, 0));
    }

    #[test]
    fn objects_no_longer_rendered_are_deleted_released_or_kept_by_a_wait() {
        let mut orphan = json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "data",
            "annotations": {ON_REMOVE_ANNOTATION: "Orphan"}}});
        orphan["metadata"]["labels"] = json!({crate::render::CHILD_LABEL: "pvc"});
        let gone = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "old", "labels": {crate::render::CHILD_LABEL: "svc"}}});
        let waiting = json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "migrate", "labels": {crate::render::CHILD_LABEL: "job"}}});
        let plan = Plan {
            children: vec![rendered(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "new"}}),
            )],
            waiting: vec![Waiting {
                id: "job".into(),
                reason: "Secret `s` (not found)".into(),
            }],
        };
        let d = compare(&plan, &[orphan, gone, waiting], Before::Live);
        assert_eq!(d.created[0].to_string(), "ConfigMap new");
        assert_eq!(d.deleted[0].to_string(), "Service old");
        assert_eq!(d.released[0].to_string(), "PersistentVolumeClaim data");
        assert_eq!(
            d.waiting,
            [("job".to_string(), "Secret `s` (not found)".to_string())]
        );
        let mut s = Summary::default();
        s.add(&d);
        assert_eq!(
            (s.touched, s.created, s.deleted, s.released, s.waiting),
            (1, 1, 1, 1, 1)
        );
    }

    #[test]
    fn a_field_the_rule_stops_writing_is_a_change_that_the_apply_would_make() {
        // The live Deployment: two env vars, both set by ruleop's apply (its managedFields).
        let mut live = deployment("nginx:1", "web");
        live["spec"]["template"]["spec"]["containers"][0]["env"] =
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]);
        live["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"] = json!("Always");
        let env_fields = json!({
            "k:{\"name\":\"A\"}": {".": {}, "f:name": {}, "f:value": {}},
            "k:{\"name\":\"B\"}": {".": {}, "f:name": {}, "f:value": {}},
        });
        let container = json!({"k:{\"name\":\"c\"}": {".": {}, "f:name": {}, "f:image": {}, "f:env": env_fields}});
        let fields = json!({
            "f:metadata": {"f:labels": {"f:tier": {}}},
            "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": container}}},
        });
        live["metadata"]["managedFields"] = json!([
            {"manager": "kube-controller-manager", "operation": "Update", "fieldsV1": {"f:status": {}}},
            {"manager": crate::render::FIELD_MANAGER, "operation": "Apply", "fieldsV1": fields},
        ]);
        let with = |env: Value| {
            let mut d = deployment("nginx:1", "web");
            d["spec"]["template"]["spec"]["containers"][0]["env"] = env;
            Plan {
                children: vec![rendered(d)],
                waiting: vec![],
            }
        };
        let both = json!([{"name": "A", "value": "1"}, {"name": "B", "value": "2"}]);
        assert!(
            !compare(&with(both), &[live.clone()], Before::Live).touches(),
            "the same render: nothing (imagePullPolicy is not the rule's)"
        );
        let d = compare(
            &with(json!([{"name": "A", "value": "1"}])),
            &[live.clone()],
            Before::Live,
        );
        assert_eq!(d.pod_templates(), 1, "B goes: the pods restart");
        assert!(
            d.changed[0].diff.contains("-        - name: B"),
            "{}",
            d.changed[0].diff
        );
        // Against another render (offline), every field is the rule's.
        let mut old = deployment("nginx:1", "web");
        old["spec"]["minReadySeconds"] = json!(5);
        let d = compare(&with(Value::Null), &[old], Before::Render);
        assert_eq!(d.changed.len(), 1, "minReadySeconds goes");
    }
}
