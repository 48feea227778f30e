//! Adoption: hand the previous manager's field ownership to ruleop before its first apply,
//! as client-go's `csaupgrade` does for client-side apply. Without it, the fields the
//! previous operator set stay owned by it (an `Update` entry, manager `manager` for a
//! controller-runtime operator), and a field later removed from the template would stay
//! on the child forever. Pure: the live object in, a JSON patch of its managedFields out.
//!
//! Which entries move, on the main resource only (never a subresource):
//! - ruleop's own `Update` entry, made by the `POST` creates of its earlier versions;
//! - on adoption of an object controlled by the custom resource, the entry of the manager
//!   that set that controller ownerReference (`f:ownerReferences` `k:{"uid":<resource>}`):
//!   the operator that made the object for it.
//!
//! Nothing else: another manager's fields (`kubectl rollout restart`'s annotation in the
//! pod template, an HPA's replicas, a team's label, the Deployment controller's revision
//! annotation) stay theirs, and no apply of ruleop's removes them.

use serde_json::{Map, Value, json};

/// The JSON patch that moves the previous managers' fields into `manager`'s `Apply`
/// entry, guarded by the object's resourceVersion; None when there is nothing to move.
/// `controller_uid` is the custom resource whose previous operator's entry moves too.
pub fn ownership_transfer(
    live: &Value,
    manager: &str,
    controller_uid: Option<&str>,
    now: &str,
) -> Option<Value> {
    let entries = live.pointer("/metadata/managedFields")?.as_array()?;
    let rv = live.pointer("/metadata/resourceVersion")?.as_str()?;
    let api_version = live.get("apiVersion")?.as_str()?;
    let (moved, kept): (Vec<&Value>, Vec<&Value>) = entries
        .iter()
        .partition(|e| moves(e, manager, controller_uid));
    if moved.is_empty() {
        return None;
    }
    let mut fields = Value::Object(Map::new());
    let mut out: Vec<Value> = Vec::with_capacity(kept.len() + 1);
    for e in &kept {
        if is_our_apply(e, manager) {
            merge_fields(&mut fields, e.get("fieldsV1").unwrap_or(&Value::Null));
        } else {
            out.push((*e).clone());
        }
    }
    for e in &moved {
        merge_fields(&mut fields, e.get("fieldsV1").unwrap_or(&Value::Null));
    }
    out.push(json!({
        "manager": manager,
        "operation": "Apply",
        "apiVersion": api_version,
        "time": now,
        "fieldsType": "FieldsV1",
        "fieldsV1": fields,
    }));
    Some(json!([
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "replace", "path": "/metadata/managedFields", "value": out},
    ]))
}

fn is_main_resource(e: &Value) -> bool {
    e.get("subresource")
        .and_then(Value::as_str)
        .is_none_or(str::is_empty)
}

fn is_our_apply(e: &Value, manager: &str) -> bool {
    e.get("manager").and_then(Value::as_str) == Some(manager)
        && e.get("operation").and_then(Value::as_str) == Some("Apply")
        && is_main_resource(e)
}

/// `manager`'s `Update` entry on the main resource: what its `POST` (a create) made.
pub fn is_create_entry(e: &Value, manager: &str) -> bool {
    e.get("manager").and_then(Value::as_str) == Some(manager)
        && e.get("operation").and_then(Value::as_str) == Some("Update")
        && is_main_resource(e)
}

/// ruleop's own create entry, or the entry that set `controller_uid`'s ownerReference.
fn moves(e: &Value, manager: &str, controller_uid: Option<&str>) -> bool {
    if is_our_apply(e, manager) || !is_main_resource(e) {
        return false;
    }
    let ours = is_create_entry(e, manager);
    let set_the_controller = controller_uid.is_some_and(|uid| {
        e.pointer("/fieldsV1/f:metadata/f:ownerReferences")
            .and_then(Value::as_object)
            .is_some_and(|refs| refs.contains_key(&format!("k:{{\"uid\":\"{uid}\"}}")))
    });
    ours || set_the_controller
}

