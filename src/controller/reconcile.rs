//! One reconcile of one custom resource: render (pure) → apply the children that differ
//! → prune the ones no longer rendered → compute the status (pure) → write it only if it
//! changed. A user's mistake is written on the custom resource and waits for a change; a
//! passing fault is returned as an error and retried with per-object backoff.

use super::children::{self, Problem, Retry};
use super::deletion;
use super::leader::Fence;
use super::status_write::{Seen, write_status};
use crate::apply::{ApplyError, Memo, ObjectKey};
use crate::controller::cached::Cached;
use crate::controller::discovery::Resolved;
use crate::controller::events::EventQueue;
use crate::controller::existing::{self, ExistingKind, Readers};
use crate::controller::owners::OwnerIndex;
use crate::metrics::Metrics;
use crate::render::{self, Plan, RenderError, Rendered};
use crate::rules::CompiledRule;
use futures::FutureExt;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::Store;
use kube::{Client, Resource, ResourceExt};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A child kind of a rule, with the cache of this rule's children of that kind.
pub struct ChildKind {
    pub resolved: Resolved,
    pub store: Store<Cached>,
    /// The cached children of each custom resource.
    pub owners: Arc<OwnerIndex>,
    /// What the cache keeps of these children (answers of writes are trimmed alike).
    pub keep: Arc<crate::rules::keep::Keep>,
}

/// Everything a reconcile of one rule's custom resources needs.
pub struct Ctx {
    pub client: Client,
    pub rule: Arc<CompiledRule>,
    pub parent: Resolved,
    /// The distinct kinds of the rule's children.
    pub kinds: Vec<ChildKind>,
    /// For each child of the rule, its index in `kinds`.
    pub child_kind: Vec<usize>,
    /// Our recent child writes.
    pub memo: Arc<Memo>,
    /// The status we last wrote to each custom resource, with the resourceVersion it got.
    /// While the cache has not caught up with that write, a reconcile compares with it and
    /// merges its conditions into it (keeping their transition times), instead of taking
    /// the stale cached status for a difference and writing again.
    /// (The status is kept as its JSON text: a tree would cost kilobytes per resource.)
    pub status_memo: Arc<Memo<(String, Box<str>)>>,
    /// Consecutive failures per custom resource, for backoff.
    pub failures: Arc<Mutex<HashMap<String, u32>>>,
    /// How often a healthy custom resource is checked again with no event.
    pub resync: Duration,
    pub metrics: Arc<Metrics>,
    /// Where Events go (a bounded queue to the rule's publishing task).
    pub events_out: EventQueue,
    pub events: super::EventLevel,
    /// Asked before every write: false once this replica may no longer write.
    pub fence: Arc<Fence>,
    /// The status fields the kind's schema drops, learned from our writes.
    pub status_schema: crate::status::StatusSchema,
    /// True once every watch of the rule has listed; until then (or [`SYNC_WAIT`] after
    /// `started`, for a watch that cannot list) a missing child may only be missing from
    /// the cache, and reconciles wait.
    pub synced: Arc<std::sync::atomic::AtomicBool>,
    pub started: std::time::Instant,
    /// The distinct kinds of the rule's existing objects, with their caches.
    pub existing: Vec<ExistingKind>,
    /// For each of the rule's `existing`, its index in `existing`.
    pub existing_kind: Vec<usize>,
    /// Which resources read which existing objects.
    pub readers: Arc<Readers>,
    /// Child writes still on their way after a reconcile stopped waiting for them.
    pub slow: super::slow::Slow<children::Sent>,
}

/// How long reconciles wait for the rule's watches to list before going ahead anyway (a
/// watch the RBAC forbids never lists; its refusal is then reported on the resources).
pub const SYNC_WAIT: Duration = Duration::from_secs(10);

