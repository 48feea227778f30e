//! Runs one rule: waits until its kinds are served, then one kube-runtime `Controller`
//! over `Api<DynamicObject>` for the watched kind, owning each child kind through a
//! label-selected, cached watch ([`crate::cache::watches`]). Stops gracefully when told to.

use super::inventory;
use discover::{distinct_kinds, stopped, wait_for};

mod census;
mod crd_follow;
mod define;
mod discover;
pub mod identity;
mod loaded;
pub mod parts;
pub use parts::{Options, RuleInfo};
mod queue;
mod rollout;
mod takeover;
use crate::cache::cached::Cached;
use crate::cache::discovery;
use crate::cache::watches::{SyncTracker, child_watch, existing_watch, parent_watch};
use crate::events::EventQueue;
use crate::lifecycle::Retire;
use crate::reconcile::{
    Ctx, KindTable, Kinds, Listed, PruneFrom, Records, Router, error_policy, reconcile,
};
use crate::rules::CompiledRule;
use futures::StreamExt;
use kube::runtime::controller::{Config, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::store::Writer;
use kube::{Client, ResourceExt};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::watch;
use tracing::Instrument;

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
    pub info: Arc<RuleInfo>,
    stop: watch::Sender<bool>,
    handle: tokio::task::JoinHandle<()>,
}

