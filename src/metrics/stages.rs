//! Where a reconcile's time goes: `ruleop_reconcile_stage_seconds{rule,stage}`, a histogram
//! per stage of a reconcile of a resource that is not being deleted. The stages, in the
//! order a reconcile runs them:
//!
//! - `lifecycle`: the finalizers ruleop keeps on the resource (ordered deletion, orphans);
//! - `render`: the template variables (with the existing objects looked up) and every
//!   child rendered and checked against its kind's schema (pure CPU);
//! - `children`: the children applied and pruned, each apply a round trip to the API server
//!   unless unchanged;
//! - `status`: the status computed from the children;
//! - `status_write`: the status written (only when it changed).
//!
//! Their sum is most of `ruleop_reconcile_duration_seconds`; the rest is the resource's
//! decoding and bookkeeping.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use std::time::Instant;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabels {
    pub rule: String,
    /// One of [`STAGES`].
    pub stage: &'static str,
}

pub const STAGES: &[&str] = &["lifecycle", "render", "children", "status", "status_write"];

pub type Stages = Family<StageLabels, Histogram>;

/// From 100 µs to about 3 s, doubling.
pub fn family() -> Stages {
    Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.0001, 2.0, 16)))
}

/// Observes one stage's time from `start`.
pub fn observe(stages: &Stages, rule: &str, stage: &'static str, start: Instant) {
    debug_assert!(STAGES.contains(&stage), "{stage}");
    stages
        .get_or_create(&StageLabels {
            rule: rule.to_string(),
            stage,
        })
        .observe(start.elapsed().as_secs_f64());
}

/// Every stage's series of `rule`, at zero.
pub fn start(stages: &Stages, rule: &str) {
    for &stage in STAGES {
        drop(stages.get_or_create(&StageLabels {
            rule: rule.to_string(),
            stage,
        }));
    }
}