/// A reconcile that must be retried.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// A child could not be applied or pruned for a passing reason.
    #[error("applying children: {0}")]
    Apply(#[source] ApplyError),
    /// The status could not be written.
    #[error("writing status: {0}")]
    Status(#[source] kube::Error),
    /// This replica may no longer write (leadership lost): nothing was sent.
    #[error("not the leader: the status was not written")]
    NotLeader,
    /// The object from the cache could not be turned into JSON (should not happen).
    #[error("reading the custom resource: {0}")]
    Decode(#[source] serde_json::Error),
    /// The reconcile panicked (a bug in ruleop): retried with backoff, the other resources
    /// go on.
    #[error("the reconcile failed inside ruleop: {0}")]
    Panicked(String),
}

/// What became of the children this round; written as the `Synced` condition.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Sync {
    Ok,
    Failed(Problem),
}

impl Sync {
    /// The first problem wins the condition (a write still on its way only when there is
    /// nothing worse); the others are in its message.
    fn of(mut problems: Vec<Problem>) -> Sync {
        if problems.is_empty() {
            return Sync::Ok;
        }
        problems.sort_by_key(|p| p.retry == Retry::Soon);
        let mut first = problems.remove(0);
        for p in problems {
            first.message.push_str("; ");
            first.message.push_str(&p.message);
            // A fault outside is retried with backoff (counted), whatever else.
            first.retry = match (first.retry, p.retry) {
                (Retry::Backoff, _) | (_, Retry::Backoff) => Retry::Backoff,
                (Retry::Soon, _) | (_, Retry::Soon) => Retry::Soon,
                _ => Retry::OnChange,
            };
        }
        Sync::Failed(first)
    }
}

/// How long a resource refused for a reason in itself waits before it is tried again
/// anyway (the cause may have been outside: an admission policy).
const RETRY_INVALID: Duration = Duration::from_secs(300);

fn key_of(cr: &impl Resource) -> String {
    failure_key(&cr.namespace().unwrap_or_default(), &cr.name_any())
}

/// The key of a custom resource in the per-resource failure counts.
pub(super) fn failure_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// When a healthy resource is checked again: at a random point of the last fifth of
/// `resync`. Resources created together (10,000 in a few minutes) would otherwise all come
/// due in the same instant, and a burst of thousands of checks would queue the reconciles
/// of real changes behind it.
pub fn jittered(resync: Duration) -> Duration {
    resync.mul_f64(0.8 + 0.2 * fastrand::f64())
}

/// The backoff after `n` consecutive failures: 0.5 s doubling up to 5 minutes.
pub fn backoff(n: u32) -> Duration {
    let ms = 500u64.saturating_mul(1u64 << n.min(12));
    Duration::from_millis(ms.min(300_000))
}

impl ReconcileError {
    /// The fixed metrics category.
    pub fn category(&self) -> &'static str {
        match self {
            ReconcileError::Apply(_) | ReconcileError::Decode(_) => "apply_transient",
            ReconcileError::Status(_) => "status_write",
            ReconcileError::NotLeader => "not_leader",
            ReconcileError::Panicked(_) => "internal",
        }
    }
}

/// Queues an Event on the custom resource (published off the reconcile path, best-effort).
/// `child`, when given, is the object the event is about (it also keeps events about
/// different children apart in the recorder's series).
pub(super) fn event(
    ctx: &Ctx,
    cr: &DynamicObject,
    type_: EventType,
    reason: &str,
    action: &str,
    note: String,
    child: Option<ObjectReference>,
) {
    let wanted = match ctx.events {
        super::EventLevel::All => true,
        super::EventLevel::Warnings => type_ == EventType::Warning,
        super::EventLevel::None => false,
    };
    if !wanted {
        return;
    }
    let reference = cr.object_ref(&ctx.parent.resource);
    let ev = Event {
        type_,
        reason: reason.into(),
        note: Some(truncate(note, 1000)),
        action: action.into(),
        secondary: child,
    };
    ctx.events_out.send(ev, reference);
}

