//! A resource whose body ruleop cannot decode (a free-form field nested past the decoder's
//! limit: see [`crate::cache::tolerant`]) fails alone: nothing of it is rendered, written
//! or deleted; it gets `Synced` and `Ready` `False` (reason `Undecodable`, written with a
//! merge patch of the status, which needs no decode of the body), a Warning Event and a
//! count in `ruleop_reconcile_errors_total{category="undecodable"}`; the others of the rule
//! go on. A change of the resource brings it back.

use super::ctx::Ctx;
use super::report::{event, key_of};
use crate::cache::tolerant::Tolerant;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt};
use serde_json::json;

/// Reports `cr`, which could not be decoded (`why`), and waits for a change of it.
pub async fn report(ctx: &Ctx, cr: &DynamicObject, why: &str) -> Action {
    let message = format!(
        "the resource cannot be read by ruleop ({why}); nothing of it is rendered, written or deleted until it is changed\n  fix: keep free-form fields to at most 100 levels of nesting"
    );
    let said = cr.data["status"]["conditions"]
        .as_array()
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c["type"] == "Synced"
                    && c["reason"] == "Undecodable"
                    && c["message"] == message.as_str()
                    && c["observedGeneration"].as_i64() == cr.meta().generation
            })
        });
    if said {
        // Said already (a resync, a replica's restart): nothing more to write.
        return Action::await_change();
    }
    tracing::warn!(rule = %ctx.rule.name, object = %key_of(cr), error = %why, "a resource that cannot be decoded: it alone is not reconciled");
    ctx.process.metrics.error(&ctx.rule.name, "undecodable");
    event(
        ctx,
        cr,
        EventType::Warning,
        "Undecodable",
        "Reconcile",
        message.clone(),
        None,
    );
    if ctx.process.fence.holds() {
        let now = k8s_openapi::jiff::Timestamp::now().to_string();
        let condition = |type_: &str, status: &str, reason: &str, message: &str| {
            json!({"type": type_, "status": status, "reason": reason, "message": message,
                "lastTransitionTime": now, "observedGeneration": cr.meta().generation})
        };
        let patch = json!({"status": {"conditions": [
            condition("Ready", "False", "Undecodable", &message),
            condition("Synced", "False", "Undecodable", &message),
            condition("Reconciling", "False", "Stalled", ""),
            condition("Stalled", "True", "Undecodable", &message),
        ]}});
        // (The answer holds the body too: read as tolerantly as the watch reads it.)
        let api: Api<Tolerant> = Api::namespaced_with(
            ctx.process.client.clone(),
            &cr.namespace().unwrap_or_default(),
            &*ctx.kinds.parent.resource,
        );
        match api
            .patch_status(
                &cr.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => ctx.process.metrics.write(&ctx.rule.name, "status"),
            Err(e) => {
                tracing::warn!(rule = %ctx.rule.name, object = %key_of(cr), error = %e, "the status of a resource that cannot be decoded could not be written")
            }
        }
    }
    Action::await_change()
}
