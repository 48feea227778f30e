//! A Rule's rollout while its rule runs: which revision each resource gets (asked by the
//! reconcile's router), and the loop that moves the rollout on (every two seconds: the
//! resources read from the cache, `ruleop.dev/rollout` read from the Rule), publishing
//! where it stands for the Rule's status, with an Event on the Rule at each step, pause,
//! rollback and end.

use super::parts::RuleInfo;
use crate::cache::cached::Cached;
use crate::metrics::{Metrics, RuleLabels};
use crate::reconcile::Choose;
use crate::rollout::{self, ACTION, PIN, Phase, Progress, Resource};
use crate::rules::compile::Rollout;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// Which revision a resource gets while a rollout runs (or pins one).
pub(super) struct RolloutChoose {
    pub newest: i64,
    /// Whether a resource's pin is honoured (the Rule's `pins`).
    pub pins: bool,
    pub progress: RwLock<Option<Progress>>,
    /// The revisions loaded besides the newest: a resource stays on the one it is on
    /// while a rollout that replaced another has not reached it, if it is loaded.
    pub loaded: std::collections::BTreeSet<i64>,
}

impl Choose for RolloutChoose {
    fn revision(&self, cr: &DynamicObject) -> Option<i64> {
        let meta = &cr.metadata;
        let pinned = meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(PIN))
            .and_then(|p| p.trim().parse().ok())
            .filter(|_| self.pins);
        let progress = self.progress.read().ok()?;
        let rolling = progress
            .as_ref()
            .is_some_and(|p| p.phase != Phase::Complete);
        if pinned.is_none() && !rolling {
            return None;
        }
        let r = Resource {
            key: String::new(),
            rank: rollout::rank(meta.uid.as_deref().unwrap_or_default()),
            created: meta.creation_timestamp.as_ref().map(|t| t.0.to_string()),
            revision: cr.data["status"]["ruleRevision"]
                .as_i64()
                .filter(|n| self.loaded.contains(n)),
            pinned,
            ready: false,
            failed: None,
        };
        Some(rollout::choose(progress.as_ref(), self.newest, &r))
    }
}

/// The rollout, paused when its previous revision (`from`) is kept but not among the
/// `loaded` ones (it no longer compiles: a kind's schema changed), and that revision: the resources that
/// would take it wait rather than take the newest in its place.
pub(super) fn hold_missing_from(
    progress: Option<Progress>,
    loaded: &[super::loaded::Loaded],
    history: Option<&crate::operator::revisions::History>,
    now: Timestamp,
) -> (Option<Progress>, Option<i64>) {
    let Some(mut p) = progress else {
        return (None, None);
    };
    // (A previous revision no longer kept was applied again: renumbered as the newest, it
    // is the newest's spec.)
    let kept = history.is_some_and(|h| h.kept.contains_key(&p.from));
    let missing = p.phase != Phase::Complete
        && p.from != p.revision
        && kept
        && !loaded.iter().any(|l| l.number == Some(p.from));
    if !missing {
        return (Some(p), None);
    }
    if p.phase == Phase::Progressing {
        p.phase = Phase::Paused;
        p.step_started = now.to_string();
    }
    p.message = format!(
        "paused: revision {} (which the resources not reached keep) no longer loads (see ruleop's log: a kind's schema changed under it?); those resources wait, unreconciled, until it loads again; an abort would put every resource on it: pin a resource to a kept revision that loads to move it",
        p.from
    );
    tracing::warn!(
        revision = p.from,
        "a rollout's previous revision no longer loads: the rollout is paused, and the resources on it wait"
    );
    let from = p.from;
    (Some(p), Some(from))
}

