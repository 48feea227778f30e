//! One round over a custom resource's children, through the ownership model: write the
//! ones that differ ([`apply::write_child`]: create if absent, apply to our own object,
//! adopt as the child's policy allows, leave anything else alone). Every problem is
//! collected, not returned early, so the status is written whatever happened. What was
//! written, and a write still on its way, is kept in the resource's record.

use super::ctx::Ctx;
use super::outcome::{Problem, Retry, Sent};
use super::record::{PATIENCE, ResourceId, Step};
use crate::apply::{
    self, AdoptPolicy, ApplyError, Claim, ObjectKey, Outcome, Refusal, Verdict, Written,
};
use crate::client::Fence;
use crate::render::Rendered;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::ObjectRef;
use serde_json::Value;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use tracing::Instrument as _;

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
    /// The children found to be another's (by instance: `id`, `id[index]`).
    pub not_owned: Vec<String>,
    /// A passing fault: the round is retried with backoff.
    pub transient: Option<ApplyError>,
    /// The uids of the children `ruleop release` let go from this resource: taken back
    /// (see [`apply::Claim::released`]).
    pub released: Arc<[String]>,
}

impl Round {
    /// Books a failed write or delete: a refusal as a problem, anything else as the
    /// round's passing fault (the first one is kept).
    pub fn fail(&mut self, e: ApplyError) {
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

/// The resource waits for the child's name, held by another's object: watched, so that its
/// release reconciles the resource at once.
fn wait_for_name(ctx: &Ctx, ns: &str, r: &ResourceId, c: &Rendered) {
    if let Some((_, kind)) = ctx.child(&c.id) {
        ctx.held
            .wait_for(&kind.resolved.resource, ns, &c.name, &r.key.name);
    }
}

/// Writes what differs, through the ownership model. Grants first (Roles, bindings): when
/// the API server refuses one (its escalation check: the account may grant only what it
/// holds), the other writes are held, so nothing is left half made. Within each, a child
/// that refers to another ([`crate::render::refers`]) is sent after it, and held while that
/// one is not ruleop's.
pub async fn apply_children(
    ctx: &Ctx,
    ns: &str,
    r: &ResourceId,
    released: Arc<[String]>,
    children: &[Rendered],
) -> Round {
    let mut round = Round {
        released,
        ..Round::default()
    };
    // Decide first (no request), then send the writes in waves: every write whose
    // children it refers to are decided goes at once (the children of one resource are
    // mostly independent, and a reconcile is mostly waiting on the API server).
    let refs = crate::render::refers::references(&ctx.rule, children);
    let mut pending = Vec::new();
    for (i, c) in children.iter().enumerate() {
        if let Some(w) = decide(ctx, ns, r, c, &mut round).await {
            pending.push((i, w));
        }
    }
    let (grants, rest): (Vec<_>, Vec<_>) = pending.into_iter().partition(|(_, w)| is_grant(w.c));
    if !grants.is_empty() {
        let before = round.problems.len();
        in_waves(ctx, (ns, r), children, &refs, grants, &mut round).await;
        if round.problems[before..]
            .iter()
            .any(|p| p.reason == "Forbidden")
            && !rest.is_empty()
        {
            tracing::info!(
                held = rest.len(),
                "a Role or binding was refused: the resource's other writes are held until it goes through"
            );
            return round;
        }
    }
    in_waves(ctx, (ns, r), children, &refs, rest, &mut round).await;
    round
}

/// Sends `pending` in waves: each wave the writes whose referred-to children are no longer
/// pending (all that are left, when they refer to each other), holding those that refer to
/// a child found not to be ruleop's.
async fn in_waves(
    ctx: &Ctx,
    (ns, r): (&str, &ResourceId),
    children: &[Rendered],
    refs: &[std::collections::BTreeSet<usize>],
    mut pending: Vec<(usize, Write<'_>)>,
    round: &mut Round,
) {
    while !pending.is_empty() {
        let foreign: Vec<usize> = children
            .iter()
            .enumerate()
            .filter(|(_, c)| round.not_owned.contains(&c.instance()))
            .map(|(i, _)| i)
            .collect();
        let (held, go): (Vec<_>, Vec<_>) = pending
            .into_iter()
            .partition(|(i, _)| refs[*i].iter().any(|j| foreign.contains(j)));
        for (i, w) in held {
            let j = refs[i].iter().find(|j| foreign.contains(j)).copied();
            hold(w.c, j.map(|j| &children[j]), w.live, round);
        }
        let waiting = |i: usize, rest: &[(usize, Write<'_>)]| {
            refs[i].iter().any(|j| rest.iter().any(|(k, _)| k == j))
        };
        let ready: Vec<usize> = go
            .iter()
            .filter(|(i, _)| !waiting(*i, &go))
            .map(|(i, _)| *i)
            .collect();
        // Children that name each other (a cycle of names) go together.
        let (now, later): (Vec<_>, Vec<_>) = go
            .into_iter()
            .partition(|(i, _)| ready.is_empty() || ready.contains(i));
        pending = later;
        send(ctx, ns, r, now.into_iter().map(|(_, w)| w).collect(), round).await;
    }
}

/// A child held: it refers to `foreign`, which is not ruleop's. Its object stays as it is.
fn hold(c: &Rendered, foreign: Option<&Rendered>, live: Option<Value>, round: &mut Round) {
    let what = foreign.map_or("another child".to_string(), |f| {
        format!("{} {} (child `{}`)", f.kind, f.name, f.id)
    });
    round.problems.push(Problem {
        reason: "NotOwned",
        message: format!(
            "{} {} (child `{}`) is not applied: it refers to {what}, which is not this resource's, and would use an object ruleop never wrote",
            c.kind, c.name, c.id
        ),
        retry: Retry::Backoff,
    });
    if let Some(live) = live {
        round.observed.insert(c.instance(), live);
    }
}

/// A child that grants permissions: its write may be refused by the API server's
/// escalation check.
fn is_grant(c: &Rendered) -> bool {
    c.api_version.starts_with("rbac.authorization.k8s.io/")
}

/// Sends `writes` at once and books their answers.
async fn send(ctx: &Ctx, ns: &str, r: &ResourceId, writes: Vec<Write<'_>>, round: &mut Round) {
    let released = round.released.clone();
    let writes = writes.into_iter().map(|w| {
        let released = released.clone();
        async move {
            let span = tracing::info_span!(
                "child write",
                child = %w.c.id,
                kind = %w.c.kind,
                name = %w.c.name,
                error = tracing::field::Empty,
                otel.status_code = tracing::field::Empty,
            );
            let fence = ctx.process.fence.clone();
            let task = owned_write(&w, &r.uid, &ctx.rule.name, fence, released).instrument(span);
            let step = ctx
                .records
                .send(r, (&w.c.id, w.key.clone()), task, PATIENCE)
                .await;
            (w, step)
        }
    });
    for (w, step) in futures::future::join_all(writes).await {
        match step {
            Step::Done(answer) => {
                book(ctx, ns, r, w.c, w.key, w.live, answer, round);
            }
            Step::OnItsWay => {
                ctx.process.metrics.slow_write(&ctx.rule.name);
                on_its_way(w.c, w.live, round);
            }
        }
    }
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
    r: &ResourceId,
    c: &'a Rendered,
    round: &mut Round,
) -> Option<Write<'a>> {
    let (i, kind) = ctx.child(&c.id)?;
    let oref = ObjectRef::new_with(&c.name, kind.resolved.resource.clone()).within(ns);
    let live = kind.store.get(&oref).and_then(|o| o.value());
    let key = ObjectKey::of(c);
    if late_write(ctx, ns, r, c, &key, live.as_ref(), round).await {
        return None;
    }
    let adopt = ctx.rule.children[i].adopt;
    // In our cache (it has the rule's label) yet someone else's: no request at all.
    if let Some(Verdict::NotOwned { controller }) = live
        .as_ref()
        .map(|l| apply::judge(l, &r.uid, &ctx.rule.name, adopt))
    {
        round.problems.push(not_owned(c, &controller));
        round.not_owned.push(c.instance());
        wait_for_name(ctx, ns, r, c);
        return None;
    }
    let last = ctx.records.written(r, &key);
    if !apply::needs_apply(c, live.as_ref(), last.as_ref()) {
        round.cache_behind |= apply::cache_behind(live.as_ref(), last.as_ref());
        if let Some(live) = live {
            round.observed.insert(c.instance(), live);
        }
        return None;
    }
    let api = Api::namespaced_with(ctx.process.client.clone(), ns, &*kind.resolved.resource);
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
    r: &ResourceId,
    c: &Rendered,
    key: &ObjectKey,
    live: Option<&Value>,
    round: &mut Round,
) -> bool {
    match ctx.records.take(r, key).await {
        None => false,
        Some(Step::OnItsWay) => {
            on_its_way(c, live.cloned(), round);
            true
        }
        Some(Step::Done(answer)) => book(ctx, ns, r, c, key.clone(), live.cloned(), answer, round),
    }
}

/// Books a write's answer (or the end of its task without one) against what it sent.
/// True when nothing more is to be done about `c` this round: failed (retried with
/// backoff), or sent as rendered now.
#[allow(clippy::too_many_arguments)]
fn book(
    ctx: &Ctx,
    ns: &str,
    r: &ResourceId,
    c: &Rendered,
    key: ObjectKey,
    live: Option<Value>,
    answer: Result<Sent, tokio::task::JoinError>,
    round: &mut Round,
) -> bool {
    let sent = answer.unwrap_or_else(|e| lost(c, live, &e));
    let done = sent.result.is_err() || sent.child.hash == c.hash;
    record(ctx, ns, r, &sent.child, key, sent.live, sent.result, round);
    done
}

/// [`apply::write_child`] as a task of its own (it may outlast the reconcile).
fn owned_write(
    w: &Write<'_>,
    cr_uid: &str,
    rule: &str,
    fence: Arc<Fence>,
    released: Arc<[String]>,
) -> impl Future<Output = Sent> + Send + 'static {
    let (api, child, live, adopt) = (w.api.clone(), w.c.clone(), w.live.clone(), w.adopt);
    let (uid, rule) = (cr_uid.to_string(), rule.to_string());
    async move {
        let claim = Claim {
            cr_uid: &uid,
            rule: &rule,
            adopt,
            fence: &fence,
            released: &released,
        };
        let result = apply::write_child(&api, &child, live.as_ref(), claim).await;
        if let Err(e) = &result {
            let span = tracing::Span::current();
            span.record("error", tracing::field::display(e));
            span.record("otel.status_code", "ERROR");
        }
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
            PATIENCE.as_secs()
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
#[allow(clippy::too_many_arguments)]
fn record(
    ctx: &Ctx,
    ns: &str,
    r: &ResourceId,
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
            ctx.records.forget_child(r, &key);
            round.problems.push(not_owned(c, &controller));
            round.not_owned.push(c.instance());
            wait_for_name(ctx, ns, r, c);
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
    // write: no metric, no Event; the record keeps the next reconcile from sending it again.
    let changed = live_rv != Some(rv.as_str());
    // Trimmed as the cache trims it, so the record compares like with like.
    if let Some((_, kind)) = ctx.child(&c.id) {
        kind.keep.apply(&mut obj.data);
    }
    let obj = serde_json::to_value(&obj).unwrap_or_default();
    let canonical = apply::canonical_hash(&c.object, &obj);
    ctx.records
        .wrote(r, key, Written::now(c.hash.clone(), rv, canonical));
    if changed {
        ctx.process.metrics.write(&ctx.rule.name, action);
        tracing::info!(rule = %ctx.rule.name, child = %c.id, kind = %c.kind, name = %c.name, namespace = %ns, action, "applied child");
        round
            .applied
            .push((reason, format!("{} {}", c.kind, c.name)));
    }
    round.observed.insert(c.instance(), obj);
}