/// Union of two FieldsV1 trees (maps of field → subtree).
fn merge_fields(into: &mut Value, from: &Value) {
    let (Value::Object(a), Value::Object(b)) = (into, from) else {
        return;
    };
    for (k, v) in b {
        match a.get_mut(k) {
            Some(existing) => merge_fields(existing, v),
            None => {
                a.insert(k.clone(), v.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn typed_operator_deployment() -> Value {
        json!({
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": "w-web",
                "resourceVersion": "42",
                "managedFields": [
                    {"manager": "manager", "operation": "Update", "apiVersion": "apps/v1",
                     "fieldsType": "FieldsV1", "fieldsV1": {
                        "f:metadata": {"f:labels": {".": {}, "f:app": {}}, "f:ownerReferences": {".": {}, "k:{\"uid\":\"u1\"}": {}}},
                        "f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {"k:{\"name\":\"web\"}": {"f:image": {}}}}}}}},
                    {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "apps/v1",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:annotations": {"f:deployment.kubernetes.io/revision": {}}}}},
                    {"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "apps/v1", "subresource": "status",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:replicas": {}}}},
                    {"manager": "kubectl-rollout", "operation": "Update", "apiVersion": "apps/v1",
                     "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:template": {"f:metadata": {"f:annotations": {"f:kubectl.kubernetes.io/restartedAt": {}}}}}}},
                ]
            }
        })
    }

    #[test]
    fn the_previous_operators_fields_move_to_our_apply_entry_and_others_stay() {
        let patch =
            ownership_transfer(&typed_operator_deployment(), "ruleop", Some("u1"), "T").unwrap();
        assert_eq!(
            patch[0],
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": "42"})
        );
        let entries = patch[1]["value"].as_array().unwrap();
        let managers: Vec<(&str, &str)> = entries
            .iter()
            .map(|e| {
                (
                    e["manager"].as_str().unwrap(),
                    e["operation"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            managers,
            vec![
                ("kube-controller-manager", "Update"),
                ("kube-controller-manager", "Update"),
                ("kubectl-rollout", "Update"),
                ("ruleop", "Apply")
            ],
            "a rollout restart's annotation stays kubectl's: no apply of ruleop's removes it"
        );
        let ours = &entries[3]["fieldsV1"];
        assert!(ours.pointer("/f:spec/f:replicas").is_some());
        assert!(ours.pointer("/f:metadata/f:ownerReferences").is_some());
        assert!(
            ours.pointer("/f:metadata/f:annotations").is_none(),
            "the revision annotation stays the Deployment controller's"
        );
    }

    #[test]
    fn our_existing_apply_entry_is_merged_not_duplicated() {
        let mut live = typed_operator_deployment();
        live["metadata"]["managedFields"]
            .as_array_mut()
            .unwrap()
            .push(json!({"manager": "ruleop", "operation": "Apply", "apiVersion": "apps/v1",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:ruleop.dev/rule": {}}}}}));
        let patch = ownership_transfer(&live, "ruleop", Some("u1"), "T").unwrap();
        let entries = patch[1]["value"].as_array().unwrap();
        let ours: Vec<&Value> = entries
            .iter()
            .filter(|e| e["manager"] == "ruleop")
            .collect();
        assert_eq!(ours.len(), 1);
        assert!(
            ours[0]
                .pointer("/fieldsV1/f:metadata/f:labels/f:ruleop.dev~1rule")
                .is_some()
        );
        assert!(
            ours[0]
                .pointer("/fieldsV1/f:metadata/f:labels/f:app")
                .is_some()
        );
    }

    #[test]
    fn fields_of_our_own_create_move_to_our_apply_entry() {
        let live = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "resourceVersion": "7",
            "managedFields": [{"manager": "ruleop", "operation": "Update", "apiVersion": "v1", "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {"f:a": {}}, "f:metadata": {"f:ownerReferences": {}}}}]}});
        let patch = ownership_transfer(&live, "ruleop", None, "T").unwrap();
        let entries = patch[1]["value"].as_array().unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0]["operation"], "Apply");
        assert!(entries[0].pointer("/fieldsV1/f:data/f:a").is_some());
    }

    #[test]
    fn nothing_to_move_gives_no_patch() {
        let mut live = typed_operator_deployment();
        assert!(
            ownership_transfer(&live, "ruleop", Some("another"), "T").is_none(),
            "the entry that set another resource's ownerReference is not moved"
        );
        assert!(
            ownership_transfer(&live, "ruleop", None, "T").is_none(),
            "an orphan's adoption moves nothing"
        );
        live["metadata"]["managedFields"]
            .as_array_mut()
            .unwrap()
            .remove(0);
        assert!(ownership_transfer(&live, "ruleop", Some("u1"), "T").is_none());
    }
}