/// What the rollout loop works with.
pub(super) struct Driver {
    pub choose: Arc<RolloutChoose>,
    pub rollout: Rollout,
    pub rule: String,
    pub uid: String,
    /// The watched resources' cache.
    pub resources: Store<Cached>,
    /// Whether every watch of the rule has completed its first list: until then the
    /// cache may hold some resources or none, and a step would be judged on too few (an
    /// empty step passes at once, and the canaries would be skipped).
    pub synced: Arc<std::sync::atomic::AtomicBool>,
    /// The Rule objects (for `ruleop.dev/rollout`).
    pub rules: Option<Store<DynamicObject>>,
    pub info: Arc<RuleInfo>,
    /// Asks the controller to reconcile every resource (their revision may have changed).
    pub reconcile_all: mpsc::Sender<()>,
    pub client: kube::Client,
    pub reporter: Reporter,
    pub metrics: Arc<Metrics>,
}

impl Driver {
    fn current(&self) -> Option<Progress> {
        self.choose.progress.read().ok().and_then(|p| p.clone())
    }

    /// Puts `next` in force: first in the Rule's status (so a replica that takes over goes
    /// on from there, never from a step before), then the router's, the metrics; every
    /// resource reconciled again when which revision they get changed. Nothing changes
    /// when the status cannot be written (tried again on the next look): false then.
    async fn set(&self, prev: &Progress, next: Progress) -> bool {
        let moved =
            (prev.phase, prev.step, prev.threshold) != (next.phase, next.step, next.threshold);
        // A rollback goes on the Rule's metadata first: read back before anything is
        // reconciled, whatever becomes of the Rule's status.
        if prev.phase != next.phase && !self.mark(&next).await {
            return false;
        }
        if !self.record(&next).await {
            return false;
        }
        if let Ok(mut p) = self.choose.progress.write() {
            *p = Some(next.clone());
        }
        self.info.set_rollout(serde_json::to_value(&next).ok());
        let labels = RuleLabels {
            rule: self.rule.clone(),
        };
        let step = if next.phase == Phase::Complete {
            0
        } else {
            next.step as i64 + 1
        };
        self.metrics.rollout_step.get_or_create(&labels).set(step);
        self.metrics
            .rollout_updated
            .get_or_create(&labels)
            .set(next.updated as i64);
        self.metrics
            .rollout_paused
            .get_or_create(&labels)
            .set(i64::from(next.phase == Phase::Paused));
        if moved {
            let _ = self.reconcile_all.try_send(());
            self.event(prev, &next).await;
        }
        true
    }

    /// Writes `p` as the Rule's `status.rollout` (the driver is its one writer); false when
    /// it could not.
    async fn record(&self, p: &Progress) -> bool {
        let api: Api<DynamicObject> =
            Api::all_with(self.client.clone(), &super::super::objects::resource());
        let patch = serde_json::json!({"status": {"rollout": p}});
        if let Err(e) = api
            .patch_status(&self.rule, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(error = %e, "the rollout's progress could not be recorded on the Rule; trying again");
            return false;
        }
        true
    }

