//! What ruleop may have written of an object, for before/after comparisons.

/// What ruleop may have written of an object, for before/after comparisons: its uid,
/// labels, annotations (but the controller-manager's `deployment.kubernetes.io/…`), owner
/// references, `spec` and `data`, `status` when `with_status` (a custom resource's is
/// ruleop's; a Deployment's is the controller-manager's), and ruleop's managedFields
/// entries. Tests compare this, never a resourceVersion: the controller-manager, the
/// scheduler and kwok also write the objects ruleop makes.
pub fn written_view(obj: &serde_json::Value, with_status: bool) -> serde_json::Value {
    let m = &obj["metadata"];
    let annotations: serde_json::Map<String, serde_json::Value> = m["annotations"]
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| !k.starts_with("deployment.kubernetes.io/"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let ours: Vec<serde_json::Value> = m["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["manager"] == "ruleop")
        .cloned()
        .collect();
    serde_json::json!({
        "uid": m["uid"], "labels": m["labels"], "annotations": annotations,
        "ownerReferences": m["ownerReferences"], "spec": obj["spec"], "data": obj["data"],
        "status": if with_status { obj["status"].clone() } else { serde_json::Value::Null },
        "ruleopManagedFields": ours,
    })
}
