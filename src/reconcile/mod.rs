//! One reconcile of one custom resource: render (pure) → apply the children that differ
//! → prune the ones no longer rendered → compute the status (pure) → write it only if it
//! changed. A user's mistake is written on the custom resource and waits for a change; a
//! passing fault is returned as an error and retried with per-object backoff.
//!
//! Owns: the reconcile and its parts: what it works with ([`ctx`]: the process's, the
//! rule's and each resource's), one record per resource ([`record`]), the children's round
//! ([`children`], [`prune`]), the existing objects looked up ([`lookups`]), the status
//! write ([`status_write`]), ordered deletion ([`deletion`]), what it reports
//! ([`report`]), a resource that cannot be decoded ([`undecodable`]) and when it comes
//! back ([`backoff`]).
//!
//! Uses: the pipeline below it (`rules`, `render`, `apply`, `status`), `cache`, `events`,
//! `client` and `metrics`. Used by: `operator`, which runs one controller per rule.

pub mod backoff;
pub mod children;
pub mod ctx;
pub mod deletion;
pub mod lookups;
pub mod outcome;
pub mod prune;
pub mod record;
pub mod released;
pub mod report;
pub mod status_write;
pub mod undecodable;

pub use ctx::{Choose, Ctx, KindTable, Kinds, Listed, Process, PruneFrom, Router, Unwatched};
pub use outcome::ReconcileError;
pub use record::Records;

use crate::apply::{ApplyError, ObjectKey};
use crate::cache::cached::Cached;
use crate::render::{self, Plan, RenderError, Rendered};
use backoff::{backoff, jittered};
use children::Round;
use futures::FutureExt;
use kube::ResourceExt;
use kube::api::DynamicObject;
use kube::runtime::controller::Action;
use outcome::{Problem, Retry, Sync};
use record::ResourceId;
use report::{key_of, publish_applied, report_problem};
use status_write::{Seen, write_status};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument as _;

/// How long a resource refused for a reason in itself waits before it is tried again
/// anyway (the cause may have been outside: an admission policy).
const RETRY_INVALID: Duration = Duration::from_secs(300);

/// After this many consecutive passing faults, `Synced=False` reason `Retrying` says so.
const SAY_RETRYING_AFTER: u32 = 4;

/// Called by the controller when [`reconcile`] fails.
pub fn error_policy(cr: Arc<Cached>, err: &ReconcileError, router: Arc<Router>) -> Action {
    // The revisions of a rule share its records and metrics.
    let ctx = &router.newest;
    ctx.process.metrics.error(&ctx.rule.name, err.category());
    let n = ctx.records.count_failure(&ResourceId::of(&*cr));
    let delay = backoff(n - 1);
    tracing::warn!(rule = %ctx.rule.name, object = %key_of(&*cr), error = %err, attempt = n, retry_in_ms = delay.as_millis() as u64, "reconcile failed");
    Action::requeue(delay)
}

/// Reconciles one custom resource (read whole from its cached text). kube-runtime runs
/// each reconcile on a task of its own and takes a panic there for its own end (the rule's
/// controller would stop); a panic (a bug in ruleop) is caught here instead and becomes an
/// error of this resource alone, retried with backoff.
pub async fn reconcile(cached: Arc<Cached>, router: Arc<Router>) -> Result<Action, ReconcileError> {
    let cr = Arc::new(cached.object().map_err(ReconcileError::Decode)?);
    let deleted = cr.metadata.deletion_timestamp.is_some();
    let ctx = match (crate::cache::tolerant::undecodable(&cr), router.pick(&cr)) {
        // Its deletion needs its metadata alone: its orphans let go, its finalizers off.
        _ if deleted => router.pick(&cr).unwrap_or_else(|| router.newest.clone()),
        (Some(why), _) => return Ok(undecodable::report(&router.newest, &cr, why).await),
        (None, Some(ctx)) => ctx,
        // Its revision is held: it waits (the rollout says why).
        (None, None) => return Ok(Action::await_change()),
    };
    let span = tracing::info_span!(
        "reconcile",
        rule = %ctx.rule.name,
        revision = ctx.revision.unwrap_or_default(),
        namespace = cr.metadata.namespace.as_deref().unwrap_or_default(),
        name = cr.metadata.name.as_deref().unwrap_or_default(),
    );
    AssertUnwindSafe(reconcile_object(cr, ctx).instrument(span))
        .catch_unwind()
        .await
        .map_err(|p| ReconcileError::Panicked(panic_message(p.as_ref())))?
}

