//! Keeps the running controllers equal to the rules in force: starts new rules, restarts
//! changed ones (their resources are reconciled again; children of kinds the rule no
//! longer makes are pruned), stops deleted ones (their children stay). Runs nothing while
//! this process is not the leader.

use super::admin::{Health, RuleHealth};
use super::inventory;
use super::runner::{Options, RuleTask};
use crate::metrics::Metrics;
use crate::rules::CompiledRule;
use std::collections::BTreeMap;
use std::sync::Arc;

pub struct Supervisor {
    opts: Options,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    running: BTreeMap<String, RuleTask>,
    desired: Vec<Arc<CompiledRule>>,
    /// The fingerprints loaded for each rule, in order (whether this replica saw its
    /// version follow another: see [`super::versions`]).
    loaded: BTreeMap<String, Vec<String>>,
    /// The kinds served, for the webhook (it refuses a Rule on a kind another rule serves).
    pub served: Arc<super::webhook::review::Served>,
}

impl Supervisor {
    pub fn new(opts: Options, metrics: Arc<Metrics>, health: Arc<Health>) -> Supervisor {
        Supervisor {
            opts,
            metrics,
            health,
            running: BTreeMap::new(),
            desired: Vec::new(),
            loaded: BTreeMap::new(),
            served: super::webhook::review::Served::new(),
        }
    }

    pub fn set_desired(&mut self, rules: Vec<Arc<CompiledRule>>) {
        for r in &rules {
            let seen = self.loaded.entry(r.name.clone()).or_default();
            if seen.last() != Some(&r.fingerprint) {
                seen.push(r.fingerprint.clone());
            }
        }
        self.served.set(&rules);
        self.desired = rules;
    }

    /// Brings the running controllers to the desired rules.
    pub async fn converge(&mut self) {
        let names: Vec<String> = self.running.keys().cloned().collect();
        for name in names {
            if !self.desired.iter().any(|r| r.name == name)
                && let Some(task) = self.running.remove(&name)
            {
                tracing::info!(rule = %name, "rule removed: stopping its controller; its children stay");
                task.stop().await;
            }
        }
        for rule in self.desired.clone() {
            let retired = match self.running.get(&rule.name) {
                // The same rule from the same kind of source: nothing to do. (A file's
                // rule that becomes a Rule's restarts: it gets revisions.)
                Some(t)
                    if t.rule.fingerprint == rule.fingerprint
                        && t.rule.object.is_some() == rule.object.is_some() =>
                {
                    continue;
                }
                Some(t) => {
                    let gone = inventory::retired(
                        &inventory::kinds_of(&t.rule),
                        &inventory::kinds_of(&rule),
                    );
                    tracing::info!(rule = %rule.name, from = %t.rule.fingerprint, to = %rule.fingerprint, "rule changed: restarting its controller");
                    if let Some(old) = self.running.remove(&rule.name) {
                        old.stop().await;
                    }
                    gone
                }
                None => Vec::new(),
            };
            let loaded = self.loaded.get(&rule.name).cloned().unwrap_or_default();
            let task = RuleTask::spawn(rule.clone(), self.opts.clone(), retired, loaded);
            self.running.insert(rule.name.clone(), task);
        }
        self.publish();
    }

    /// The running rule of that name.
    pub fn task(&self, name: &str) -> Option<&RuleTask> {
        self.running.get(name)
    }

    /// Stops every controller, letting in-flight reconciles finish.
    pub async fn stop_all(&mut self) {
        let tasks: Vec<RuleTask> = std::mem::take(&mut self.running).into_values().collect();
        futures::future::join_all(tasks.into_iter().map(RuleTask::stop)).await;
        self.publish();
    }

    /// Stops every controller at once, cancelling in-flight reconciles (leadership lost).
    pub async fn abort_all(&mut self) {
        let tasks: Vec<RuleTask> = std::mem::take(&mut self.running).into_values().collect();
        futures::future::join_all(tasks.into_iter().map(RuleTask::abort)).await;
        self.publish();
    }

    fn publish(&self) {
        self.metrics.rules_running.set(self.running.len() as i64);
        if let Ok(mut h) = self.health.rules.lock() {
            *h = self
                .running
                .values()
                .map(|t| RuleHealth {
                    name: t.rule.name.clone(),
                    source: t.rule.at.to_string(),
                    fingerprint: t.rule.fingerprint.clone(),
                    synced: t.synced.clone(),
                    identity: t.rule.identity.as_ref().map(|i| i.to_string()),
                    info: t.info.clone(),
                })
                .collect();
        }
    }
}
