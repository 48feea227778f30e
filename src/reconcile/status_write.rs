//! The status write of a reconcile: the status computed from what the reconcile saw
//! (the rule's exported fields, `observedGeneration`, the `Ready` and `Synced`
//! conditions), compared with what the resource has, and server-side applied only when
//! it differs.

use super::ctx::Ctx;
use super::outcome::{Problem, ReconcileError, Retry, Sync};
use super::record::{ResourceId, StatusMark};
use crate::apply::{Lag, ObjectKey};
use crate::render::{self, FIELD_MANAGER, Plan};
use crate::status::verdict::{self, SyncProblem};
use crate::status::{self, merge_conditions};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::time::Instant;
use tracing::Instrument as _;

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// What a reconcile saw, for the status: the render's scope and outcome (None when it
/// failed), and the live children by instance.
pub struct Seen<'a> {
    pub scope: Option<&'a render::Scope>,
    pub plan: Option<&'a Plan>,
    pub observed: &'a HashMap<String, Value>,
}

/// The status to write: exported fields, observedGeneration, and the Ready and Synced conditions.
fn desired_status(
    ctx: &Ctx,
    cr: &DynamicObject,
    cr_json: &Value,
    seen: &Seen<'_>,
    existing: Option<&Value>,
    sync: &Sync,
) -> Value {
    let report = seen
        .scope
        .map(|scope| status::compute(&ctx.rule, scope, cr_json, seen.plan, seen.observed));
    let mut out = Map::new();
    if let Some(r) = &report {
        out.extend(r.fields.clone());
    } else if let Some(Value::Object(old)) = existing {
        // Keep what was there: nothing can be computed for a resource that does not render.
        out.extend(
            old.iter()
                .filter(|(k, _)| {
                    !matches!(
                        k.as_str(),
                        "conditions" | "observedGeneration" | "ruleRevision"
                    )
                })
                .map(|(k, v)| (k.clone(), v.clone())),
        );
    }
    // Without a status subresource every status write moves the generation: a status
    // that records it would chase it forever.
    let generation = cr
        .metadata
        .generation
        .filter(|_| ctx.kinds.parent.status_subresource);
    let problem = match sync {
        Sync::Ok => None,
        Sync::Failed(p) => Some(SyncProblem {
            reason: p.reason,
            message: &p.message,
        }),
    };
    let conditions = verdict::conditions(report.as_ref(), problem);
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
    if let Some(r) = ctx.revision {
        out.insert("ruleRevision".into(), json!(r));
    }
    Value::Object(out)
}

/// The problem a status refused by the CRD's schema makes (the API server's message, cut).
fn refusal(message: &str) -> Problem {
    const MOST: usize = 4096;
    let mut cut = message.len().min(MOST);
    while !message.is_char_boundary(cut) {
        cut -= 1;
    }
    let more = if cut < message.len() { " …" } else { "" };
    Problem {
        reason: "StatusRefused",
        message: format!(
            "the API server refused the status the rule computes: {}{more}; make the rule's status fields fit the CRD's status schema (their types, maxLength, maxItems), or widen the schema; the fields keep their last accepted values",
            &message[..cut]
        ),
        retry: Retry::Backoff,
    }
}

/// The status we last wrote, while the cached resource is that write or older (`live_rv`):
/// None once the cache has moved past it (then the cache is the status, and the mark goes).
fn our_status(mark: &StatusMark, live_rv: &str) -> Option<Value> {
    match mark.lag(live_rv) {
        Lag::Behind | Lag::Shows => serde_json::from_str(&mark.text).ok(),
        Lag::Past => None,
    }
}

/// Server-side applies `status`: through the status subresource, or the object itself
/// when the kind has none.
async fn patch_status(
    ctx: &Ctx,
    api: &Api<DynamicObject>,
    key: &ObjectKey,
    status: &Value,
) -> Result<DynamicObject, kube::Error> {
    let span = tracing::info_span!(
        "status write",
        subresource = ctx.kinds.parent.status_subresource
    );
    patch(ctx, api, key, status).instrument(span).await
}

async fn patch(
    ctx: &Ctx,
    api: &Api<DynamicObject>,
    key: &ObjectKey,
    status: &Value,
) -> Result<DynamicObject, kube::Error> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    if ctx.kinds.parent.status_subresource {
        let body = json!({"apiVersion": key.api_version, "kind": key.kind, "status": status});
        api.patch_status(&key.name, &params, &Patch::Apply(&body))
            .await
    } else {
        // No status subresource: the status is a field of the object itself.
        let body = json!({"apiVersion": key.api_version, "kind": key.kind,
            "metadata": {"name": key.name}, "status": status});
        api.patch(&key.name, &params, &Patch::Apply(&body)).await
    }
}

