//! The watches of one rule, each feeding its cache: the rule's own kind, each child kind
//! (label-selected, trimmed, indexed by owner) and each existing kind; what they tell
//! the rule besides (every watch has listed; a resource or child is gone, so what was
//! kept for it goes).

use super::cached::{self, Cached};
use super::discovery::Resolved;
use super::existing::Readers;
use super::owners::OwnerIndex;
use super::reconcile::ChildKind;
use super::relist::Relist;
use super::runner::Options;
use crate::apply::{CACHE_LAG_GRACE, Memo, ObjectKey};
use crate::render::RULE_LABEL;
use crate::rules::CompiledRule;
use futures::{Stream, TryStreamExt};
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// An API for `ar` in the configured scope.
fn scoped(client: &Client, ar: &ApiResource, ns: Option<&str>) -> Api<DynamicObject> {
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

/// Backoff of each watch after an error: 0.5 s doubling to 5 s, jittered. Bounded (a few
/// requests per watch per outage-minute), yet a watch is back within seconds of the API
/// server (kube's default climbs to 30 s, and compounds with the controller's own).
pub(super) fn watch_backoff() -> kube::runtime::watcher::ExponentialBackoff {
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(Duration::from_secs(5))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .into()
}

/// Sets `synced` once every one of a rule's watches has completed its first list. (The
/// stores' own `wait_until_ready` wakes only one waiter, and the controller is one.)
pub(super) struct SyncTracker {
    listed: Vec<AtomicBool>,
    synced: Arc<AtomicBool>,
}

impl SyncTracker {
    pub(super) fn new(watches: usize, synced: Arc<AtomicBool>) -> SyncTracker {
        SyncTracker {
            listed: (0..watches).map(|_| AtomicBool::new(false)).collect(),
            synced,
        }
    }

    fn observe(&self, i: usize, ev: &watcher::Event<DynamicObject>) {
        if !matches!(ev, watcher::Event::InitDone) {
            return;
        }
        if let Some(flag) = self.listed.get(i) {
            flag.store(true, Ordering::SeqCst);
        }
        if !self.synced.load(Ordering::SeqCst)
            && self.listed.iter().all(|f| f.load(Ordering::SeqCst))
        {
            self.synced.store(true, Ordering::SeqCst);
            tracing::info!("watches synced");
        }
    }
}

/// The watch of the rule's own kind (every object of it in scope), cached in `writer`;
/// a resource gone takes what the rule kept for it ([`PerResource`]) along.
pub(super) fn parent_watch(
    client: &Client,
    opts: &Options,
    parent: &Resolved,
    writer: Writer<Cached>,
    sync: &Arc<SyncTracker>,
    kept: &PerResource,
) -> impl Stream<Item = Result<Cached, watcher::Error>> + Send + 'static {
    let (sync, kept) = (sync.clone(), kept.clone());
    let relist = Relist::default();
    let ar = parent.resource.clone();
    let api = scoped(client, &parent.resource, opts.namespace.as_deref());
    watcher(api, watcher::Config::default().timeout(opts.watch_timeout))
        .backoff(watch_backoff())
        .modify(crate::apply::slim)
        .inspect_ok(move |ev| {
            sync.observe(0, ev);
            forget_gone_parents(ev, &ar, &kept, &relist);
        })
        .map_ok(cached::compact(&parent.resource))
        .reflect(writer)
        .applied_objects()
}

/// The watch of one child kind `k` (the rule's label selects its children), cached with
/// only what reconcile, status and pruning read of each, and indexed by owner; a child
/// gone takes its write memo along.
pub(super) fn child_watch(
    client: &Client,
    opts: &Options,
    rule: &CompiledRule,
    k: &Resolved,
    sync: Arc<SyncTracker>,
    watch_index: usize,
    memo: &Arc<Memo>,
) -> (
    impl Stream<Item = Result<Cached, watcher::Error>> + Send + 'static,
    ChildKind,
) {
    let writer = Writer::<Cached>::new(k.resource.clone());
    let owners = Arc::new(OwnerIndex::default());
    let child = ChildKind {
        resolved: k.clone(),
        store: writer.as_reader(),
        owners: owners.clone(),
        keep: Arc::new(crate::rules::keep::for_kind(
            rule,
            &k.resource.api_version,
            &k.resource.kind,
        )),
    };
    let keep = child.keep.clone();
    let (memo, ar, relist) = (memo.clone(), k.resource.clone(), Relist::default());
    let selector = format!("{RULE_LABEL}={}", rule.name);
    let api = scoped(client, &k.resource, opts.namespace.as_deref());
    let config = watcher::Config::default()
        .labels(&selector)
        .timeout(opts.watch_timeout);
    let stream = watcher(api, config)
        .backoff(watch_backoff())
        .modify(move |o| {
            crate::apply::slim_managed_fields(o);
            keep.apply(&mut o.data);
        })
        .inspect_ok(move |ev| {
            sync.observe(watch_index, ev);
            owners.observe(ev);
            forget_gone_children(ev, &ar, &memo, &relist);
        })
        .map_ok(cached::compact(&k.resource))
        .reflect(writer)
        .touched_objects();
    (stream, child)
}

/// The keys of the objects a re-list brought, at its end.
fn relisted(
    relist: &Relist<ObjectKey>,
    ar: &ApiResource,
    ev: &watcher::Event<DynamicObject>,
) -> Option<HashSet<ObjectKey>> {
    relist
        .observe(ev, |o| Some(ObjectKey::of_object(ar, o)))
        .map(|keys| keys.into_iter().collect())
}

