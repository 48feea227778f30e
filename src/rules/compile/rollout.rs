//! A rule's `rollout`, checked: its steps (each reaching more resources, the last every
//! one), how long a step may take to be Ready, and what a failed step does.

use super::compiler::Compiler;
use crate::rules::spec::{OnFailure, RolloutSpec};
use std::time::Duration;

/// How a new revision of a Rule reaches its resources.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollout {
    /// Strictly growing; the last is `Percent(100)`.
    pub steps: Vec<Step>,
    pub wait_ready: Duration,
    pub on_failure: OnFailure,
}

/// How many resources have the new revision once a step is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Resources(u32),
    Percent(u32),
}

impl Step {
    /// The number of resources this step reaches out of `total` (a share rounded up).
    pub fn count(self, total: usize) -> usize {
        match self {
            Step::Resources(n) => (n as usize).min(total),
            Step::Percent(p) => (total * p as usize).div_ceil(100).min(total),
        }
    }
}

impl std::fmt::Display for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Step::Resources(n) => write!(f, "{n} resource(s)"),
            Step::Percent(p) => write!(f, "{p}%"),
        }
    }
}

/// The default of `rollout.waitReady`.
pub const DEFAULT_WAIT_READY: Duration = Duration::from_secs(300);

/// Parses a duration as Kubernetes writes them: `90s`, `2m`, `1h30m`, `500ms`.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let mut total = Duration::ZERO;
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit())?;
        let n: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let one = match &rest[..unit] {
            "ms" => Duration::from_millis(n),
            "s" => Duration::from_secs(n),
            "m" => Duration::from_secs(n.checked_mul(60)?),
            "h" => Duration::from_secs(n.checked_mul(3600)?),
            _ => return None,
        };
        total = total.checked_add(one)?;
        rest = &rest[unit..];
    }
    Some(total)
}

/// Checks `rollout`; None (with errors given to the compiler) when it is wrong.
pub(super) fn compile_rollout(c: &mut Compiler<'_>, spec: &RolloutSpec) -> Option<Rollout> {
    let before = c.errors.len();
    let mut steps = Vec::new();
    for (i, s) in spec.steps.iter().enumerate() {
        let path = format!("rollout.steps[{i}]");
        let step = match (s.resources, s.percent) {
            (Some(n), None) if n >= 1 => Step::Resources(n),
            (None, Some(p)) if (1..=100).contains(&p) => Step::Percent(p),
            (Some(_), Some(_)) | (None, None) => {
                c.error(
                    &path,
                    None,
                    "a step gives exactly one of `resources` and `percent`",
                    "write `{resources: 1}` or `{percent: 10}`",
                );
                continue;
            }
            _ => {
                c.error(
                    &path,
                    None,
                    "a step reaches at least one resource, at most 100 percent",
                    "give `resources` of 1 or more, or `percent` from 1 to 100",
                );
                continue;
            }
        };
        if let Some(prev) = steps.last()
            && !grows(*prev, step)
        {
            c.error(
                &path,
                None,
                format!("step {step} does not reach more resources than the step before ({prev})"),
                "order the steps so each reaches more: resources first, then growing percentages",
            );
        }
        steps.push(step);
    }
    if spec.steps.is_empty() {
        c.error(
            "rollout.steps",
            None,
            "a rollout needs at least one step",
            "add steps, e.g. `[{resources: 1}, {percent: 50}]` (100 percent is added at the end)",
        );
    }
    if steps.last() != Some(&Step::Percent(100)) {
        steps.push(Step::Percent(100));
    }
    let wait_ready = match spec.wait_ready.as_deref() {
        None => DEFAULT_WAIT_READY,
        Some(text) => match parse_duration(text).filter(|d| !d.is_zero()) {
            Some(d) => d,
            None => {
                c.error(
                    "rollout.waitReady",
                    None,
                    format!("{text:?} is not a duration"),
                    "write it as Kubernetes does: `90s`, `2m`, `1h`",
                );
                DEFAULT_WAIT_READY
            }
        },
    };
    (c.errors.len() == before).then_some(Rollout {
        steps,
        wait_ready,
        on_failure: spec.on_failure,
    })
}

/// Whether `next` reaches more resources than `prev` for every fleet size where it can
/// (a count of resources always precedes percentages).
fn grows(prev: Step, next: Step) -> bool {
    match (prev, next) {
        (Step::Resources(a), Step::Resources(b)) => b > a,
        (Step::Percent(a), Step::Percent(b)) => b > a,
        (Step::Resources(_), Step::Percent(_)) => true,
        (Step::Percent(_), Step::Resources(_)) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_as_kubernetes_writes_them() {
        assert_eq!(parse_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        for bad in ["", "2", "m", "2 minutes", "-1s", "1d"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_step_counts_resources_or_a_share_rounded_up() {
        assert_eq!(Step::Resources(1).count(200), 1);
        assert_eq!(Step::Resources(5).count(3), 3);
        assert_eq!(Step::Percent(10).count(200), 20);
        assert_eq!(Step::Percent(10).count(5), 1);
        assert_eq!(Step::Percent(50).count(200), 100);
        assert_eq!(Step::Percent(100).count(200), 200);
        assert_eq!(Step::Percent(10).count(0), 0);
    }
}
