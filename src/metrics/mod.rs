//! Prometheus metrics of the operator. Labels are fixed categories (rule names, error
//! categories, write actions), never error text.

mod census;
mod process;
pub mod stages;

pub use census::{CONDITIONS, Census, Count, Counted, Counts};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::time::Instant;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleLabels {
    pub rule: String,
}

/// Who a request was made as: `ruleop` (its own account) or the ServiceAccount a rule
/// names (`system:serviceaccount:NS:NAME`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IdentityLabels {
    pub identity: String,
}

/// A rule and the identity it runs as.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuleIdentityLabels {
    pub rule: String,
    pub identity: String,
}

/// `ruleop_build_info`'s labels.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: String,
    pub commit: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RevisionLabels {
    pub rule: String,
    pub revision: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub rule: String,
    /// One of [`ERROR_CATEGORIES`].
    pub category: &'static str,
}

/// The categories of `ruleop_reconcile_errors_total`.
pub const ERROR_CATEGORIES: &[&str] = &[
    "render",
    "apply_refused",
    "forbidden",
    "not_owned",
    "cluster_scoped",
    "apply_transient",
    "status_write",
    "finalizer",
    "not_leader",
    "internal",
    "undecodable",
    "crd_refused",
    "crd_error",
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WriteLabels {
    pub rule: String,
    /// One of [`WRITE_ACTIONS`].
    pub action: &'static str,
}

/// The actions of `ruleop_writes_total`.
pub const WRITE_ACTIONS: &[&str] = &[
    "create",
    "update",
    "adopt",
    "prune",
    "orphan",
    "status",
    "finalizer",
];

/// Every metric ruleop exports.
pub struct Metrics {
    pub registry: Registry,
    pub reconciles: Family<RuleLabels, Counter>,
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    pub reconcile_duration: Family<RuleLabels, Histogram>,
    /// Where a reconcile's time goes, per rule and stage ([`stages`]).
    pub reconcile_stages: stages::Stages,
    pub writes: Family<WriteLabels, Counter>,
    pub events_dropped: Family<RuleLabels, Counter>,
    /// Names held by another's object whose release a watch saw (its resources reconciled).
    pub held_names_freed: Family<RuleLabels, Counter>,
    /// Child writes a reconcile stopped waiting for (they went on by themselves).
    pub slow_writes: Family<RuleLabels, Counter>,
    pub retired_kinds_pending: Family<RuleLabels, Gauge>,
    /// 1 while a rule waits because the cluster has seen a newer version of it.
    pub rule_older: Family<RuleLabels, Gauge>,
    /// 1 for the revision of each Rule object's rule in force.
    pub rule_info: Family<RevisionLabels, Gauge>,
    /// The step a Rule's rollout is at (from 1; 0 when none runs) and how many of its
    /// resources are Ready on the new revision.
    pub rollout_step: Family<RuleLabels, Gauge>,
    pub rollout_updated: Family<RuleLabels, Gauge>,
    /// 1 while a rule's rollout is paused (a step failed its health gate, or it was told to).
    pub rollout_paused: Family<RuleLabels, Gauge>,
    /// Each running rule's resources by condition, counted on each scrape.
    pub census: Census,
    /// Requests sent, by the identity they were made as.
    pub identity_requests: Family<IdentityLabels, Counter>,
    /// 1 for each running rule, labelled with the identity it runs as.
    pub rule_identity: Family<RuleIdentityLabels, Gauge>,
    /// Permissions a rule's identity lacks (0 once it has them all): the rule waits.
    pub rule_missing_permissions: Family<RuleLabels, Gauge>,
    pub rule_load_failures: Counter,
    pub rule_load_errors: Gauge,
    pub rules_running: Gauge,
    pub leader: Gauge,
    /// Requests sent to the API server (after the client's rate limiter).
    pub client_requests: Counter,
    /// Seconds requests spent waiting for the client's rate limiter.
    pub limiter_wait: Counter<f64, std::sync::atomic::AtomicU64>,
    /// Seconds requests spent waiting for a slot under `--max-in-flight`.
    pub in_flight_wait: Counter<f64, std::sync::atomic::AtomicU64>,
    /// Requests in flight now that make resources converge (watches and Events aside).
    pub requests_in_flight: Gauge,
    /// When the webhook's serving certificate ends (Unix seconds; 0 until it serves one).
    pub webhook_certificate_expiry: Gauge,
}

/// The help text of each metric (`ruleop_<name>`).
const HELP: &[(&str, &str)] = &[
    (
        "build_info",
        "1, labelled with the version and the commit this ruleop was built from",
    ),
    (
        "identity_requests",
        "Requests sent to the API server as a rule's ServiceAccount (by impersonation), by account; ruleop's own are in ruleop_client_requests_total",
    ),
    (
        "rule_identity",
        "1 for each running rule, with the identity its requests are made as",
    ),
    (
        "rule_missing_permissions",
        "Permissions a rule's ServiceAccount lacks (the rule is not started until it has them all)",
    ),
    (
        "client_requests_in_flight",
        "Requests at the API server or waiting for their slot now, watches and Events aside (Events wait for a moment when this is 0)",
    ),
    (
        "client_in_flight_wait_seconds",
        "Seconds the client's requests waited for a slot under --max-in-flight (summed over the requests)",
    ),
    ("client_requests", "Requests sent to the API server"),
    (
        "client_rate_limiter_wait_seconds",
        "Seconds the client's requests were held by its rate limiter (--qps, --burst): the time the request at the head of the queue waited for a token",
    ),
    (
        "slow_writes",
        "Child writes the API server had not answered after 5 s, per rule: the reconcile let them go on by themselves and wrote the status meanwhile",
    ),
    (
        "reconcile_errors",
        "Reconcile errors, per rule and category",
    ),
    ("reconcile_duration_seconds", "Reconcile duration, per rule"),
    (
        "reconcile_stage_seconds",
        "Time of each stage of a reconcile (lifecycle, render, children, status, status_write), per rule",
    ),
    ("writes", "Writes to the API server, per rule and action"),
    (
        "retired_kinds_pending",
        "Kinds a rule no longer makes whose children are not cleaned up yet",
    ),
    (
        "rule_older",
        "1 while a rule does not run because the cluster has seen a newer version of it than this replica's files hold",
    ),
    (
        "rule_info",
        "1 for the revision in force of each rule from a Rule object",
    ),
    (
        "rollout_step",
        "The step a rule's rollout is at (from 1); 0 when none runs",
    ),
    (
        "rollout_updated",
        "Resources Ready on the revision a rule's rollout brings",
    ),
    (
        "rollout_paused",
        "1 while a rule's rollout is paused (a step failed its health gate, or it was told to pause)",
    ),
    (
        "events_dropped",
        "Events not published because the rule's event queue was full",
    ),
    (
        "held_names_freed",
        "Names a child needs, held by an object not ruleop's, seen freed or changed by their watch (the resources waiting for them reconciled at once)",
    ),
    (
        "rule_load_failures",
        "Rules-file loads that failed (each error counted once per load)",
    ),
    (
        "rule_load_errors",
        "Errors in the rules files as last loaded",
    ),
    ("rules_running", "Rules whose controllers are running"),
    (
        "leader",
        "1 while this process holds the leader Lease (or runs without election)",
    ),
    ("reconciles", "Reconciles run, per rule"),
    (
        "webhook_certificate_expiry_timestamp_seconds",
        "When the serving certificate of the webhook ends, in Unix seconds (renewed 30 days before; 0 while it serves none, or without --webhook-addr)",
    ),
];

/// Registers `metric` as `name` with its help text, and gives it back.
fn reg<M: prometheus_client::registry::Metric + Clone>(
    r: &mut Registry,
    name: &str,
    metric: M,
) -> M {
    let help = HELP
        .iter()
        .find(|(n, _)| *n == name)
        .map_or("", |(_, h)| *h);
    r.register(name, help, metric.clone());
    metric
}

impl Default for Metrics {
    fn default() -> Self {
        let mut root = Registry::default();
        root.register_collector(Box::new(process::Process));
        let census = Census::default();
        root.register_collector(Box::new(census.clone()));
        let r = root.sub_registry_with_prefix("ruleop");
        let build_info = Family::<BuildLabels, Gauge>::default();
        build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION").into(),
                commit: env!("RULEOP_COMMIT").into(),
            })
            .set(1);
        reg(r, "build_info", build_info);
        let mut m = Metrics {
            // (The root, once the others are registered under it.)
            registry: Registry::default(),
            census,
            identity_requests: reg(
                r,
                "identity_requests",
                Family::<IdentityLabels, Counter>::default(),
            ),
            rule_identity: reg(
                r,
                "rule_identity",
                Family::<RuleIdentityLabels, Gauge>::default(),
            ),
            rule_missing_permissions: reg(
                r,
                "rule_missing_permissions",
                Family::<RuleLabels, Gauge>::default(),
            ),
            requests_in_flight: reg(r, "client_requests_in_flight", Gauge::default()),
            in_flight_wait: reg(
                r,
                "client_in_flight_wait_seconds",
                Counter::<f64, std::sync::atomic::AtomicU64>::default(),
            ),
            client_requests: reg(r, "client_requests", Counter::default()),
            limiter_wait: reg(
                r,
                "client_rate_limiter_wait_seconds",
                Counter::<f64, std::sync::atomic::AtomicU64>::default(),
            ),
            slow_writes: reg(r, "slow_writes", Family::<RuleLabels, Counter>::default()),
            reconcile_errors: reg(
                r,
                "reconcile_errors",
                Family::<ErrorLabels, Counter>::default(),
            ),
            reconcile_duration: reg(
                r,
                "reconcile_duration_seconds",
                Family::<RuleLabels, Histogram>::new_with_constructor(|| {
                    Histogram::new(exponential_buckets(0.001, 2.0, 14))
                }),
            ),
            reconcile_stages: reg(r, "reconcile_stage_seconds", stages::family()),
            writes: reg(r, "writes", Family::<WriteLabels, Counter>::default()),
            retired_kinds_pending: reg(
                r,
                "retired_kinds_pending",
                Family::<RuleLabels, Gauge>::default(),
            ),
            rule_older: reg(r, "rule_older", Family::<RuleLabels, Gauge>::default()),
            rule_info: reg(r, "rule_info", Family::<RevisionLabels, Gauge>::default()),
            rollout_step: reg(r, "rollout_step", Family::<RuleLabels, Gauge>::default()),
            rollout_updated: reg(r, "rollout_updated", Family::<RuleLabels, Gauge>::default()),
            rollout_paused: reg(r, "rollout_paused", Family::<RuleLabels, Gauge>::default()),
            events_dropped: reg(
                r,
                "events_dropped",
                Family::<RuleLabels, Counter>::default(),
            ),
            held_names_freed: reg(
                r,
                "held_names_freed",
                Family::<RuleLabels, Counter>::default(),
            ),
            rule_load_failures: reg(r, "rule_load_failures", Counter::default()),
            rule_load_errors: reg(r, "rule_load_errors", Gauge::default()),
            rules_running: reg(r, "rules_running", Gauge::default()),
            leader: reg(r, "leader", Gauge::default()),
            reconciles: reg(r, "reconciles", Family::<RuleLabels, Counter>::default()),
            webhook_certificate_expiry: reg(
                r,
                "webhook_certificate_expiry_timestamp_seconds",
                Gauge::default(),
            ),
        };
        m.registry = root;
        m
    }
}

