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
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(()),
        Err(e) => return Err(ApplyError::from_kube(&ar.kind, &name, e)),
    }
    if ar.group == "apps" && ar.kind == "Deployment" {
        let ns = o.metadata.namespace.as_deref().unwrap_or_default();
        let uid = o.metadata.uid.as_deref().unwrap_or_default();
        replica_sets_let_go(api.clone().into_client(), ns, uid).await;
    }
    Ok(())
}

/// The ReplicaSets of a Deployment let go: the Deployment's controller copies its
/// annotations to them (ruleop's included) and never takes one away. Best effort: an
/// account that may not list or patch ReplicaSets leaves them (said at debug level).
async fn replica_sets_let_go(client: kube::Client, ns: &str, deployment_uid: &str) {
    use k8s_openapi::api::apps::v1::ReplicaSet;
    let api: Api<ReplicaSet> = Api::namespaced(client, ns);
    let sets = match api.list_metadata(&Default::default()).await {
        Ok(l) => l.items,
        Err(e) => {
            tracing::debug!(namespace = %ns, error = %e, "the ReplicaSets of a Deployment let go keep ruleop's annotations (they cannot be listed)");
            return;
        }
    };
    let ours = |rs: &kube::api::PartialObjectMeta<ReplicaSet>| {
        let controlled = rs
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|r| r.uid == deployment_uid && r.controller == Some(true));
        let marked = rs.metadata.annotations.as_ref().is_some_and(|a| {
            a.contains_key(HASH_ANNOTATION) || a.contains_key(ON_REMOVE_ANNOTATION)
        });
        controlled && marked
    };
    let body = serde_json::json!({"metadata": {
        "annotations": {HASH_ANNOTATION: null, ON_REMOVE_ANNOTATION: null},
    }});
    for rs in sets.iter().filter(|rs| ours(rs)) {
        let name = rs.metadata.name.as_deref().unwrap_or_default();
        if let Err(e) = api
            .patch_metadata(name, &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            tracing::debug!(namespace = %ns, replicaset = %name, error = %e, "a ReplicaSet of a Deployment let go keeps ruleop's annotations");
        }
    }
}