    /// Marks a rolled-back revision on the Rule (read back before anything is reconciled
    /// after a restart); false when it could not (tried again on the next look).
    async fn mark(&self, p: &Progress) -> bool {
        if p.phase != Phase::RolledBack {
            return true;
        }
        let marked =
            crate::operator::revisions::mark_rolled_back(&self.client, &self.rule, p.revision);
        match marked.await {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, revision = p.revision, "the rolled-back revision could not be marked on the Rule; trying again");
                false
            }
        }
    }

    /// What the Rule's status says of the rollout now.
    fn recorded(&self) -> Option<Progress> {
        let store = self.rules.as_ref()?;
        let key = ObjectRef::new_with(&self.rule, super::super::objects::resource());
        Progress::from_status(store.get(&key)?.data.pointer("/status/rollout"))
    }

    /// An Event on the Rule for a step, a pause, a rollback or the end.
    async fn event(&self, prev: &Progress, next: &Progress) {
        let (type_, reason) = match next.phase {
            Phase::Complete => (EventType::Normal, "RolloutComplete"),
            Phase::Paused if prev.phase != Phase::Paused => (EventType::Warning, "RolloutPaused"),
            Phase::RolledBack => (EventType::Warning, "RolloutRolledBack"),
            Phase::Progressing if prev.phase == Phase::Paused => {
                (EventType::Normal, "RolloutResumed")
            }
            Phase::Progressing if prev.step != next.step => (EventType::Normal, "RolloutStep"),
            _ => return,
        };
        let reference = ObjectReference {
            api_version: Some(crate::rules::object::api_version()),
            kind: Some(crate::rules::object::KIND.into()),
            name: Some(self.rule.clone()),
            uid: Some(self.uid.clone()),
            ..Default::default()
        };
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(crate::status::verdict::bounded([next.message.as_str()])),
            action: "Rollout".into(),
            secondary: None,
        };
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        if let Err(e) = recorder.publish(&ev, &reference).await {
            tracing::debug!(error = %e, "rollout Event not published");
        }
    }

    /// What `ruleop.dev/rollout` on the Rule asks, if anything.
    fn action(&self) -> Option<String> {
        let store = self.rules.as_ref()?;
        let key = ObjectRef::new_with(&self.rule, super::super::objects::resource());
        let rule = store.get(&key)?;
        rule.metadata.annotations.as_ref()?.get(ACTION).cloned()
    }

    /// Takes `ruleop.dev/rollout` off the Rule once acted on.
    async fn clear_action(&self) {
        let api: Api<DynamicObject> =
            Api::all_with(self.client.clone(), &super::super::objects::resource());
        let patch = serde_json::json!({"metadata": {"annotations": {ACTION: null}}});
        if let Err(e) = api
            .patch(&self.rule, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(error = %e, "the Rule's {ACTION} annotation could not be removed");
        }
    }

    /// One look: an action asked, then the resources.
    async fn tick(&self) {
        let Some(p) = self.current() else { return };
        let now = Timestamp::now();
        if let Some(action) = self.action() {
            // The annotation goes once acted on (or when it asks nothing of this
            // rollout); kept while the move is not recorded, to be acted on again.
            let done = match rollout::act(&p, &action, now) {
                Some(next) => {
                    tracing::info!(action = %action, "rollout: acted on the Rule's annotation");
                    self.set(&p, next).await
                }
                None => true,
            };
            if done {
                self.clear_action().await;
            }
            return;
        }
        if !self.synced.load(std::sync::atomic::Ordering::SeqCst) {
            tracing::debug!("rollout: the watches have not listed yet; the step waits");
            return;
        }
        let resources: Vec<Resource> = self
            .resources
            .state()
            .iter()
            .filter_map(|c| c.value())
            .filter(|v| v.pointer("/metadata/deletionTimestamp").is_none())
            // (One ruleop cannot read takes no part: it would never be Ready.)
            .filter(|v| v.get(crate::cache::tolerant::UNDECODABLE).is_none())
            .map(|v| Resource::of(&v))
            .map(|mut r| {
                if !self.choose.pins {
                    r.pinned = None;
                }
                r
            })
            .collect();
        let next = rollout::evaluate(&p, &self.rollout, &resources, now);
        if next != p {
            if next.phase != p.phase || next.step != p.step {
                tracing::info!(phase = ?next.phase, step = next.step + 1, message = %next.message, "rollout");
            }
            let _ = self.set(&p, next).await;
        }
    }
}

/// Moves the rollout on until the rule stops.
pub(super) async fn drive(d: Driver, mut stop: watch::Receiver<bool>) {
    let Some(p) = d.current() else { return };
    d.info.set_rollout(serde_json::to_value(&p).ok());
    // A rollout that starts (or pauses) here is recorded before anything moves.
    while d.recorded().as_ref() != Some(&p) && !d.record(&p).await {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        d.tick().await;
    }
}
