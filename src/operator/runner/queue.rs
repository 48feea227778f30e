//! `ruleop_queue_depth{rule}`: the resources of a rule waiting for a reconcile that a watch
//! event (of the resource, of a child it owns, of an existing object it reads) or a "every
//! resource again" asked for, and that has not started yet. kube-runtime's scheduler does
//! not say how long its queue is, so the depth is kept beside it: a resource is marked when
//! an event for it comes in and unmarked when its reconcile starts. As controller-runtime's
//! `workqueue_depth`, it leaves out the retries that wait for their time. A resource deleted
//! before its turn is not counted (only those the cache still holds are).

use crate::cache::cached::Cached;
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use std::collections::HashSet;
use std::sync::Mutex;

/// (namespace, name) of a resource.
type Key = (String, String);

/// The resources waiting for a reconcile.
#[derive(Default)]
pub(super) struct Queue {
    waiting: Mutex<HashSet<Key>>,
}

impl Queue {
    /// An event asked for a reconcile of this resource.
    pub(super) fn wanted(&self, namespace: &str, name: &str) {
        if let Ok(mut w) = self.waiting.lock() {
            w.insert((namespace.to_string(), name.to_string()));
        }
    }

    /// Every resource of the cache asked for.
    pub(super) fn all_wanted(&self, store: &Store<Cached>) {
        for r in store.state() {
            self.wanted(&r.namespace().unwrap_or_default(), &r.name_any());
        }
    }

    /// A child's event: each owner of the watched kind is wanted (as kube-runtime maps
    /// it: by apiVersion and kind).
    pub(super) fn child_event(&self, child: &Cached, api_version: &str, kind: &str) {
        let ns = child.namespace().unwrap_or_default();
        for o in child.owner_references() {
            if o.api_version == api_version && o.kind == kind {
                self.wanted(&ns, &o.name);
            }
        }
    }

    /// The reconcile of this resource started.
    pub(super) fn started(&self, r: &Cached) {
        if let Ok(mut w) = self.waiting.lock() {
            w.remove(&(r.namespace().unwrap_or_default(), r.name_any()));
        }
    }

    /// How many wait now: those the cache still holds (one deleted before its turn is
    /// never reconciled, and is forgotten here).
    pub(super) fn depth(&self, store: &Store<Cached>) -> i64 {
        let Ok(mut w) = self.waiting.lock() else {
            return 0;
        };
        let held: HashSet<Key> = store
            .state()
            .iter()
            .map(|r| (r.namespace().unwrap_or_default(), r.name_any()))
            .collect();
        w.retain(|k| held.contains(k));
        w.len() as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::cached::Kind;
    use crate::cache::watches::tests::cm;
    use kube::discovery::ApiResource;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher;

    fn store(names: &[&str]) -> (Writer<Cached>, Store<Cached>) {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let mut w = Writer::<Cached>::new(Kind::from(ar));
        for n in names {
            w.apply_watcher_event(&watcher::Event::Apply(Cached::new(&cm(n))));
        }
        let r = w.as_reader();
        (w, r)
    }

    #[test]
    fn a_resource_waits_from_its_event_to_its_reconcile() {
        let (_w, s) = store(&["a", "b", "c"]);
        let q = Queue::default();
        q.wanted("n", "a");
        q.wanted("n", "a");
        q.wanted("n", "b");
        assert_eq!(q.depth(&s), 2, "one mark per resource, however many events");
        q.started(&Cached::new(&cm("a")));
        assert_eq!(q.depth(&s), 1);
        q.all_wanted(&s);
        assert_eq!(q.depth(&s), 3);
    }

    #[test]
    fn a_child_marks_its_owner_of_the_watched_kind_and_a_deleted_resource_is_forgotten() {
        let (_w, s) = store(&["a"]);
        let q = Queue::default();
        let mut child = cm("a-web");
        child.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: "a".into(),
                uid: "u".into(),
                ..Default::default()
            },
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "apps/v1".into(),
                kind: "ReplicaSet".into(),
                name: "other".into(),
                uid: "v".into(),
                ..Default::default()
            },
        ]);
        q.child_event(&Cached::new(&child), "v1", "ConfigMap");
        assert_eq!(q.depth(&s), 1);
        q.wanted("n", "gone");
        assert_eq!(
            q.depth(&s),
            1,
            "not in the cache: never reconciled, not counted"
        );
    }
}
