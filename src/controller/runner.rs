//! Runs one rule: waits until its kinds are served, then one kube-runtime `Controller`
//! over `Api<DynamicObject>` for the watched kind, owning each child kind through a
//! label-selected, cached watch. Stops gracefully when told to.

use super::cached::{self, Cached};
use super::discovery::{self, Resolved};
use super::events::EventQueue;
use super::existing::{ExistingKind, Readers};
use super::inventory;
use super::owners::OwnerIndex;
use super::reconcile::{ChildKind, Ctx, error_policy, reconcile};
use super::relist::Relist;
use crate::apply::{CACHE_LAG_GRACE, Memo, ObjectKey};
use crate::render::RULE_LABEL;
use crate::rules::CompiledRule;
use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::controller::{Config, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::store::Writer;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::watch;
use tracing::Instrument;

/// How a rule runs.
#[derive(Clone)]
pub struct Options {
    /// Reconciles of this rule running at once.
    pub concurrency: u16,
    /// How often each healthy custom resource is checked with no event.
    pub resync: Duration,
    /// How often discovery is retried while a kind is not served.
    pub discovery_retry: Duration,
    /// Only this namespace, or all.
    pub namespace: Option<String>,
    /// Server-side timeout of every watch, in seconds.
    pub watch_timeout: u32,
    /// Which Events to publish.
    pub events: super::EventLevel,
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Who the Events ruleop publishes come from.
    pub reporter: kube::runtime::events::Reporter,
    /// Asked before every write: false once this replica may no longer write.
    pub fence: Arc<super::leader::Fence>,
    /// The operator's own namespace: the inventory of made kinds lives there.
    pub state_namespace: String,
    /// Install each rule's CRD from its schema when it starts.
    pub install_crds: bool,
    /// Paces the publishing of Events (all rules share it); None: unpaced.
    pub event_pace: Option<Arc<super::limiter::Pace>>,
}

/// An API for `ar` in the configured scope.
fn scoped(
    client: &Client,
    ar: &kube::discovery::ApiResource,
    ns: Option<&str>,
) -> Api<DynamicObject> {
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    }
}

/// How long a stopping rule waits for its in-flight reconciles.
pub const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// Aborts its task when dropped: a helper task never outlives the rule that spawned it,
/// however that rule ends (stopped, or cancelled when leadership is lost).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A running rule.
pub struct RuleTask {
    pub rule: Arc<CompiledRule>,
    /// True once every watch of the rule has listed its objects.
    pub synced: Arc<AtomicBool>,
    stop: watch::Sender<bool>,
    handle: tokio::task::JoinHandle<()>,
}

impl RuleTask {
    /// Starts `rule` in its own task.
    /// `retired` are kinds an earlier version of the rule in this process made (the
    /// inventory in the cluster has the others): their children are cleaned up.
    pub fn spawn(
        client: Client,
        rule: Arc<CompiledRule>,
        opts: Options,
        retired: Vec<inventory::Made>,
    ) -> RuleTask {
        let (stop, stop_rx) = watch::channel(false);
        let synced = Arc::new(AtomicBool::new(false));
        let span = tracing::info_span!("rule", rule = %rule.name);
        let task = run(client, rule.clone(), opts, stop_rx, synced.clone(), retired);
        let handle = tokio::spawn(task.instrument(span));
        RuleTask {
            rule,
            synced,
            stop,
            handle,
        }
    }

    /// Asks the rule to stop (in-flight reconciles finish) and waits for it, at most
    /// [`STOP_GRACE`]: a reconcile hung on a stalled connection is then cancelled.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        if tokio::time::timeout(STOP_GRACE, &mut self.handle)
            .await
            .is_err()
        {
            tracing::warn!(rule = %self.rule.name, "in-flight reconciles did not finish in time; cancelled");
            self.handle.abort();
            let _ = self.handle.await;
        }
    }

    /// Stops the rule at once: in-flight reconciles are cancelled, not finished.
    pub async fn abort(self) {
        self.handle.abort();
        let _ = self.handle.await;
        self.synced.store(false, Ordering::SeqCst);
    }
}

