//! The objects a resource owns that its render no longer makes: deleted (only its own:
//! its controller ownerReference and the rule's label, with a uid precondition); and the
//! live objects of the children that wait, kept as they are and read for the status.

use super::children::Round;
use super::ctx::Ctx;
use super::report::event;
use crate::apply::{self, ApplyError};
use crate::cache::owners::controller_uid;
use crate::cache::watches::ChildKind;
use crate::lifecycle::planner::{self, Doubts, Removal};
use crate::render::{CHILD_LABEL, Plan, group_of};
use crate::rules::spec::OnRemove;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::Value;
use std::collections::HashSet;

/// The cached objects this resource controls of child kind `kind` (only its own: its
/// controller ownerReference and the rule's label, which the cache selects on).
pub fn owned(kind: &ChildKind, ns: &str, uid: &str) -> Vec<DynamicObject> {
    let ar = &kind.resolved.resource;
    kind.owners
        .children_of(uid)
        .into_iter()
        .filter(|(child_ns, _)| child_ns == ns)
        .filter_map(|(child_ns, name)| {
            kind.store
                .get(&ObjectRef::new_with(&name, ar.clone()).within(&child_ns))
        })
        .filter(|c| controller_uid(&**c) == Some(uid))
        .filter_map(|c| c.object().ok())
        .collect()
}

/// The live objects of the children that wait (they are not rendered, so not looked up
/// by name): the status still reports what is there. (A waiting collection's objects are
/// listed in name order: its items are not known while it waits.)
pub fn observe_waiting(ctx: &Ctx, ns: &str, uid: &str, out: &Plan, round: &mut Round) {
    for w in &out.waiting {
        let Some((i, kind)) = ctx.child(&w.id) else {
            continue;
        };
        let mut mine: Vec<Value> = owned(kind, ns, uid)
            .into_iter()
            .filter(|o| o.labels().get(CHILD_LABEL) == Some(&w.id))
            .filter_map(|o| serde_json::to_value(o).ok())
            .collect();
        if ctx.rule.children[i].each.is_none() {
            if let Some(o) = mine.pop() {
                round.observed.insert(w.id.clone(), o);
            }
            continue;
        }
        mine.sort_by(|a, b| {
            a["metadata"]["name"]
                .as_str()
                .cmp(&b["metadata"]["name"].as_str())
        });
        for (k, o) in mine.into_iter().enumerate() {
            round.observed.insert(format!("{}[{k}]", w.id), o);
        }
    }
}

/// Why the children this round does not render may not be taken away now, if so (the
/// planner decides: [`planner::uncertain`]).
pub fn uncertain(ctx: &Ctx, out: &Plan, round: &Round) -> Option<&'static str> {
    planner::uncertain(Doubts {
        version: ctx.kinds.prune.closed(),
        listed: ctx.kinds.listed.children(),
        waiting: !out.waiting.is_empty(),
        unsettled: round.transient.is_some() || round.on_its_way || !round.problems.is_empty(),
    })
}

/// Takes away the objects this resource owns that are no longer rendered: each deleted,
/// or orphaned when it asked to be (`onRemove: Orphan`). Only when [`uncertain`] says
/// nothing.
pub async fn prune_children(
    ctx: &Ctx,
    cr: &DynamicObject,
    ns: &str,
    uid: &str,
    out: &Plan,
    round: &mut Round,
) {
    let children = &out.children;
    for kind in ctx.kinds.children.distinct() {
        let ar = &*kind.resolved.resource;
        let keep: HashSet<&str> = children
            .iter()
            .filter(|c| c.kind == ar.kind && group_of(&c.api_version) == ar.group)
            .map(|c| c.name.as_str())
            .collect();
        let stale = planner::stale(owned(kind, ns, uid), |name| keep.contains(name));
        for o in stale {
            if !ctx.process.fence.holds() {
                round.transient = Some(ApplyError::NotLeader);
                return;
            }
            if let Err(e) = take_away(ctx, cr, ns, ar, &o, uid, "is no longer rendered").await {
                round.fail(e);
            }
        }
    }
}

/// What becomes of an object that leaves the rule (the planner decides:
/// [`planner::removal`]), given what its child says now.
pub fn removal_of(ctx: &Ctx, o: &DynamicObject) -> Removal {
    let child = o.labels().get(CHILD_LABEL);
    let orphans_now = ctx
        .rule
        .children
        .iter()
        .any(|c| Some(&c.id) == child && c.on_remove == OnRemove::Orphan);
    planner::removal(o, orphans_now)
}

/// Deletes one object of this resource, or orphans it when it asks to be; logs, counts
/// and publishes it. `why` completes "child `x` …".
pub async fn take_away(
    ctx: &Ctx,
    cr: &DynamicObject,
    ns: &str,
    ar: &ApiResource,
    o: &DynamicObject,
    uid: &str,
    why: &str,
) -> Result<(), ApplyError> {
    let api: Api<DynamicObject> = Api::namespaced_with(ctx.process.client.clone(), ns, ar);
    let name = o.name_any();
    let child = o.labels().get(CHILD_LABEL).cloned().unwrap_or_default();
    let (reason, action, verb) = if removal_of(ctx, o) == Removal::Orphan {
        apply::orphan(&api, ar, o, uid).await?;
        ("Orphaned", "orphan", "orphaned")
    } else {
        apply::prune(&api, ar, &name, o.uid()).await?;
        ("Pruned", "prune", "pruned")
    };
    ctx.process.metrics.write(&ctx.rule.name, action);
    tracing::info!(rule = %ctx.rule.name, child = %child, kind = %ar.kind, name = %name, namespace = %ns, action, "{verb} child");
    event(
        ctx,
        cr,
        EventType::Normal,
        reason,
        if action == "orphan" {
            "Orphan"
        } else {
            "Prune"
        },
        format!("{} {} (child `{child}` {why})", ar.kind, name),
        Some(o.object_ref(ar)),
    );
    Ok(())
}