fn truncate(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

/// Called by the controller when [`reconcile`] fails.
pub fn error_policy(cr: Arc<Cached>, err: &ReconcileError, ctx: Arc<Ctx>) -> Action {
    ctx.metrics.error(&ctx.rule.name, err.category());
    let n = count_failure(&ctx, &*cr);
    let delay = backoff(n - 1);
    tracing::warn!(rule = %ctx.rule.name, object = %key_of(&*cr), error = %err, attempt = n, retry_in_ms = delay.as_millis() as u64, "reconcile failed");
    Action::requeue(delay)
}

/// After this many consecutive passing faults, `Synced=False` reason `Retrying` says so.
const SAY_RETRYING_AFTER: u32 = 4;

/// The consecutive failures of `cr` so far.
fn failures_of(ctx: &Ctx, cr: &DynamicObject) -> u32 {
    ctx.failures
        .lock()
        .map(|f| f.get(&key_of(cr)).copied().unwrap_or(0))
        .unwrap_or(0)
}

/// Counts one more failure of `cr`; gives how many in a row (at least 1).
fn count_failure(ctx: &Ctx, cr: &impl Resource) -> u32 {
    let mut f = ctx.failures.lock().unwrap_or_else(|p| p.into_inner());
    let n = f.entry(key_of(cr)).or_insert(0);
    *n = n.saturating_add(1);
    *n
}

/// Counts one more failure of `cr` and gives its backoff.
fn retry_later(ctx: &Ctx, cr: &DynamicObject) -> Duration {
    backoff(count_failure(ctx, cr) - 1)
}

/// Reconciles one custom resource (read whole from its cached text). kube-runtime runs
/// each reconcile on a task of its own and takes a panic there for its own end (the rule's
/// controller would stop); a panic (a bug in ruleop) is caught here instead and becomes an
/// error of this resource alone, retried with backoff.
pub async fn reconcile(cached: Arc<Cached>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let cr = Arc::new(cached.object().map_err(ReconcileError::Decode)?);
    AssertUnwindSafe(reconcile_object(cr, ctx))
        .catch_unwind()
        .await
        .map_err(|p| ReconcileError::Panicked(panic_message(p.as_ref())))?
}

/// What a panic said.
fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

async fn reconcile_object(cr: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let synced =
        ctx.synced.load(std::sync::atomic::Ordering::SeqCst) || ctx.started.elapsed() >= SYNC_WAIT;
    if cr.metadata.deletion_timestamp.is_some() {
        if deletion::has_finalizer(&cr) {
            if !synced {
                return Ok(Action::requeue(Duration::from_millis(250)));
            }
            return deletion::step(&ctx, &cr).await;
        }
        // The garbage collector removes the children (ownerReferences).
        forget(&ctx, &cr);
        return Ok(Action::await_change());
    }
    if !synced {
        // A child not in the cache yet would be taken for a missing one.
        return Ok(Action::requeue(Duration::from_millis(250)));
    }
    deletion::keep_finalizer(&ctx, &cr).await?;
    let rule = &ctx.rule;
    let _timer = ctx.metrics.reconcile(&rule.name);
    let ns = cr.namespace().unwrap_or_default();
    let cr_json = serde_json::to_value(&*cr).map_err(ReconcileError::Decode)?;
    let uid = cr.uid().unwrap_or_default();

    // The template variables (with the existing objects found), built once for the
    // children and the status.
    let scope = render::scope(rule, &cr_json)
        .and_then(|s| existing::resolve(rule, &ctx.existing, &ctx.existing_kind, &ctx.readers, s));
    let live = |r: &Rendered| ctx.live(&ns, r);
    let rendered = scope
        .as_ref()
        .map_err(Clone::clone)
        .and_then(|s| render::render_with(rule, s, &live));
    let (sync, round) = sync_children(&ctx, &cr, &ns, &uid, &rendered).await;
    let plan = rendered.as_ref().ok();
    if let Some(e) = round.transient {
        // A passing fault: retried with backoff. Once it has lasted a few rounds, the
        // resource says so (a fault that lasts is not to be hidden behind an old status).
        if matches!(e, ApplyError::NotLeader) {
            return Err(ReconcileError::NotLeader);
        }
        if failures_of(&ctx, &cr) + 1 >= SAY_RETRYING_AFTER {
            let retrying = Sync::of(vec![Problem {
                reason: "Retrying",
                message: e.to_string(),
                retry: Retry::Backoff,
            }]);
            let s = scope.as_ref().ok();
            let seen = Seen {
                scope: s,
                plan,
                observed: &round.observed,
            };
            if let Err(w) = write_status(&ctx, &cr, &cr_json, &seen, &retrying).await {
                tracing::debug!(error = %w, "status of a retried resource not written");
            }
        }
        return Err(ReconcileError::Apply(e));
    }
    if let Sync::Failed(p) = &sync {
        report_problem(&ctx, &cr, &cr_json, p);
    }
    if round.cache_behind && sync == Sync::Ok {
        // A child we wrote is not in the cache yet: its watch event triggers another
        // reconcile, which writes the status from it (now it would be stale, and written twice).
        tracing::debug!(rule = %rule.name, object = %key_of(&*cr), "status waits for the cache to show our writes");
    } else {
        let seen = Seen {
            scope: scope.as_ref().ok(),
            plan,
            observed: &round.observed,
        };
        write_status(&ctx, &cr, &cr_json, &seen, &sync).await?;
    }
    publish_applied(&ctx, &cr, &round.applied);
    let after = next_look(&ctx, &cr, &sync);
    // A write on its way is looked at again soon, whatever else (its failure brings no
    // watch event).
    Ok(Action::requeue(if round.on_its_way {
        after.min(super::slow::RECHECK)
    } else {
        after
    }))
}

/// When a resource is looked at again with no event, after a round with this outcome.
fn next_look(ctx: &Ctx, cr: &DynamicObject, sync: &Sync) -> Duration {
    match sync {
        Sync::Ok => {
            forget_failures(ctx, cr);
            jittered(ctx.resync)
        }
        Sync::Failed(Problem {
            retry: Retry::OnChange,
            ..
        }) => {
            forget_failures(ctx, cr);
            RETRY_INVALID
        }
        Sync::Failed(Problem {
            retry: Retry::Backoff,
            ..
        }) => retry_later(ctx, cr),
        Sync::Failed(Problem {
            retry: Retry::Soon, ..
        }) => super::slow::RECHECK,
    }
}

/// Applies and prunes the children of a render, and says what became of them.
async fn sync_children(
    ctx: &Ctx,
    cr: &DynamicObject,
    ns: &str,
    uid: &str,
    rendered: &Result<Plan, RenderError>,
) -> (Sync, children::Round) {
    let problem = |reason, message| {
        let p = Problem {
            reason,
            message,
            retry: Retry::OnChange,
        };
        (Sync::of(vec![p]), children::Round::default())
    };
    let out = match rendered {
        Err(e) => return problem("RenderFailed", e.to_string()),
        Ok(out) => out,
    };
    if let Some(message) = scope_problem(ctx, &out.children) {
        return problem("ClusterScopedChild", message);
    }
    let mut round = children::apply_children(ctx, ns, uid, &out.children).await;
    children::prune_children(ctx, cr, ns, uid, out, &mut round).await;
    children::observe_waiting(ctx, ns, uid, out, &mut round);
    let mut problems = std::mem::take(&mut round.problems);
    if !out.waiting.is_empty() {
        let message = out
            .waiting
            .iter()
            .map(|w| format!("child `{}` {}", w.id, w.reason))
            .collect::<Vec<_>>()
            .join("; ");
        problems.push(Problem {
            reason: "Waiting",
            message,
            retry: Retry::OnChange,
        });
    }
    (Sync::of(problems), round)
}

fn forget_failures(ctx: &Ctx, cr: &DynamicObject) {
    if let Ok(mut f) = ctx.failures.lock() {
        f.remove(&key_of(cr));
    }
}

/// Drops what ruleop keeps about a resource that is going away.
pub fn forget(ctx: &Ctx, cr: &DynamicObject) {
    forget_failures(ctx, cr);
    ctx.readers
        .forget(&cr.namespace().unwrap_or_default(), &cr.name_any());
    ctx.status_memo
        .forget(&ObjectKey::of_object(&ctx.parent.resource, cr));
    ctx.slow.forget(&cr.uid().unwrap_or_default());
}

/// Logs, counts and (when the `Synced` condition changes) publishes a problem.
fn report_problem(ctx: &Ctx, cr: &DynamicObject, cr_json: &Value, p: &Problem) {
    let category = match p.reason {
        "RenderFailed" => "render",
        "ClusterScopedChild" => "cluster_scoped",
        "NotOwned" => "not_owned",
        "Forbidden" => "forbidden",
        _ => "apply_refused",
    };
    // Waiting for a child or an existing object is the graph at work, and a write still on
    // its way the API server's pace: neither is a fault.
    if p.reason == "Applying" {
        // Looked at every second until the answer comes; the write's own Event follows it.
        tracing::debug!(rule = %ctx.rule.name, object = %key_of(cr), message = %p.message, "a child write is on its way");
        return;
    }
    let waiting = p.reason == "Waiting";
    if waiting {
        tracing::info!(rule = %ctx.rule.name, object = %key_of(cr), reason = p.reason, message = %p.message, "custom resource waits");
    } else {
        ctx.metrics.error(&ctx.rule.name, category);
        tracing::warn!(rule = %ctx.rule.name, object = %key_of(cr), reason = p.reason, error = %p.message, "custom resource not synced");
    }
    let was = cr_json
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().find(|c| c["type"] == "Synced"))
        .map(|c| (c["reason"].clone(), c["message"].clone()));
    if was != Some((json!(p.reason), json!(p.message))) {
        let type_ = if waiting {
            EventType::Normal
        } else {
            EventType::Warning
        };
        event(
            ctx,
            cr,
            type_,
            p.reason,
            "Reconcile",
            p.message.clone(),
            None,
        );
    }
}

