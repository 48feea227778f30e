//! ruleop's finalizers and what it does while a resource is deleted. Ordered deletion
//! (`deletion: Ordered`): ruleop holds each resource with a finalizer and, when it is
//! deleted, removes its children in the reverse of the order they were made — a child
//! only once nothing that depends on it is left, each removed in the foreground (its own
//! dependents, such as pods, gone first) — then releases the resource. Orphaned children
//! (`onRemove: Orphan`): ruleop holds the resource until their objects are let go, so the
//! garbage collector leaves them.

use super::ctx::Ctx;
use super::outcome::ReconcileError;
use super::prune::{owned, removal_of, take_away};
use super::record::ResourceId;
use crate::apply::{self, ApplyError};
use crate::cache::watches::ChildKind;
use crate::lifecycle::planner::{self, Deleting, Deletion, Holding, Leaving, Then};
use crate::render::CHILD_LABEL;
use crate::rules::spec::{DeletionPolicy, OnRemove};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::discovery::ApiResource;
use kube::runtime::controller::Action;
use kube::{Resource, ResourceExt};
use serde_json::json;
use std::collections::BTreeSet;
use std::time::Duration;

pub use crate::lifecycle::planner::{FINALIZER, ORPHAN_FINALIZER, OURS};

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

/// The finalizers the resource needs (the planner decides: [`planner::finalizers`]).
fn wanted(ctx: &Ctx, cr: &DynamicObject) -> Vec<&'static str> {
    let held = cr.finalizers().iter().any(|f| f == ORPHAN_FINALIZER);
    let orphaning_child = orphans_children(ctx);
    let unwatched = ctx.kinds.unwatched.get().map(|k| !k.is_empty());
    planner::finalizers(Holding {
        ordered: ctx.rule.deletion == DeletionPolicy::Ordered,
        orphaning_child,
        held,
        unwatched,
        // (Looked at only when the answer turns on it: it reads every child kind's cache,
        // and this runs on every reconcile.)
        orphan_left: !orphaning_child
            && held
            && unwatched == Some(false)
            && any_orphan_left(ctx, cr),
    })
}

/// Why an object that asks to be orphaned could not be let go.
#[derive(Debug, thiserror::Error)]
pub enum LetGoError {
    #[error("reading the {kind} objects of the rule: {message}")]
    Read { kind: String, message: String },
    #[error("reading the {kind} objects of the rule: forbidden ({message})")]
    Forbidden { kind: String, message: String },
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error("not the leader: nothing written")]
    NotLeader,
}

/// Lets go every object of `kinds` ((apiVersion, kind)) labelled for rule `rule`, in
/// `namespace` (or all), whose controller is one of `owners` and that asks to be orphaned
/// (with `every`, whatever its `onRemove`: `ruleop release`, nothing of the rule's left
/// owned or marked). The API server is asked: no watch need see these kinds. Those let go,
/// as (their resource's uid, their uid).
pub async fn let_go(
    client: &kube::Client,
    fence: &crate::client::Fence,
    rule: &str,
    kinds: impl IntoIterator<Item = (String, String)>,
    namespace: Option<&str>,
    owners: &BTreeSet<String>,
    every: bool,
) -> Result<Vec<(String, String)>, LetGoError> {
    let found = to_let_go(client, rule, kinds, namespace, owners, every).await?;
    let_go_found(client, fence, rule, &found, every).await
}

/// Lets go the objects [`to_let_go`] found; those let go, as (their resource's uid, their
/// uid).
pub async fn let_go_found(
    client: &kube::Client,
    fence: &crate::client::Fence,
    rule: &str,
    found: &[(ApiResource, DynamicObject, String)],
    every: bool,
) -> Result<Vec<(String, String)>, LetGoError> {
    let mut gone = Vec::new();
    for (ar, o, owner) in found {
        if !fence.holds() {
            return Err(LetGoError::NotLeader);
        }
        let ns = o.namespace().unwrap_or_default();
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, ar);
        apply::orphan(&api, ar, o, owner).await?;
        tracing::info!(rule, kind = %ar.kind, name = %o.name_any(), namespace = %ns, every, "a child let go (of a kind no watch of the rule sees)");
        gone.push((owner.clone(), o.uid().unwrap_or_default()));
    }
    Ok(gone)
}

/// What [`let_go`] would let go, asked of the API server: each object with its kind and
/// its resource's uid.
pub async fn to_let_go(
    client: &kube::Client,
    rule: &str,
    kinds: impl IntoIterator<Item = (String, String)>,
    namespace: Option<&str>,
    owners: &BTreeSet<String>,
    every: bool,
) -> Result<Vec<(ApiResource, DynamicObject, String)>, LetGoError> {
    let selector = format!("{}={rule}", crate::render::RULE_LABEL);
    let mut found = Vec::new();
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
        let list = match all
            .list(&kube::api::ListParams::default().labels(&selector))
            .await
        {
            Ok(l) => l,
            Err(kube::Error::Api(s)) if s.code == 403 => {
                return Err(LetGoError::Forbidden {
                    kind: kind.clone(),
                    message: s.message,
                });
            }
            Err(e) => return Err(read(e.to_string())),
        };
        for o in list
            .items
            .into_iter()
            .filter(|o| every || apply::orphans(o))
        {
            let Some(owner) = crate::cache::owners::controller_uid(&o)
                .filter(|u| owners.contains(*u))
                .map(str::to_string)
            else {
                continue;
            };
            found.push((ar.clone(), o, owner));
        }
    }
    Ok(found)
}