/// Writes the resource's status if it differs from what it is (our last write while the
/// cache lags behind it): server-side applied, learning the fields the CRD's schema
/// refuses.
pub async fn write_status(
    ctx: &Ctx,
    r: &ResourceId,
    cr: &DynamicObject,
    cr_json: &Value,
    seen: &Seen<'_>,
    sync: &Sync,
) -> Result<(), ReconcileError> {
    let key = ObjectKey::of_object(&ctx.kinds.parent.resource, cr);
    let live_rv = cr.resource_version().unwrap_or_default();
    // What the resource's status is: our last write while the cache lags behind it.
    let mark = ctx.records.status(r);
    let ours = mark.as_ref().and_then(|m| our_status(m, &live_rv));
    if mark.is_some() && ours.is_none() {
        ctx.records.set_status(r, None);
    }
    let current = ours.as_ref().or(cr_json.get("status"));
    let started = Instant::now();
    let mut status = desired_status(ctx, cr, cr_json, seen, current, sync);
    ctx.status_schema.strip(&mut status);
    ctx.process.metrics.stage(&ctx.rule.name, "status", started);
    if current == Some(&status) {
        return Ok(());
    }
    let _write = StageTimer(ctx, Instant::now());
    if !ctx.process.fence.holds() {
        return Err(ReconcileError::NotLeader);
    }
    let api: Api<DynamicObject> = Api::namespaced_with(
        ctx.process.client.clone(),
        &key.namespace,
        &*ctx.kinds.parent.resource,
    );
    // A field the CRD's status schema does not declare is refused; learned, it is left
    // out and the write tried again (once per field the schema lacks). A status the
    // schema refuses otherwise (a type, a length, a count) is written once more without
    // the rule's new values, saying why, so that it never freezes.
    let mut refused = false;
    let written = loop {
        match patch_status(ctx, &api, &key, &status).await {
            Err(kube::Error::Api(e)) if ctx.status_schema.learn_refusal(&e.message) => {
                ctx.status_schema.strip(&mut status);
            }
            Err(kube::Error::Api(e)) if e.code == 422 && !refused => {
                refused = true;
                tracing::warn!(rule = %ctx.rule.name, object = %key.name, namespace = %key.namespace, error = %e.message, "the status the rule computes is refused by the custom resource's schema; its conditions say so");
                // The children's own problem, if any, stays first; the refusal joins it.
                let mut problems = match sync {
                    Sync::Failed(p) => vec![p.clone()],
                    Sync::Ok => Vec::new(),
                };
                problems.push(refusal(&e.message));
                let why = Sync::of(problems);
                let kept = Seen {
                    scope: None,
                    plan: seen.plan,
                    observed: seen.observed,
                };
                status = desired_status(ctx, cr, cr_json, &kept, current, &why);
                ctx.status_schema.strip(&mut status);
            }
            other => break other.map_err(ReconcileError::Status)?,
        }
        if current == Some(&status) {
            return Ok(());
        }
    };
    ctx.process.metrics.write(&ctx.rule.name, "status");
    tracing::debug!(rule = %ctx.rule.name, object = %key.name, namespace = %key.namespace, "status written");
    let kept = written.data.get("status").cloned().unwrap_or(Value::Null);
    if ctx.status_schema.learn(&status, &kept) {
        ctx.status_schema.strip(&mut status);
    }
    let mark = StatusMark {
        text: status.to_string().into(),
        resource_version: written.resource_version().unwrap_or_default(),
        at: std::time::Instant::now(),
    };
    ctx.records.set_status(r, Some(mark));
    Ok(())
}

/// Observes the `status_write` stage when dropped (the write's every way out).
struct StageTimer<'a>(&'a Ctx, Instant);

impl Drop for StageTimer<'_> {
    fn drop(&mut self) {
        let rule = &self.0.rule.name;
        self.0.process.metrics.stage(rule, "status_write", self.1);
    }
}

#[cfg(test)]
mod tests {
    use super::{StatusMark, our_status};
    use serde_json::json;
    use std::time::Instant;

    #[test]
    fn our_last_status_counts_until_the_cache_moves_past_it() {
        let mark = StatusMark {
            text: r#"{"readyReplicas":1}"#.into(),
            resource_version: "12".into(),
            at: Instant::now(),
        };
        let ours = Some(json!({"readyReplicas": 1}));
        assert_eq!(
            our_status(&mark, "11"),
            ours,
            "the cache lags behind our write"
        );
        assert_eq!(our_status(&mark, "12"), ours, "the cache shows our write");
        assert_eq!(
            our_status(&mark, "13"),
            None,
            "a newer version is the status now"
        );
    }
}
