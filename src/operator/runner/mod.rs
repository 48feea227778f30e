//! Runs one rule: checks who it runs as and whether ruleop may define its kind for it,
//! starts its early companions, waits until its kind is served, decides what it runs
//! ([`plan`]), builds one kube-runtime `Controller` for it ([`build`]), starts the
//! companions beside it ([`companions`]) and runs the controller until told to stop.

mod build;
mod census;
mod companions;
mod define;
mod discover;
pub mod identity;
mod loaded;
pub mod parts;
pub use parts::{Options, RuleInfo};
mod plan;
mod queue;
mod rollout;
mod takeover;
use crate::cache::cached::Cached;
use crate::cache::discovery;
use crate::reconcile::{Router, error_policy, reconcile};
use crate::rules::CompiledRule;
use discover::{stopped, wait_for};
use futures::StreamExt;
use kube::Client;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::watch;
use tracing::Instrument;

/// How long a stopping rule waits for its in-flight reconciles.
pub const STOP_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

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
    let early = companions::Early {
        rule: &rule,
        opts: &opts,
        own: &own,
        client: &client,
        info: &info,
    };
    let _early = companions::start_early(&early);
    let Some(parent) = served_parent(&rule, &opts, &client, &info, &stop).await else {
        return;
    };
    let inputs = plan::Inputs {
        rule: &rule,
        opts: &opts,
        own: &own,
        client: &client,
        parent: &parent,
        fingerprints: &loaded,
        info: &info,
        stop: &stop,
    };
    let Some(plan) = plan::plan(&inputs).await else {
        return;
    };
    let parts = build::Parts {
        rule: &rule,
        opts: &opts,
        process: &process,
        client: &client,
        parent: &parent,
        info: &info,
        synced: &synced,
        stop: &stop,
    };
    let Some(built) = build::build(&parts, &plan) else {
        return;
    };
    let beside = beside(early, &parent, &plan, &built, retired, (&synced, &stop));
    let _beside = companions::start_beside(&beside);
    // The rule's info gauges, removed however the rule ends (stopped, or aborted).
    let revision = plan.history.as_ref().map(|h| h.current);
    let _gauges = parts::Gauges::set(&process.metrics, &rule, revision);
    tracing::info!(children = rule.children.len(), fingerprint = %rule.fingerprint, revisions = plan.loaded.len(), "rule started");
    drive(built.controller, built.router, built.queue).await;
    synced.store(false, Ordering::SeqCst);
    tracing::info!("rule stopped");
}

/// What the companions beside the running rule start from.
fn beside<'a>(
    early: companions::Early<'a>,
    parent: &'a crate::cache::discovery::Resolved,
    plan: &plan::Plan,
    built: &'a build::Built,
    retired: Vec<crate::lifecycle::Made>,
    (synced, stop): (&'a Arc<AtomicBool>, &'a watch::Receiver<bool>),
) -> companions::Beside<'a> {
    companions::Beside {
        early,
        parent_kind: &parent.resource.kind,
        in_force: plan.in_force_kinds(),
        // (A version that may never prune retires nothing this process saw it drop.)
        retired: match plan.allowed.prune {
            crate::lifecycle::Retire::Never => Vec::new(),
            _ => retired,
        },
        retire: plan.allowed.retire,
        unwatched: &built.unwatched,
        prune: plan.prune,
        reconcile_all: &built.reconcile_all,
        status_schema: &built.status_schema,
        choose: built.choose.as_ref(),
        resources: &built.resources,
        synced,
        stop,
    }
}

/// The watched kind once discovery serves it; None when stopped first, or (said, and
/// waiting to be stopped) when the kind is cluster-scoped.
async fn served_parent(
    rule: &CompiledRule,
    opts: &Options,
    client: &Client,
    info: &RuleInfo,
    stop: &watch::Receiver<bool>,
) -> Option<crate::cache::discovery::Resolved> {
    let w = &rule.watch;
    let what = format!("{}/{} {}", w.group, w.version, w.resource);
    let parent = wait_for(&what, opts.discovery_retry, stop, || {
        discovery::watched(client, w)
    })
    .await?;
    let _ = info.kind.set(parent.resource.kind.clone());
    if !parent.namespaced {
        tracing::error!(kind = %parent.resource.kind, "the watched kind is cluster-scoped; ruleop only runs rules for namespaced kinds; rule not started");
        stopped(stop.clone()).await;
        return None;
    }
    Some(parent)
}

/// Runs the controller until it stops (told to, or its watches end).
async fn drive(
    controller: kube::runtime::Controller<Cached>,
    router: Router,
    queue: Arc<queue::Queue>,
) {
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
}