impl RuleTask {
    /// Starts `rule` in its own task.
    /// `retired` are kinds an earlier version of the rule in this process made (the
    /// inventory in the cluster has the others): their children are cleaned up.
    /// `loaded` are the fingerprints this process has loaded for the rule, in order (see
    /// [`super::versions`]).
    pub fn spawn(
        rule: Arc<CompiledRule>,
        opts: Options,
        retired: Vec<crate::lifecycle::Made>,
        loaded: Vec<String>,
    ) -> RuleTask {
        let (stop, stop_rx) = watch::channel(false);
        let synced = Arc::new(AtomicBool::new(false));
        let info = Arc::new(RuleInfo::default());
        // (Until the run decides whether a rollout runs, the Rule's status keeps where one
        // stood: the status writer leaves it alone.)
        let identity = rule
            .identity
            .as_ref()
            .map_or_else(|| "ruleop".to_string(), |i| i.user());
        let span = tracing::info_span!("rule", rule = %rule.name, identity = %identity);
        let state = State {
            synced: synced.clone(),
            info: info.clone(),
        };
        let task = run(rule.clone(), opts, stop_rx, state, retired, loaded);
        let handle = tokio::spawn(task.instrument(span));
        RuleTask {
            rule,
            synced,
            info,
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

/// The revisions of a Rule object's rule, its own recorded, and those whose rollout was
/// rolled back (read from the Rule itself: what a rollout decided, before anything is
/// reconciled); retried until both are known, or the rule is stopped (None).
async fn recorded(
    client: &Client,
    opts: &Options,
    rule: &CompiledRule,
    pinned: &std::collections::BTreeSet<i64>,
    stop: &watch::Receiver<bool>,
) -> Option<(super::revisions::History, std::collections::BTreeSet<i64>)> {
    // A rollout's revisions are kept whatever the history limit: its previous one, and its
    // new one (the previous one of the rollout this edit starts); so are those pinned.
    let keep: Vec<i64> = saved_rollout(rule, opts)
        .map(|r| [r["from"].as_i64(), r["revision"].as_i64()])
        .into_iter()
        .flatten()
        .flatten()
        .chain(pinned.iter().copied())
        .collect();
    loop {
        let read = async {
            let h = super::revisions::ensure(client, &opts.state_namespace, rule, &keep).await?;
            let rolled_back = super::revisions::rolled_back(client, &rule.name).await?;
            Ok::<_, kube::Error>((h, rolled_back))
        };
        match read.await {
            Ok(got) => return Some(got),
            Err(e) => {
                tracing::warn!(error = %e, namespace = %opts.state_namespace, "the Rule's revisions cannot be read or recorded (ControllerRevisions in the operator's namespace, and the Rule's rolled-back ones); retrying")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            _ = stopped(stop.clone()) => return None,
        }
    }
}

/// Where the Rule's status says its rollout stands: as the Rule watch has it now (its
/// status moves on while its spec, and so the compiled rule, stays), else as it was when
/// the rule was compiled.
fn saved_rollout(rule: &CompiledRule, opts: &Options) -> Option<serde_json::Value> {
    let object = rule.object.as_ref()?;
    let key = ObjectRef::new_with(&rule.name, super::objects::resource());
    let live = opts.rules.as_ref().and_then(|s| s.get(&key));
    match live.filter(|o| o.metadata.uid.as_deref() == Some(object.uid.as_str())) {
        Some(o) => o.data.pointer("/status/rollout").cloned(),
        None => object.rollout.clone(),
    }
}

/// The kinds of every revision in force: those loaded, and a rollout's previous one that
/// no longer compiles (`held`: its resources wait on it, and keep its kinds' objects).
fn in_force_kinds(
    loaded: &[&CompiledRule],
    history: Option<&super::revisions::History>,
    held: Option<i64>,
) -> std::collections::BTreeSet<crate::lifecycle::Made> {
    let held = held
        .and_then(|n| history?.kept.get(&n))
        .map(|rev| &rev.spec);
    crate::lifecycle::kinds::kinds_in_force(loaded.iter().copied(), held)
}

/// An (apiVersion, kind).
type KindName = (String, String);

/// The (apiVersion, kind) of every child, then of every existing object, of the
/// revisions, in order.
fn wanted(loaded: &[loaded::Loaded]) -> (Vec<KindName>, Vec<KindName>) {
    let children = loaded
        .iter()
        .flat_map(|l| l.rule.children.iter())
        .map(|c| (c.api_version.clone(), c.kind.clone()))
        .collect();
    let existing = loaded
        .iter()
        .flat_map(|l| l.rule.existing.iter())
        .map(|e| (e.api_version.clone(), e.kind.clone()))
        .collect();
    (children, existing)
}

fn now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

/// A channel's receiving end as a stream (each `()` asks to reconcile every resource).
fn tokio_stream_of(
    mut rx: tokio::sync::mpsc::Receiver<()>,
) -> impl futures::Stream<Item = ()> + Send + 'static {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// The controller's settings: at most `concurrency` reconciles of the rule at once (and
/// never two of one resource).
fn controller_config(concurrency: u16) -> Config {
    Config::default().concurrency(concurrency)
}

/// What a running rule keeps up to date for its task.
struct State {
    synced: Arc<AtomicBool>,
    info: Arc<RuleInfo>,
}

async fn run(
    rule: Arc<CompiledRule>,
    opts: Options,
    stop: watch::Receiver<bool>,
    state: State,
    retired: Vec<crate::lifecycle::Made>,
    loaded: Vec<String>,
) {
    let State { synced, info } = state;
    // ruleop's own requests (the CRD, the inventory, revisions, the Rule's rollout) and
    // the rule's (its watches, children, status, Events: as its ServiceAccount if it
    // names one).
    let own = opts.process.client.clone();
    let Some((process, client)) = identity::acting(&rule, &opts, &stop).await else {
        return;
    };
    // A kind ruleop defines for the rule (its CRD, its conversions): only once its account
    // may update that CRD.
    if !define::may_define(&rule, &opts, &info, &stop).await {
        return;
    }
    opts.served.allow_conversion(&rule);
    // The CRD is installed beside the rule, tried again while it fails; the rule runs
    // against the CRD the cluster serves meanwhile.
    let _install = opts.install_crds.then(|| -> Option<AbortOnDrop> {
        let metrics = opts.process.metrics.clone();
        let name = rule.name.clone();
        let failed = move |e: &super::crds::CrdError| {
            let category = match e {
                super::crds::CrdError::Breaking { .. } => "crd_refused",
                _ => "crd_error",
            };
            metrics.error(&name, category);
            tracing::error!(error = %e, "CRD not installed");
        };
        let install = super::crds::keep_installing(
            own.clone(),
            client.clone(),
            rule.crd.clone()?,
            opts.conversion.clone(),
            opts.process.fence.clone(),
            failed,
        );
        Some(AbortOnDrop(tokio::spawn(install)))
    });
    // A kind in several versions whose CRD is applied by others (GitOps, from `ruleop
    // crd`): ruleop's CA kept in its conversion webhook.
    let _ca = (!opts.install_crds && rule.conversion.is_some())
        .then(|| {
            let name = rule.crd_name()?.to_string();
            let keep = super::ca_inject::keep(
                own.clone(),
                name,
                opts.conversion.clone()?,
                opts.process.fence.clone(),
            );
            Some(AbortOnDrop(tokio::spawn(keep)))
        })
        .flatten();
    // A kind in several versions: its objects move to a new storage version.
    // (Whoever applies the CRD: ruleop, or GitOps from `ruleop crd` with ruleop serving
    // its conversions.)
    let migrates = opts.install_crds || opts.conversion.is_some();
    let _migrate = (migrates && rule.conversion.is_some()).then(|| {
        let migrator = super::migrate::Migrator {
            client: own.clone(),
            fence: opts.process.fence.clone(),
            by: opts.storage_migration,
            storage: info.storage.clone(),
        };
        AbortOnDrop(tokio::spawn(super::migrate::keep_migrating(
            migrator,
            rule.clone(),
        )))
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
    let _ = info.kind.set(parent.resource.kind.clone());
    if !parent.namespaced {
        tracing::error!(kind = %parent.resource.kind, "the watched kind is cluster-scoped; ruleop only runs rules for namespaced kinds; rule not started");
        stopped(stop).await;
        return;
    }
    let inventory = || inventory::Inventory {
        client: own.clone(),
        namespace: opts.state_namespace.clone(),
        fence: opts.process.fence.clone(),
    };
    // An older version than one the cluster has run does not run at all (it would undo
    // the newer one's work, and retire the kinds it added).
    let scope = opts.scope.namespace.as_deref();
    let metrics = &opts.process.metrics;
    let state = inventory();
    // A Rule's generation and a file's version alike are claimed against the versions
    // the cluster has run (lifecycle::newer): an older one waits.
    let versions = super::versions::wait_until_newest(
        &state,
        &rule,
        scope,
        &loaded,
        opts.settle,
        metrics,
        &stop,
    );
    let Some(allowed) = versions.await else {
        return;
    };
    // A kind another rule served: its orphans are let go before this rule reconciles.
    let takeover = takeover::Takeover {
        inventory: inventory(),
        rule: &rule,
        namespace: scope,
    };
    if takeover::take_over(takeover, &stop).await.is_none() {
        return;
    }
    let prune_from = match allowed.prune {
        Retire::Now => PruneFrom::Now,
        Retire::After(wait) => std::time::Instant::now()
            .checked_add(wait)
            .map_or(PruneFrom::Never, PruneFrom::At),
        Retire::Never => PruneFrom::Never,
    };
    // The revisions the resources pin: kept whatever the history limit, and in force.
    let pins = loaded::pinned(&client, &parent, scope, &rule, &stop);
    let Some(pinned) = pins.await else {
        return;
    };
    // A Rule object's spec is a revision: found, or recorded as the next one.
    let (history, rolled_back) = match rule.object {
        Some(_) => match recorded(&own, &opts, &rule, &pinned, &stop).await {
            Some((h, rolled_back)) => (Some(h), rolled_back),
            None => return,
        },
        None => (None, std::collections::BTreeSet::new()),
    };
    let revision = history.as_ref().map(|h| h.current);
    if let Some(r) = revision {
        let _ = info.revision.set(r);
    }
    // The revisions that render resources (the newest; in a rollout, the previous one),
    // and where the rollout stands.
    let progress = history.as_ref().and_then(|h| {
        let saved = crate::rollout::Progress::from_status(saved_rollout(&rule, &opts).as_ref());
        let previous = h.previous(&rolled_back);
        let p = crate::rollout::start(saved, h.current, previous, rule.rollout.as_ref(), now());
        // The current revision was rolled back once (its status since lost): it stays so.
        p.map(|p| match rolled_back.contains(&h.current) {
            true => crate::rollout::rolled_back(p),
            false => p,
        })
    });
    if progress.is_none() {
        info.set_rollout(None);
    }
    let loaded = loaded::revisions(
        &rule,
        history.as_ref(),
        progress.as_ref(),
        &opts.policy,
        &pinned,
    );
    // A rollout whose previous revision no longer loads pauses: the resources not reached
    // wait (they never take the newest in its place).
    let (progress, held) = rollout::hold_missing_from(progress, &loaded, history.as_ref(), now());
    // The distinct child kinds and existing kinds of them all, each resolved by discovery.
    let (wanted_children, wanted_existing) = wanted(&loaded);
    let wanted = wanted_children
        .iter()
        .map(|(a, k)| (a.as_str(), k.as_str()));
    let Some((kinds, child_kind)) = distinct_kinds(&client, &opts, &stop, wanted).await else {
        return;
    };
    let wanted = wanted_existing
        .iter()
        .map(|(a, k)| (a.as_str(), k.as_str()));
    let Some((existing_kinds, existing_kind)) = distinct_kinds(&client, &opts, &stop, wanted).await
    else {
        return;
    };
    // A rule with a ServiceAccount starts only once the account may do all it needs.
    let revisions: Vec<&CompiledRule> = loaded.iter().map(|l| &*l.rule).collect();
    let kinds_used = identity::ResolvedKinds {
        parent: &parent,
        children: &kinds,
        existing: &existing_kinds,
    };
    if !identity::preflight(&revisions, &client, &opts, kinds_used, &info, &stop).await {
        return;
    }
    // Kinds no revision in force makes are cleaned up beside the controller, until done.
    let unwatched = Arc::new(crate::reconcile::Unwatched::default());
    let _cleanup = AbortOnDrop(tokio::spawn(
        inventory::retire(inventory::Retirement {
            inventory: inventory(),
            children: client.clone(),
            rule: rule.clone(),
            parent_kind: parent.resource.kind.clone(),
            namespace: opts.scope.namespace.clone(),
            also: if allowed.prune == Retire::Never {
                Vec::new()
            } else {
                retired
            },
            policy: allowed.retire,
            in_force: in_force_kinds(&revisions, history.as_ref(), held),
            unwatched: unwatched.clone(),
            metrics: opts.process.metrics.clone(),
        })
        .in_current_span(),
    ));

    let records = Arc::new(Records::new(usize::from(opts.concurrency)));
    let _ = info.records.set(records.clone());
    // Readiness: every watch (the parent's, one per child kind, one per existing kind)
    // has listed once.
    let watches = 1 + kinds.len() + existing_kinds.len();
    let sync = Arc::new(SyncTracker::new(watches, synced.clone()));
    let parent_writer = Writer::<Cached>::new(parent.resource.clone());
    let parent_reader = parent_writer.as_reader();
    let queue = Arc::new(queue::Queue::default());
    let _counted = process
        .metrics
        .census
        .count(&rule.name, census::of(parent_reader.clone(), queue.clone()));
    let follow = records.clone();
    let marks = queue.clone();
    let parent_stream = parent_watch(
        &client,
        &opts.scope,
        &parent,
        parent_writer,
        &sync,
        Box::new(move |ev| follow.follow_resource(ev)),
    )
    .inspect(move |ev| {
        if let Ok(o) = ev {
            marks.wanted(&o.namespace().unwrap_or_default(), &o.name_any());
        }
    });
    let (reconcile_all, all) = tokio::sync::mpsc::channel::<()>(1);
    // A version that may prune only after a wait: every resource again when it may.
    let _prune_opens = match prune_from {
        PruneFrom::At(t) => {
            let again = reconcile_all.clone();
            Some(AbortOnDrop(tokio::spawn(async move {
                tokio::time::sleep_until(t.into()).await;
                tracing::info!("this version has been the newest for the whole wait: it now deletes what its render no longer makes");
                let _ = again.send(()).await;
            }.in_current_span())))
        }
        _ => None,
    };

    let mut controller = Controller::for_stream_with(
        parent_stream,
        parent_reader.clone(),
        parent.resource.clone(),
    )
    .with_config(controller_config(opts.concurrency))
    .trigger_backoff(BriefPause)
    .graceful_shutdown_on(stopped(stop.clone()))
    .reconcile_all_on({
        let (marks, every) = (queue.clone(), parent_reader.clone());
        tokio_stream_of(all).inspect(move |_| marks.all_wanted(&every))
    });

    let rules: Vec<&CompiledRule> = loaded.iter().map(|l| &*l.rule).collect();
    let mut child_kinds = Vec::new();
    for (i, k) in kinds.iter().enumerate() {
        let (follow, ar) = (records.clone(), k.resource.clone());
        let follow = Box::new(move |ev: &_| follow.follow_child(&ar, ev));
        let (stream, child) =
            child_watch(&client, &opts.scope, &rules, k, sync.clone(), i + 1, follow);
        let (marks, owner) = (queue.clone(), parent.resource.clone());
        let stream = stream.inspect(move |ev| {
            if let Ok(c) = ev {
                marks.child_event(c, &owner.api_version, &owner.kind);
            }
        });
        controller = controller.owns_stream_with(stream, k.resource.clone());
        child_kinds.push(child);
    }

    let mut existing = Vec::new();
    for (i, k) in existing_kinds.into_iter().enumerate() {
        let watch_index = 1 + kinds.len() + i;
        let (stream, kind) = existing_watch(&client, &opts.scope, &k, sync.clone(), watch_index);
        let readers = records.clone();
        let parent_kind = parent.resource.clone();
        let marks = queue.clone();
        let mapper = move |c: Cached| {
            // The labels a lookup matches are in the text only.
            let Some(o) = c.head() else {
                return Vec::new();
            };
            let ns = o.namespace().unwrap_or_default();
            let names = readers.readers_of(i, &o);
            names.iter().for_each(|name| marks.wanted(&ns, name));
            names
                .into_iter()
                .map(|name| ObjectRef::new_with(&name, parent_kind.clone()).within(&ns))
                .collect::<Vec<_>>()
        };
        controller = controller.watches_stream_with(stream, mapper, k.resource.clone());
        existing.push(kind);
    }

    let (Some(children), Some(existing)) = (
        KindTable::new(child_kinds, Vec::new()),
        KindTable::new(existing, Vec::new()),
    ) else {
        return;
    };
    let events = Arc::new(EventQueue::start(
        crate::events::recorder::Publisher::new(client.clone(), opts.reporter.clone()),
        process.metrics.clone(),
        rule.name.clone(),
        process.fence.clone(),
        opts.event_pace.clone(),
        opts.event_quiet.clone(),
    ));
    let status_schema = Arc::new(crate::status::StatusSchema::default());
    let _crd_follow = AbortOnDrop(tokio::spawn(
        crd_follow::follow(
            own.clone(),
            format!("{}.{}", rule.watch.resource, rule.watch.group),
            status_schema.clone(),
            reconcile_all.clone(),
        )
        .in_current_span(),
    ));
    // One context per revision: its rule, and its children's places among the kinds.
    let mut contexts = Vec::new();
    let (mut c_at, mut e_at) = (0, 0);
    for l in &loaded {
        let (nc, ne) = (l.rule.children.len(), l.rule.existing.len());
        let tables = (
            children.with_children(child_kind[c_at..c_at + nc].to_vec()),
            existing.with_children(existing_kind[e_at..e_at + ne].to_vec()),
        );
        (c_at, e_at) = (c_at + nc, e_at + ne);
        let (Some(children), Some(existing)) = tables else {
            tracing::error!(
                "a child's kind is missing from the rule's kinds (a bug in ruleop); rule not started"
            );
            return;
        };
        contexts.push(Arc::new(Ctx {
            process: process.clone(),
            rule: l.rule.clone(),
            kinds: Kinds {
                parent: parent.clone(),
                children,
                existing,
                listed: Listed::new(sync.clone(), kinds.len()),
                prune: prune_from,
                unwatched: unwatched.clone(),
            },
            records: records.clone(),
            events: events.clone(),
            status_schema: status_schema.clone(),
            revision: l.number,
        }));
    }
    let newest = contexts.remove(0);
    let choose = history.as_ref().map(|h| {
        Arc::new(rollout::RolloutChoose {
            newest: h.current,
            pins: rule.pins == crate::rules::spec::Pins::Allowed,
            progress: std::sync::RwLock::new(progress.clone()),
            loaded: contexts.iter().filter_map(|c| c.revision).collect(),
        })
    });
    let _driver = match (&choose, &rule.rollout, &progress) {
        (Some(choose), Some(r), Some(_)) => {
            let driver = rollout::Driver {
                choose: choose.clone(),
                rollout: r.clone(),
                rule: rule.name.clone(),
                uid: rule
                    .object
                    .as_ref()
                    .map(|o| o.uid.clone())
                    .unwrap_or_default(),
                resources: parent_reader.clone(),
                synced: synced.clone(),
                rules: opts.rules.clone(),
                info: info.clone(),
                reconcile_all,
                client: own.clone(),
                reporter: opts.reporter.clone(),
                metrics: process.metrics.clone(),
            };
            Some(AbortOnDrop(tokio::spawn(
                rollout::drive(driver, stop.clone()).in_current_span(),
            )))
        }
        _ => None,
    };
    let router = Router {
        held,
        newest,
        others: contexts
            .into_iter()
            .filter_map(|c| Some((c.revision?, c)))
            .collect(),
        choose: choose.map(|c| c as Arc<dyn crate::reconcile::Choose>),
    };

    // The rule's info gauges, removed however the rule ends (stopped, or aborted).
    let _gauges = parts::Gauges::set(&process.metrics, &rule, revision);
    tracing::info!(children = rule.children.len(), fingerprint = %rule.fingerprint, revisions = loaded.len(), "rule started");
    let reconcile = move |cr: Arc<Cached>, router: Arc<Router>| {
        queue.started(&cr);
        reconcile(cr, router)
    };
    controller
        .run(reconcile, error_policy, Arc::new(router))
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
    use crate::cache::watches::tests::cm;
    use kube::api::DynamicObject;
    use kube::discovery::ApiResource;
    use kube::runtime::watcher;
    use std::sync::Mutex;
    use std::time::Duration;

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
}
