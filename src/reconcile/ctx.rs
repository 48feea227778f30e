//! What a reconcile of one rule's resources works with, in three parts of different
//! lifetimes: the process's shared parts ([`Process`]: one per `ruleop run`), the rule's
//! kinds and their caches ([`Kinds`]: one per running rule), and one record per custom
//! resource ([`Records`]). [`Ctx`] holds one of each, with the rule and its Events.

use super::outcome::Sent;
use super::record::Records;
use crate::cache::cached::Cached;
use crate::cache::discovery::Resolved;
use crate::cache::existing::ExistingKind;
use crate::cache::watches::{ChildKind, SyncTracker};
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
use std::time::{Duration, Instant};

/// The process's shared parts, the same for every rule but for the client: a rule with a
/// ServiceAccount has one of its own ([`Process::acting_as`]).
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

impl Process {
    /// The same parts, every request made with `client` (a rule's, acting as its
    /// ServiceAccount).
    pub fn acting_as(&self, client: Client) -> Process {
        Process {
            client,
            fence: self.fence.clone(),
            metrics: self.metrics.clone(),
            events: self.events,
            resync: self.resync,
        }
    }
}

/// Each of a rule's children (or existing objects) with its kind; children of one kind
/// share it. Made only by [`KindTable::new`], which keeps every child's index in range.
/// The revisions of one Rule share the kinds (their union), each with its own children.
pub struct KindTable<K> {
    distinct: Arc<Vec<K>>,
    of: Vec<usize>,
}

impl<K> Clone for KindTable<K> {
    fn clone(&self) -> Self {
        KindTable {
            distinct: self.distinct.clone(),
            of: self.of.clone(),
        }
    }
}

impl<K> KindTable<K> {
    /// The distinct kinds, and for each child (in rule order) its index among them; None
    /// when an index is out of range.
    pub fn new(distinct: Vec<K>, of: Vec<usize>) -> Option<KindTable<K>> {
        of.iter().all(|&i| i < distinct.len()).then_some(KindTable {
            distinct: Arc::new(distinct),
            of,
        })
    }

    /// The same kinds for other children (another revision's); None when an index is out
    /// of range.
    pub fn with_children(&self, of: Vec<usize>) -> Option<KindTable<K>> {
        of.iter()
            .all(|&i| i < self.distinct.len())
            .then(|| KindTable {
                distinct: self.distinct.clone(),
                of,
            })
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

/// Whether a rule's watches have listed. Until every one has (or [`SYNC_WAIT`] after the
/// rule started, for a watch that cannot list: its refusal is then reported), a missing
/// child may only be missing from the cache, and reconciles wait. Nothing is deleted on
/// the strength of a watch that has not listed, whatever the wait: see [`Listed::children`].
#[derive(Clone)]
pub struct Listed {
    tracker: Arc<SyncTracker>,
    started: Instant,
    /// How many child kinds there are (their watches come after the watched kind's, then
    /// the existing kinds').
    child_kinds: usize,
}

/// How long reconciles wait for the rule's watches to list before going ahead anyway (a
/// watch the RBAC forbids never lists; its refusal is then reported on the resources).
pub const SYNC_WAIT: Duration = Duration::from_secs(10);

impl Listed {
    /// Following `tracker` (watch 0 the watched kind's, then `child_kinds` child kinds',
    /// then the existing kinds'), from now.
    pub fn new(tracker: Arc<SyncTracker>, child_kinds: usize) -> Listed {
        Listed {
            tracker,
            started: Instant::now(),
            child_kinds,
        }
    }

    /// Reconciles may go ahead: every watch has listed, or the wait is over.
    pub fn ready(&self) -> bool {
        self.tracker.all_listed() || self.started.elapsed() >= SYNC_WAIT
    }

    /// Every child kind's watch has listed: what the caches lack of the rule's children is
    /// not there (so an object may be pruned, or a deletion go on, on their word).
    pub fn children(&self) -> bool {
        (1..=self.child_kinds).all(|i| self.tracker.listed(i))
    }

    /// The watch of existing kind `k` (among the distinct ones) has listed.
    pub fn existing(&self, k: usize) -> bool {
        self.tracker.listed(1 + self.child_kinds + k)
    }
}

/// The kinds one rule reads and writes, each resolved by discovery and cached.
#[derive(Clone)]
pub struct Kinds {
    /// The watched kind.
    pub parent: Resolved,
    pub children: KindTable<ChildKind>,
    pub existing: KindTable<ExistingKind>,
    pub listed: Listed,
    /// When objects the render no longer makes may be deleted.
    pub prune: PruneFrom,
    /// The kinds recorded for the rule that no revision in force makes (being retired, or
    /// kept): no watch sees their objects, so a deletion lets go those that ask to be
    /// orphaned by asking the API server.
    pub unwatched: Arc<Unwatched>,
}

/// The kinds a rule made once and no revision in force makes: (apiVersion, kind).
#[derive(Debug, Default)]
pub struct Unwatched {
    /// None until the rule's retirement has read the inventory.
    kinds: std::sync::Mutex<Option<Vec<(String, String)>>>,
}

impl Unwatched {
    /// These are the kinds from now on.
    pub fn set(&self, kinds: Vec<(String, String)>) {
        if let Ok(mut k) = self.kinds.lock() {
            *k = Some(kinds);
        }
    }

    /// The kinds, once known.
    pub fn get(&self) -> Option<Vec<(String, String)>> {
        self.kinds.lock().ok().and_then(|k| k.clone())
    }
}

/// When a rule may take away the objects its render no longer makes: only once its version
/// is known to be the newest the cluster has run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PruneFrom {
    Now,
    /// Its version is one the cluster had not run, loaded by a replica that never loaded
    /// the newest (it may be an old one that never ran): once it has been the newest for
    /// the whole wait, from this instant.
    At(Instant),
    /// Its version could not be checked against the cluster's newest.
    Never,
}

impl PruneFrom {
    /// Why nothing may be pruned now, if so.
    pub fn closed(&self) -> Option<&'static str> {
        match self {
            PruneFrom::Now => None,
            PruneFrom::At(t) if Instant::now() >= *t => None,
            PruneFrom::At(_) => Some(
                "the rule's version is one the cluster has not run, loaded by a replica that never loaded the newest (it may be an old one that never ran): it prunes once it has been the newest for --rules-settle-seconds",
            ),
            PruneFrom::Never => {
                Some("the rule's version could not be checked against the cluster's newest")
            }
        }
    }
}

