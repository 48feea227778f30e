//! ruleop's finalizers and what it does while a resource is deleted. Ordered deletion
//! (`deletion: Ordered`): ruleop holds each resource with a finalizer and, when it is
//! deleted, removes its children in the reverse of the order they were made — a child
//! only once nothing that depends on it is left, each removed in the foreground (its own
//! dependents, such as pods, gone first) — then releases the resource. Orphaned children
//! (`onRemove: Orphan`): ruleop holds the resource until their objects are let go, so the
//! garbage collector leaves them.

use super::ctx::Ctx;
use super::outcome::ReconcileError;
use super::prune::{asks_orphan, owned, take_away};
use super::record::ResourceId;
use crate::apply::{self, ApplyError};
use crate::cache::watches::ChildKind;
use crate::render::CHILD_LABEL;
use crate::rules::graph;
use crate::rules::spec::{DeletionPolicy, OnRemove};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;

/// The finalizer ruleop puts on resources of rules with ordered deletion.
pub const FINALIZER: &str = "ruleop.dev/ordered-deletion";

/// The finalizer ruleop puts on resources of rules with a child that orphans its objects
/// (`onRemove: Orphan`): the resource stays until those objects are no longer its own, so
/// the garbage collector does not delete them with it.
pub const ORPHAN_FINALIZER: &str = "ruleop.dev/orphan";

const OURS: [&str; 2] = [FINALIZER, ORPHAN_FINALIZER];

/// How often a deletion in progress is looked at again (watch events also wake it).
const RECHECK: Duration = Duration::from_secs(2);

/// Whether the resource carries one of ruleop's finalizers.
pub fn has_finalizer(cr: &DynamicObject) -> bool {
    cr.finalizers().iter().any(|f| OURS.contains(&f.as_str()))
}

/// Whether the rule has a child whose objects are orphaned when they leave it.
pub fn orphans_children(ctx: &Ctx) -> bool {
    ctx.rule
        .children
        .iter()
        .any(|c| c.on_remove == OnRemove::Orphan)
}

/// The finalizers the resource needs: ordered deletion's when the rule asks for it; the
/// orphans' while the rule has such a child, or any object of the resource still asks to
/// be orphaned (an edit that removed the last such child leaves its objects protected
/// until they are let go).
fn wanted(ctx: &Ctx, cr: &DynamicObject) -> Vec<&'static str> {
    let mut out = Vec::new();
    if ctx.rule.deletion == DeletionPolicy::Ordered {
        out.push(FINALIZER);
    }
    let held = cr.finalizers().iter().any(|f| f == ORPHAN_FINALIZER);
    let unwatched = ctx.kinds.unwatched.get().is_none_or(|k| !k.is_empty());
    if orphans_children(ctx) || (held && (unwatched || any_orphan_left(ctx, cr))) {
        out.push(ORPHAN_FINALIZER);
    }
    out
}

/// Whether the kinds no revision in force makes are not known yet (the rule's retirement
/// has not read the inventory): an object of such a kind may ask to be orphaned, and no
/// watch of this rule sees it.
fn retiring(ctx: &Ctx) -> bool {
    ctx.kinds.unwatched.get().is_none()
}

/// Why an object that asks to be orphaned could not be let go.
#[derive(Debug, thiserror::Error)]
pub enum LetGoError {
    #[error("reading the {kind} objects of the rule: {message}")]
    Read { kind: String, message: String },
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error("not the leader: nothing written")]
    NotLeader,
}