/// Runs `f` (pure CPU: a render) without holding up the async workers: on a worker of a
/// multi-threaded runtime, that worker hands its other tasks (the Lease's renewal among
/// them) to another thread while `f` runs; elsewhere (a single-threaded runtime: the CLI,
/// tests) `f` simply runs.
fn off_the_workers<T>(f: impl FnOnce() -> T) -> T {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// What a panic said.
fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

async fn reconcile_object(cr: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let synced = ctx.kinds.listed.ready();
    let r = ResourceId::of(&*cr);
    if cr.metadata.deletion_timestamp.is_some() {
        if deletion::has_finalizer(&cr) {
            if !synced {
                return Ok(Action::requeue(Duration::from_millis(250)));
            }
            // A deletion that cannot go on (a finalizer or a child's delete refused) is
            // said on the resource, then retried with backoff.
            let step = deletion::step(&ctx, &r, &cr).await;
            if let Err(e) = &step
                && !matches!(e, ReconcileError::NotLeader)
                && !is_conflict(e)
            {
                let note = format!("the deletion cannot go on: {e}");
                report::event(
                    &ctx,
                    &cr,
                    kube::runtime::events::EventType::Warning,
                    "DeletionBlocked",
                    "Delete",
                    note,
                    None,
                );
            }
            return step;
        }
        // The garbage collector removes the children (ownerReferences); writes still on
        // their way have nothing left to do, and the existing objects it read no longer
        // concern it. (Its record goes with the watch's delete event.)
        ctx.records.abandon_writes(&r);
        ctx.records.set_lookups(&r, Vec::new());
        return Ok(Action::await_change());
    }
    if !synced {
        // A child not in the cache yet would be taken for a missing one.
        return Ok(Action::requeue(Duration::from_millis(250)));
    }
    // A finalizer that cannot be written is a problem of this resource, not the end of
    // its reconcile: its children and status go on.
    let started = Instant::now();
    let kept = deletion::keep_finalizer(&ctx, &cr).await;
    ctx.process
        .metrics
        .stage(&ctx.rule.name, "lifecycle", started);
    let finalizer = match kept {
        Ok(()) => None,
        Err(ReconcileError::NotLeader) => return Err(ReconcileError::NotLeader),
        // The resource changed since it was read: retried with backoff, as any passing
        // fault (the next read has the new version).
        Err(e) if is_conflict(&e) => return Err(e),
        Err(e) => Some(finalizer_problem(&e)),
    };
    let rule = &ctx.rule;
    let _timer = ctx.process.metrics.reconcile(&rule.name);
    let ns = cr.namespace().unwrap_or_default();
    let cr_json = serde_json::to_value(&*cr).map_err(ReconcileError::Decode)?;

    let (scope, rendered) = render_round(&ctx, &r, &ns, &cr_json);
    let started = Instant::now();
    let (sync, round) = sync_children(&ctx, &cr, &ns, &r, &rendered, finalizer).await;
    ctx.process.metrics.stage(&rule.name, "children", started);
    let plan = rendered.as_ref().ok();
    if let Some(e) = round.transient {
        // A passing fault: retried with backoff. Once it has lasted a few rounds, the
        // resource says so (a fault that lasts is not to be hidden behind an old status).
        if matches!(e, ApplyError::NotLeader) {
            return Err(ReconcileError::NotLeader);
        }
        if ctx.records.failures(&r) + 1 >= SAY_RETRYING_AFTER {
            let retrying = Sync::of(vec![Problem {
                reason: "Retrying",
                message: e.to_string(),
                retry: Retry::Backoff,
            }]);
            let seen = Seen {
                scope: scope.as_ref().ok(),
                plan,
                observed: &round.observed,
            };
            if let Err(w) = write_status(&ctx, &r, &cr, &cr_json, &seen, &retrying).await {
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
        write_status(&ctx, &r, &cr, &cr_json, &seen, &sync).await?;
    }
    publish_applied(&ctx, &cr, &round.applied);
    let after = next_look(&ctx, &r, &sync);
    // A write on its way is looked at again soon, whatever else (its failure brings no
    // watch event).
    Ok(Action::requeue(if round.on_its_way {
        after.min(record::RECHECK)
    } else {
        after
    }))
}

/// The template variables (with the existing objects found), built once for the children
/// and the status, and the children rendered. (Off the async workers, which also renew the
/// Lease: a render is pure CPU.)
fn render_round(
    ctx: &Ctx,
    r: &ResourceId,
    ns: &str,
    cr_json: &serde_json::Value,
) -> (
    Result<render::Scope, RenderError>,
    Result<Plan, RenderError>,
) {
    let started = Instant::now();
    let rule = &ctx.rule;
    let out = off_the_workers(|| {
        let _span = tracing::info_span!("render").entered();
        let scope = render::scope(rule, cr_json).and_then(|s| lookups::resolve(ctx, r, s));
        let live = |c: &Rendered| ctx.live(ns, c);
        let rendered = scope
            .as_ref()
            .map_err(Clone::clone)
            .and_then(|s| render::render_applied(rule, s, &live));
        (scope, rendered)
    });
    ctx.process.metrics.stage(&rule.name, "render", started);
    out
}

/// When a resource is looked at again with no event, after a round with this outcome.
fn next_look(ctx: &Ctx, r: &ResourceId, sync: &Sync) -> Duration {
    match sync {
        Sync::Ok => {
            ctx.records.reset_failures(r);
            jittered(ctx.process.resync)
        }
        Sync::Failed(Problem {
            retry: Retry::OnChange,
            ..
        }) => {
            ctx.records.reset_failures(r);
            RETRY_INVALID
        }
        Sync::Failed(Problem {
            retry: Retry::Backoff,
            ..
        }) => backoff(ctx.records.count_failure(r) - 1),
        Sync::Failed(Problem {
            retry: Retry::Soon, ..
        }) => record::RECHECK,
    }
}

/// Applies and prunes the children of a render, and says what became of them.
async fn sync_children(
    ctx: &Ctx,
    cr: &DynamicObject,
    ns: &str,
    r: &ResourceId,
    rendered: &Result<Plan, RenderError>,
    finalizer: Option<Problem>,
) -> (Sync, Round) {
    let problem = |reason, message| {
        let p = Problem {
            reason,
            message,
            retry: Retry::OnChange,
        };
        (
            Sync::of(finalizer.clone().into_iter().chain([p]).collect()),
            Round::default(),
        )
    };
    let out = match rendered {
        Err(e) => return problem("RenderFailed", e.to_string()),
        Ok(out) => out,
    };
    // Without its finalizer, an orphaned child's objects would go with the resource.
    let held;
    let out = if finalizer.is_some() && deletion::orphans_children(ctx) {
        held = hold_orphans(ctx, out);
        &held
    } else {
        out
    };
    if let Some(message) = scope_problem(ctx, &out.children) {
        return problem("ClusterScopedChild", message);
    }
    // A write still on its way to an object this render no longer makes has no reason
    // left (the objects of the children that wait are kept as they are).
    let rendered = out.children.iter().map(ObjectKey::of).collect();
    let waiting = out.waiting.iter().map(|w| w.id.as_str()).collect();
    ctx.records.stop_writes_except(r, &rendered, &waiting);
    let released = released::of(cr);
    let mut round = children::apply_children(ctx, ns, r, released, &out.children).await;
    released::forget_taken_back(ctx, cr, &round).await;
    match prune::uncertain(ctx, out, &round) {
        None => prune::prune_children(ctx, cr, ns, &r.uid, out, &mut round).await,
        Some(why) => {
            tracing::debug!(rule = %ctx.rule.name, object = %key_of(cr), why, "nothing pruned this round")
        }
    }
    prune::observe_waiting(ctx, ns, &r.uid, out, &mut round);
    let mut problems: Vec<Problem> = finalizer.into_iter().collect();
    problems.append(&mut round.problems);
    if !out.waiting.is_empty() {
        let message = crate::status::verdict::waiting_message(&out.waiting);
        problems.push(Problem {
            reason: "Waiting",
            message,
            retry: Retry::OnChange,
        });
    }
    (Sync::of(problems), round)
}

/// The plan with the objects of `onRemove: Orphan` children held back (they wait, kept as
/// they are), for a resource whose finalizer could not be put on.
fn hold_orphans(ctx: &Ctx, out: &Plan) -> Plan {
    let orphaned = |id: &str| {
        ctx.rule
            .children
            .iter()
            .any(|c| c.id == id && c.on_remove == crate::rules::spec::OnRemove::Orphan)
    };
    let mut plan = out.clone();
    plan.children.retain(|c| !orphaned(&c.id));
    for c in ctx.rule.children.iter().filter(|c| orphaned(&c.id)) {
        plan.waiting.push(render::Waiting {
            id: c.id.clone(),
            reason: format!(
                "waits for the resource's finalizer `{}` (it could not be written: see the other problem)",
                deletion::ORPHAN_FINALIZER
            ),
        });
    }
    plan
}

fn is_conflict(e: &ReconcileError) -> bool {
    matches!(e, ReconcileError::Finalizer(kube::Error::Api(s)) if s.code == 409)
}

/// The problem a failed finalizer write makes on the resource (retried with backoff).
fn finalizer_problem(e: &ReconcileError) -> Problem {
    let forbidden = matches!(e, ReconcileError::Finalizer(kube::Error::Api(s)) if s.code == 403);
    Problem {
        reason: if forbidden {
            "Forbidden"
        } else {
            "FinalizerFailed"
        },
        message: format!(
            "{e}; ruleop needs `patch` on the resource to set and release its finalizers (`ruleop rbac` grants it)"
        ),
        retry: Retry::Backoff,
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
