//! The watches of one rule, each feeding its cache: the rule's own kind, each child kind
//! (label-selected, trimmed, indexed by owner) and each existing kind; and what they tell
//! the rule besides: every watch has listed ([`SyncTracker`]), and each event, for those
//! who keep something per object (a resource or a child gone: what was kept for it goes).

use super::cached::{self, Cached};
use super::discovery::Resolved;
use super::existing::{ExistingKind, LabelIndex};
use super::keep::{self, Keep};
use super::owners::OwnerIndex;
use crate::render::RULE_LABEL;
use crate::rules::CompiledRule;
use futures::{Stream, TryStreamExt};
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::reflector::Store;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Where and how a rule's watches look: one namespace or all, and the server-side timeout
/// of every watch, in seconds.
#[derive(Debug, Clone)]
pub struct WatchScope {
    pub namespace: Option<String>,
    pub timeout: u32,
}

/// A child kind of a rule, with the cache of this rule's children of that kind.
pub struct ChildKind {
    pub resolved: Resolved,
    pub store: Store<Cached>,
    /// The cached children of each custom resource.
    pub owners: Arc<OwnerIndex>,
    /// What the cache keeps of these children (answers of writes are trimmed alike).
    pub keep: Arc<Keep>,
}

/// What follows a watch's events as they come (before the cache stores them).
pub type Follow = Box<dyn Fn(&watcher::Event<DynamicObject>) + Send + Sync>;

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
pub fn watch_backoff() -> kube::runtime::watcher::ExponentialBackoff {
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
pub struct SyncTracker {
    listed: Vec<AtomicBool>,
    synced: Arc<AtomicBool>,
}

impl SyncTracker {
    pub fn new(watches: usize, synced: Arc<AtomicBool>) -> SyncTracker {
        SyncTracker {
            listed: (0..watches).map(|_| AtomicBool::new(false)).collect(),
            synced,
        }
    }

    /// Whether watch `i` has completed its first list.
    pub fn listed(&self, i: usize) -> bool {
        self.listed.get(i).is_some_and(|f| f.load(Ordering::SeqCst))
    }

    /// Whether every one of the watches has completed its first list.
    pub fn all_listed(&self) -> bool {
        self.synced.load(Ordering::SeqCst)
    }

    /// Follows one event of watch `i`, once its cache has stored it (a watch counts as
    /// listed only when its cache holds the list).
    fn observe<T>(&self, i: usize, ev: &watcher::Event<T>) {
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
/// `follow` sees each event first (the rule's records of its resources).
pub fn parent_watch(
    client: &Client,
    scope: &WatchScope,
    parent: &Resolved,
    writer: Writer<Cached>,
    sync: &Arc<SyncTracker>,
    follow: Follow,
) -> impl Stream<Item = Result<Cached, watcher::Error>> + Send + 'static {
    let sync = sync.clone();
    // One resource that does not decode must not fail the list of them all.
    let api: Api<super::tolerant::Tolerant> = match scope.namespace.as_deref() {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &*parent.resource),
        None => Api::all_with(client.clone(), &*parent.resource),
    };
    watcher(api, watcher::Config::default().timeout(scope.timeout))
        .backoff(watch_backoff())
        .map_ok(super::tolerant::dynamic)
        .modify(crate::apply::slim)
        .inspect_ok(move |ev| follow(ev))
        .map_ok(cached::compact(&parent.resource))
        .reflect(writer)
        .inspect_ok(move |ev| sync.observe(0, ev))
        .applied_objects()
}

/// The watch of one child kind `k` (the rule's label selects its children), cached with
/// only what reconcile, status and pruning read of each, and indexed by owner; `follow`
/// sees each event first (a child gone takes what was written to it along).
/// `rules`: the revisions of one rule that render its resources (the first in force).
pub fn child_watch(
    client: &Client,
    scope: &WatchScope,
    rules: &[&CompiledRule],
    k: &Resolved,
    sync: Arc<SyncTracker>,
    watch_index: usize,
    follow: Follow,
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
        keep: Arc::new(keep::for_rules(
            rules,
            &k.resource.api_version,
            &k.resource.kind,
        )),
    };
    let keep = child.keep.clone();
    let name = rules.first().map(|r| r.name.as_str()).unwrap_or_default();
    let selector = format!("{RULE_LABEL}={name}");
    let api = scoped(client, &k.resource, scope.namespace.as_deref());
    let config = watcher::Config::default()
        .labels(&selector)
        .timeout(scope.timeout);
    let stream = watcher(api, config)
        .backoff(watch_backoff())
        .modify(move |o| {
            crate::apply::slim_managed_fields(o);
            keep.apply(&mut o.data);
        })
        .inspect_ok(move |ev| {
            owners.observe(ev);
            follow(ev);
        })
        .map_ok(cached::compact(&k.resource))
        .reflect(writer)
        .inspect_ok(move |ev| sync.observe(watch_index, ev))
        .touched_objects();
    (stream, child)
}

/// The cached watch of an existing kind (every object of it in scope: the rule reads
/// them by name or labels, which are the resource's to choose), with its label index.
pub fn existing_watch(
    client: &Client,
    scope: &WatchScope,
    k: &Resolved,
    sync: Arc<SyncTracker>,
    watch_index: usize,
) -> (
    impl futures::Stream<Item = Result<Cached, watcher::Error>> + Send + 'static,
    ExistingKind,
) {
    let writer = Writer::<Cached>::new(k.resource.clone());
    let labels = Arc::new(LabelIndex::default());
    let kind = ExistingKind {
        resolved: k.clone(),
        store: writer.as_reader(),
        labels: labels.clone(),
    };
    let api = scoped(client, &k.resource, scope.namespace.as_deref());
    let stream = watcher(api, watcher::Config::default().timeout(scope.timeout))
        .backoff(watch_backoff())
        .modify(crate::apply::slim)
        .inspect_ok(move |ev| labels.observe(ev))
        .map_ok(cached::compact(&k.resource))
        .reflect(writer)
        .inspect_ok(move |ev| sync.observe(watch_index, ev))
        .touched_objects();
    (stream, kind)
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A ConfigMap named `name` in namespace `n` (the tests of the layers above share it).
    pub fn cm(name: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "n"}
        }))
        .unwrap()
    }

    #[test]
    fn the_rule_is_synced_once_every_watch_has_listed() {
        let synced = Arc::new(AtomicBool::new(false));
        let tracker = SyncTracker::new(2, synced.clone());
        tracker.observe(0, &watcher::Event::<DynamicObject>::InitDone);
        tracker.observe(1, &watcher::Event::Apply(cm("a")));
        assert!(!synced.load(Ordering::SeqCst));
        tracker.observe(1, &watcher::Event::<DynamicObject>::InitDone);
        assert!(synced.load(Ordering::SeqCst));
    }
}
