//! Writing one child through the ownership model: create what is missing (atomically),
//! apply only to the object judged ours (uid-guarded), adopt as the policy allows (moving
//! the previous managers' fields first), and report anything else as not owned.

use super::adopt;
use super::error::{ApplyError, Refusal};
use super::ownership::{AdoptPolicy, Verdict, judge};
use crate::client::Fence;
use crate::render::{FIELD_MANAGER, Rendered};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::Value;

/// Server-side applies one child, forced, as ruleop's field manager, to the object with
/// `uid` only: if another object has taken the name meanwhile (422, uid immutable) or the
/// object is gone (409, uid mismatch), nothing is written ([`ApplyError::Exists`]).
pub async fn apply(
    api: &Api<DynamicObject>,
    child: &Rendered,
    uid: &str,
) -> Result<DynamicObject, ApplyError> {
    apply_on(api, child, "uid", uid)
        .await
        .map_err(|e| ApplyError::from_kube(&child.kind, &child.name, e))
}

/// Server-side applies the child, forced, as ruleop's field manager, with one metadata
/// field set as the write's precondition (`uid` or `resourceVersion`).
async fn apply_on(
    api: &Api<DynamicObject>,
    child: &Rendered,
    field: &str,
    value: &str,
) -> Result<DynamicObject, kube::Error> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let mut body = child.object.clone();
    if let Some(meta) = body.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert(field.into(), value.into());
    }
    api.patch(&child.name, &params, &Patch::Apply(&body)).await
}

/// A `resourceVersion` no object has: etcd's revisions start at 1 for the empty store, so
/// the first object ever written gets 2. An apply carrying it creates a missing object and
/// is refused (409) by any object of that name.
const NO_OBJECT_YET: &str = "1";

/// Creates a child that is not there: a server-side apply (so its fields are ruleop's
/// `Apply` entry from the start) with the precondition [`NO_OBJECT_YET`], which no live
/// object meets. So the create is atomic: an object someone else made meanwhile is never
/// written to (409, [`ApplyError::Exists`]).
pub async fn create(
    api: &Api<DynamicObject>,
    child: &Rendered,
) -> Result<DynamicObject, ApplyError> {
    match apply_on(api, child, "resourceVersion", NO_OBJECT_YET).await {
        Err(kube::Error::Api(s)) if precondition_failed(&s, api.resource_url(), &child.name) => {
            Err(ApplyError::Exists {
                kind: child.kind.clone(),
                name: child.name.clone(),
            })
        }
        other => other.map_err(|e| ApplyError::from_kube(&child.kind, &child.name, e)),
    }
}

/// Whether a 409 is the child's own resourceVersion precondition failing (an object of
/// its name exists), not another object's conflict on the way (a ResourceQuota's count
/// under a burst of creates answers 409 too, naming the quota).
fn precondition_failed(s: &kube::core::Status, resource_url: &str, name: &str) -> bool {
    s.code == 409
        && s.details.as_ref().is_some_and(|d| {
            d.name == name && resource_url.rsplit('/').next() == Some(d.kind.as_str())
        })
}

/// Whether a live object still has fields owned by ruleop's `Update` entry (made by the
/// `POST` creates of earlier versions; the cache keeps that entry, without its fields, as
/// a marker).
pub fn has_create_entry(live: &Value) -> bool {
    live.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .is_some_and(|m| m.iter().any(|e| adopt::is_create_entry(e, FIELD_MANAGER)))
}

/// The annotation `kubectl apply` leaves: a copy of the whole object as last applied.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

fn drop_last_applied(o: &mut DynamicObject) {
    if let Some(a) = o.metadata.annotations.as_mut() {
        a.remove(LAST_APPLIED);
    }
}

/// What the watch cache keeps of an object ruleop does not write (a custom resource, an
/// existing object): no managedFields, no last-applied copy.
pub fn slim(o: &mut DynamicObject) {
    o.metadata.managed_fields = None;
    drop_last_applied(o);
}

/// What the watch cache keeps of an object's managedFields: only ruleop's `Update`
/// entry, without its fields (a marker for [`has_create_entry`]); the rest is memory.
/// `kubectl apply`'s copy of the object (its last-applied annotation) is dropped too.
pub fn slim_managed_fields(o: &mut DynamicObject) {
    drop_last_applied(o);
    o.metadata.managed_fields = o.metadata.managed_fields.take().and_then(|m| {
        let kept: Vec<_> = m
            .into_iter()
            .filter(|e| {
                e.manager.as_deref() == Some(FIELD_MANAGER)
                    && e.operation.as_deref() == Some("Update")
                    && e.subresource.is_none()
            })
            .map(|mut e| {
                e.fields_v1 = None;
                e
            })
            .collect();
        (!kept.is_empty()).then_some(kept)
    });
}

/// What became of one child's write.
#[derive(Debug)]
pub enum Outcome {
    Created(DynamicObject),
    Updated(DynamicObject),
    /// Taken over from the previous operator (`why` from the verdict).
    Adopted(DynamicObject, &'static str),
    /// Someone else's object has the name: left untouched.
    NotOwned {
        controller: String,
    },
}

/// Whose a child is: the custom resource's uid, the rule, and the child's policy; and
/// the fence every request asks first.
#[derive(Debug, Clone, Copy)]
pub struct Claim<'a> {
    pub cr_uid: &'a str,
    pub rule: &'a str,
    pub adopt: AdoptPolicy,
    pub fence: &'a Fence,
    /// The uids of the objects `ruleop release` let go from this resource (its
    /// `ruleop.dev/released-children`): one of them with no controller, that ruleop's field
    /// manager applied, is taken back whatever `adopt` says.
    pub released: &'a [String],
}

