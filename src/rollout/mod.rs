//! A progressive rollout of a Rule's new revision across its resources (pure: the
//! operator runs it). Each resource has a stable rank (a hash of its uid: the same
//! canaries each time); a step reaches the resources of the lowest ranks, as many as the
//! step says; the next step starts once every resource reached is Ready under the new
//! revision, within `waitReady`. A render error or a refused write under the new revision,
//! or a step not Ready in time, pauses the rollout (or rolls the step back). Where it
//! stands ([`Progress`]) is kept in the Rule's status, so a restart or a failover goes on
//! from the same step.
//!
//! Which revision renders a resource ([`choose`]): the one a resource pins
//! (`ruleop.dev/revision`), else the new one once reached (and for a resource created
//! during the rollout), else the one an unfinished rollout this one replaced had moved it
//! to, else the previous one.

use crate::rules::compile::{Rollout, Step};
use crate::rules::spec::OnFailure;
use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// How many replaced rollouts' revisions a rollout remembers ([`Progress::superseded`]).
const MAX_SUPERSEDED: usize = 8;

/// A resource's annotation pinning it to a revision (`"3"`).
pub const PIN: &str = "ruleop.dev/revision";
/// A Rule's annotation asking its paused rollout to `resume`, or any rollout to `abort`.
pub const ACTION: &str = "ruleop.dev/rollout";

/// Where a rollout stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Phase {
    Progressing,
    /// A step failed and `onFailure` is `Pause` (or it was paused): nothing moves until
    /// `ruleop.dev/rollout: resume`.
    Paused,
    /// A step failed with `onFailure: Rollback`, or the rollout was aborted: every resource
    /// is on the previous revision.
    RolledBack,
    Complete,
}

/// A rollout's state, as the Rule's `status.rollout` holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Progress {
    /// The new revision.
    pub revision: i64,
    /// The previous one, which the resources not reached yet keep.
    pub from: i64,
    /// The step in progress (from 0) and how many there are.
    pub step: usize,
    pub steps: usize,
    pub phase: Phase,
    /// When the rollout and the step in progress started (RFC 3339).
    pub started: String,
    pub step_started: String,
    /// The resources of a rank up to this are reached (None: none yet).
    #[serde(default)]
    pub threshold: Option<u64>,
    /// How many resources the step reaches, how many are Ready on the new revision (of all
    /// the resources), and how many there are.
    #[serde(default)]
    pub reached: usize,
    #[serde(default)]
    pub updated: usize,
    #[serde(default)]
    pub total: usize,
    #[serde(default)]
    pub message: String,
    /// The resources that failed the step, and why (at most 20).
    #[serde(default)]
    pub failed: Vec<String>,
    /// How many resources pin a revision (`ruleop.dev/revision`): the rollout does not
    /// move them.
    #[serde(default)]
    pub pinned: usize,
    /// The new revisions of rollouts this one replaced before they finished: a resource
    /// one of them had reached stays on it until this rollout reaches it (it does not go
    /// back to `from` in between, which would delete and make its children twice).
    /// (Always written, empty too: the Rule's status is merge-patched, and a list left
    /// out would stay as it was.)
    #[serde(default)]
    pub superseded: Vec<i64>,
}

impl Progress {
    /// The progress a Rule's status holds, if it reads as one.
    pub fn from_status(v: Option<&Value>) -> Option<Progress> {
        serde_json::from_value(v?.clone()).ok()
    }
}

/// What a rollout reads of one resource.
#[derive(Debug, Clone, PartialEq)]
pub struct Resource {
    /// `namespace/name`.
    pub key: String,
    pub rank: u64,
    /// When it was created (RFC 3339).
    pub created: Option<String>,
    /// The revision that last reconciled it (`status.ruleRevision`).
    pub revision: Option<i64>,
    /// The revision it pins.
    pub pinned: Option<i64>,
    /// Ready, for its current generation.
    pub ready: bool,
    /// Why its last reconcile failed (a render error, a refused write), if it did.
    pub failed: Option<String>,
}

/// A resource's stable rank: a hash of its uid, in 63 bits (the API server keeps a
/// number of the Rule's status as a signed 64-bit integer: a larger one would be rounded).
pub fn rank(uid: &str) -> u64 {
    let d = Sha256::digest(uid.as_bytes());
    u64::from_be_bytes([d[0], d[1], d[2], d[3], d[4], d[5], d[6], d[7]]) >> 1
}

/// Whether a Synced reason is no failure (the reconcile goes on, or it is done).
fn passing(reason: &str) -> bool {
    reason == "Applied" || crate::status::verdict::PASSING.contains(&reason)
}