/// Lets go the objects of `cr` that ask to be orphaned among the kinds no revision in
/// force makes (no watch sees them).
async fn let_go_unwatched(ctx: &Ctx, cr: &DynamicObject) -> Result<(), ReconcileError> {
    let ns = cr.namespace().unwrap_or_default();
    let owners: BTreeSet<String> = cr.uid().into_iter().collect();
    let kinds = ctx.kinds.unwatched.get().unwrap_or_default();
    let p = &ctx.process;
    match let_go(
        &p.client,
        &p.fence,
        &ctx.rule.name,
        kinds,
        Some(&ns),
        &owners,
        false,
    )
    .await
    {
        Ok(_) => Ok(()),
        Err(LetGoError::Read { kind, message } | LetGoError::Forbidden { kind, message }) => {
            Err(ReconcileError::Unwatched { kind, message })
        }
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

/// One step of the deletion of `cr` while it carries ruleop's finalizers, as the planner
/// says ([`planner::deletion`]): the objects that ask to be orphaned are let go first (so
/// the garbage collector leaves them), of every kind; then, with ordered deletion, the
/// children that may go now are deleted; the finalizers are released once that is done.
pub async fn step(ctx: &Ctx, r: &ResourceId, cr: &DynamicObject) -> Result<Action, ReconcileError> {
    let ns = cr.namespace().unwrap_or_default();
    let uid = cr.uid().unwrap_or_default();
    let listed = ctx.kinds.listed.children();
    let objects: Vec<_> = if listed {
        ctx.kinds
            .children
            .distinct()
            .iter()
            .flat_map(|k| owned(k, &ns, &uid).into_iter().map(move |o| (k, o)))
            .collect()
    } else {
        Vec::new()
    };
    let position = |o: &DynamicObject| {
        let id = o.labels().get(CHILD_LABEL)?;
        ctx.rule.children.iter().position(|c| &c.id == id)
    };
    let leaving: Vec<Leaving> = objects
        .iter()
        .map(|(_, o)| Leaving {
            removal: removal_of(ctx, o),
            child: position(o),
            deleting: o.meta().deletion_timestamp.is_some(),
        })
        .collect();
    let plan = planner::deletion(Deleting {
        listed,
        objects: &leaving,
        orphan_held: cr.finalizers().iter().any(|f| f == ORPHAN_FINALIZER),
        unwatched_known: ctx.kinds.unwatched.get().is_some(),
        ordered: ctx.rule.deletion == DeletionPolicy::Ordered
            && cr.finalizers().iter().any(|f| f == FINALIZER),
        // `kubectl delete --cascade=orphan` asks for the children to stay.
        cascade_orphan: cr.finalizers().iter().any(|f| f == "orphan"),
        deps: &ctx.rule.deps,
    });
    let (let_go, unwatched, then) = match plan {
        Deletion::Wait(why) => {
            // Said once the usual wait is over: a watch the RBAC forbids never lists.
            if !listed && ctx.kinds.listed.ready() {
                tracing::warn!(rule = %ctx.rule.name, object = %cr.name_any(), "deletion waits for every child kind's watch to list (is `list`/`watch` on a child kind forbidden?): nothing is deleted or let go on the word of a cache that has not listed");
            } else {
                tracing::debug!(rule = %ctx.rule.name, object = %cr.name_any(), why, "deletion waits");
            }
            return Ok(Action::requeue(RECHECK));
        }
        Deletion::Act {
            let_go,
            unwatched,
            then,
        } => (let_go, unwatched, then),
    };
    for (k, o) in let_go.iter().map(|&i| &objects[i]) {
        if !ctx.process.fence.holds() {
            return Err(ReconcileError::NotLeader);
        }
        let why = "is kept: its resource is being deleted";
        take_away(ctx, cr, &ns, &k.resolved.resource, o, &uid, why)
            .await
            .map_err(ReconcileError::Apply)?;
    }
    if unwatched {
        let_go_unwatched(ctx, cr).await?;
    }
    match then {
        Then::Release => {
            let rest: Vec<String> = cr
                .finalizers()
                .iter()
                .filter(|f| !OURS.contains(&f.as_str()))
                .cloned()
                .collect();
            set_finalizers(ctx, cr, rest).await?;
            ctx.records.abandon_writes(r);
            tracing::info!(rule = %ctx.rule.name, object = %cr.name_any(), namespace = %ns, "resource released");
            Ok(Action::await_change())
        }
        Then::Delete(which) => {
            for (k, o) in which.iter().map(|&i| &objects[i]) {
                delete_foreground(ctx, &ns, k, o).await?;
            }
            Ok(Action::requeue(RECHECK))
        }
    }
}

/// Deletes one object in the foreground (its own dependents, such as pods, go first),
/// only if it is still the object judged.
async fn delete_foreground(
    ctx: &Ctx,
    ns: &str,
    k: &ChildKind,
    o: &DynamicObject,
) -> Result<(), ReconcileError> {
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
    Ok(())
}