impl Metrics {
    /// The metrics in Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// Every series of a rule, at 0 until it first happens: a rule's counters are on
    /// /metrics from its start, so `increase()` and `rate()` see their first count.
    pub fn rule_started(&self, rule: &str) {
        let labels = RuleLabels {
            rule: rule.to_string(),
        };
        for f in [
            &self.reconciles,
            &self.events_dropped,
            &self.slow_writes,
            &self.held_names_freed,
        ] {
            drop(f.get_or_create(&labels));
        }
        drop(self.reconcile_duration.get_or_create(&labels));
        stages::start(&self.reconcile_stages, rule);
        for g in [
            &self.retired_kinds_pending,
            &self.rule_older,
            &self.rollout_step,
            &self.rollout_updated,
            &self.rollout_paused,
            &self.rule_missing_permissions,
        ] {
            drop(g.get_or_create(&labels));
        }
        for &category in ERROR_CATEGORIES {
            drop(self.reconcile_errors.get_or_create(&ErrorLabels {
                rule: rule.to_string(),
                category,
            }));
        }
        for &action in WRITE_ACTIONS {
            drop(self.writes.get_or_create(&WriteLabels {
                rule: rule.to_string(),
                action,
            }));
        }
    }

    pub fn error(&self, rule: &str, category: &'static str) {
        debug_assert!(ERROR_CATEGORIES.contains(&category), "{category}");
        self.reconcile_errors
            .get_or_create(&ErrorLabels {
                rule: rule.to_string(),
                category,
            })
            .inc();
    }

