//! Step 3: bring the cluster to the rendered children. Server-side apply with one field
//! manager, forced, only where something differs; then delete the children this custom
//! resource owned that are no longer rendered.
//!
//! "Differs" is decided without a request ([`needs_apply`]): the live object (from the
//! watch cache) must hold every rendered field with the same value, and carry the hash of
//! the last applied render, so a field dropped from the rule is still removed. Right after
//! a write the cache may lag; a memo of our own writes keeps that from causing a second.

pub mod adopt;
mod compare;
mod fence;
pub mod ownership;
mod write;

pub use compare::{is_subset, project};
pub use fence::Fence;
pub use ownership::{AdoptPolicy, Verdict, judge};
pub use write::{
    Claim, Outcome, apply, create, has_create_entry, slim, slim_managed_fields, write_child,
};

use crate::render::{HASH_ANNOTATION, Rendered};
use kube::api::{Api, DeleteParams, DynamicObject, Preconditions};
use kube::discovery::ApiResource;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Why a child could not be applied or pruned.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The API server refused the object; retrying unchanged will not help soon (see
    /// [`Refusal`] for what ruleop does then).
    #[error("{kind} {name}: the API server refused it ({code} {reason}): {message}")]
    Refused {
        kind: String,
        name: String,
        code: u16,
        reason: String,
        message: String,
        class: Refusal,
    },
    /// A passing fault (connection, timeout, conflict, server error): retried with backoff.
    #[error("{kind} {name}: {source}")]
    Transient {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
    /// A create found an object of that name already there (not in ruleop's cache: it
    /// lacks the rule's label), or an update found another object than the one judged.
    #[error("{kind} {name}: another object of this name is there")]
    Exists { kind: String, name: String },
    /// This replica no longer holds the leader Lease (or cannot show it does): nothing
    /// was sent.
    #[error("not the leader (the Lease was not renewed in time): nothing written")]
    NotLeader,
    /// A write that went on by itself ended without an answer (stopped, or a bug in
    /// ruleop): retried with backoff.
    #[error("{kind} {name}: the write ended without an answer ({why})")]
    Lost {
        kind: String,
        name: String,
        why: String,
    },
}

/// The two kinds of refusal (the README's error classification table).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The object is wrong (400, 422, other 4xx, a 500 for a value of the wrong type): the
    /// rule or the custom resource must change. Reported; retried on a change, and every
    /// five minutes in case the cause was outside (an admission policy).
    Invalid,
    /// Not allowed (403: RBAC, a quota, an admission policy): fixed outside the resource.
    /// Reported; retried with backoff until it goes through.
    Forbidden,
}

/// How an API server's answer is taken: a refusal of some class, or None (transient:
/// 401 after a token rotation, 404 while a namespace or kind comes and goes, 408, 409,
/// 429, 5xx, and anything that is not an answer).
pub fn classify(code: u16, message: &str) -> Option<Refusal> {
    match code {
        403 => Some(Refusal::Forbidden),
        401 | 404 | 408 | 409 | 429 => None,
        400..=499 => Some(Refusal::Invalid),
        500 if message.contains("failed to create typed patch object") => Some(Refusal::Invalid),
        _ => None,
    }
}

impl ApplyError {
    pub(crate) fn from_kube(kind: &str, name: &str, e: kube::Error) -> ApplyError {
        match e {
            kube::Error::Api(s) if is_uid_mismatch(s.code, &s.message) => ApplyError::Exists {
                kind: kind.to_string(),
                name: name.to_string(),
            },
            kube::Error::Api(s) if classify(s.code, &s.message).is_some() => ApplyError::Refused {
                kind: kind.to_string(),
                name: name.to_string(),
                code: s.code,
                reason: s.reason.clone(),
                message: s.message.clone(),
                class: classify(s.code, &s.message).unwrap_or(Refusal::Invalid),
            },
            other => ApplyError::Transient {
                kind: kind.to_string(),
                name: name.to_string(),
                source: other,
            },
        }
    }

    /// The refusal class, when the API server refused.
    pub fn refusal(&self) -> Option<Refusal> {
        match self {
            ApplyError::Refused { class, .. } => Some(*class),
            _ => None,
        }
    }
}

/// The answer to an apply whose `metadata.uid` is not the live object's: the object is
/// another than the one the apply was meant for.
fn is_uid_mismatch(code: u16, message: &str) -> bool {
    (code == 409 && message.contains("uid mismatch"))
        || (code == 422 && message.contains("metadata.uid"))
}

/// Identifies a child object across rules' kinds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ObjectKey {
    pub api_version: String,
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    /// The key of a live object of kind `ar`.
    pub fn of_object(ar: &ApiResource, o: &DynamicObject) -> ObjectKey {
        use kube::ResourceExt;
        ObjectKey {
            api_version: ar.api_version.clone(),
            kind: ar.kind.clone(),
            namespace: o.namespace().unwrap_or_default(),
            name: o.name_any(),
        }
    }

    pub fn of(r: &Rendered) -> ObjectKey {
        ObjectKey {
            api_version: r.api_version.clone(),
            kind: r.kind.clone(),
            namespace: r.namespace.clone(),
            name: r.name.clone(),
        }
    }
}

