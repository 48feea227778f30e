//! Deleting a child that is no longer rendered, only if it is still the object judged.

use super::error::ApplyError;
use kube::api::{Api, DeleteParams, DynamicObject, Preconditions};
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
