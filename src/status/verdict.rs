//! The `Ready` and `Synced` conditions of a resource, from its status report and what
//! became of its children: one definition, in the cluster (the reconcile's status write)
//! and offline (`ruleop test`). Messages are bounded to what a condition holds.

use super::Report;
use super::conditions::Condition;
use crate::render::Waiting;

/// The most a condition message holds, in bytes: a condition's message may be 32768 bytes
/// at most (`metav1.Condition`), and the status has two of them beside its fields.
pub const MAX_MESSAGE: usize = 8 * 1024;

/// `parts` joined with "; ", as many as fit in [`MAX_MESSAGE`], then "… and K more" (a
/// single part too long for it is cut at a character boundary).
pub fn bounded<'a>(parts: impl IntoIterator<Item = &'a str>) -> String {
    let parts: Vec<&str> = parts.into_iter().collect();
    let room = MAX_MESSAGE - 64;
    let mut out = String::new();
    for (i, p) in parts.iter().enumerate() {
        let sep = if out.is_empty() { "" } else { "; " };
        if out.len() + sep.len() + p.len() > room {
            if out.is_empty() {
                out.push_str(cut(p, room));
                out.push_str(" …");
                if parts.len() > 1 {
                    out.push_str(&format!(" and {} more", parts.len() - 1));
                }
            } else {
                out.push_str(&format!("; … and {} more", parts.len() - i));
            }
            return out;
        }
        out.push_str(sep);
        out.push_str(p);
    }
    out
}

/// The longest start of `s` of at most `max` bytes, at a character boundary.
fn cut(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Why the children do not match the rule, for the `Synced` condition; None when they do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SyncProblem<'a> {
    pub reason: &'a str,
    pub message: &'a str,
}

/// The message of the `Waiting` problem: each child that waits, and what for.
pub fn waiting_message(waiting: &[Waiting]) -> String {
    let parts: Vec<String> = waiting
        .iter()
        .map(|w| format!("child `{}` {}", w.id, w.reason))
        .collect();
    bounded(parts.iter().map(String::as_str))
}

/// The reasons of a `Synced=False` that is no failure: the reconcile goes on.
pub const PASSING: &[&str] = &["Waiting", "Retrying", "Applying"];

/// The `Ready`, `Synced`, `Reconciling` and `Stalled` conditions (in that order). `report`
/// is None when nothing could be computed (the render failed). The last two are kstatus'
/// (Flux, `kubectl wait`, cli-utils; see [`kstatus`]).
pub fn conditions(report: Option<&Report>, problem: Option<SyncProblem<'_>>) -> [Condition; 4] {
    let [ready, synced] = ready_and_synced(report, problem);
    let [reconciling, stalled] = kstatus(&ready, &synced);
    [ready, synced, reconciling, stalled]
}

/// `Reconciling` and `Stalled`, as the Kubernetes API conventions and kstatus read them:
/// `Stalled=True` when the resource failed and will not get further on its own (its
/// `Synced` reason is a failure: RenderFailed, ApplyRefused, NotOwned, Forbidden,
/// StatusRefused, ...); else `Reconciling=True` while it is not both Synced and Ready
/// (waiting, applying, retrying, children rolling out). A resource with neither True, at
/// its observed generation, is Current.
pub fn kstatus(ready: &Condition, synced: &Condition) -> [Condition; 2] {
    let failed = !synced.status && !PASSING.contains(&synced.reason.as_str());
    let done = ready.status && synced.status;
    let reconciling = match (failed, done) {
        (false, false) => {
            let by = if synced.status { ready } else { synced };
            Condition {
                type_: "Reconciling",
                status: true,
                reason: by.reason.clone(),
                message: by.message.clone(),
            }
        }
        _ => Condition {
            type_: "Reconciling",
            status: false,
            reason: if failed { "Stalled" } else { "Reconciled" }.into(),
            message: String::new(),
        },
    };
    let stalled = Condition {
        type_: "Stalled",
        status: failed,
        reason: if failed {
            synced.reason.clone()
        } else {
            "NotStalled".into()
        },
        message: if failed {
            synced.message.clone()
        } else {
            String::new()
        },
    };
    [reconciling, stalled]
}

/// The `Ready` and `Synced` conditions (in that order).
fn ready_and_synced(report: Option<&Report>, problem: Option<SyncProblem<'_>>) -> [Condition; 2] {
    let (ready, ready_reason, ready_message) = match (problem, report) {
        (Some(p), _) if p.reason == "Waiting" => (false, "Waiting", p.message.to_string()),
        (Some(p), _) => (false, "SyncFailed", p.message.to_string()),
        (None, Some(r)) if r.ready && r.problems.is_empty() => (true, "Ready", r.checked.clone()),
        (None, Some(r)) => {
            let mut parts = r
                .problems
                .iter()
                .map(|p| format!("status: {p}"))
                .collect::<Vec<_>>();
            parts.extend(r.notes.iter().cloned());
            (
                r.ready && r.problems.is_empty(),
                if r.problems.is_empty() {
                    "NotReady"
                } else {
                    "StatusError"
                },
                bounded(parts.iter().map(String::as_str)),
            )
        }
        (None, None) => (false, "NotReady", String::new()),
    };
    let synced = match problem {
        None => Condition {
            type_: "Synced",
            status: true,
            reason: "Applied".into(),
            message: "every child matches the rule".into(),
        },
        Some(p) => Condition {
            type_: "Synced",
            status: false,
            reason: p.reason.into(),
            message: p.message.to_string(),
        },
    };
    [
        Condition {
            type_: "Ready",
            status: ready,
            reason: ready_reason.into(),
            message: ready_message,
        },
        synced,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kinds(c: &[Condition; 4]) -> Vec<(&str, bool, &str)> {
        c.iter()
            .map(|c| (c.type_, c.status, c.reason.as_str()))
            .collect()
    }

    #[test]
    fn stalled_on_a_failure_reconciling_while_it_gets_there_neither_once_ready() {
        let ready = Report {
            ready: true,
            ..Report::default()
        };
        assert_eq!(
            kinds(&conditions(Some(&ready), None))[2..],
            [
                ("Reconciling", false, "Reconciled"),
                ("Stalled", false, "NotStalled")
            ]
        );
        let waiting = SyncProblem {
            reason: "Waiting",
            message: "child `a` waits",
        };
        assert_eq!(
            kinds(&conditions(Some(&ready), Some(waiting)))[2..],
            [
                ("Reconciling", true, "Waiting"),
                ("Stalled", false, "NotStalled")
            ]
        );
        let rolling = Report::default();
        assert_eq!(
            kinds(&conditions(Some(&rolling), None))[2..],
            [
                ("Reconciling", true, "NotReady"),
                ("Stalled", false, "NotStalled")
            ]
        );
        let refused = SyncProblem {
            reason: "RenderFailed",
            message: "child `svc`: bad",
        };
        let c = conditions(None, Some(refused));
        assert_eq!(
            kinds(&c)[2..],
            [
                ("Reconciling", false, "Stalled"),
                ("Stalled", true, "RenderFailed")
            ]
        );
        assert_eq!(c[3].message, "child `svc`: bad");
    }
}
