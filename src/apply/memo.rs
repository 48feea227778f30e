//! What ruleop last wrote to an object ([`Written`]), how the watch cache stands to it
//! ([`Lag`]: the one answer to "is the cache behind my write", for children and statuses),
//! and whether a rendered child must be applied at all ([`needs_apply`]). Where the last
//! writes are kept is the reconcile's (one record per custom resource).

use super::compare::{as_stored, is_subset, project};
use crate::render::{HASH_ANNOTATION, Rendered};
use kube::api::DynamicObject;
use kube::discovery::ApiResource;
use serde_json::Value;
use std::time::{Duration, Instant};

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
    crate::render::hash_of(&project(&as_stored(rendered), live))
}

/// Whether `observed` is `written` or older, judged as the API server's etcd storage
/// makes resourceVersions (integers); two different versions that are not integers are
/// not ordered (false).
pub fn not_newer(observed: &str, written: &str) -> bool {
    observed == written
        || matches!((observed.parse::<u64>(), written.parse::<u64>()), (Ok(o), Ok(w)) if o <= w)
}

/// How the watch cache stands to a write of ours: the one answer to "is the cache behind
/// my write", for children and statuses alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lag {
    /// The cache lacks the object (for at most [`CACHE_LAG_GRACE`] after the write) or holds
    /// an older version of it: our write's watch event is on its way.
    Behind,
    /// The cache holds the version our write made.
    Shows,
    /// The cache holds a newer version (another write came after ours), or has lacked the
    /// object for longer than the grace (it may have been deleted meanwhile).
    Past,
}

/// How a cached object at `cached_rv` (None: not cached) stands to our write that got
/// `written_rv` at `at`.
pub fn lag(cached_rv: Option<&str>, written_rv: &str, at: Instant) -> Lag {
    match cached_rv {
        None if at.elapsed() < CACHE_LAG_GRACE => Lag::Behind,
        None => Lag::Past,
        Some(rv) if rv == written_rv => Lag::Shows,
        Some(rv) if not_newer(rv, written_rv) => Lag::Behind,
        Some(_) => Lag::Past,
    }
}

impl Written {
    /// How `live` (the cached object, if any) stands to this write.
    pub fn lag(&self, live: Option<&Value>) -> Lag {
        lag(resource_version(live), &self.resource_version, self.at)
    }
}

fn resource_version(live: Option<&Value>) -> Option<&str> {
    live.and_then(|l| l.pointer("/metadata/resourceVersion"))
        .and_then(Value::as_str)
}

/// Whether the cache has not yet caught up with our last write to an object (it lacks the
/// object, or holds an older version of it). A status computed from it now would be stale;
/// the watch event that brings our write is on its way and triggers another reconcile.
pub fn cache_behind(live: Option<&Value>, last: Option<&Written>) -> bool {
    // (A cached object always has a resourceVersion; one without is not awaited.)
    let unversioned = live.is_some() && resource_version(live).is_none();
    !unversioned && last.is_some_and(|w| w.lag(live) == Lag::Behind)
}

/// Whether `desired` must be applied, given the live object (if the cache has one) and
/// our last write to it.
pub fn needs_apply(desired: &Rendered, live: Option<&Value>, last: Option<&Written>) -> bool {
    if let Some(w) = last.filter(|w| w.hash == desired.hash) {
        // The cache shows our write, or is behind it: nothing new to send.
        if w.lag(live) != Lag::Past {
            return false;
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
            size: 0,
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
}
