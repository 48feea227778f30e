//! Which cached children each custom resource controls, kept from the child watch.
//!
//! A reconcile prunes the children of its resource that are no longer rendered. Scanning
//! the whole child cache for them costs O(children) per reconcile, O(N²) over a wave of N
//! resources; this index answers "the children of uid U" in O(its children). It follows
//! the watch events the reflector stores, including a re-list (`Init` … `InitDone`), after
//! which it holds exactly the listed objects, as the store does.

use super::relist::Relist;
use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use kube::{Resource, ResourceExt};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// (namespace, name) of a child.
pub type ChildName = (String, String);

#[derive(Default)]
struct Inner {
    /// Owner uid → its children.
    by_owner: HashMap<String, HashSet<ChildName>>,
    /// Child → its owner uid (to move or drop it when it changes).
    owner_of: HashMap<ChildName, String>,
}

impl Inner {
    fn remove(&mut self, child: &ChildName) {
        if let Some(uid) = self.owner_of.remove(child)
            && let Some(set) = self.by_owner.get_mut(&uid)
        {
            set.remove(child);
            if set.is_empty() {
                self.by_owner.remove(&uid);
            }
        }
    }

    fn insert(&mut self, child: ChildName, uid: Option<String>) {
        self.remove(&child);
        if let Some(uid) = uid {
            self.by_owner
                .entry(uid.clone())
                .or_default()
                .insert(child.clone());
            self.owner_of.insert(child, uid);
        }
    }
}

/// The index of one child kind.
#[derive(Default)]
pub struct OwnerIndex {
    inner: Mutex<Inner>,
    /// The objects of a re-list in progress; swapped in at `InitDone`.
    relist: Relist<(ChildName, String)>,
}

/// The uid of the object's controller (the ownerReference with `controller: true`).
pub fn controller_uid(o: &impl Resource) -> Option<&str> {
    controller_ref_of(o).map(|(uid, _)| uid)
}

/// The uid and name of the object's controller, if it has one.
pub fn controller_ref_of(o: &impl Resource) -> Option<(&str, &str)> {
    o.meta()
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| (r.uid.as_str(), r.name.as_str()))
}

fn name_of(o: &DynamicObject) -> ChildName {
    (o.namespace().unwrap_or_default(), o.name_any())
}

impl OwnerIndex {
    /// Follows one watch event.
    pub fn observe(&self, ev: &Event<DynamicObject>) {
        let listed = self.relist.observe(ev, |o| {
            controller_uid(o).map(|uid| (name_of(o), uid.to_string()))
        });
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        match ev {
            Event::Apply(o) => inner.insert(name_of(o), controller_uid(o).map(str::to_string)),
            Event::Delete(o) => inner.remove(&name_of(o)),
            Event::Init | Event::InitApply(_) | Event::InitDone => {}
        }
        if let Some(listed) = listed {
            inner.by_owner.clear();
            inner.owner_of.clear();
            for (child, uid) in listed {
                inner.insert(child, Some(uid));
            }
        }
    }

    /// The children controlled by `uid`.
    pub fn children_of(&self, uid: &str) -> Vec<ChildName> {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner
            .by_owner
            .get(uid)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn child(name: &str, owner: Option<&str>) -> DynamicObject {
        let mut v = json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": "ns"}});
        if let Some(uid) = owner {
            v["metadata"]["ownerReferences"] = json!([
                {"apiVersion": "example.com/v1", "kind": "WebSite", "name": "w", "uid": "other", "controller": false},
                {"apiVersion": "example.com/v1", "kind": "WebSite", "name": "w", "uid": uid, "controller": true}
            ]);
        }
        serde_json::from_value(v).unwrap()
    }

    fn names(idx: &OwnerIndex, uid: &str) -> Vec<String> {
        let mut v: Vec<String> = idx.children_of(uid).into_iter().map(|c| c.1).collect();
        v.sort();
        v
    }

    #[test]
    fn follows_applies_deletes_and_owner_changes() {
        let idx = OwnerIndex::default();
        idx.observe(&Event::Apply(child("a", Some("u1"))));
        idx.observe(&Event::Apply(child("b", Some("u1"))));
        idx.observe(&Event::Apply(child("c", Some("u2"))));
        idx.observe(&Event::Apply(child("d", None)));
        assert_eq!(names(&idx, "u1"), ["a", "b"]);
        assert_eq!(names(&idx, "u2"), ["c"]);
        assert!(
            idx.children_of("other").is_empty(),
            "only the controller counts"
        );

        idx.observe(&Event::Apply(child("b", Some("u2"))));
        assert_eq!(names(&idx, "u1"), ["a"]);
        assert_eq!(names(&idx, "u2"), ["b", "c"]);

        idx.observe(&Event::Apply(child("a", None)));
        idx.observe(&Event::Delete(child("c", Some("u2"))));
        assert!(idx.children_of("u1").is_empty());
        assert_eq!(names(&idx, "u2"), ["b"]);
    }

    #[test]
    fn a_relist_replaces_everything_at_init_done() {
        let idx = OwnerIndex::default();
        idx.observe(&Event::Apply(child("gone", Some("u1"))));
        idx.observe(&Event::Init);
        idx.observe(&Event::InitApply(child("kept", Some("u1"))));
        // Until the re-list is complete the old view stays.
        assert_eq!(names(&idx, "u1"), ["gone"]);
        idx.observe(&Event::InitApply(child("new", Some("u3"))));
        idx.observe(&Event::InitDone);
        assert_eq!(names(&idx, "u1"), ["kept"]);
        assert_eq!(names(&idx, "u3"), ["new"]);
    }
}