impl Resource {
    /// What a rollout reads of a custom resource.
    pub fn of(o: &Value) -> Resource {
        let meta = &o["metadata"];
        let key = format!(
            "{}/{}",
            meta["namespace"].as_str().unwrap_or_default(),
            meta["name"].as_str().unwrap_or_default()
        );
        let condition = |t: &str| crate::status::condition_of(o, t);
        let generation = meta["generation"].as_i64();
        let current = |c: &Value| {
            c["observedGeneration"].as_i64().is_none()
                || c["observedGeneration"].as_i64() == generation
        };
        let ready = condition("Ready").is_some_and(|c| c["status"] == "True" && current(c));
        let failed = condition("Synced")
            .filter(|c| c["status"] == "False" && current(c))
            .filter(|c| !passing(c["reason"].as_str().unwrap_or_default()))
            .map(|c| {
                format!(
                    "{}: {}",
                    c["reason"].as_str().unwrap_or_default(),
                    c["message"].as_str().unwrap_or_default()
                )
            });
        Resource {
            key,
            rank: rank(meta["uid"].as_str().unwrap_or_default()),
            created: meta["creationTimestamp"].as_str().map(str::to_string),
            revision: o["status"]["ruleRevision"].as_i64(),
            pinned: meta["annotations"][PIN]
                .as_str()
                .and_then(|p| p.trim().parse().ok()),
            ready,
            failed,
        }
    }
}

fn after(t: Option<&str>, since: &str) -> bool {
    match (
        t.and_then(|t| t.parse::<Timestamp>().ok()),
        since.parse::<Timestamp>(),
    ) {
        (Some(t), Ok(s)) => t > s,
        _ => false,
    }
}

/// The revision that renders `r`, `newest` being the Rule's revision in force.
pub fn choose(p: Option<&Progress>, newest: i64, r: &Resource) -> i64 {
    if let Some(pin) = r.pinned {
        return pin;
    }
    let Some(p) = p.filter(|p| p.revision == newest) else {
        return newest;
    };
    match p.phase {
        Phase::Complete => newest,
        Phase::RolledBack => p.from,
        Phase::Progressing | Phase::Paused => {
            let reached = p.threshold.is_some_and(|t| r.rank <= t);
            // A resource made during the rollout starts on the new revision.
            if reached || after(r.created.as_deref(), &p.started) {
                newest
            } else if let Some(kept) = r.revision.filter(|n| p.superseded.contains(n)) {
                kept
            } else {
                p.from
            }
        }
    }
}

/// Where a rollout to `newest` starts: where the Rule's status says it stands when that is
/// a rollout to `newest` (a restart, a failover), else a new one from `previous` (the
/// revision the resources are on). None: every resource takes `newest` at once (no
/// `rollout`, or nothing to roll from).
pub fn start(
    saved: Option<Progress>,
    newest: i64,
    previous: Option<i64>,
    rollout: Option<&Rollout>,
    now: Timestamp,
) -> Option<Progress> {
    let rollout = rollout?;
    if let Some(p) = saved.as_ref().filter(|p| p.revision == newest) {
        return Some(p.clone());
    }
    // From the revision the resources are on: a rolled-back or unfinished rollout's
    // previous one, else the one before. The resources an unfinished one reached stay on
    // its revision until reached again.
    let from = match &saved {
        Some(p) if p.phase != Phase::Complete => Some(p.from),
        _ => previous,
    }?;
    // Only from a rollout that was going well: a paused one's revision failed somewhere,
    // and its resources are better off where the new rollout puts them.
    let superseded = match &saved {
        Some(p) if p.phase == Phase::Progressing && p.failed.is_empty() => p
            .superseded
            .iter()
            .copied()
            .chain([p.revision])
            .filter(|n| *n != from && *n != newest)
            .collect::<Vec<_>>(),
        _ => Vec::new(),
    };
    // (Edits in a row mid-rollout: the last few are enough to keep resources where they
    // are; one older than those goes back to `from`.)
    let superseded = superseded[superseded.len().saturating_sub(MAX_SUPERSEDED)..].to_vec();
    (from != newest).then(|| Progress {
        revision: newest,
        from,
        step: 0,
        steps: rollout.steps.len(),
        phase: Phase::Progressing,
        started: now.to_string(),
        step_started: now.to_string(),
        threshold: None,
        reached: 0,
        updated: 0,
        total: 0,
        message: format!("rolling out revision {newest} from revision {from}"),
        failed: Vec::new(),
        pinned: 0,
        superseded,
    })
}

/// The rank bound of `step` among `resources`: those there when the rollout `started` (one
/// made since starts on the new revision, and must not move the bound: the step's
/// resources stay the same). A pinned resource keeps its rank (it is not moved, but a pin
/// set or taken off never moves the bound onto another resource). Never below `before`,
/// so a resource once reached stays reached.
fn threshold(
    step: Step,
    resources: &[Resource],
    started: &str,
    before: Option<u64>,
) -> Option<u64> {
    let mut ranks: Vec<u64> = resources
        .iter()
        .filter(|r| !after(r.created.as_deref(), started))
        .map(|r| r.rank)
        .collect();
    ranks.sort_unstable();
    let n = step.count(ranks.len());
    n.checked_sub(1)
        .and_then(|i| ranks.get(i).copied())
        .max(before)
}