    /// A child write that went on by itself (see `reconcile::record`).
    pub fn slow_write(&self, rule: &str) {
        self.slow_writes
            .get_or_create(&RuleLabels {
                rule: rule.to_string(),
            })
            .inc();
    }

    pub fn write(&self, rule: &str, action: &'static str) {
        debug_assert!(WRITE_ACTIONS.contains(&action), "{action}");
        self.writes
            .get_or_create(&WriteLabels {
                rule: rule.to_string(),
                action,
            })
            .inc();
    }

    pub fn held_name_freed(&self, rule: &str) {
        self.held_names_freed
            .get_or_create(&RuleLabels {
                rule: rule.to_string(),
            })
            .inc();
    }

    pub fn event_dropped(&self, rule: &str) {
        self.events_dropped
            .get_or_create(&RuleLabels {
                rule: rule.to_string(),
            })
            .inc();
    }

    /// One stage of a reconcile of `rule` ran from `start` until now.
    pub fn stage(&self, rule: &str, stage: &'static str, start: Instant) {
        stages::observe(&self.reconcile_stages, rule, stage, start);
    }

    /// Counts a reconcile now and its duration when the guard drops.
    pub fn reconcile(&self, rule: &str) -> ReconcileTimer<'_> {
        let labels = RuleLabels {
            rule: rule.to_string(),
        };
        self.reconciles.get_or_create(&labels).inc();
        ReconcileTimer {
            metrics: self,
            labels,
            start: Instant::now(),
        }
    }
}