/// Lets go every object of `kinds` ((apiVersion, kind)) labelled for rule `rule`, in
/// `namespace` (or all), that asks to be orphaned and whose controller is one of `owners`.
/// The API server is asked: no watch need see these kinds. How many were let go.
pub async fn let_go_orphans(
    client: &kube::Client,
    fence: &crate::client::Fence,
    rule: &str,
    kinds: impl IntoIterator<Item = (String, String)>,
    namespace: Option<&str>,
    owners: &BTreeSet<String>,
) -> Result<usize, LetGoError> {
    let selector = format!("{}={rule}", crate::render::RULE_LABEL);
    let mut n = 0;
    for (api_version, kind) in kinds {
        let version = api_version.rsplit('/').next().unwrap_or(&api_version);
        let group = crate::render::group_of(&api_version);
        let read = |message: String| LetGoError::Read {
            kind: kind.clone(),
            message,
        };
        let resolved = match crate::cache::discovery::child(client, group, version, &kind).await {
            Ok(Some(r)) => r,
            // Not served: nothing of it can be left.
            Ok(None) => continue,
            Err(e) => return Err(read(e.to_string())),
        };
        let ar = &*resolved.resource;
        let all: Api<DynamicObject> = match namespace {
            Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
            None => Api::all_with(client.clone(), ar),
        };
        let list = all
            .list(&kube::api::ListParams::default().labels(&selector))
            .await
            .map_err(|e| read(e.to_string()))?;
        for o in list.items.iter().filter(|o| apply::orphans(o)) {
            let Some(owner) =
                crate::cache::owners::controller_uid(o).filter(|u| owners.contains(*u))
            else {
                continue;
            };
            if !fence.holds() {
                return Err(LetGoError::NotLeader);
            }
            let ns = o.namespace().unwrap_or_default();
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, ar);
            apply::orphan(&api, ar, o, owner).await?;
            tracing::info!(rule, kind = %kind, name = %o.name_any(), namespace = %ns, "a child that asks to be orphaned let go (of a kind no watch of the rule sees)");
            n += 1;
        }
    }
    Ok(n)
}

/// Lets go the objects of `cr` that ask to be orphaned among the kinds no revision in
/// force makes (no watch sees them).
async fn let_go_unwatched(ctx: &Ctx, cr: &DynamicObject) -> Result<(), ReconcileError> {
    let ns = cr.namespace().unwrap_or_default();
    let owners: BTreeSet<String> = cr.uid().into_iter().collect();
    let kinds = ctx.kinds.unwatched.get().unwrap_or_default();
    let p = &ctx.process;
    match let_go_orphans(
        &p.client,
        &p.fence,
        &ctx.rule.name,
        kinds,
        Some(&ns),
        &owners,
    )
    .await
    {
        Ok(_) => Ok(()),
        Err(LetGoError::Read { kind, message }) => Err(ReconcileError::Unwatched { kind, message }),
        Err(LetGoError::Apply(e)) => Err(ReconcileError::Apply(e)),
        Err(LetGoError::NotLeader) => Err(ReconcileError::NotLeader),
    }
}

/// Whether an object of the resource still asks to be orphaned.
fn any_orphan_left(ctx: &Ctx, cr: &DynamicObject) -> bool {
    let (ns, uid) = (
        cr.namespace().unwrap_or_default(),
        cr.uid().unwrap_or_default(),
    );
    ctx.kinds
        .children
        .distinct()
        .iter()
        .any(|k| owned(k, &ns, &uid).iter().any(apply::orphans))
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
    // (The answer holds the whole resource: read as tolerantly as its watch reads it.)
    let api: Api<crate::cache::tolerant::Tolerant> =
        Api::namespaced_with(ctx.process.client.clone(), &ns, &*ctx.kinds.parent.resource);
    let body =
        json!({"metadata": {"finalizers": finalizers, "resourceVersion": cr.resource_version()}});
    api.patch(
        &cr.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&body),
    )
    .await
    .map_err(ReconcileError::Finalizer)?;
    ctx.process.metrics.write(&ctx.rule.name, "finalizer");
    Ok(())
}

/// Puts on the finalizers the rule asks for (ordered deletion, orphaned children), and
/// takes off those it no longer asks for. One write per resource, when they change.
pub async fn keep_finalizer(ctx: &Ctx, cr: &DynamicObject) -> Result<(), ReconcileError> {
    let wanted = wanted(ctx, cr);
    let have: Vec<&str> = cr
        .finalizers()
        .iter()
        .map(String::as_str)
        .filter(|f| OURS.contains(f))
        .collect();
    if OURS.iter().all(|f| wanted.contains(f) == have.contains(f)) {
        return Ok(());
    }
    let mut finalizers: Vec<String> = cr
        .finalizers()
        .iter()
        .filter(|f| !OURS.contains(&f.as_str()))
        .cloned()
        .collect();
    finalizers.extend(wanted.iter().map(|f| f.to_string()));
    set_finalizers(ctx, cr, finalizers).await
}

