//! Children `ruleop release` let go (an uninstall), taken back when ruleop serves their
//! resource again: the resource keeps their uids ([`RELEASED_ANNOTATION`]), and an object
//! of a child's name is taken back only if it is one of them, has no controller and was
//! applied by ruleop ([`crate::apply::ownership::released`]). Each uid taken back leaves the
//! record, and the annotation goes with the last (a write only when one was taken back).

use super::children::Round;
use super::ctx::Ctx;
use crate::render::RELEASED_ANNOTATION;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use std::sync::Arc;

/// The uids the resource says were released from it.
pub fn of(cr: &DynamicObject) -> Arc<[String]> {
    cr.annotations()
        .get(RELEASED_ANNOTATION)
        .map(|v| {
            crate::render::released_uids(v)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Takes off the record the uids this round found ruleop's again (taken back); the
/// annotation goes with the last. A released object the rule does not render now (its
/// `when` false) stays named, to be taken back when it is rendered again.
pub async fn forget_taken_back(ctx: &Ctx, cr: &DynamicObject, round: &Round) {
    let uid = cr.uid().unwrap_or_default();
    let ours: Vec<&str> = round
        .observed
        .values()
        .filter(|o| {
            crate::apply::ownership::controller_ref(o).and_then(|r| r["uid"].as_str())
                == Some(uid.as_str())
        })
        .filter_map(|o| {
            o.pointer("/metadata/uid")
                .and_then(serde_json::Value::as_str)
        })
        .collect();
    let left: Vec<&str> = round
        .released
        .iter()
        .map(String::as_str)
        .filter(|u| !ours.contains(u))
        .collect();
    if left.len() == round.released.len() || !ctx.process.fence.holds() {
        return;
    }
    let value = match left.is_empty() {
        true => serde_json::Value::Null,
        false => serde_json::Value::String(left.join(",")),
    };
    let ns = cr.namespace().unwrap_or_default();
    let ar = &*ctx.kinds.parent.resource;
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.process.client.clone(), &ns, ar);
    let patch = serde_json::json!({"metadata": {"annotations": {RELEASED_ANNOTATION: value}}});
    match api
        .patch(
            &cr.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => ctx.process.metrics.write(&ctx.rule.name, "adopt"),
        Err(e) => {
            tracing::debug!(rule = %ctx.rule.name, resource = %cr.name_any(), error = %e, "the released children's record stays on the resource (tried again next round)")
        }
    }
}