/// Observes a reconcile's duration when dropped.
pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    labels: RuleLabels,
    start: Instant,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        self.metrics
            .reconcile_duration
            .get_or_create(&self.labels)
            .observe(self.start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn process_metrics_and_the_census_are_read_on_each_scrape() {
        let m = Metrics::default();
        let text = m.render();
        for name in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "ruleop_build_info{",
        ] {
            assert!(text.contains(name), "{name} in {text}");
        }
        assert!(!text.contains("ruleop_process_"), "{text}");
        assert_eq!(text.matches("# EOF").count(), 1);
        let counted = m.census.count(
            "website",
            Box::new(|| Counts {
                total: 3,
                true_of: [2, 3, 1, 0],
                queued: 2,
            }),
        );
        let text = m.render();
        for line in [
            r#"ruleop_resources{rule="website",condition="Ready",status="True"} 2"#,
            r#"ruleop_resources{rule="website",condition="Ready",status="False"} 1"#,
            r#"ruleop_resources{rule="website",condition="Stalled",status="False"} 3"#,
            r#"ruleop_queue_depth{rule="website"} 2"#,
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        drop(counted);
        assert!(!m.render().contains(r#"rule="website",condition"#));
    }

    #[test]
    fn a_rules_counters_are_there_at_zero_from_its_start() {
        let m = Metrics::default();
        assert!(!m.render().contains("rule=\"website\""));
        m.rule_started("website");
        let text = m.render();
        for line in [
            r#"ruleop_reconciles_total{rule="website"} 0"#,
            r#"ruleop_events_dropped_total{rule="website"} 0"#,
            r#"ruleop_rollout_paused{rule="website"} 0"#,
            r#"ruleop_reconcile_errors_total{rule="website",category="crd_error"} 0"#,
            r#"ruleop_writes_total{rule="website",action="prune"} 0"#,
            r#"ruleop_reconcile_duration_seconds_count{rule="website"} 0"#,
            r#"ruleop_reconcile_stage_seconds_count{rule="website",stage="render"} 0"#,
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        // A gauge already set keeps its value.
        m.rollout_step
            .get_or_create(&RuleLabels {
                rule: "website".into(),
            })
            .set(2);
        m.rule_started("website");
        assert!(
            m.render()
                .contains(r#"ruleop_rollout_step{rule="website"} 2"#)
        );
    }

    #[test]
    fn metrics_render_in_prometheus_text_format() {
        let m = Metrics::default();
        drop(m.reconcile("website"));
        m.error("website", "render");
        m.write("website", "create");
        let text = m.render();
        assert!(
            text.contains("ruleop_reconciles_total{rule=\"website\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("ruleop_reconcile_errors_total{rule=\"website\",category=\"render\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("ruleop_writes_total{rule=\"website\",action=\"create\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("ruleop_reconcile_duration_seconds_count{rule=\"website\"} 1"),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
    }
}
