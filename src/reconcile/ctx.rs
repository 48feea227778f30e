//! What a reconcile of one rule's resources works with, in three parts of different
//! lifetimes: the process's shared parts ([`Process`]: one per `ruleop run`), the rule's
//! kinds and their caches ([`Kinds`]: one per running rule), and one record per custom
//! resource ([`Records`]). [`Ctx`] holds one of each, with the rule and its Events.

use super::outcome::Sent;
use super::record::Records;
use crate::cache::cached::Cached;
use crate::cache::discovery::Resolved;
use crate::cache::existing::ExistingKind;
use crate::cache::watches::ChildKind;
use crate::client::Fence;
use crate::events::{EventLevel, EventQueue};
use crate::metrics::Metrics;
use crate::render::Rendered;
use crate::rules::CompiledRule;
use crate::status::StatusSchema;
use kube::Client;
use kube::runtime::reflector::ObjectRef;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The process's shared parts, the same for every rule.
pub struct Process {
    pub client: Client,
    /// Asked before every write: false once this replica may no longer write.
    pub fence: Arc<Fence>,
    pub metrics: Arc<Metrics>,
    /// Which Events to publish.
    pub events: EventLevel,
    /// How often a healthy custom resource is checked again with no event.
    pub resync: Duration,
}

/// Each of a rule's children (or existing objects) with its kind; children of one kind
/// share it. Made only by [`KindTable::new`], which keeps every child's index in range.
pub struct KindTable<K> {
    distinct: Vec<K>,
    of: Vec<usize>,
}

impl<K> KindTable<K> {
    /// The distinct kinds, and for each child (in rule order) its index among them; None
    /// when an index is out of range.
    pub fn new(distinct: Vec<K>, of: Vec<usize>) -> Option<KindTable<K>> {
        of.iter()
            .all(|&i| i < distinct.len())
            .then_some(KindTable { distinct, of })
    }

    /// The kind of child `i`, and its index among the distinct kinds.
    pub fn of(&self, i: usize) -> Option<(usize, &K)> {
        let k = *self.of.get(i)?;
        Some((k, &self.distinct[k]))
    }

    /// The distinct kinds.
    pub fn distinct(&self) -> &[K] {
        &self.distinct
    }
}

/// Whether a rule's watches have listed: until then (or [`SYNC_WAIT`] after the rule
/// started, for a watch that cannot list) a missing child may only be missing from the
/// cache, and reconciles wait.
pub struct Listed {
    flag: Arc<AtomicBool>,
    started: Instant,
}

/// How long reconciles wait for the rule's watches to list before going ahead anyway (a
/// watch the RBAC forbids never lists; its refusal is then reported on the resources).
pub const SYNC_WAIT: Duration = Duration::from_secs(10);

impl Listed {
    /// Following `flag`, set once every watch has listed, from now.
    pub fn new(flag: Arc<AtomicBool>) -> Listed {
        Listed {
            flag,
            started: Instant::now(),
        }
    }

    pub fn ready(&self) -> bool {
        self.flag.load(Ordering::SeqCst) || self.started.elapsed() >= SYNC_WAIT
    }
}

/// The kinds one rule reads and writes, each resolved by discovery and cached.
pub struct Kinds {
    /// The watched kind.
    pub parent: Resolved,
    pub children: KindTable<ChildKind>,
    pub existing: KindTable<ExistingKind>,
    pub listed: Listed,
}

/// Everything a reconcile of one rule's custom resources needs.
pub struct Ctx {
    pub process: Arc<Process>,
    pub rule: Arc<CompiledRule>,
    pub kinds: Kinds,
    /// One record per custom resource.
    pub records: Arc<Records<Sent>>,
    /// Where Events go (a bounded queue to the rule's publishing task).
    pub events: EventQueue,
    /// The status fields the kind's schema drops, learned from our writes.
    pub status_schema: StatusSchema,
}

impl Ctx {
    /// The rule's child `id`: its index in the rule and its kind.
    pub fn child(&self, id: &str) -> Option<(usize, &ChildKind)> {
        let i = self.rule.children.iter().position(|c| c.id == id)?;
        Some((i, self.kinds.children.of(i)?.1))
    }

    /// The cached object of a rendered child, if the cluster has it.
    pub fn live(&self, ns: &str, r: &Rendered) -> Option<Value> {
        let (_, kind) = self.child(&r.id)?;
        let oref = ObjectRef::new_with(&r.name, kind.resolved.resource.clone()).within(ns);
        kind.store.get(&oref)?.value()
    }

    /// The cached object of a child, by name, if the cluster has it.
    pub fn cached(&self, kind: &ChildKind, ns: &str, name: &str) -> Option<Arc<Cached>> {
        let oref = ObjectRef::new_with(name, kind.resolved.resource.clone()).within(ns);
        kind.store.get(&oref)
    }
}

#[cfg(test)]
mod tests {
    use super::KindTable;

    #[test]
    fn every_child_has_a_kind_in_the_table() {
        let t = KindTable::new(vec!["Deployment", "Service"], vec![0, 1, 0]).unwrap();
        assert_eq!(t.of(2), Some((0, &"Deployment")));
        assert_eq!(t.of(3), None);
        assert_eq!(t.distinct().len(), 2);
        assert!(KindTable::new(vec!["Deployment"], vec![0, 1]).is_none());
    }
}
