//! What a reconcile makes of its resource: the problems written as the `Synced`
//! condition and how each is retried ([`Problem`], [`Sync`]), a child write's answer
//! ([`Sent`]), and the faults that make the reconcile itself fail ([`ReconcileError`]).

use crate::apply::{ApplyError, Outcome};
use crate::render::Rendered;
use serde_json::Value;

/// How a problem is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// The rule or the resource must change (and, in case the cause was outside, every
    /// five minutes).
    OnChange,
    /// Something outside the resource must change (RBAC, a quota, another's object):
    /// retried with backoff until it goes through.
    Backoff,
    /// A write is still on its way ([`super::record`]): looked at again in a second.
    Soon,
}

/// Why the children do not match the rule: the `Synced` condition's reason and message.
#[derive(Debug, Clone, PartialEq)]
pub struct Problem {
    pub reason: &'static str,
    pub message: String,
    pub retry: Retry,
}

/// What became of the children this round; written as the `Synced` condition.
#[derive(Debug, Clone, PartialEq)]
pub enum Sync {
    Ok,
    Failed(Problem),
}

impl Sync {
    /// The first problem wins the condition (a write still on its way only when there is
    /// nothing worse); the others are in its message.
    pub fn of(mut problems: Vec<Problem>) -> Sync {
        if problems.is_empty() {
            return Sync::Ok;
        }
        problems.sort_by_key(|p| p.retry == Retry::Soon);
        let mut first = problems.remove(0);
        for p in problems {
            first.message.push_str("; ");
            first.message.push_str(&p.message);
            // A fault outside is retried with backoff (counted), whatever else.
            first.retry = match (first.retry, p.retry) {
                (Retry::Backoff, _) | (_, Retry::Backoff) => Retry::Backoff,
                (Retry::Soon, _) | (_, Retry::Soon) => Retry::Soon,
                _ => Retry::OnChange,
            };
        }
        Sync::Failed(first)
    }
}

/// A child write's answer, with what it sent and what the cache held when it was sent
/// (what the answer is booked against, however late it comes).
pub struct Sent {
    pub child: Rendered,
    pub live: Option<Value>,
    pub result: Result<Outcome, ApplyError>,
}

/// A reconcile that must be retried.
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// A child could not be applied or pruned for a passing reason.
    #[error("applying children: {0}")]
    Apply(#[source] ApplyError),
    /// The status could not be written.
    #[error("writing status: {0}")]
    Status(#[source] kube::Error),
    /// This replica may no longer write (leadership lost): nothing was sent.
    #[error("not the leader: the status was not written")]
    NotLeader,
    /// The object from the cache could not be turned into JSON (should not happen).
    #[error("reading the custom resource: {0}")]
    Decode(#[source] serde_json::Error),
    /// The reconcile panicked (a bug in ruleop): retried with backoff, the other resources
    /// go on.
    #[error("the reconcile failed inside ruleop: {0}")]
    Panicked(String),
}

impl ReconcileError {
    /// The fixed metrics category.
    pub fn category(&self) -> &'static str {
        match self {
            ReconcileError::Apply(_) | ReconcileError::Decode(_) => "apply_transient",
            ReconcileError::Status(_) => "status_write",
            ReconcileError::NotLeader => "not_leader",
            ReconcileError::Panicked(_) => "internal",
        }
    }
}
