//! Ordered deletion (`deletion: Ordered`): ruleop holds each resource with a finalizer and,
//! when it is deleted, removes its children in the reverse of the order they were made —
//! a child only once nothing that depends on it is left, each removed in the foreground
//! (its own dependents, such as pods, gone first) — then releases the resource.

use super::ctx::Ctx;
use super::outcome::ReconcileError;
use super::prune::owned;
use super::record::ResourceId;
use crate::apply::ApplyError;
use crate::render::CHILD_LABEL;
use crate::rules::graph;
use crate::rules::spec::DeletionPolicy;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;

/// The finalizer ruleop puts on resources of rules with ordered deletion.
pub const FINALIZER: &str = "ruleop.dev/ordered-deletion";

/// How often a deletion in progress is looked at again (watch events also wake it).
const RECHECK: Duration = Duration::from_secs(2);

pub fn has_finalizer(cr: &DynamicObject) -> bool {
    cr.finalizers().iter().any(|f| f == FINALIZER)
}

/// Among the children with objects left (`present`, indexes into the rule's children),
/// those that may go now: nothing left depends on them.
pub fn deletable(deps: &[BTreeSet<usize>], present: &BTreeSet<usize>) -> BTreeSet<usize> {
    present
        .iter()
        .copied()
        .filter(|&i| graph::dependents(deps, i).is_disjoint(present))
        .collect()
}

/// Sets the resource's finalizers to `finalizers`, if its resourceVersion is still `rv`.
async fn set_finalizers(
    ctx: &Ctx,
    cr: &DynamicObject,
    finalizers: Vec<String>,
) -> Result<(), ReconcileError> {
    if !ctx.process.fence.holds() {
        return Err(ReconcileError::NotLeader);
    }
    let ns = cr.namespace().unwrap_or_default();
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.process.client.clone(), &ns, &*ctx.kinds.parent.resource);
    let body =
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": cr.resource_version()}});
    api.patch(
        &cr.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&body),
    )
    .await
    .map_err(ReconcileError::Status)?;
    ctx.process.metrics.write(&ctx.rule.name, "finalizer");
    Ok(())
}

/// Adds the finalizer when the rule asks for ordered deletion, removes it when it no
/// longer does. One write per resource, once.
pub async fn keep_finalizer(ctx: &Ctx, cr: &DynamicObject) -> Result<(), ReconcileError> {
    let wanted = ctx.rule.deletion == DeletionPolicy::Ordered;
    if wanted == has_finalizer(cr) {
        return Ok(());
    }
    let mut finalizers: Vec<String> = cr
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    if wanted {
        finalizers.push(FINALIZER.into());
    }
    set_finalizers(ctx, cr, finalizers).await
}

/// One step of the ordered deletion of `cr`: deletes the children that may go now, or
/// releases the resource once none is left.
pub async fn step(ctx: &Ctx, r: &ResourceId, cr: &DynamicObject) -> Result<Action, ReconcileError> {
    let ns = cr.namespace().unwrap_or_default();
    let uid = cr.uid().unwrap_or_default();
    let position = |o: &DynamicObject| {
        let id = o.labels().get(CHILD_LABEL)?;
        ctx.rule.children.iter().position(|c| &c.id == id)
    };
    let objects: Vec<_> = ctx
        .kinds
        .children
        .distinct()
        .iter()
        .flat_map(|k| owned(k, &ns, &uid).into_iter().map(move |o| (k, o)))
        .collect();
    // `kubectl delete --cascade=orphan` asks for the children to stay.
    let orphan = cr.finalizers().iter().any(|f| f == "orphan");
    if objects.is_empty() || orphan || ctx.rule.deletion != DeletionPolicy::Ordered {
        // All gone (or the rule no longer asks for order, or the children are to stay:
        // the garbage collector does what the deletion asked).
        let rest: Vec<String> = cr
            .finalizers()
            .iter()
            .filter(|f| *f != FINALIZER)
            .cloned()
            .collect();
        set_finalizers(ctx, cr, rest).await?;
        ctx.records.abandon_writes(r);
        tracing::info!(rule = %ctx.rule.name, object = %cr.name_any(), namespace = %ns, "children deleted in order; resource released");
        return Ok(Action::await_change());
    }
    // An object whose child the rule no longer has goes first.
    let present: BTreeSet<usize> = objects.iter().filter_map(|(_, o)| position(o)).collect();
    let now = deletable(&ctx.rule.deps, &present);
    for (k, o) in &objects {
        let go = position(o).is_none_or(|i| now.contains(&i));
        if !go || o.meta().deletion_timestamp.is_some() {
            continue;
        }
        if !ctx.process.fence.holds() {
            return Err(ReconcileError::NotLeader);
        }
        let ar = &*k.resolved.resource;
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.process.client.clone(), &ns, ar);
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: o.uid(),
                resource_version: None,
            }),
            ..DeleteParams::foreground()
        };
        match api.delete(&o.name_any(), &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => {
                return Err(ReconcileError::Apply(ApplyError::from_kube(
                    &ar.kind,
                    &o.name_any(),
                    e,
                )));
            }
        }
        ctx.process.metrics.write(&ctx.rule.name, "prune");
        tracing::info!(rule = %ctx.rule.name, kind = %ar.kind, name = %o.name_any(), namespace = %ns, "deleted child in order");
    }
    Ok(Action::requeue(RECHECK))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependents_go_before_what_they_depend_on() {
        // 0: config; 1: job (reads config); 2: app (after job, reads config); 3: hpa (reads app).
        let deps: Vec<BTreeSet<usize>> = vec![
            BTreeSet::new(),
            [0].into_iter().collect(),
            [0, 1].into_iter().collect(),
            [2].into_iter().collect(),
        ];
        let all: BTreeSet<usize> = (0..4).collect();
        assert_eq!(deletable(&deps, &all), [3].into_iter().collect());
        let rest: BTreeSet<usize> = [0, 1, 2].into_iter().collect();
        assert_eq!(deletable(&deps, &rest), [2].into_iter().collect());
        let rest: BTreeSet<usize> = [0, 1].into_iter().collect();
        assert_eq!(deletable(&deps, &rest), [1].into_iter().collect());
        // Children that depend on nothing left go together.
        let rest: BTreeSet<usize> = [0, 3].into_iter().collect();
        assert_eq!(deletable(&deps, &rest), [3].into_iter().collect());
    }
}
