//! What a reconcile makes of its resource: the problems written as the `Synced`
//! condition and how each is retried ([`Problem`], [`Sync`]), a child write's answer
//! ([`Sent`]), and the faults that make the reconcile itself fail ([`ReconcileError`]).

use crate::apply::{ApplyError, Outcome};
use crate::render::Rendered;
pub use crate::status::verdict::{MAX_MESSAGE, bounded};
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
        let retry = problems
            .iter()
            .fold(Retry::OnChange, |r, p| match (r, p.retry) {
                // A fault outside is retried with backoff (counted), whatever else.
                (Retry::Backoff, _) | (_, Retry::Backoff) => Retry::Backoff,
                (Retry::Soon, _) | (_, Retry::Soon) => Retry::Soon,
                _ => Retry::OnChange,
            });
        let message = bounded(problems.iter().map(|p| p.message.as_str()));
        Sync::Failed(Problem {
            reason: problems[0].reason,
            message,
            retry,
        })
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
    /// ruleop's finalizers could not be set or released on the resource.
    #[error("setting the resource's finalizers: {0}")]
    Finalizer(#[source] kube::Error),
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
    /// The objects of a kind the rule no longer makes could not be read (to let go those
    /// that ask to be orphaned before the resource goes).
    #[error("reading the {kind} objects of the rule (a kind it no longer makes): {message}")]
    Unwatched { kind: String, message: String },
}

impl ReconcileError {
    /// The fixed metrics category.
    pub fn category(&self) -> &'static str {
        match self {
            ReconcileError::Apply(_) | ReconcileError::Decode(_) => "apply_transient",
            ReconcileError::Status(_) => "status_write",
            ReconcileError::Finalizer(_) => "finalizer",
            ReconcileError::NotLeader => "not_leader",
            ReconcileError::Panicked(_) => "internal",
            ReconcileError::Unwatched { .. } => "finalizer",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(i: usize) -> Problem {
        Problem {
            reason: "ApplyRefused",
            message: format!(
                "ConfigMap x-{i}: the API server refused it (422 Invalid): data[a/{i}]: Invalid value: a valid config key must consist of alphanumeric characters"
            ),
            retry: Retry::OnChange,
        }
    }

    #[test]
    fn six_hundred_refusals_fit_a_condition_and_say_how_many_more() {
        let Sync::Failed(p) = Sync::of((0..600).map(refused).collect()) else {
            panic!("a problem")
        };
        assert!(p.message.len() <= MAX_MESSAGE, "{}", p.message.len());
        assert!(
            p.message.ends_with(" more"),
            "{}",
            &p.message[p.message.len() - 40..]
        );
        assert!(p.message.starts_with("ConfigMap x-0:"));
        let shown = p.message.matches("ConfigMap x-").count();
        assert!(p.message.contains(&format!("and {} more", 600 - shown)));
    }

    #[test]
    fn one_huge_message_is_cut_at_a_character_boundary() {
        let huge = "é".repeat(MAX_MESSAGE);
        let out = bounded([huge.as_str(), "next"]);
        assert!(out.len() <= MAX_MESSAGE);
        assert!(out.ends_with("… and 1 more"), "{}", &out[out.len() - 20..]);
        assert_eq!(bounded(["a", "b"]), "a; b");
    }

    #[test]
    fn the_worst_retry_wins_and_a_write_on_its_way_comes_last() {
        let soon = Problem {
            reason: "Applying",
            message: "on its way".into(),
            retry: Retry::Soon,
        };
        let Sync::Failed(p) = Sync::of(vec![soon.clone(), refused(1)]) else {
            panic!()
        };
        assert_eq!(p.reason, "ApplyRefused");
        assert_eq!(p.retry, Retry::Soon);
        assert!(p.message.ends_with("on its way"));
    }
}