/// Everything a reconcile of one rule's custom resources needs.
pub struct Ctx {
    pub process: Arc<Process>,
    pub rule: Arc<CompiledRule>,
    pub kinds: Kinds,
    /// One record per custom resource.
    pub records: Arc<Records<Sent>>,
    /// Where Events go (a bounded queue to the rule's publishing task).
    pub events: Arc<EventQueue>,
    /// The status fields the kind's schema drops, learned from our writes.
    pub status_schema: Arc<StatusSchema>,
    /// The revision of the Rule object this rule is (written in each resource's status
    /// as `ruleRevision`); None for a rule from a file.
    pub revision: Option<i64>,
    /// The names its children need that another's object holds, watched (every revision's).
    pub held: Arc<crate::cache::held::HeldNames>,
}

/// Which revision of a Rule renders a custom resource (a rollout's progress, a pin).
pub trait Choose: Send + Sync {
    /// The revision for `cr`; None: the newest.
    fn revision(&self, cr: &kube::api::DynamicObject) -> Option<i64>;
}

/// The contexts of a rule's revisions, and which one each custom resource gets. A rule
/// from a file has one.
pub struct Router {
    /// The newest revision's (the rule in force).
    pub newest: Arc<Ctx>,
    /// Other revisions kept loaded (a rollout's previous one, pinned ones), by number.
    pub others: std::collections::BTreeMap<i64, Arc<Ctx>>,
    pub choose: Option<Arc<dyn Choose>>,
    /// A revision that must not be replaced by the newest when it is not loaded (a
    /// rollout's previous one): its resources wait.
    pub held: Option<i64>,
}

impl Router {
    /// One context, for every resource.
    pub fn one(ctx: Arc<Ctx>) -> Router {
        Router {
            newest: ctx,
            others: Default::default(),
            choose: None,
            held: None,
        }
    }

    /// The context that reconciles `cr`; None when its revision is held (not loaded, and
    /// not to be replaced by the newest).
    pub fn pick(&self, cr: &kube::api::DynamicObject) -> Option<Arc<Ctx>> {
        let chosen = self.choose.as_ref().and_then(|c| c.revision(cr));
        match chosen {
            Some(r) if Some(r) != self.newest.revision => match self.others.get(&r) {
                Some(ctx) => Some(ctx.clone()),
                None if Some(r) == self.held => None,
                None => Some(self.newest.clone()),
            },
            _ => Some(self.newest.clone()),
        }
    }
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
