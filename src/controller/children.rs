//! One round over a custom resource's children, through the ownership model: write the
//! ones that differ ([`apply::write_child`]: create if absent, apply to our own object,
//! adopt as the child's policy allows, leave anything else alone), then delete the ones
//! no longer rendered that are ours. Every problem is collected, not returned early, so
//! the status is written whatever happened.

use super::leader::Fence;
use super::reconcile::{ChildKind, Ctx, event};
use super::slow::{self, Step};
use crate::apply::{
    self, AdoptPolicy, ApplyError, Claim, ObjectKey, Outcome, Refusal, Verdict, Written,
};
use crate::controller::owners::controller_uid;
use crate::render::{CHILD_LABEL, Plan, Rendered, group_of};
use kube::api::{Api, DynamicObject};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;

/// How a problem is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// The rule or the resource must change (and, in case the cause was outside, every
    /// five minutes).
    OnChange,
    /// Something outside the resource must change (RBAC, a quota, another's object):
    /// retried with backoff until it goes through.
    Backoff,
    /// A write is still on its way ([`super::slow`]): looked at again in a second.
    Soon,
}

/// Why the children do not match the rule: the `Synced` condition's reason and message.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub reason: &'static str,
    pub message: String,
    pub retry: Retry,
}

/// What one round did.
#[derive(Default)]
pub struct Round {
    /// Each child's live object (the write's answer, or the cached one), by child id.
    pub observed: HashMap<String, Value>,
    /// (Created|Updated|Adopted, "Kind name") for each write.
    pub applied: Vec<(&'static str, String)>,
    /// A child we wrote is not in the cache yet.
    pub cache_behind: bool,
    /// A child's write is still on its way (the resource is looked at again soon).
    pub on_its_way: bool,
    pub problems: Vec<Problem>,
    /// A passing fault: the round is retried with backoff.
    pub transient: Option<ApplyError>,
}

impl Round {
    /// Books a failed write or delete: a refusal as a problem, anything else as the
    /// round's passing fault (the first one is kept).
    fn fail(&mut self, e: ApplyError) {
        match refused(&e) {
            Some(p) => self.problems.push(p),
            None => self.transient = self.transient.take().or(Some(e)),
        }
    }
}

fn refused(e: &ApplyError) -> Option<Problem> {
    let class = e.refusal()?;
    Some(Problem {
        reason: match class {
            Refusal::Invalid => "ApplyRefused",
            Refusal::Forbidden => "Forbidden",
        },
        message: e.to_string(),
        retry: match class {
            Refusal::Invalid => Retry::OnChange,
            Refusal::Forbidden => Retry::Backoff,
        },
    })
}

fn not_owned(c: &Rendered, controller: &str) -> Problem {
    Problem {
        reason: "NotOwned",
        message: format!(
            "{} {} exists and is not this resource's (its controller: {controller}); ruleop leaves it untouched: delete or rename it, or set `adopt: IfOrphan` on child `{}` if ruleop should take over an object with no controller",
            c.kind, c.name, c.id
        ),
        retry: Retry::Backoff,
    }
}

/// Writes what differs, through the ownership model.
pub async fn apply_children(ctx: &Ctx, ns: &str, cr_uid: &str, children: &[Rendered]) -> Round {
    let mut round = Round::default();
    // Decide first (no request), then send every write at once: the children of one
    // resource are independent, and a reconcile is mostly waiting on the API server.
    let mut pending = Vec::new();
    for c in children {
        if let Some(w) = decide(ctx, ns, cr_uid, c, &mut round).await {
            pending.push(w);
        }
    }
    let writes = pending.into_iter().map(|w| async move {
        let task = owned_write(&w, cr_uid, &ctx.rule.name, ctx.fence.clone());
        let step = ctx
            .slow
            .send(w.key.clone(), cr_uid, task, slow::PATIENCE)
            .await;
        (w, step)
    });
    for (w, step) in futures::future::join_all(writes).await {
        match step {
            Step::Done(answer) => {
                book(ctx, ns, w.c, w.key, w.live, answer, &mut round);
            }
            Step::OnItsWay => {
                ctx.metrics.slow_write(&ctx.rule.name);
                on_its_way(w.c, w.live, &mut round);
            }
        }
    }
    round
}

/// A child write decided on, not sent yet.
struct Write<'a> {
    c: &'a Rendered,
    key: ObjectKey,
    live: Option<Value>,
    api: Api<DynamicObject>,
    adopt: AdoptPolicy,
}