/// One step of the deletion of `cr` while it carries ruleop's finalizers: first the
/// objects that asked to be orphaned are let go (so the garbage collector leaves them);
/// then, with ordered deletion, the children that may go now are deleted; the finalizers
/// are released once that is done. Nothing is done until every child kind's watch has
/// listed (what the caches lack would be taken for gone).
pub async fn step(ctx: &Ctx, r: &ResourceId, cr: &DynamicObject) -> Result<Action, ReconcileError> {
    if !ctx.kinds.listed.children() {
        // Said once the usual wait is over: a watch the RBAC forbids never lists.
        if ctx.kinds.listed.ready() {
            tracing::warn!(rule = %ctx.rule.name, object = %cr.name_any(), "deletion waits for every child kind's watch to list (is `list`/`watch` on a child kind forbidden?): nothing is deleted or let go on the word of a cache that has not listed");
        }
        return Ok(Action::requeue(RECHECK));
    }
    let ns = cr.namespace().unwrap_or_default();
    let uid = cr.uid().unwrap_or_default();
    let objects: Vec<_> = ctx
        .kinds
        .children
        .distinct()
        .iter()
        .flat_map(|k| owned(k, &ns, &uid).into_iter().map(move |o| (k, o)))
        .collect();
    for (k, o) in objects.iter().filter(|(_, o)| asks_orphan(ctx, o)) {
        if !ctx.process.fence.holds() {
            return Err(ReconcileError::NotLeader);
        }
        let why = "is kept: its resource is being deleted";
        take_away(ctx, cr, &ns, &k.resolved.resource, o, &uid, why)
            .await
            .map_err(ReconcileError::Apply)?;
    }
    let objects: Vec<_> = objects
        .into_iter()
        .filter(|(_, o)| !asks_orphan(ctx, o))
        .collect();
    // `kubectl delete --cascade=orphan` asks for the children to stay.
    let orphan = cr.finalizers().iter().any(|f| f == "orphan");
    if cr.finalizers().iter().any(|f| f == ORPHAN_FINALIZER) {
        if retiring(ctx) {
            // Which kinds the rule no longer makes is not known yet.
            tracing::debug!(rule = %ctx.rule.name, object = %cr.name_any(), "deletion waits to know the kinds the rule no longer makes (their objects that ask to be orphaned are let go first)");
            return Ok(Action::requeue(RECHECK));
        }
        let_go_unwatched(ctx, cr).await?;
    }
    let ordered = ctx.rule.deletion == DeletionPolicy::Ordered
        && cr.finalizers().iter().any(|f| f == FINALIZER);
    if objects.is_empty() || orphan || !ordered {
        // All gone (or the rule no longer asks for order, or the children are to stay:
        // the garbage collector does what the deletion asked).
        let rest: Vec<String> = cr
            .finalizers()
            .iter()
            .filter(|f| !OURS.contains(&f.as_str()))
            .cloned()
            .collect();
        set_finalizers(ctx, cr, rest).await?;
        ctx.records.abandon_writes(r);
        tracing::info!(rule = %ctx.rule.name, object = %cr.name_any(), namespace = %ns, "resource released");
        return Ok(Action::await_change());
    }
    delete_in_order(ctx, &ns, &objects).await?;
    Ok(Action::requeue(RECHECK))
}

/// Deletes, in the foreground, the objects whose children nothing left depends on (an
/// object whose child the rule no longer has goes first).
async fn delete_in_order(
    ctx: &Ctx,
    ns: &str,
    objects: &[(&ChildKind, DynamicObject)],
) -> Result<(), ReconcileError> {
    let position = |o: &DynamicObject| {
        let id = o.labels().get(CHILD_LABEL)?;
        ctx.rule.children.iter().position(|c| &c.id == id)
    };
    let present: BTreeSet<usize> = objects.iter().filter_map(|(_, o)| position(o)).collect();
    let now = deletable(&ctx.rule.deps, &present);
    for (k, o) in objects {
        let go = position(o).is_none_or(|i| now.contains(&i));
        if !go || o.meta().deletion_timestamp.is_some() {
            continue;
        }
        if !ctx.process.fence.holds() {
            return Err(ReconcileError::NotLeader);
        }
        let ar = &*k.resolved.resource;
        let api: Api<DynamicObject> = Api::namespaced_with(ctx.process.client.clone(), ns, ar);
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
    Ok(())
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
