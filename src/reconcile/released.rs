//! Children `ruleop release` let go (an uninstall), taken back when ruleop serves their
//! resource again: the resource keeps their uids ([`RELEASED_ANNOTATION`]), and an object
//! of a child's name is taken back only if it is one of them, has no controller and was
//! applied by ruleop ([`crate::apply::ownership::released`]). Once every child is ruleop's
//! again the annotation goes (one write, once).

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
            v.split(',')
                .map(str::trim)
                .filter(|u| !u.is_empty())
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Takes the annotation off once a round wrote every child with no problem (the released
/// ones taken back, or made anew). The caller calls it only when no child waits (a child
/// that waits for another is not written yet: it may be one released).
pub async fn forget_when_taken_back(ctx: &Ctx, cr: &DynamicObject, round: &Round) {
    let done = round.problems.is_empty() && round.transient.is_none() && !round.on_its_way;
    if round.released.is_empty() || !done || !ctx.process.fence.holds() {
        return;
    }
    let ns = cr.namespace().unwrap_or_default();
    let ar = &*ctx.kinds.parent.resource;
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.process.client.clone(), &ns, ar);
    let patch = serde_json::json!({"metadata": {"annotations": {RELEASED_ANNOTATION: null}}});
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