/// What to do about child `c`: book a write an earlier reconcile let go on, and return
/// the write it needs now, if any.
async fn decide<'a>(
    ctx: &Ctx,
    ns: &str,
    cr_uid: &str,
    c: &'a Rendered,
    round: &mut Round,
) -> Option<Write<'a>> {
    let (i, kind) = ctx.child(&c.id)?;
    let oref = ObjectRef::new_with(&c.name, kind.resolved.resource.clone()).within(ns);
    let live = kind.store.get(&oref).and_then(|o| o.value());
    let key = ObjectKey::of(c);
    if late_write(ctx, ns, cr_uid, c, &key, live.as_ref(), round).await {
        return None;
    }
    let adopt = ctx.rule.children[i].adopt;
    // In our cache (it has the rule's label) yet someone else's: no request at all.
    if let Some(Verdict::NotOwned { controller }) = live
        .as_ref()
        .map(|l| apply::judge(l, cr_uid, &ctx.rule.name, adopt))
    {
        round.problems.push(not_owned(c, &controller));
        return None;
    }
    let last = ctx.memo.get(&key);
    if !apply::needs_apply(c, live.as_ref(), last.as_ref()) {
        round.cache_behind |= apply::cache_behind(live.as_ref(), last.as_ref());
        if let Some(live) = live {
            round.observed.insert(c.instance(), live);
        }
        return None;
    }
    let api = Api::namespaced_with(ctx.client.clone(), ns, &*kind.resolved.resource);
    Some(Write {
        c,
        key,
        live,
        api,
        adopt,
    })
}

/// A write of `c` an earlier reconcile let go on by itself: still on its way, or booked
/// now that it is answered (as sent then: the render may have moved since). True when
/// nothing more is to be done about `c` this round: on its way, failed (retried with
/// backoff), or done as rendered now.
async fn late_write(
    ctx: &Ctx,
    ns: &str,
    cr_uid: &str,
    c: &Rendered,
    key: &ObjectKey,
    live: Option<&Value>,
    round: &mut Round,
) -> bool {
    match ctx.slow.take(key, cr_uid).await {
        None => false,
        Some(Step::OnItsWay) => {
            on_its_way(c, live.cloned(), round);
            true
        }
        Some(Step::Done(answer)) => book(ctx, ns, c, key.clone(), live.cloned(), answer, round),
    }
}

/// Books a write's answer (or the end of its task without one) against what it sent.
/// True when nothing more is to be done about `c` this round: failed (retried with
/// backoff), or sent as rendered now.
fn book(
    ctx: &Ctx,
    ns: &str,
    c: &Rendered,
    key: ObjectKey,
    live: Option<Value>,
    answer: Result<Sent, tokio::task::JoinError>,
    round: &mut Round,
) -> bool {
    let sent = answer.unwrap_or_else(|e| lost(c, live, &e));
    let done = sent.result.is_err() || sent.child.hash == c.hash;
    record(ctx, ns, &sent.child, key, sent.live, sent.result, round);
    done
}

/// A write's answer, with what it sent and what the cache held when it was sent (what
/// the answer is booked against, however late it comes).
pub struct Sent {
    child: Rendered,
    live: Option<Value>,
    result: Result<Outcome, ApplyError>,
}

/// [`apply::write_child`] as a task of its own (it may outlast the reconcile).
fn owned_write(
    w: &Write<'_>,
    cr_uid: &str,
    rule: &str,
    fence: Arc<Fence>,
) -> impl Future<Output = Sent> + Send + 'static {
    let (api, child, live, adopt) = (w.api.clone(), w.c.clone(), w.live.clone(), w.adopt);
    let (uid, rule) = (cr_uid.to_string(), rule.to_string());
    async move {
        let claim = Claim {
            cr_uid: &uid,
            rule: &rule,
            adopt,
            fence: &fence,
        };
        let result = apply::write_child(&api, &child, live.as_ref(), claim).await;
        Sent {
            child,
            live,
            result,
        }
    }
}

