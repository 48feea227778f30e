//! The objects a resource owns that its render no longer makes: deleted (only its own:
//! its controller ownerReference and the rule's label, with a uid precondition); and the
//! live objects of the children that wait, kept as they are and read for the status.

use super::children::Round;
use super::ctx::Ctx;
use super::report::event;
use crate::apply::{self, ApplyError};
use crate::cache::owners::controller_uid;
use crate::cache::watches::ChildKind;
use crate::render::{CHILD_LABEL, Plan, group_of};
use kube::api::{Api, DynamicObject};
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

/// Deletes the children this resource owns that are no longer rendered. The objects of
/// a child that waits are kept as they are.
pub async fn prune_children(
    ctx: &Ctx,
    cr: &DynamicObject,
    ns: &str,
    uid: &str,
    out: &Plan,
    round: &mut Round,
) {
    let children = &out.children;
    let waiting: HashSet<&str> = out.waiting.iter().map(|w| w.id.as_str()).collect();
    for kind in ctx.kinds.children.distinct() {
        let ar = &*kind.resolved.resource;
        let keep: HashSet<&str> = children
            .iter()
            .filter(|c| c.kind == ar.kind && group_of(&c.api_version) == ar.group)
            .map(|c| c.name.as_str())
            .collect();
        let stale: Vec<DynamicObject> = owned(kind, ns, uid)
            .into_iter()
            .filter(|o| !keep.contains(o.name_any().as_str()))
            .filter(|o| {
                let child = o.labels().get(CHILD_LABEL).map(String::as_str);
                !child.is_some_and(|c| waiting.contains(c))
            })
            .collect();
        for o in stale {
            if !ctx.process.fence.holds() {
                round.transient = Some(ApplyError::NotLeader);
                return;
            }
            let api: Api<DynamicObject> = Api::namespaced_with(ctx.process.client.clone(), ns, ar);
            let name = o.name_any();
            if let Err(e) = apply::prune(&api, ar, &name, o.uid()).await {
                round.fail(e);
                continue;
            }
            let child = o.labels().get(CHILD_LABEL).cloned().unwrap_or_default();
            ctx.process.metrics.write(&ctx.rule.name, "prune");
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
}
