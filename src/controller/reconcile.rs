//! One reconcile of one custom resource: render (pure) → apply the children that differ
//! → prune the ones no longer rendered → compute the status (pure) → write it only if it
//! changed. A user's mistake is written on the custom resource and waits for a change; a
//! passing fault is returned as an error and retried with per-object backoff.

use crate::apply::{self, ApplyError, Memo, ObjectKey, Written};
use crate::controller::discovery::Resolved;
use crate::controller::events::EventQueue;
use crate::controller::owners::{OwnerIndex, controller_uid};
use crate::metrics::Metrics;
use crate::render::{self, CHILD_LABEL, FIELD_MANAGER, Rendered};
use crate::rules::CompiledRule;
use crate::status::{self, Condition, merge_conditions};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde_json::{Map, Value, json};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A child kind of a rule, with the cache of this rule's children of that kind.
pub struct ChildKind {
    pub resolved: Resolved,
    pub store: Store<DynamicObject>,
    /// The cached children of each custom resource.
    pub owners: Arc<OwnerIndex>,
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
    pub status_memo: Arc<Memo<(String, Value)>>,
    /// Consecutive failures per custom resource, for backoff.
    pub failures: Mutex<HashMap<String, u32>>,
    /// How often a healthy custom resource is checked again with no event.
    pub resync: Duration,
    pub metrics: Arc<Metrics>,
    /// Where Events go (a bounded queue to the rule's publishing task).
    pub events_out: EventQueue,
    pub events: super::EventLevel,
}

/// A reconcile that must be retried.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// A child could not be applied or pruned for a passing reason.
    #[error("applying children: {0}")]
    Apply(#[source] ApplyError),
    /// The status could not be written.
    #[error("writing status: {0}")]
    Status(#[source] kube::Error),
    /// The object from the cache could not be turned into JSON (should not happen).
    #[error("reading the custom resource: {0}")]
    Decode(#[source] serde_json::Error),
}

/// What became of the children this round; written as the `Synced` condition.
#[derive(Debug, Clone, PartialEq)]
enum Sync {
    Ok,
    Failed {
        reason: &'static str,
        message: String,
    },
}

fn key_of(cr: &DynamicObject) -> String {
    format!("{}/{}", cr.namespace().unwrap_or_default(), cr.name_any())
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
        }
    }
}

