//! Existing objects a rule reads (`existing[]`): one cached watch per kind, the lookups of
//! each custom resource (recorded at every reconcile), and the mapping back from a changed
//! object to the resources that read it, so that creating, changing or deleting a Secret
//! reconciles exactly the resources that use it.

use super::cached::Cached;
use super::discovery::Resolved;
use crate::render::{self, Lookup, RenderError, Scope};
use crate::rules::CompiledRule;
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Mutex;

/// A kind of existing object, with its cache.
pub struct ExistingKind {
    pub resolved: Resolved,
    pub store: Store<Cached>,
}

/// (kind index, namespace) → the resources there that read objects of that kind, with
/// their lookups.
type ByPlace = HashMap<(usize, String), HashMap<String, Vec<Lookup>>>;

/// Who reads what: filled by reconciles, read by the watch mapper.
#[derive(Default)]
pub struct Readers {
    inner: Mutex<ByPlace>,
}

impl Readers {
    /// Records the lookups of resource `name` in `ns` (replacing its earlier ones).
    pub fn record(&self, ns: &str, name: &str, lookups: Vec<(usize, Lookup)>) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        for ((_, n), readers) in inner.iter_mut() {
            if n == ns {
                readers.remove(name);
            }
        }
        for (kind, lookup) in lookups {
            inner
                .entry((kind, ns.to_string()))
                .or_default()
                .entry(name.to_string())
                .or_default()
                .push(lookup);
        }
        inner.retain(|_, readers| !readers.is_empty());
    }

    /// Forgets a resource that is gone.
    pub fn forget(&self, ns: &str, name: &str) {
        self.record(ns, name, Vec::new());
    }

    /// Keeps only the resources `keep(namespace, name)` says are still there (after a
    /// re-list of the watched kind).
    pub fn retain(&self, keep: impl Fn(&str, &str) -> bool) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        for ((_, ns), readers) in inner.iter_mut() {
            readers.retain(|name, _| keep(ns, name));
        }
        inner.retain(|_, readers| !readers.is_empty());
    }

    /// The resources (names in the object's namespace) whose lookups find `o`, or may
    /// have found it before: a label lookup reads every object of the kind in its
    /// namespace (a label removed is a change to the list, though `o` no longer matches).
    pub fn readers_of(&self, kind: usize, o: &DynamicObject) -> Vec<String> {
        let ns = o.namespace().unwrap_or_default();
        let meta = json!({"metadata": {"name": o.name_any(), "labels": o.labels()}});
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner
            .get(&(kind, ns))
            .map(|readers| {
                readers
                    .iter()
                    .filter(|(_, lookups)| {
                        lookups
                            .iter()
                            .any(|l| matches!(l, Lookup::Labels(_)) || l.matches(&meta))
                    })
                    .map(|(name, _)| name.clone())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Looks up the rule's existing objects for one resource in the caches, records the
/// lookups, and gives the scope with what was found.
pub fn resolve(
    rule: &CompiledRule,
    kinds: &[ExistingKind],
    kind_of: &[usize],
    readers: &Readers,
    scope: Scope,
) -> Result<Scope, RenderError> {
    if rule.existing.is_empty() {
        return Ok(scope);
    }
    let ns = scope.namespace.clone();
    let candidates = |i: usize, lookup: &Lookup| -> Vec<Value> {
        let kind = &kinds[kind_of[i]];
        let objects = match lookup {
            Lookup::Name(n) => kind
                .store
                .get(&ObjectRef::new_with(n, kind.resolved.resource.clone()).within(&ns))
                .into_iter()
                .collect(),
            Lookup::Labels(_) => kind
                .store
                .state()
                .into_iter()
                .filter(|o| o.namespace().as_deref() == Some(ns.as_str()))
                .collect::<Vec<_>>(),
        };
        objects.iter().filter_map(|o| o.value()).collect()
    };
    let (scope, lookups) = render::find_existing(rule, scope, candidates)?;
    readers.record(
        &ns,
        &scope.name,
        kind_of.iter().copied().zip(lookups).collect(),
    );
    Ok(scope)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(name: &str, labels: serde_json::Value) -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": "n", "labels": labels}}))
        .unwrap()
    }

    #[test]
    fn a_changed_object_reaches_exactly_the_resources_that_read_it() {
        let r = Readers::default();
        r.record("n", "a", vec![(0, Lookup::Name("db".into()))]);
        let team = Lookup::Labels([("team".to_string(), "x".to_string())].into());
        r.record("n", "b", vec![(0, team)]);
        r.record("m", "c", vec![(0, Lookup::Name("db".into()))]);
        let mut found = r.readers_of(0, &secret("db", json!({})));
        found.sort();
        assert_eq!(found, vec!["a", "b"], "b may have listed db before");
        assert_eq!(
            r.readers_of(0, &secret("other", json!({"team": "x"}))),
            vec!["b"]
        );
        assert!(r.readers_of(1, &secret("db", json!({}))).is_empty());
        // A new lookup replaces the old; a forgotten resource reads nothing.
        r.record("n", "a", vec![(0, Lookup::Name("db2".into()))]);
        assert_eq!(r.readers_of(0, &secret("db", json!({}))), vec!["b"]);
        r.forget("n", "b");
        assert!(r.readers_of(0, &secret("db", json!({}))).is_empty());
        assert!(
            r.readers_of(0, &secret("other", json!({"team": "x"})))
                .is_empty()
        );
    }

    #[test]
    fn a_relist_keeps_only_the_resources_still_there() {
        let r = Readers::default();
        r.record("n", "a", vec![(0, Lookup::Name("db".into()))]);
        r.record("n", "b", vec![(0, Lookup::Name("db".into()))]);
        r.retain(|ns, name| ns == "n" && name == "b");
        assert_eq!(r.readers_of(0, &secret("db", json!({}))), vec!["b"]);
    }
}
