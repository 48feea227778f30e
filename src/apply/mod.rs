//! Step 3: bring the cluster to the rendered children. Server-side apply with one field
//! manager, forced, only where something differs; then delete the children this custom
//! resource owned that are no longer rendered.
//!
//! "Differs" is decided without a request ([`needs_apply`]): the live object (from the
//! watch cache) must hold every rendered field with the same value, and carry the hash of
//! the last applied render, so a field dropped from the rule is still removed. Right after
//! a write the cache may lag; a memo of our own writes keeps that from causing a second.

mod compare;

pub use compare::is_subset;

use crate::render::{FIELD_MANAGER, HASH_ANNOTATION, Rendered};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::discovery::ApiResource;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Why a child could not be applied or pruned.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The API server refused the object: the user must change the rule or the resource.
    #[error("{kind} {name}: the API server refused it ({code} {reason}): {message}")]
    Refused {
        kind: String,
        name: String,
        code: u16,
        reason: String,
        message: String,
    },
    /// A passing fault (connection, timeout, conflict, server error): retried with backoff.
    #[error("{kind} {name}: {source}")]
    Transient {
        kind: String,
        name: String,
        #[source]
        source: kube::Error,
    },
}

impl ApplyError {
    fn from_kube(kind: &str, name: &str, e: kube::Error) -> ApplyError {
        match e {
            kube::Error::Api(s)
                if is_user_error(s.code) || is_type_mismatch(s.code, &s.message) =>
            {
                ApplyError::Refused {
                    kind: kind.to_string(),
                    name: name.to_string(),
                    code: s.code,
                    reason: s.reason.clone(),
                    message: s.message.clone(),
                }
            }
            other => ApplyError::Transient {
                kind: kind.to_string(),
                name: name.to_string(),
                source: other,
            },
        }
    }

    /// Whether retrying without a change cannot help.
    pub fn is_refused(&self) -> bool {
        matches!(self, ApplyError::Refused { .. })
    }
}

/// The API server answers a server-side apply whose values do not fit the kind's schema
/// (a number where a string belongs) with a 500; retrying cannot fix it either.
fn is_type_mismatch(code: u16, message: &str) -> bool {
    code == 500 && message.contains("failed to create typed patch object")
}

/// 4xx answers that retrying will not fix (409 Conflict and 429 Too Many Requests will).
fn is_user_error(code: u16) -> bool {
    (400..500).contains(&code) && code != 409 && code != 429
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

/// What we last wrote to an object: the render hash and the resourceVersion it got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    pub hash: String,
    pub resource_version: String,
    pub at: Instant,
}

impl Written {
    pub fn now(hash: String, resource_version: String) -> Written {
        Written {
            hash,
            resource_version,
            at: Instant::now(),
        }
    }
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
    }
    let Some(live) = live else { return true };
    let applied = live
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(HASH_ANNOTATION))
        .and_then(Value::as_str);
    !(applied == Some(desired.hash.as_str()) && is_subset(&desired.object, live))
}

/// Server-side applies one child, forced, as ruleop's field manager.
pub async fn apply(
    api: &Api<DynamicObject>,
    child: &Rendered,
) -> Result<DynamicObject, ApplyError> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(&child.name, &params, &Patch::Apply(&child.object))
        .await
        .map_err(|e| ApplyError::from_kube(&child.kind, &child.name, e))
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
        }
    }

    #[test]
    fn the_cache_is_behind_until_it_shows_our_write() {
        let w = Written::now("h".into(), "20".into());
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
            Some(&Written::now(r.hash.clone(), "10".into()))
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
        let written = Written::now(r.hash.clone(), "20".into());
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
    fn refusals_are_told_from_passing_faults() {
        assert!(is_user_error(422));
        assert!(is_user_error(403));
        assert!(!is_user_error(409));
        assert!(!is_user_error(429));
        assert!(!is_user_error(500));
        assert!(is_type_mismatch(
            500,
            "failed to create typed patch object (ns/x; /v1, Kind=ConfigMap): .data.size: expected string"
        ));
        assert!(!is_type_mismatch(500, "etcdserver: request timed out"));
    }
}