/// Queues an Event on the custom resource (published off the reconcile path, best-effort).
/// `child`, when given, is the object the event is about (it also keeps events about
/// different children apart in the recorder's series).
fn event(
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
pub fn error_policy(cr: Arc<DynamicObject>, err: &ReconcileError, ctx: Arc<Ctx>) -> Action {
    ctx.metrics.error(&ctx.rule.name, err.category());
    let n = {
        let mut f = ctx.failures.lock().unwrap_or_else(|p| p.into_inner());
        let n = f.entry(key_of(&cr)).or_insert(0);
        *n += 1;
        *n
    };
    let delay = backoff(n - 1);
    tracing::warn!(rule = %ctx.rule.name, object = %key_of(&cr), error = %err, attempt = n, retry_in_ms = delay.as_millis() as u64, "reconcile failed");
    Action::requeue(delay)
}

/// Reconciles one custom resource.
pub async fn reconcile(cr: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    if cr.metadata.deletion_timestamp.is_some() {
        // The garbage collector removes the children (ownerReferences).
        return Ok(Action::await_change());
    }
    let rule = &ctx.rule;
    let _timer = ctx.metrics.reconcile(&rule.name);
    let ns = cr.namespace().unwrap_or_default();
    let cr_json = serde_json::to_value(&*cr).map_err(ReconcileError::Decode)?;
    let uid = cr.uid();
    let mut observed: HashMap<String, Value> = HashMap::new();
    let mut applied: Vec<(&'static str, String)> = Vec::new();
    let mut cache_behind = false;

    // The template variables, built once for the children and the status.
    let scope = render::scope(rule, &cr_json);
    let rendered = scope
        .as_ref()
        .map_err(Clone::clone)
        .and_then(|s| render::render_in(rule, s));
    let sync = match rendered {
        Err(e) => Sync::Failed {
            reason: "RenderFailed",
            message: e.to_string(),
        },
        Ok(children) => match scope_problem(&ctx, &children) {
            Some(message) => Sync::Failed {
                reason: "ClusterScopedChild",
                message,
            },
            None => {
                let sync = apply_children(
                    &ctx,
                    &ns,
                    &children,
                    &mut observed,
                    &mut applied,
                    &mut cache_behind,
                )
                .await?;
                if let Some(uid) = &uid {
                    prune_children(&ctx, &cr, &ns, uid, &children).await?;
                }
                sync
            }
        },
    };

    if let Sync::Failed { reason, message } = &sync {
        let category = match *reason {
            "RenderFailed" => "render",
            "ClusterScopedChild" => "cluster_scoped",
            _ => "apply_refused",
        };
        ctx.metrics.error(&rule.name, category);
        tracing::warn!(rule = %rule.name, object = %key_of(&cr), reason, error = %message, "custom resource not synced; waiting for a change");
        let was = cr_json
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|a| a.iter().find(|c| c["type"] == "Synced"))
            .map(|c| (c["reason"].clone(), c["message"].clone()));
        if was != Some((json!(reason), json!(message))) {
            event(
                &ctx,
                &cr,
                EventType::Warning,
                reason,
                "Reconcile",
                message.clone(),
                None,
            );
        }
    }
    if cache_behind && sync == Sync::Ok {
        // A child we wrote is not in the cache yet: its watch event triggers another
        // reconcile, which writes the status from it (now it would be stale, and written twice).
        tracing::debug!(rule = %rule.name, object = %key_of(&cr), "status waits for the cache to show our writes");
    } else {
        write_status(&ctx, &cr, &cr_json, scope.ok().as_ref(), &observed, &sync).await?;
    }
    // One Event per kind of change, naming every child it covers (built only when Normal
    // Events are published).
    let normal_events = ctx.events == super::EventLevel::All;
    for reason in ["Created", "Updated"].into_iter().filter(|_| normal_events) {
        let names: Vec<&str> = applied
            .iter()
            .filter(|(r, _)| *r == reason)
            .map(|(_, n)| n.as_str())
            .collect();
        if !names.is_empty() {
            let note = names.join(", ");
            let action = truncate(format!("Apply {note}"), 120);
            event(&ctx, &cr, EventType::Normal, reason, &action, note, None);
        }
    }
    if let Ok(mut f) = ctx.failures.lock() {
        f.remove(&key_of(&cr));
    }
    Ok(match sync {
        Sync::Ok => Action::requeue(ctx.resync),
        Sync::Failed { .. } => Action::await_change(),
    })
}

fn child_index(rule: &CompiledRule, id: &str) -> Option<usize> {
    rule.children.iter().position(|c| c.id == id)
}

/// A child whose kind is cluster-scoped (known only from discovery) is refused.
fn scope_problem(ctx: &Ctx, children: &[Rendered]) -> Option<String> {
    children.iter().find_map(|c| {
        let k = &ctx.kinds[ctx.child_kind[child_index(&ctx.rule, &c.id)?]];
        (!k.resolved.namespaced).then(|| {
            format!("child `{}`: {} is cluster-scoped; children always live in the custom resource's namespace; nothing was created", c.id, c.kind)
        })
    })
}

/// Applies what differs; records each write in `applied` as (Created|Updated, "Kind name")
/// and each child's live object (the apply's answer, or the cached one) in `observed`.
async fn apply_children(
    ctx: &Ctx,
    ns: &str,
    children: &[Rendered],
    observed: &mut HashMap<String, Value>,
    applied: &mut Vec<(&'static str, String)>,
    cache_behind: &mut bool,
) -> Result<Sync, ReconcileError> {
    // Decide first (no request), then send every apply at once: the children of one
    // resource are independent, and a reconcile is mostly waiting on the API server.
    let mut pending = Vec::new();
    for c in children {
        let Some(i) = child_index(&ctx.rule, &c.id) else {
            continue;
        };
        let kind = &ctx.kinds[ctx.child_kind[i]];
        let oref = ObjectRef::new_with(&c.name, kind.resolved.resource.clone()).within(ns);
        let live = kind
            .store
            .get(&oref)
            .and_then(|o| serde_json::to_value(&*o).ok());
        let key = ObjectKey::of(c);
        let last = ctx.memo.get(&key);
        if apply::needs_apply(c, live.as_ref(), last.as_ref()) {
            let api: Api<DynamicObject> =
                Api::namespaced_with(ctx.client.clone(), ns, &kind.resolved.resource);
            pending.push((c, key, live, api));
        } else {
            *cache_behind |= apply::cache_behind(live.as_ref(), last.as_ref());
            if let Some(live) = live {
                observed.insert(c.id.clone(), live);
            }
        }
    }
    let results =
        futures::future::join_all(pending.iter().map(|(c, _, _, api)| apply::apply(api, c))).await;
    let mut refused = Vec::new();
    let mut transient = None;
    for ((c, key, live, _), result) in pending.into_iter().zip(results) {
        match result {
            Ok(obj) => {
                let (action, reason) = if live.is_some() {
                    ("update", "Updated")
                } else {
                    ("create", "Created")
                };
                ctx.metrics.write(&ctx.rule.name, action);
                tracing::info!(rule = %ctx.rule.name, child = %c.id, kind = %c.kind, name = %c.name, namespace = %ns, action, "applied child");
                applied.push((reason, format!("{} {}", c.kind, c.name)));
                ctx.memo.put(
                    key,
                    Written::now(c.hash.clone(), obj.resource_version().unwrap_or_default()),
                );
                if let Ok(v) = serde_json::to_value(&obj) {
                    observed.insert(c.id.clone(), v);
                }
            }
            Err(e) if e.is_refused() => {
                refused.push(e.to_string());
                // The status still reports what is there.
                if let Some(live) = live {
                    observed.insert(c.id.clone(), live);
                }
            }
            Err(e) => transient = transient.or(Some(e)),
        }
    }
    if let Some(e) = transient {
        return Err(ReconcileError::Apply(e));
    }
    Ok(if refused.is_empty() {
        Sync::Ok
    } else {
        Sync::Failed {
            reason: "ApplyRefused",
            message: refused.join("; "),
        }
    })
}

async fn prune_children(
    ctx: &Ctx,
    cr: &DynamicObject,
    ns: &str,
    uid: &str,
    children: &[Rendered],
) -> Result<(), ReconcileError> {
    for kind in &ctx.kinds {
        let ar = &kind.resolved.resource;
        let keep: HashSet<&str> = children
            .iter()
            .filter(|c| c.kind == ar.kind && c.api_version == ar.api_version)
            .map(|c| c.name.as_str())
            .collect();
        let stale: Vec<Arc<DynamicObject>> = kind
            .owners
            .children_of(uid)
            .into_iter()
            .filter(|(child_ns, name)| child_ns == ns && !keep.contains(name.as_str()))
            .filter_map(|(child_ns, name)| {
                kind.store
                    .get(&ObjectRef::new_with(&name, ar.clone()).within(&child_ns))
            })
            .filter(|o| controller_uid(o) == Some(uid))
            .collect();
        for o in stale {
            let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, ar);
            let name = o.name_any();
            apply::prune(&api, ar, &name, o.uid())
                .await
                .map_err(ReconcileError::Apply)?;
            let child = o.labels().get(CHILD_LABEL).cloned().unwrap_or_default();
            ctx.metrics.write(&ctx.rule.name, "prune");
            tracing::info!(rule = %ctx.rule.name, child = %child, kind = %ar.kind, name = %name, namespace = %ns, "pruned child");
            event(
                ctx,
                cr,
                EventType::Normal,
                "Pruned",
                "Prune",
                format!(
                    "{} {} (child `{child}` is no longer rendered)",
                    ar.kind, name
                ),
                Some(o.object_ref(ar)),
            );
        }
    }
    Ok(())
}

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The status to write: exported fields, observedGeneration, and the Ready and Synced conditions.
fn desired_status(
    ctx: &Ctx,
    cr: &DynamicObject,
    cr_json: &Value,
    scope: Option<&render::Scope>,
    existing: Option<&Value>,
    observed: &HashMap<String, Value>,
    sync: &Sync,
) -> Value {
    let report = scope.map(|scope| status::compute(&ctx.rule, scope, cr_json, observed));
    let mut out = Map::new();
    if let Some(r) = &report {
        out.extend(r.fields.clone());
    } else if let Some(Value::Object(old)) = existing {
        // Keep what was there: nothing can be computed for a resource that does not render.
        out.extend(
            old.iter()
                .filter(|(k, _)| *k != "conditions" && *k != "observedGeneration")
                .map(|(k, v)| (k.clone(), v.clone())),
        );
    }
    let generation = cr.metadata.generation;
    let (ready, ready_reason, ready_message) = match (sync, &report) {
        (Sync::Failed { message, .. }, _) => (false, "SyncFailed", message.clone()),
        (Sync::Ok, Some(r)) if r.ready && r.problems.is_empty() => {
            (true, "Ready", "all children are ready".to_string())
        }
        (Sync::Ok, Some(r)) => {
            let mut parts = r
                .problems
                .iter()
                .map(|p| format!("status: {p}"))
                .collect::<Vec<_>>();
            parts.extend(r.notes.iter().cloned());
            (
                r.ready && r.problems.is_empty(),
                if r.problems.is_empty() {
                    "NotReady"
                } else {
                    "StatusError"
                },
                parts.join("; "),
            )
        }
        (Sync::Ok, None) => (false, "NotReady", String::new()),
    };
    let synced = match sync {
        Sync::Ok => Condition {
            type_: "Synced",
            status: true,
            reason: "Applied".into(),
            message: "every child matches the rule".into(),
        },
        Sync::Failed { reason, message } => Condition {
            type_: "Synced",
            status: false,
            reason: (*reason).into(),
            message: message.clone(),
        },
    };
    let conditions = [
        Condition {
            type_: "Ready",
            status: ready,
            reason: ready_reason.into(),
            message: ready_message,
        },
        synced,
    ];
    out.insert(
        "conditions".into(),
        merge_conditions(
            existing.and_then(|s| s.get("conditions")),
            &conditions,
            generation,
            &now_rfc3339(),
        ),
    );
    if let Some(g) = generation {
        out.insert("observedGeneration".into(), json!(g));
    }
    Value::Object(out)
}

async fn write_status(
    ctx: &Ctx,
    cr: &DynamicObject,
    cr_json: &Value,
    scope: Option<&render::Scope>,
    observed: &HashMap<String, Value>,
    sync: &Sync,
) -> Result<(), ReconcileError> {
    let key = ObjectKey::of_object(&ctx.parent.resource, cr);
    let live_rv = cr.resource_version().unwrap_or_default();
    // What the resource's status is: our last write while the cache lags behind it.
    let ours = ctx
        .status_memo
        .get(&key)
        .filter(|(rv, _)| apply::not_newer(&live_rv, rv))
        .map(|(_, status)| status);
    let current = ours.as_ref().or(cr_json.get("status"));
    let status = desired_status(ctx, cr, cr_json, scope, current, observed, sync);
    if current == Some(&status) {
        return Ok(());
    }
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &key.namespace, &ctx.parent.resource);
    let body = json!({"apiVersion": key.api_version, "kind": key.kind, "status": status});
    let written = api
        .patch_status(
            &key.name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&body),
        )
        .await
        .map_err(ReconcileError::Status)?;
    ctx.metrics.write(&ctx.rule.name, "status");
    tracing::debug!(rule = %ctx.rule.name, object = %key.name, namespace = %key.namespace, "status written");
    ctx.status_memo.put(
        key,
        (written.resource_version().unwrap_or_default(), status),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::backoff;
    use std::time::Duration;

    #[test]
    fn backoff_doubles_from_half_a_second_to_a_five_minute_cap() {
        assert_eq!(backoff(0), Duration::from_millis(500));
        assert_eq!(backoff(1), Duration::from_secs(1));
        assert_eq!(backoff(5), Duration::from_secs(16));
        assert_eq!(backoff(10), Duration::from_secs(300));
        assert_eq!(backoff(u32::MAX), Duration::from_secs(300));
    }
}
