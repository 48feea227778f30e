//! The existing objects a rule reads (`existing[]`): one cached watch per kind (every
//! object of it in scope: the rule reads them by name or labels, which are the resource's
//! to choose), an index of their labels by namespace, and what a lookup finds.
//!
//! A lookup by labels reads only the objects that carry every label asked for (found in
//! the index, kept from the watch's events), not every object of the kind in the
//! namespace: with many readers and many objects, each change would otherwise parse them
//! all for every reader.

use super::cached::Cached;
use super::discovery::Resolved;
use super::relist::Relist;
use crate::render::Lookup;
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher::Event;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

/// A kind of existing object, with its cache and the index of its labels.
pub struct ExistingKind {
    pub resolved: Resolved,
    pub store: Store<Cached>,
    pub labels: Arc<LabelIndex>,
}

impl ExistingKind {
    /// The cached objects `lookup` may find in namespace `ns`: the one of its name, or
    /// those that carry every label asked for.
    pub fn candidates(&self, ns: &str, lookup: &Lookup) -> Vec<Value> {
        let get = |name: &str| {
            self.store
                .get(&ObjectRef::new_with(name, self.resolved.resource.clone()).within(ns))
        };
        let objects: Vec<_> = match lookup {
            Lookup::Name(n) => get(n).into_iter().collect(),
            Lookup::Labels(want) if want.is_empty() => self
                .store
                .state()
                .into_iter()
                .filter(|o| o.namespace().as_deref() == Some(ns))
                .collect(),
            Lookup::Labels(want) => self
                .labels
                .matching(ns, want)
                .iter()
                .filter_map(|name| get(name))
                .collect(),
        };
        objects.iter().filter_map(|o| o.value()).collect()
    }
}

/// (namespace, name) of an object.
type Place = (String, String);

#[derive(Default)]
struct Index {
    /// (namespace, label, value) → the names there that carry it.
    by_label: HashMap<(String, String, String), BTreeSet<String>>,
    /// Each object's labels (to take them out when it changes or goes).
    of: HashMap<Place, BTreeMap<String, String>>,
}

impl Index {
    fn remove(&mut self, place: &Place) {
        let Some(labels) = self.of.remove(place) else {
            return;
        };
        for (k, v) in labels {
            let key = (place.0.clone(), k, v);
            if let Some(names) = self.by_label.get_mut(&key) {
                names.remove(&place.1);
                if names.is_empty() {
                    self.by_label.remove(&key);
                }
            }
        }
    }

    fn insert(&mut self, place: Place, labels: BTreeMap<String, String>) {
        self.remove(&place);
        for (k, v) in &labels {
            self.by_label
                .entry((place.0.clone(), k.clone(), v.clone()))
                .or_default()
                .insert(place.1.clone());
        }
        self.of.insert(place, labels);
    }
}

/// The labels of one existing kind's objects, by namespace, kept from its watch's events
/// (a re-list replaces them all at its end, as the cache does).
#[derive(Default)]
pub struct LabelIndex {
    inner: Mutex<Index>,
    relist: Relist<(Place, BTreeMap<String, String>)>,
}

fn entry(o: &DynamicObject) -> (Place, BTreeMap<String, String>) {
    (
        (o.namespace().unwrap_or_default(), o.name_any()),
        o.labels().clone(),
    )
}

impl LabelIndex {
    /// Follows one watch event.
    pub fn observe(&self, ev: &Event<DynamicObject>) {
        let listed = self.relist.observe(ev, |o| Some(entry(o)));
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        match ev {
            Event::Apply(o) => {
                let (place, labels) = entry(o);
                inner.insert(place, labels);
            }
            Event::Delete(o) => inner.remove(&entry(o).0),
            Event::Init | Event::InitApply(_) | Event::InitDone => {}
        }
        if let Some(listed) = listed {
            *inner = Index::default();
            for (place, labels) in listed {
                inner.insert(place, labels);
            }
        }
    }

    /// The names in `ns` of the objects that carry every label of `want` (not empty).
    pub fn matching(&self, ns: &str, want: &BTreeMap<String, String>) -> Vec<String> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut sets = want
            .iter()
            .map(|(k, v)| inner.by_label.get(&(ns.to_string(), k.clone(), v.clone())));
        let Some(Some(first)) = sets.next() else {
            return Vec::new();
        };
        let mut names: BTreeSet<&String> = first.iter().collect();
        for set in sets {
            let Some(set) = set else { return Vec::new() };
            names.retain(|n| set.contains(*n));
        }
        names.into_iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn secret(ns: &str, name: &str, labels: Value) -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": ns, "labels": labels}}))
        .unwrap()
    }

    fn want(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_label_lookup_finds_only_the_objects_with_every_label_in_its_namespace() {
        let idx = LabelIndex::default();
        idx.observe(&Event::Apply(secret(
            "n",
            "a",
            json!({"team": "x", "tier": "db"}),
        )));
        idx.observe(&Event::Apply(secret("n", "b", json!({"team": "x"}))));
        idx.observe(&Event::Apply(secret(
            "m",
            "c",
            json!({"team": "x", "tier": "db"}),
        )));
        assert_eq!(idx.matching("n", &want(&[("team", "x")])), ["a", "b"]);
        assert_eq!(
            idx.matching("n", &want(&[("team", "x"), ("tier", "db")])),
            ["a"]
        );
        assert!(idx.matching("n", &want(&[("team", "y")])).is_empty());
        // A label removed, an object deleted.
        idx.observe(&Event::Apply(secret("n", "a", json!({"tier": "db"}))));
        idx.observe(&Event::Delete(secret("n", "b", json!({"team": "x"}))));
        assert!(idx.matching("n", &want(&[("team", "x")])).is_empty());
        assert_eq!(idx.matching("m", &want(&[("team", "x")])), ["c"]);
    }

    #[test]
    fn a_relist_replaces_the_index_at_its_end() {
        let idx = LabelIndex::default();
        idx.observe(&Event::Apply(secret("n", "gone", json!({"team": "x"}))));
        idx.observe(&Event::Init);
        idx.observe(&Event::InitApply(secret("n", "new", json!({"team": "x"}))));
        assert_eq!(idx.matching("n", &want(&[("team", "x")])), ["gone"]);
        idx.observe(&Event::InitDone);
        assert_eq!(idx.matching("n", &want(&[("team", "x")])), ["new"]);
    }
}
