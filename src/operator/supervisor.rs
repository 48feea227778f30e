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
    /// Every rule name a source holds (in force or refused): a running rule whose name is
    /// not here was removed for good.
    pub present: std::collections::BTreeSet<String>,
    /// The rules removed, not released yet: since when, and the rule.
    leaving: BTreeMap<String, (std::time::Instant, Arc<CompiledRule>)>,
    /// The releases of removed rules' resources under way, by rule.
    releasing: BTreeMap<String, tokio::task::JoinHandle<()>>,
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
            releasing: BTreeMap::new(),
            leaving: BTreeMap::new(),
            present: Default::default(),
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
                let rule = task.rule.clone();
                task.stop().await;
                if self.present.contains(&name) {
                    // Refused (a conflict), not removed: its resources stay held.
                    tracing::info!(rule = %name, "rule refused: stopping its controller; its children stay");
                } else {
                    tracing::info!(rule = %name, wait_s = self.opts.settle.as_secs(), "rule removed: stopping its controller; its children stay, and its resources' finalizers are released once it has stayed away for the wait");
                    self.leaving
                        .insert(name.clone(), (std::time::Instant::now(), rule));
                }
            }
        }
        self.release_the_gone().await;
        for rule in self.desired.clone() {
            let retired = match self.running.get(&rule.name) {
                // The same rule from the same source: nothing to do. (A file's rule that
                // becomes a Rule's restarts: it gets revisions; so does a Rule's new
                // generation or object with the same spec: its standing is claimed again.)
                Some(t)
                    if t.rule.fingerprint == rule.fingerprint && same_object(&t.rule, &rule) =>
                {
                    continue;
                }
                Some(t) => {
                    let gone = crate::lifecycle::kinds::retired(
                        &crate::lifecycle::kinds::kinds_of(&t.rule),
                        &crate::lifecycle::kinds::kinds_of(&rule),
                    );
                    tracing::info!(rule = %rule.name, from = %t.rule.fingerprint, to = %rule.fingerprint, "rule changed: restarting its controller");
                    if let Some(old) = self.running.remove(&rule.name) {
                        old.stop().await;
                    }
                    gone
                }
                None => Vec::new(),
            };
            // Back before its release ended: the rule keeps its resources again.
            if let Some(h) = self.releasing.remove(&rule.name) {
                h.abort();
            }
            self.leaving.remove(&rule.name);
            let loaded = self.loaded.get(&rule.name).cloned().unwrap_or_default();
            let task = RuleTask::spawn(rule.clone(), self.opts.clone(), retired, loaded);
            self.running.insert(rule.name.clone(), task);
        }
        self.publish();
    }

    /// Releases the rules that have stayed away for `--rules-settle-seconds` (a file being
    /// rewritten, a Rule replaced, comes back before), unless a rule in force now serves
    /// their kind (its finalizers are its own); forgets those back meanwhile.
    async fn release_the_gone(&mut self) {
        let present = &self.present;
        self.leaving.retain(|name, _| !present.contains(name));
        let settle = self.opts.settle;
        let due: Vec<String> = self
            .leaving
            .iter()
            .filter(|(_, (since, _))| since.elapsed() >= settle)
            .map(|(n, _)| n.clone())
            .collect();
        for name in due {
            let Some((_, rule)) = self.leaving.remove(&name) else {
                continue;
            };
            use crate::rules::claims::{claims, shared};
            let gone = claims(&rule);
            let taken = self
                .desired
                .iter()
                .any(|d| shared(&claims(d), &gone).is_some());
            if taken {
                tracing::info!(rule = %name, "a removed rule's kind is served by another rule now: its resources stay held, by that rule (which let its orphans go when it took the kind over)");
                continue;
            }
            self.release(rule).await;
        }
    }

    /// Releases the resources of `rule`, removed (see [`super::release`]), as the rule's
    /// ServiceAccount when it names one.
    async fn release(&mut self, rule: Arc<CompiledRule>) {
        let client = match &rule.identity {
            Some(id) => match self.opts.clients.acting_as(&id.user()).await {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(rule = %rule.name, error = %e, "no client for the removed rule's ServiceAccount: its resources' finalizers are released as ruleop");
                    self.opts.process.client.clone()
                }
            },
            None => self.opts.process.client.clone(),
        };
        let name = rule.name.clone();
        // The kinds an earlier version made, as the inventory records them: their objects
        // that ask to be orphaned are let go too.
        let inventory = inventory::Inventory {
            client: self.opts.process.client.clone(),
            namespace: self.opts.state_namespace.clone(),
            fence: self.opts.process.fence.clone(),
        };
        let key = inventory::key(&name, self.opts.scope.namespace.as_deref());
        let recorded = match inventory.recorded(&key).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(rule = %name, error = %e, "the inventory cannot be read: only the kinds the removed rule makes now are looked at for children to let go");
                Default::default()
            }
        };
        let task = super::release::run(super::release::Release {
            client,
            recorded,
            rule: super::release::Subject::of(&rule),
            namespace: self.opts.scope.namespace.clone(),
            fence: self.opts.process.fence.clone(),
            reporter: self.opts.reporter.clone(),
            every: false,
        });
        if let Some(old) = self.releasing.insert(name, tokio::spawn(task)) {
            old.abort();
        }
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

/// Whether two versions of a rule come from the same kind of source and, for a Rule, the
/// same object at the same generation.
fn same_object(a: &crate::rules::CompiledRule, b: &crate::rules::CompiledRule) -> bool {
    match (&a.object, &b.object) {
        (None, None) => true,
        (Some(x), Some(y)) => x.uid == y.uid && x.generation == y.generation,
        _ => false,
    }
}