/// One Event per kind of change, naming every child it covers (built only when Normal
/// Events are published).
fn publish_applied(ctx: &Ctx, cr: &DynamicObject, applied: &[(&'static str, String)]) {
    if ctx.events != super::EventLevel::All {
        return;
    }
    for reason in ["Created", "Updated", "Adopted"] {
        let names: Vec<&str> = applied
            .iter()
            .filter(|(r, _)| *r == reason)
            .map(|(_, n)| n.as_str())
            .collect();
        if !names.is_empty() {
            let note = names.join(", ");
            let action = truncate(format!("Apply {note}"), 120);
            event(ctx, cr, EventType::Normal, reason, &action, note, None);
        }
    }
}

impl Ctx {
    /// The rule's child `id`: its index in the rule and its kind.
    pub fn child(&self, id: &str) -> Option<(usize, &ChildKind)> {
        let i = self.rule.children.iter().position(|c| c.id == id)?;
        Some((i, &self.kinds[self.child_kind[i]]))
    }

    /// The cached object of a rendered child, if the cluster has it.
    pub fn live(&self, ns: &str, r: &Rendered) -> Option<Value> {
        let (_, kind) = self.child(&r.id)?;
        let oref = ObjectRef::new_with(&r.name, kind.resolved.resource.clone()).within(ns);
        kind.store.get(&oref)?.value()
    }
}

/// A child whose kind is cluster-scoped (known only from discovery) is refused.
fn scope_problem(ctx: &Ctx, children: &[Rendered]) -> Option<String> {
    children.iter().find_map(|c| {
        let (_, k) = ctx.child(&c.id)?;
        (!k.resolved.namespaced).then(|| {
            format!("child `{}`: {} is cluster-scoped; children always live in the custom resource's namespace; nothing was created", c.id, c.kind)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::{backoff, jittered};
    use std::time::Duration;

    #[test]
    fn resyncs_spread_over_the_last_fifth_of_the_period() {
        let resync = Duration::from_secs(600);
        let due: Vec<Duration> = (0..1000).map(|_| jittered(resync)).collect();
        assert!(
            due.iter()
                .all(|d| *d >= Duration::from_secs(480) && *d <= resync)
        );
        let early = due
            .iter()
            .filter(|d| **d < Duration::from_secs(540))
            .count();
        assert!(
            (350..650).contains(&early),
            "{early} of 1000 in the first half of the window: not spread"
        );
    }

    #[test]
    fn backoff_doubles_from_half_a_second_to_a_five_minute_cap() {
        assert_eq!(backoff(0), Duration::from_millis(500));
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(5), Duration::from_secs(16));
        assert_eq!(backoff(10), Duration::from_secs(300));
        assert_eq!(backoff(u32::MAX), Duration::from_secs(300));
    }
}