/// How long a write of ours may be missing from the cache before we stop assuming the
/// cache lags (and apply again: the object may have been deleted meanwhile).
pub const CACHE_LAG_GRACE: Duration = Duration::from_secs(10);

/// What we last wrote to an object: the render hash, the resourceVersion it got, and a
/// hash of what the server made of the rendered fields ([`canonical_hash`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub hash: String,
    pub resource_version: String,
    pub canonical: String,
    pub at: Instant,
}

impl Written {
    pub fn now(hash: String, resource_version: String, canonical: String) -> Written {
        Written {
            hash,
            resource_version,
            canonical,
            at: Instant::now(),
        }
    }
}

/// A hash of the part of `live` that `rendered` sets ([`project`]).
pub fn canonical_hash(rendered: &Value, live: &Value) -> String {
    crate::render::hash_of(&project(rendered, live))
}

/// Our own recent writes, so a lagging cache does not cause a second one: per object,
/// what we wrote (`Written` for children; the status and its resourceVersion for a
/// custom resource's status).
#[derive(Debug)]
pub struct Memo<V = Written> {
    inner: Mutex<HashMap<ObjectKey, V>>,
}

impl<V> Default for Memo<V> {
    fn default() -> Self {
        Memo {
            inner: Mutex::new(HashMap::new()),
        }
    }
}