/// A deleted child must be recreated, not taken for a lagging cache: its memo goes (and,
/// after a re-list, the memos of children gone meanwhile, unless just written).
fn forget_gone_children(
    ev: &watcher::Event<DynamicObject>,
    ar: &ApiResource,
    memo: &Memo,
    relist: &Relist<ObjectKey>,
) {
    if let Some(listed) = relisted(relist, ar, ev) {
        memo.retain(|k, w| listed.contains(k) || w.at.elapsed() < CACHE_LAG_GRACE);
    }
    if let watcher::Event::Delete(o) = ev {
        memo.forget(&ObjectKey::of_object(ar, o));
    }
}

/// What a rule keeps per custom resource, dropped when the resource is gone.
#[derive(Clone, Default)]
pub(super) struct PerResource {
    pub(super) status_memo: Arc<Memo<(String, Box<str>)>>,
    pub(super) failures: Arc<Mutex<HashMap<String, u32>>>,
    pub(super) readers: Arc<Readers>,
}

fn forget_gone_parents(
    ev: &watcher::Event<DynamicObject>,
    ar: &ApiResource,
    kept: &PerResource,
    relist: &Relist<ObjectKey>,
) {
    let key = |k: &ObjectKey| super::reconcile::failure_key(&k.namespace, &k.name);
    if let Some(listed) = relisted(relist, ar, ev) {
        kept.status_memo.retain(|k, _| listed.contains(k));
        let names: HashSet<String> = listed.iter().map(key).collect();
        if let Ok(mut f) = kept.failures.lock() {
            f.retain(|k, _| names.contains(k));
        }
        kept.readers
            .retain(|ns, name| names.contains(&super::reconcile::failure_key(ns, name)));
    }
    if let watcher::Event::Delete(o) = ev {
        let k = ObjectKey::of_object(ar, o);
        if let Ok(mut f) = kept.failures.lock() {
            f.remove(&key(&k));
        }
        kept.status_memo.forget(&k);
        kept.readers.forget(&k.namespace, &k.name);
    }
}

/// The cached watch of an existing kind (every object of it in scope: the rule reads
/// them by name or labels, which are the resource's to choose).
pub(super) fn existing_watch(
    client: &Client,
    opts: &Options,
    k: &Resolved,
    sync: Arc<SyncTracker>,
    watch_index: usize,
) -> (
    impl futures::Stream<Item = Result<Cached, watcher::Error>> + Send + 'static,
    kube::runtime::reflector::Store<Cached>,
) {
    let writer = Writer::<Cached>::new(k.resource.clone());
    let store = writer.as_reader();
    let api = scoped(client, &k.resource, opts.namespace.as_deref());
    let stream = watcher(api, watcher::Config::default().timeout(opts.watch_timeout))
        .backoff(watch_backoff())
        .modify(crate::apply::slim)
        .inspect_ok(move |ev| sync.observe(watch_index, ev))
        .map_ok(cached::compact(&k.resource))
        .reflect(writer)
        .touched_objects();
    (stream, store)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::apply::Written;
    use std::time::{Duration, Instant};

    /// A ConfigMap named `name` in namespace `n` (the controller's tests share it).
    pub(in crate::controller) fn cm(name: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "n"}
        }))
        .unwrap()
    }

    #[test]
    fn after_a_relist_the_memos_of_objects_gone_meanwhile_are_dropped() {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let memo: Memo = Memo::default();
        let old = Written {
            at: Instant::now() - CACHE_LAG_GRACE - Duration::from_secs(1),
            ..Written::now("h".into(), "1".into(), String::new())
        };
        memo.put(ObjectKey::of_object(&ar, &cm("kept")), old.clone());
        memo.put(ObjectKey::of_object(&ar, &cm("gone")), old);
        // Written a moment ago and not listed yet: the cache may simply lag.
        let fresh = Written::now("h".into(), "9".into(), String::new());
        memo.put(ObjectKey::of_object(&ar, &cm("just-made")), fresh);
        let relist = Relist::default();
        for ev in [
            watcher::Event::Init,
            watcher::Event::InitApply(cm("kept")),
            watcher::Event::InitDone,
        ] {
            forget_gone_children(&ev, &ar, &memo, &relist);
        }
        assert!(memo.get(&ObjectKey::of_object(&ar, &cm("kept"))).is_some());
        assert!(memo.get(&ObjectKey::of_object(&ar, &cm("gone"))).is_none());
        assert!(
            memo.get(&ObjectKey::of_object(&ar, &cm("just-made")))
                .is_some()
        );
    }

    #[test]
    fn a_resource_gone_while_failing_leaves_no_backoff_entry() {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let kept = PerResource::default();
        kept.failures.lock().unwrap().extend([
            ("n/deleted".to_string(), 3),
            ("n/vanished".to_string(), 5),
            ("n/kept".to_string(), 1),
        ]);
        let relist = Relist::default();
        forget_gone_parents(&watcher::Event::Delete(cm("deleted")), &ar, &kept, &relist);
        for ev in [
            watcher::Event::Init,
            watcher::Event::InitApply(cm("kept")),
            watcher::Event::InitDone,
        ] {
            forget_gone_parents(&ev, &ar, &kept, &relist);
        }
        let left: Vec<String> = kept.failures.lock().unwrap().keys().cloned().collect();
        assert_eq!(left, vec!["n/kept".to_string()]);
    }
}