/// A child whose write is still on its way: a `Synced` problem, and the status reads
/// what the cache has of it.
fn on_its_way(c: &Rendered, live: Option<Value>, round: &mut Round) {
    round.on_its_way = true;
    round.problems.push(Problem {
        reason: "Applying",
        message: format!(
            "{} {} (child `{}`): the API server has not answered its write after {} s; it is still on its way",
            c.kind,
            c.name,
            c.id,
            slow::PATIENCE.as_secs()
        ),
        retry: Retry::Soon,
    });
    if let Some(live) = live {
        round.observed.insert(c.instance(), live);
    }
}

/// A write whose task ended without an answer (stopped, or a panic): retried.
fn lost(c: &Rendered, live: Option<Value>, e: &tokio::task::JoinError) -> Sent {
    Sent {
        child: c.clone(),
        live,
        result: Err(ApplyError::Lost {
            kind: c.kind.clone(),
            name: c.name.clone(),
            why: e.to_string(),
        }),
    }
}

/// Books one write's result into the round.
fn record(
    ctx: &Ctx,
    ns: &str,
    c: &Rendered,
    key: ObjectKey,
    live: Option<Value>,
    result: Result<Outcome, ApplyError>,
    round: &mut Round,
) {
    let (mut obj, action, reason) = match result {
        Ok(Outcome::Created(o)) => (o, "create", "Created"),
        Ok(Outcome::Updated(o)) => (o, "update", "Updated"),
        Ok(Outcome::Adopted(o, why)) => {
            tracing::info!(rule = %ctx.rule.name, child = %c.id, kind = %c.kind, name = %c.name, namespace = %ns, why, "adopted child");
            (o, "adopt", "Adopted")
        }
        Ok(Outcome::NotOwned { controller }) => {
            ctx.memo.forget(&key);
            round.problems.push(not_owned(c, &controller));
            return;
        }
        Err(e) => {
            round.fail(e);
            // The status still reports what is there.
            if let Some(live) = live {
                round.observed.insert(c.instance(), live);
            }
            return;
        }
    };
    let rv = obj.resource_version().unwrap_or_default();
    let live_rv = live
        .as_ref()
        .and_then(|l| l.pointer("/metadata/resourceVersion"))
        .and_then(Value::as_str);
    // An apply that changed nothing (the server keeps `500m` where we sent `0.5`) is no
    // write: no metric, no Event; the memo keeps the next reconcile from sending it again.
    let changed = live_rv != Some(rv.as_str());
    // Trimmed as the cache trims it, so the memo compares like with like.
    if let Some((_, kind)) = ctx.child(&c.id) {
        kind.keep.apply(&mut obj.data);
    }
    let obj = serde_json::to_value(&obj).unwrap_or_default();
    let canonical = apply::canonical_hash(&c.object, &obj);
    ctx.memo
        .put(key, Written::now(c.hash.clone(), rv, canonical));
    if changed {
        ctx.metrics.write(&ctx.rule.name, action);
        tracing::info!(rule = %ctx.rule.name, child = %c.id, kind = %c.kind, name = %c.name, namespace = %ns, action, "applied child");
        round
            .applied
            .push((reason, format!("{} {}", c.kind, c.name)));
    }
    round.observed.insert(c.instance(), obj);
}

/// The cached objects this resource controls of child kind `kind` (only its own: its
/// controller ownerReference and the rule's label, which the cache selects on).
pub(super) fn owned(kind: &ChildKind, ns: &str, uid: &str) -> Vec<DynamicObject> {
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
    for kind in &ctx.kinds {
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
            if !ctx.fence.holds() {
                round.transient = Some(ApplyError::NotLeader);
                return;
            }
            let api: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, ar);
            let name = o.name_any();
            if let Err(e) = apply::prune(&api, ar, &name, o.uid()).await {
                round.fail(e);
                continue;
            }
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
}
