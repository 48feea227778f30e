//! `ruleop_resources{rule, condition, status}`: each running rule's resources counted by
//! their `Ready`, `Synced`, `Reconciling` and `Stalled` conditions, as the cache holds them,
//! counted when /metrics is read (nothing is kept per resource, nothing is done between
//! scrapes); and `ruleop_queue_depth{rule}`, the resources waiting for a reconcile.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The conditions counted, in the order of [`Counts::true_of`].
pub const CONDITIONS: [&str; 4] = ["Ready", "Synced", "Reconciling", "Stalled"];

/// A rule's resources, and how many have each condition of [`CONDITIONS`] True.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Counts {
    pub total: i64,
    pub true_of: [i64; 4],
    /// Waiting for a reconcile an event asked for (`ruleop_queue_depth`).
    pub queued: i64,
}

/// Counts a rule's resources now.
pub type Count = Box<dyn Fn() -> Counts + Send + Sync>;

#[derive(Clone, Default)]
pub struct Census {
    rules: Arc<Mutex<BTreeMap<String, Count>>>,
}

impl std::fmt::Debug for Census {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Census")
    }
}

/// Takes a rule out of the census when dropped (the rule stopped).
pub struct Counted {
    census: Census,
    rule: String,
}

impl Drop for Counted {
    fn drop(&mut self) {
        if let Ok(mut r) = self.census.rules.lock() {
            r.remove(&self.rule);
        }
    }
}

impl Census {
    /// Counts `rule`'s resources with `count` on each scrape, until the guard drops.
    pub fn count(&self, rule: &str, count: Count) -> Counted {
        if let Ok(mut r) = self.rules.lock() {
            r.insert(rule.to_string(), count);
        }
        Counted {
            census: self.clone(),
            rule: rule.to_string(),
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleLabel {
    rule: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Labels {
    rule: String,
    condition: &'static str,
    status: &'static str,
}

impl Collector for Census {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let counted: Vec<(String, Counts)> = match self.rules.lock() {
            Ok(r) => r.iter().map(|(k, f)| (k.clone(), f())).collect(),
            Err(_) => return Ok(()),
        };
        let mut m = e.encode_descriptor(
            "ruleop_resources",
            "A running rule's resources by condition (Ready, Synced, Reconciling, Stalled) and its status (True, or False for every other, absent included)",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for (rule, c) in &counted {
            for (i, condition) in CONDITIONS.iter().enumerate() {
                for (status, n) in [("True", c.true_of[i]), ("False", c.total - c.true_of[i])] {
                    let labels = Labels {
                        rule: rule.clone(),
                        condition,
                        status,
                    };
                    ConstGauge::new(n).encode(m.encode_family(&labels)?)?;
                }
            }
        }
        let mut q = e.encode_descriptor(
            "ruleop_queue_depth",
            "A running rule's resources waiting for a reconcile that a watch event asked for (retries waiting for their time left out)",
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for (rule, c) in counted {
            ConstGauge::new(c.queued).encode(q.encode_family(&RuleLabel { rule })?)?;
        }
        Ok(())
    }
}