impl Claim<'_> {
    fn may_write(&self) -> Result<(), ApplyError> {
        if self.fence.holds() {
            Ok(())
        } else {
            Err(ApplyError::NotLeader)
        }
    }
}

/// Writes one child through the ownership model: an object ruleop owns is applied (to
/// that object only); a missing one is created (only if still missing); an existing one
/// that is not ruleop's is adopted where the policy allows, else left alone.
/// `live` is the cached object, if any (the cache holds only objects with the rule's label).
pub async fn write_child(
    api: &Api<DynamicObject>,
    child: &Rendered,
    live: Option<&Value>,
    claim: Claim<'_>,
) -> Result<Outcome, ApplyError> {
    if let Some(live) = live {
        return write_existing(api, child, live, claim).await;
    }
    claim.may_write()?;
    match create(api, child).await {
        Ok(obj) => Ok(Outcome::Created(obj)),
        Err(ApplyError::Exists { .. }) => {
            // There without the rule's label (or not cached yet): judge it as it is now.
            let fresh = get(api, child).await?;
            write_existing(api, child, &fresh, claim).await
        }
        Err(e) => Err(e),
    }
}

async fn get(api: &Api<DynamicObject>, child: &Rendered) -> Result<Value, ApplyError> {
    let obj = api
        .get(&child.name)
        .await
        .map_err(|e| ApplyError::from_kube(&child.kind, &child.name, e))?;
    Ok(serde_json::to_value(&obj).unwrap_or_default())
}

async fn write_existing(
    api: &Api<DynamicObject>,
    child: &Rendered,
    live: &Value,
    claim: Claim<'_>,
) -> Result<Outcome, ApplyError> {
    let uid = live
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let verdict = match judge(live, claim.cr_uid, claim.rule, claim.adopt) {
        Verdict::NotOwned { .. } if super::ownership::released(live, claim.released) => {
            Verdict::Adopt {
                why: "ruleop released it from this resource (`ruleop release`) and it has no controller",
            }
        }
        v => v,
    };
    if let Verdict::NotOwned { controller } = verdict {
        return Ok(Outcome::NotOwned { controller });
    }
    if matches!(verdict, Verdict::Adopt { .. }) || has_create_entry(live) {
        // The previous operator's fields (only when the object is controlled by this
        // resource), and ruleop's own create's, become ruleop's applied fields.
        let controlled = super::ownership::controller_ref(live)
            .and_then(|r| r.get("uid"))
            .and_then(Value::as_str)
            == Some(claim.cr_uid);
        take_over_fields(api, child, uid, controlled.then_some(claim.cr_uid), claim).await?;
    }
    claim.may_write()?;
    let obj = apply(api, child, uid).await?;
    Ok(match verdict {
        Verdict::Adopt { why } => Outcome::Adopted(obj, why),
        _ => Outcome::Updated(obj),
    })
}

/// Moves the fields of ruleop's own earlier `POST` create, and of the operator that made the object for
/// `controller_uid`, to ruleop's `Apply` entry, on the object with `uid` only.
async fn take_over_fields(
    api: &Api<DynamicObject>,
    child: &Rendered,
    uid: &str,
    controller_uid: Option<&str>,
    claim: Claim<'_>,
) -> Result<(), ApplyError> {
    // The cache strips managedFields: read the object whole before moving them.
    let fresh = get(api, child).await?;
    if fresh.pointer("/metadata/uid").and_then(Value::as_str) != Some(uid) {
        return Err(ApplyError::Exists {
            kind: child.kind.clone(),
            name: child.name.clone(),
        });
    }
    let now = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let Some(patch) = adopt::ownership_transfer(&fresh, FIELD_MANAGER, controller_uid, &now) else {
        return Ok(());
    };
    let patch: json_patch::Patch =
        serde_json::from_value(patch).map_err(|e| ApplyError::Refused {
            kind: child.kind.clone(),
            name: child.name.clone(),
            code: 0,
            reason: "OwnershipTransfer".into(),
            message: e.to_string(),
            class: Refusal::Invalid,
        })?;
    claim.may_write()?;
    match api
        .patch(
            &child.name,
            &PatchParams::default(),
            &Patch::<()>::Json(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        // The resourceVersion `test` failed: the object moved since it was read (422 is
        // how the API server says it). A race, not the user's mistake: retried.
        Err(e @ kube::Error::Api(_)) if matches!(&e, kube::Error::Api(s) if s.code == 422) => {
            Err(ApplyError::Transient {
                kind: child.kind.clone(),
                name: child.name.clone(),
                source: e,
            })
        }
        Err(e) => Err(ApplyError::from_kube(&child.kind, &child.name, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::precondition_failed;
    use kube::core::Status;
    use serde_json::json;

    fn conflict(name: &str, kind: &str) -> Status {
        serde_json::from_value(json!({"status": "Failure", "code": 409, "reason": "Conflict",
            "message": format!("Operation cannot be fulfilled on {kind} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"),
            "details": {"name": name, "group": "apps", "kind": kind}}))
        .unwrap()
    }

    #[test]
    fn only_the_childs_own_conflict_means_it_exists() {
        let url = "/apis/apps/v1/namespaces/ns/deployments";
        assert!(precondition_failed(
            &conflict("w-web", "deployments"),
            url,
            "w-web"
        ));
        assert!(
            !precondition_failed(&conflict("quota", "resourcequotas"), url, "w-web"),
            "a quota's conflict is the quota's, not an object in the way"
        );
        assert!(!precondition_failed(
            &conflict("w-web", "services"),
            url,
            "w-web"
        ));
        let mut other = conflict("w-web", "deployments");
        other.code = 422;
        assert!(!precondition_failed(&other, url, "w-web"));
    }
}