/// The rollout after looking at the resources now: the step's counts, and the next step,
/// the end, or a failure.
pub fn evaluate(
    p: &Progress,
    rollout: &Rollout,
    resources: &[Resource],
    now: Timestamp,
) -> Progress {
    let mut next = p.clone();
    next.total = resources.len();
    next.pinned = resources.iter().filter(|r| r.pinned.is_some()).count();
    let on_new = |r: &Resource| r.revision == Some(p.revision);
    next.updated = resources.iter().filter(|r| on_new(r) && r.ready).count();
    if p.phase != Phase::Progressing {
        return next;
    }
    let Some(&step) = rollout.steps.get(p.step) else {
        next.phase = Phase::Complete;
        next.superseded.clear();
        return next;
    };
    next.steps = rollout.steps.len();
    next.threshold = threshold(step, resources, &p.started, p.threshold);
    let reached: Vec<&Resource> = resources
        .iter()
        .filter(|r| r.pinned.is_none() && choose(Some(&next), p.revision, r) == p.revision)
        .collect();
    next.reached = reached.len();
    let failed: Vec<String> = reached
        .iter()
        .filter(|r| on_new(r))
        .filter_map(|r| r.failed.as_ref().map(|f| format!("{}: {f}", r.key)))
        .take(20)
        .collect();
    if !failed.is_empty() {
        return fail(next, rollout, failed, "failed under the new revision");
    }
    let waiting: Vec<&&Resource> = reached.iter().filter(|r| !(on_new(r) && r.ready)).collect();
    if waiting.is_empty() {
        return advance(next, rollout, resources, now);
    }
    let started = p.step_started.parse::<Timestamp>().unwrap_or(now);
    let late = now.duration_since(started).as_secs_f64() > rollout.wait_ready.as_secs_f64();
    if late {
        let names = waiting
            .iter()
            .take(20)
            .map(|r| format!("{}: not Ready on revision {} in time", r.key, p.revision))
            .collect();
        return fail(next, rollout, names, "not Ready in time");
    }
    next.message = format!(
        "step {} of {} ({step}): {} of {} resource(s) Ready on revision {}",
        p.step + 1,
        rollout.steps.len(),
        next.reached - waiting.len(),
        next.reached,
        p.revision
    );
    next
}

fn advance(
    mut next: Progress,
    rollout: &Rollout,
    resources: &[Resource],
    now: Timestamp,
) -> Progress {
    if next.step + 1 >= rollout.steps.len() {
        next.phase = Phase::Complete;
        next.superseded.clear();
        next.message = format!("revision {} reached every resource", next.revision);
        return next;
    }
    next.step += 1;
    next.step_started = now.to_string();
    next.threshold = threshold(
        rollout.steps[next.step],
        resources,
        &next.started,
        next.threshold,
    );
    next.message = format!(
        "step {} of {} ({}) started",
        next.step + 1,
        rollout.steps.len(),
        rollout.steps[next.step]
    );
    next
}

fn fail(mut next: Progress, rollout: &Rollout, failed: Vec<String>, why: &str) -> Progress {
    next.failed = failed;
    next.phase = match rollout.on_failure {
        OnFailure::Pause => Phase::Paused,
        OnFailure::Rollback => Phase::RolledBack,
    };
    if next.phase == Phase::RolledBack {
        next.superseded.clear();
    }
    next.message = match next.phase {
        Phase::Paused => format!(
            "step {} paused: resources {why}; `kubectl annotate rule <name> {ACTION}=resume` tries the step again, `{ACTION}=abort` rolls back",
            next.step + 1
        ),
        _ => format!(
            "step {} rolled back: resources {why}; every resource is on revision {}",
            next.step + 1,
            next.from
        ),
    };
    next
}

/// `p` as a rollout rolled back before (its revision is listed as rolled back on the Rule,
/// whatever its status says now): every resource on `from`, and nothing moves again.
pub fn rolled_back(mut p: Progress) -> Progress {
    if p.phase != Phase::RolledBack {
        p.phase = Phase::RolledBack;
        p.superseded.clear();
        p.message = format!(
            "revision {} was rolled back (ruleop.dev/rolled-back on the Rule): every resource is on revision {}",
            p.revision, p.from
        );
    }
    p
}

/// What `ruleop.dev/rollout` on the Rule asks: `resume` a paused rollout (its step
/// again, from now) or `abort` it (every resource back on the previous revision).
pub fn act(p: &Progress, action: &str, now: Timestamp) -> Option<Progress> {
    let mut next = p.clone();
    match (action.trim(), p.phase) {
        ("resume", Phase::Paused) => {
            next.phase = Phase::Progressing;
            next.step_started = now.to_string();
            next.failed.clear();
            next.message = format!("step {} resumed", p.step + 1);
        }
        ("abort", Phase::Progressing | Phase::Paused) => {
            next.phase = Phase::RolledBack;
            next.superseded.clear();
            next.message = format!("aborted: every resource is on revision {}", p.from);
        }
        _ => return None,
    }
    Some(next)
}

#[cfg(test)]
mod tests;