impl<V: Clone> Memo<V> {
    pub fn get(&self, k: &ObjectKey) -> Option<V> {
        self.inner.lock().ok()?.get(k).cloned()
    }
    pub fn put(&self, k: ObjectKey, w: V) {
        if let Ok(mut m) = self.inner.lock() {
            m.insert(k, w);
        }
    }
    pub fn forget(&self, k: &ObjectKey) {
        if let Ok(mut m) = self.inner.lock() {
            m.remove(k);
        }
    }
    /// Keeps only the entries `keep` says yes to.
    pub fn retain(&self, mut keep: impl FnMut(&ObjectKey, &V) -> bool) {
        if let Ok(mut m) = self.inner.lock() {
            m.retain(|k, v| keep(k, v));
        }
    }
    pub fn len(&self) -> usize {
        self.inner.lock().map(|m| m.len()).unwrap_or(0)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether `observed` is `written` or older, judged as the API server's etcd storage
/// makes resourceVersions (integers); two different versions that are not integers are
/// not ordered (false).
pub fn not_newer(observed: &str, written: &str) -> bool {
    observed == written
        || matches!((observed.parse::<u64>(), written.parse::<u64>()), (Ok(o), Ok(w)) if o <= w)
}

/// Whether the cache has not yet caught up with our last write to an object (it lacks the
/// object, or holds an older version of it). A status computed from it now would be stale;
/// the watch event that brings our write is on its way and triggers another reconcile.
pub fn cache_behind(live: Option<&Value>, last: Option<&Written>) -> bool {
    let Some(w) = last else { return false };
    match live
        .and_then(|l| l.pointer("/metadata/resourceVersion"))
        .and_then(Value::as_str)
    {
        None => live.is_none() && w.at.elapsed() < CACHE_LAG_GRACE,
        Some(rv) => rv != w.resource_version && not_newer(rv, &w.resource_version),
    }
}

/// Whether `desired` must be applied, given the live object (if the cache has one) and
/// our last write to it.
pub fn needs_apply(desired: &Rendered, live: Option<&Value>, last: Option<&Written>) -> bool {
    let live_rv = live
        .and_then(|l| l.pointer("/metadata/resourceVersion"))
        .and_then(Value::as_str);
    if let Some(w) = last.filter(|w| w.hash == desired.hash) {
        match live_rv {
            // Not in the cache yet: our write is still on its way (deletes clear the memo).
            None if w.at.elapsed() < CACHE_LAG_GRACE => return false,
            // The cache shows our write, or something older than it.
            Some(rv) if not_newer(rv, &w.resource_version) => return false,
            _ => {}
        }
        // A newer object (its status moved on) that still holds what the server made of
        // our write: the values it canonicalises (`500m` for `0.5`) are no difference.
        if let Some(live) = live
            && canonical_hash(&desired.object, live) == w.canonical
        {
            return false;
        }
    }
    let Some(live) = live else { return true };
    let applied = live
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(HASH_ANNOTATION))
        .and_then(Value::as_str);
    !(applied == Some(desired.hash.as_str()) && is_subset(&desired.object, live))
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rendered(obj: Value) -> Rendered {
        let hash = crate::render::hash_of(&obj);
        let mut object = obj;
        object["metadata"]["annotations"] = json!({HASH_ANNOTATION: hash});
        Rendered {
            id: "d".into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "x".into(),
            namespace: "ns".into(),
            object,
            hash,
            item: None,
        }
    }

    #[test]
    fn the_cache_is_behind_until_it_shows_our_write() {
        let w = Written::now("h".into(), "20".into(), String::new());
        let at = |rv: &str| json!({"metadata": {"resourceVersion": rv}});
        assert!(
            !cache_behind(None, None),
            "nothing written, nothing awaited"
        );
        assert!(cache_behind(None, Some(&w)), "our create not cached yet");
        assert!(
            cache_behind(Some(&at("15")), Some(&w)),
            "an older version cached"
        );
        assert!(!cache_behind(Some(&at("20")), Some(&w)), "our write cached");
        assert!(
            !cache_behind(Some(&at("25")), Some(&w)),
            "a newer write cached"
        );
        let old = Written {
            at: Instant::now() - CACHE_LAG_GRACE - Duration::from_secs(1),
            ..w.clone()
        };
        assert!(
            !cache_behind(None, Some(&old)),
            "gone after the grace: not awaited"
        );
    }

    #[test]
    fn an_object_missing_from_the_cluster_is_applied() {
        let r = rendered(json!({"metadata": {"name": "x"}, "data": {"a": "1"}}));
        assert!(needs_apply(&r, None, None));
    }

    #[test]
    fn a_live_object_holding_every_rendered_field_and_the_hash_needs_nothing() {
        let r = rendered(json!({"metadata": {"name": "x"}, "data": {"a": "1"}}));
        let mut live = r.object.clone();
        live["metadata"]["resourceVersion"] = json!("10");
        live["metadata"]["uid"] = json!("u");
        live["data"]["extra-from-someone-else"] = json!("kept");
        assert!(!needs_apply(&r, Some(&live), None));
    }

    #[test]
    fn a_hand_edit_of_a_rendered_field_is_applied_again() {
        let r = rendered(json!({"metadata": {"name": "x"}, "data": {"a": "1"}}));
        let mut live = r.object.clone();
        live["metadata"]["resourceVersion"] = json!("12");
        live["data"]["a"] = json!("edited");
        assert!(needs_apply(
            &r,
            Some(&live),
            Some(&Written::now(r.hash.clone(), "10".into(), String::new()))
        ));
    }

    #[test]
    fn a_changed_render_with_the_old_hash_live_is_applied_so_dropped_fields_go() {
        let old = rendered(json!({"metadata": {"name": "x"}, "data": {"a": "1", "b": "2"}}));
        let new = rendered(json!({"metadata": {"name": "x"}, "data": {"a": "1"}}));
        let mut live = old.object.clone();
        live["metadata"]["resourceVersion"] = json!("5");
        assert!(needs_apply(&new, Some(&live), None));
    }

    #[test]
    fn a_lagging_cache_after_our_own_write_causes_no_second_write() {
        let r = rendered(json!({"metadata": {"name": "x"}, "data": {"a": "1"}}));
        let written = Written::now(r.hash.clone(), "20".into(), String::new());
        assert!(!needs_apply(&r, None, Some(&written)), "not cached yet");
        let mut stale =
            json!({"metadata": {"name": "x", "resourceVersion": "19"}, "data": {"a": "0"}});
        assert!(
            !needs_apply(&r, Some(&stale), Some(&written)),
            "cache older than our write"
        );
        stale["metadata"]["resourceVersion"] = json!("21");
        assert!(
            needs_apply(&r, Some(&stale), Some(&written)),
            "a newer, different object is corrected"
        );
    }

    #[test]
    fn a_value_the_server_canonicalised_is_not_applied_again_when_the_status_moves() {
        let r = rendered(json!({"metadata": {"name": "x"}, "spec": {"cpu": "0.5"}}));
        let mut answer = r.object.clone();
        answer["metadata"]["resourceVersion"] = json!("10");
        answer["spec"]["cpu"] = json!("500m");
        let w = Written::now(
            r.hash.clone(),
            "10".into(),
            canonical_hash(&r.object, &answer),
        );
        let mut later = answer.clone();
        later["metadata"]["resourceVersion"] = json!("11");
        later["status"] = json!({"ready": 1});
        assert!(!needs_apply(&r, Some(&later), Some(&w)));
        later["spec"]["cpu"] = json!("2");
        assert!(
            needs_apply(&r, Some(&later), Some(&w)),
            "a hand edit is still seen"
        );
    }

    #[test]
    fn refusals_are_told_from_passing_faults() {
        assert_eq!(classify(422, "invalid"), Some(Refusal::Invalid));
        assert_eq!(classify(400, "bad request"), Some(Refusal::Invalid));
        assert_eq!(classify(413, "too large"), Some(Refusal::Invalid));
        assert_eq!(classify(403, "forbidden"), Some(Refusal::Forbidden));
        assert_eq!(classify(403, "exceeded quota"), Some(Refusal::Forbidden));
        for transient in [401, 404, 408, 409, 429, 500, 503, 504] {
            assert_eq!(classify(transient, "x"), None, "{transient}");
        }
        assert_eq!(
            classify(
                500,
                "failed to create typed patch object (ns/x; /v1, Kind=ConfigMap): .data.size: expected string"
            ),
            Some(Refusal::Invalid)
        );
        assert!(is_uid_mismatch(
            422,
            "metadata.uid: Invalid value: field is immutable"
        ));
        assert!(!is_uid_mismatch(422, "spec.replicas: Invalid value"));
    }
}