/// Backoff of each watch after an error: 0.5 s doubling to 5 s, jittered. Bounded (a few
/// requests per watch per outage-minute), yet a watch is back within seconds of the API
/// server (kube's default climbs to 30 s, and compounds with the controller's own).
fn watch_backoff() -> kube::runtime::watcher::ExponentialBackoff {
    backon::ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(500))
        .with_max_delay(Duration::from_secs(5))
        .with_factor(2.0)
        .with_jitter()
        .without_max_times()
        .into()
}

/// The controller's pause on its merged trigger stream after an error: each watch
/// already backs off on its own, so this only keeps a burst of errors from spinning.
struct BriefPause;

impl Iterator for BriefPause {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        Some(Duration::from_millis(100))
    }
}

impl kube::runtime::utils::Backoff for BriefPause {
    fn reset(&mut self) {}
}

/// Sets `synced` once every one of a rule's watches has completed its first list. (The
/// stores' own `wait_until_ready` wakes only one waiter, and the controller is one.)
struct SyncTracker {
    listed: Vec<AtomicBool>,
    synced: Arc<AtomicBool>,
}

impl SyncTracker {
    fn new(watches: usize, synced: Arc<AtomicBool>) -> SyncTracker {
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

async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// Retries `f` until it finds the kind, or the rule is stopped (None).
async fn wait_for<F, Fut>(
    what: &str,
    retry: Duration,
    stop: &watch::Receiver<bool>,
    mut f: F,
) -> Option<Resolved>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<Resolved>, discovery::DiscoveryError>>,
{
    let mut told = false;
    loop {
        match f().await {
            Ok(Some(r)) => return Some(r),
            Ok(None) if !told => {
                tracing::warn!(kind = %what, "kind not served by the API server (CRD not installed?); waiting for it");
                told = true;
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(kind = %what, error = %e, "discovery failed; retrying"),
        }
        if *stop.borrow() {
            return None;
        }
        tokio::select! {
            _ = tokio::time::sleep(retry) => {}
            _ = stopped(stop.clone()) => return None,
        }
    }
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
struct PerResource {
    status_memo: Arc<Memo<(String, Box<str>)>>,
    failures: Arc<Mutex<HashMap<String, u32>>>,
    readers: Arc<Readers>,
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

/// Resolves the distinct kinds among `wanted` (apiVersion, kind); gives them and, for
/// each of `wanted`, its index among them. None when the rule is stopped meanwhile.
async fn distinct_kinds<'a>(
    client: &Client,
    opts: &Options,
    stop: &watch::Receiver<bool>,
    wanted: impl Iterator<Item = (&'a str, &'a str)>,
) -> Option<(Vec<Resolved>, Vec<usize>)> {
    let mut kinds: Vec<Resolved> = Vec::new();
    let mut index = Vec::new();
    for (api_version, kind) in wanted {
        let known = kinds
            .iter()
            .position(|k| k.resource.api_version == api_version && k.resource.kind == kind);
        let idx = match known {
            Some(i) => i,
            None => {
                let what = format!("{api_version} {kind}");
                let (group, version) = crate::rules::kinds::group_version(api_version);
                let r = wait_for(&what, opts.discovery_retry, stop, || {
                    discovery::child(client, group, version, kind)
                })
                .await?;
                kinds.push(r);
                kinds.len() - 1
            }
        };
        index.push(idx);
    }
    Some((kinds, index))
}

/// The cached watch of an existing kind (every object of it in scope: the rule reads
/// them by name or labels, which are the resource's to choose).
fn existing_watch(
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

/// The controller's settings: at most `concurrency` reconciles of the rule at once (and
/// never two of one resource).
fn controller_config(concurrency: u16) -> Config {
    Config::default().concurrency(concurrency)
}

async fn run(
    client: Client,
    rule: Arc<CompiledRule>,
    opts: Options,
    stop: watch::Receiver<bool>,
    synced: Arc<AtomicBool>,
    retired: Vec<inventory::Made>,
) {
    // The CRD is installed beside the rule, tried again while it fails; the rule runs
    // against the CRD the cluster serves meanwhile.
    let _install = opts.install_crds.then(|| {
        let metrics = opts.metrics.clone();
        let name = rule.name.clone();
        let failed = move |e: &super::crds::CrdError| {
            let category = match e {
                super::crds::CrdError::Breaking { .. } => "crd_refused",
                _ => "crd_error",
            };
            metrics.error(&name, category);
            tracing::error!(error = %e, "CRD not installed");
        };
        let install =
            super::crds::keep_installing(client.clone(), rule.clone(), opts.fence.clone(), failed);
        AbortOnDrop(tokio::spawn(install))
    });
    let w = &rule.watch;
    let what = format!("{}/{} {}", w.group, w.version, w.resource);
    let Some(parent) = wait_for(&what, opts.discovery_retry, &stop, || {
        discovery::watched(&client, w)
    })
    .await
    else {
        return;
    };
    if !parent.namespaced {
        tracing::error!(kind = %parent.resource.kind, "the watched kind is cluster-scoped; ruleop only runs rules for namespaced kinds; rule not started");
        stopped(stop).await;
        return;
    }
    // Kinds the rule no longer makes are cleaned up beside the controller, until done.
    let _cleanup = AbortOnDrop(tokio::spawn(
        inventory::retire(
            inventory::Inventory {
                client: client.clone(),
                namespace: opts.state_namespace.clone(),
                fence: opts.fence.clone(),
            },
            rule.clone(),
            parent.resource.kind.clone(),
            opts.namespace.clone(),
            retired,
            opts.metrics.clone(),
        )
        .in_current_span(),
    ));
    // The distinct child kinds and existing kinds, each resolved by discovery.
    let wanted = rule
        .children
        .iter()
        .map(|c| (c.api_version.as_str(), c.kind.as_str()));
    let Some((kinds, child_kind)) = distinct_kinds(&client, &opts, &stop, wanted).await else {
        return;
    };
    let wanted = rule
        .existing
        .iter()
        .map(|e| (e.api_version.as_str(), e.kind.as_str()));
    let Some((existing_kinds, existing_kind)) = distinct_kinds(&client, &opts, &stop, wanted).await
    else {
        return;
    };

    let memo = Arc::new(Memo::default());
    let kept = PerResource::default();
    let forget = kept.clone();
    let parent_relist = Relist::default();
    let parent_resource = parent.resource.clone();
    let parent_writer = Writer::<Cached>::new(parent.resource.clone());
    let parent_reader = parent_writer.as_reader();
    let parent_api = scoped(&client, &parent.resource, opts.namespace.as_deref());
    // Readiness: every watch (the parent's, one per child kind, one per existing kind)
    // has listed once.
    let watches = 1 + kinds.len() + existing_kinds.len();
    let sync = Arc::new(SyncTracker::new(watches, synced.clone()));
    let parent_sync = sync.clone();
    let parent_stream = watcher(
        parent_api,
        watcher::Config::default().timeout(opts.watch_timeout),
    )
    .backoff(watch_backoff())
    .modify(crate::apply::slim)
    .inspect_ok(move |ev| {
        parent_sync.observe(0, ev);
        forget_gone_parents(ev, &parent_resource, &forget, &parent_relist);
    })
    .map_ok(cached::compact(&parent.resource))
    .reflect(parent_writer)
    .applied_objects();

    let mut controller = Controller::for_stream_with(
        parent_stream,
        parent_reader.clone(),
        parent.resource.clone(),
    )
    .with_config(controller_config(opts.concurrency))
    .trigger_backoff(BriefPause)
    .graceful_shutdown_on(stopped(stop.clone()));

    let selector = format!("{RULE_LABEL}={}", rule.name);
    let mut child_kinds = Vec::new();
    for (i, k) in kinds.iter().enumerate() {
        let writer = Writer::<Cached>::new(k.resource.clone());
        let owners = Arc::new(OwnerIndex::default());
        let index = owners.clone();
        let child_sync = sync.clone();
        let store = writer.as_reader();
        let api = scoped(&client, &k.resource, opts.namespace.as_deref());
        let forget = memo.clone();
        let child_resource = k.resource.clone();
        let child_relist = Relist::default();
        // Only what reconcile, status and pruning read of each child stays in memory.
        let keep = Arc::new(crate::rules::keep::for_kind(
            &rule,
            &k.resource.api_version,
            &k.resource.kind,
        ));
        let cache_keep = keep.clone();
        let stream = watcher(
            api,
            watcher::Config::default()
                .labels(&selector)
                .timeout(opts.watch_timeout),
        )
        .backoff(watch_backoff())
        .modify(move |o| {
            crate::apply::slim_managed_fields(o);
            keep.apply(&mut o.data);
        })
        .inspect_ok(move |ev| {
            child_sync.observe(i + 1, ev);
            index.observe(ev);
            forget_gone_children(ev, &child_resource, &forget, &child_relist);
        })
        .map_ok(cached::compact(&k.resource))
        .reflect(writer)
        .touched_objects();
        controller = controller.owns_stream_with(stream, k.resource.clone());
        child_kinds.push(ChildKind {
            resolved: k.clone(),
            store,
            owners,
            keep: cache_keep,
        });
    }

    let mut existing = Vec::new();
    for (i, k) in existing_kinds.into_iter().enumerate() {
        let (stream, store) = existing_watch(&client, &opts, &k, sync.clone(), 1 + kinds.len() + i);
        let readers = kept.readers.clone();
        let parent_ar = parent.resource.clone();
        let mapper = move |c: Cached| {
            // The labels a lookup matches are in the text only.
            let Some(o) = c.head() else {
                return Vec::new();
            };
            let ns = o.namespace().unwrap_or_default();
            readers
                .readers_of(i, &o)
                .into_iter()
                .map(|name| ObjectRef::new_with(&name, parent_ar.clone()).within(&ns))
                .collect::<Vec<_>>()
        };
        controller = controller.watches_stream_with(stream, mapper, k.resource.clone());
        existing.push(ExistingKind { resolved: k, store });
    }

    let ctx = Arc::new(Ctx {
        client: client.clone(),
        rule: rule.clone(),
        parent,
        kinds: child_kinds,
        child_kind,
        memo,
        status_memo: kept.status_memo,
        failures: kept.failures,
        resync: opts.resync,
        metrics: opts.metrics.clone(),
        events: opts.events,
        events_out: EventQueue::start(
            super::recorder::Publisher::new(client.clone(), opts.reporter.clone()),
            opts.metrics.clone(),
            rule.name.clone(),
            opts.fence.clone(),
            opts.event_pace.clone(),
        ),
        fence: opts.fence.clone(),
        synced: synced.clone(),
        started: std::time::Instant::now(),
        status_schema: Default::default(),
        existing,
        existing_kind,
        readers: kept.readers,
        slow: super::slow::Slow::new(usize::from(opts.concurrency)),
    });

    tracing::info!(children = rule.children.len(), fingerprint = %rule.fingerprint, "rule started");
    controller
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            // Reconcile failures are logged by error_policy; the rest are the queue's own.
            if let Err(e) = res
                && !matches!(e, kube::runtime::controller::Error::ReconcilerFailed(..))
            {
                tracing::debug!(error = %e, "controller event");
            }
        })
        .await;
    synced.store(false, Ordering::SeqCst);
    tracing::info!("rule stopped");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apply::Written;
    use std::time::{Duration, Instant};

    fn cm(name: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "n"}
        }))
        .unwrap()
    }

    #[tokio::test]
    async fn no_more_reconciles_run_at_once_than_the_bound() {
        use kube::runtime::controller::Action;
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let mut writer = Writer::<DynamicObject>::new(ar.clone());
        let objects: Vec<DynamicObject> = (0..24).map(|i| cm(&format!("c{i}"))).collect();
        writer.apply_watcher_event(&watcher::Event::Init);
        for o in &objects {
            writer.apply_watcher_event(&watcher::Event::InitApply(o.clone()));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        // A trigger stream that stays open, as a watch does (the controller ends with it).
        let trigger = futures::stream::iter(objects.into_iter().map(Ok::<_, watcher::Error>))
            .chain(futures::stream::pending());
        // (running now, most at once)
        let counts = Arc::new(Mutex::new((0usize, 0usize)));
        let reconcile = |_: Arc<DynamicObject>, c: Arc<Mutex<(usize, usize)>>| async move {
            {
                let mut c = c.lock().unwrap();
                c.0 += 1;
                c.1 = c.1.max(c.0);
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
            c.lock().unwrap().0 -= 1;
            Ok::<_, std::convert::Infallible>(Action::await_change())
        };
        let done = Controller::for_stream_with(trigger, writer.as_reader(), ar)
            .with_config(controller_config(5))
            .run(
                reconcile,
                |_, _: &std::convert::Infallible, _| Action::await_change(),
                counts.clone(),
            )
            .take(24)
            .count()
            .await;
        assert_eq!(done, 24);
        assert_eq!(
            counts.lock().unwrap().1,
            5,
            "at most 5 at once, and the bound was reached"
        );
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
