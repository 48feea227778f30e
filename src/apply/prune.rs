//! What becomes of a child that is no longer rendered: deleted, only if it is still the
//! object judged; or, when it asked to be (`onRemove: Orphan`), left in place and no longer
//! ruleop's.

use super::error::ApplyError;
use crate::render::{CHILD_LABEL, HASH_ANNOTATION, ON_REMOVE_ANNOTATION, RULE_LABEL};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::discovery::ApiResource;

/// Deletes a child that is no longer rendered, only if it is still the object we saw.
pub async fn prune(
    api: &Api<DynamicObject>,
    ar: &ApiResource,
    name: &str,
    uid: Option<String>,
) -> Result<(), ApplyError> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version: None,
        }),
        ..DeleteParams::background()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(ApplyError::from_kube(&ar.kind, name, e)),
    }
}

/// Whether a live object asks to be orphaned, not deleted, when it leaves the rule: its
/// child said `onRemove: Orphan` when it was written.
pub fn orphans(o: &DynamicObject) -> bool {
    o.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ON_REMOVE_ANNOTATION))
        .is_some_and(|v| v == "Orphan")
}

/// Leaves a child in place but no longer ruleop's: its controller ownerReference to the
/// resource `cr_uid` and ruleop's labels and annotations go (one merge patch, only if the
/// object is still the version judged: a conflict is retried).
pub async fn orphan(
    api: &Api<DynamicObject>,
    ar: &ApiResource,
    o: &DynamicObject,
    cr_uid: &str,
) -> Result<(), ApplyError> {
    let name = o.metadata.name.clone().unwrap_or_default();
    let others: Vec<_> = o
        .metadata
        .owner_references
        .iter()
        .flatten()
        .filter(|r| r.uid != cr_uid)
        .cloned()
        .collect();
    let body = serde_json::json!({"metadata": {
        "resourceVersion": o.metadata.resource_version,
        "ownerReferences": if others.is_empty() { serde_json::Value::Null } else { serde_json::json!(others) },
        "labels": {RULE_LABEL: null, CHILD_LABEL: null},
        "annotations": {HASH_ANNOTATION: null, ON_REMOVE_ANNOTATION: null},
    }});
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&body))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(ApplyError::from_kube(&ar.kind, &name, e)),
    }
}
