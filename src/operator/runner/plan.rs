//! What a rule runs, decided before anything is reconciled: whether this version may run
//! at all (against the versions the cluster has run), a takeover of another rule's kind,
//! the revisions it renders (the newest; the ones a rollout comes from or a resource pins)
//! and where its rollout stands, every kind they use resolved by discovery, and its
//! account's permissions for all of them.

use super::discover::{distinct_kinds, stopped};
use super::loaded::{self, Loaded};
use super::parts::{Options, RuleInfo};
use super::{identity, rollout, takeover};
use crate::cache::discovery::Resolved;
use crate::lifecycle::Retire;
use crate::operator::inventory::Inventory;
use crate::operator::revisions::History;
use crate::reconcile::PruneFrom;
use crate::rollout::Progress;
use crate::rules::CompiledRule;
use kube::Client;
use kube::runtime::reflector::ObjectRef;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// What the rule starts from.
pub(super) struct Inputs<'a> {
    pub rule: &'a Arc<CompiledRule>,
    pub opts: &'a Options,
    /// ruleop's own client, and the rule's (as its ServiceAccount when it names one).
    pub own: &'a Client,
    pub client: &'a Client,
    pub parent: &'a Resolved,
    /// The fingerprints this process has loaded for the rule, in order.
    pub fingerprints: &'a [String],
    pub info: &'a RuleInfo,
    pub stop: &'a watch::Receiver<bool>,
}

/// What the rule runs.
pub(super) struct Plan {
    /// Whether this version prunes and retires kinds now, after a wait, or never.
    pub allowed: crate::operator::versions::Allowed,
    pub prune: PruneFrom,
    pub history: Option<History>,
    /// The revisions that render resources, the newest first.
    pub loaded: Vec<Loaded>,
    pub progress: Option<Progress>,
    /// A rollout's previous revision that no longer loads (its resources wait).
    pub held: Option<i64>,
    /// The revisions the resources pinned when the rule started.
    pub pinned: BTreeSet<i64>,
    /// The distinct child kinds of every revision, and each child's place among them.
    pub kinds: Vec<Resolved>,
    pub child_kind: Vec<usize>,
    /// The same for the existing objects they read.
    pub existing_kinds: Vec<Resolved>,
    pub existing_kind: Vec<usize>,
}

impl Plan {
    /// The revisions, the newest first.
    pub fn revisions(&self) -> Vec<&CompiledRule> {
        self.loaded.iter().map(|l| &*l.rule).collect()
    }

    /// The kinds of every revision in force: those loaded, a rollout's previous one that
    /// no longer compiles (`held`: its resources wait on it, and keep its kinds' objects),
    /// and a pinned one that no longer loads (its kinds are not retired while pinned).
    pub fn in_force_kinds(&self) -> BTreeSet<crate::lifecycle::Made> {
        let loaded: BTreeSet<i64> = self.loaded.iter().filter_map(|l| l.number).collect();
        let unloaded = self
            .held
            .into_iter()
            .chain(self.pinned.iter().copied())
            .filter(|n| !loaded.contains(n))
            .filter_map(|n| self.history.as_ref()?.kept.get(&n))
            .map(|rev| &rev.spec);
        crate::lifecycle::kinds::kinds_in_force(self.revisions(), unloaded)
    }
}

/// Decides what the rule runs; None when it is stopped first.
pub(super) async fn plan(i: &Inputs<'_>) -> Option<Plan> {
    let allowed = may_run(i).await?;
    // The revisions the resources pin: kept whatever the history limit, and in force.
    let pinned = pins(i).await?;
    let (history, progress) = revisions(i, &pinned).await?;
    let load = served_pins(i, history.as_ref(), &pinned).await;
    let loaded = loaded::revisions(
        i.rule,
        history.as_ref(),
        progress.as_ref(),
        &i.opts.policy,
        &load,
    );
    // A rollout whose previous revision no longer loads pauses: the resources not reached
    // wait (they never take the newest in its place).
    let (progress, held) = rollout::hold_missing_from(progress, &loaded, history.as_ref(), now());
    // The distinct child kinds and existing kinds of them all, each resolved by discovery.
    let (children, existing) = wanted(&loaded);
    let (kinds, child_kind) = resolve(i, &children).await?;
    let (existing_kinds, existing_kind) = resolve(i, &existing).await?;
    let plan = Plan {
        prune: prune_from(allowed.prune),
        allowed,
        history,
        loaded,
        progress,
        held,
        pinned,
        kinds,
        child_kind,
        existing_kinds,
        existing_kind,
    };
    // A rule with a ServiceAccount starts only once the account may do all it needs.
    let used = identity::ResolvedKinds {
        parent: i.parent,
        children: &plan.kinds,
        existing: &plan.existing_kinds,
    };
    let revisions = plan.revisions();
    identity::preflight(&revisions, i.client, i.opts, used, i.info, i.stop)
        .await
        .then_some(())?;
    Some(plan)
}

fn inventory(i: &Inputs<'_>) -> Inventory {
    Inventory {
        client: i.own.clone(),
        namespace: i.opts.state_namespace.clone(),
        fence: i.opts.process.fence.clone(),
    }
}

/// Whether this version may run: an older version than one the cluster has run waits (it
/// would undo the newer one's work, and retire the kinds it added); a kind another rule
/// served is taken over first (see [`takeover`]).
async fn may_run(i: &Inputs<'_>) -> Option<crate::operator::versions::Allowed> {
    let scope = i.opts.scope.namespace.as_deref();
    let state = inventory(i);
    let versions = crate::operator::versions::wait_until_newest(
        &state,
        i.rule,
        scope,
        i.fingerprints,
        i.opts.settle,
        &i.opts.process.metrics,
        i.stop,
    );
    let allowed = versions.await?;
    let t = takeover::Takeover {
        inventory: state,
        client: i.client,
        rule: i.rule,
        namespace: scope,
    };
    takeover::take_over(t, i.stop).await?;
    Some(allowed)
}

fn prune_from(prune: Retire) -> PruneFrom {
    match prune {
        Retire::Now => PruneFrom::Now,
        Retire::After(wait) => std::time::Instant::now()
            .checked_add(wait)
            .map_or(PruneFrom::Never, PruneFrom::At),
        Retire::Never => PruneFrom::Never,
    }
}

/// The revisions the resources pin (none for a rule from a file, or pins disabled).
async fn pins(i: &Inputs<'_>) -> Option<BTreeSet<i64>> {
    let scope = i.opts.scope.namespace.as_deref();
    loaded::pinned(i.client, i.parent, scope, i.rule, i.stop).await
}

/// The pinned revisions whose child kinds the cluster serves now: the others are not
/// loaded (the rule would wait for their kinds; the resource pinning one takes the
/// newest), though their kinds stay in force (see [`Plan::in_force_kinds`]).
async fn served_pins(
    i: &Inputs<'_>,
    history: Option<&History>,
    pinned: &BTreeSet<i64>,
) -> BTreeSet<i64> {
    let mut out = BTreeSet::new();
    for n in pinned {
        let Some(rev) = history.and_then(|h| h.kept.get(n)) else {
            continue;
        };
        let mut served = true;
        for made in crate::lifecycle::kinds::kinds_of_spec(&rev.spec) {
            let (group, version) = crate::schema::kinds::group_version(&made.api_version);
            let found = crate::cache::discovery::child(i.client, group, version, &made.kind);
            if let Ok(None) = found.await {
                tracing::warn!(revision = n, kind = %made.kind, "a pinned revision makes a kind the cluster does not serve: not loaded (its resources take the newest; the kind's objects are kept)");
                served = false;
            }
        }
        if served {
            out.insert(*n);
        }
    }
    out
}

/// A Rule object's revisions (its spec found among them, or recorded as the next one;
/// the revisions resources pin kept whatever the history limit), and where its rollout
/// stands. (None, None) for a rule from a file; None when stopped first.
async fn revisions(
    i: &Inputs<'_>,
    pinned: &BTreeSet<i64>,
) -> Option<(Option<History>, Option<Progress>)> {
    if i.rule.object.is_none() {
        i.info.set_rollout(None);
        return Some((None, None));
    }
    let (h, rolled_back) = recorded(i.own, i.opts, i.rule, pinned, i.stop).await?;
    let _ = i.info.revision.set(h.current);
    let saved = Progress::from_status(saved_rollout(i.rule, i.opts).as_ref());
    let previous = h.previous(&rolled_back);
    let p = crate::rollout::start(saved, h.current, previous, i.rule.rollout.as_ref(), now());
    // The current revision was rolled back once (its status since lost): it stays so.
    let progress = p.map(|p| match rolled_back.contains(&h.current) {
        true => crate::rollout::rolled_back(p),
        false => p,
    });
    if progress.is_none() {
        i.info.set_rollout(None);
    }
    Some((Some(h), progress))
}

/// An (apiVersion, kind).
type KindName = (String, String);

/// The (apiVersion, kind) of every child, then of every existing object, of the
/// revisions, in order.
fn wanted(loaded: &[Loaded]) -> (Vec<KindName>, Vec<KindName>) {
    let children = loaded
        .iter()
        .flat_map(|l| l.rule.children.iter())
        .map(|c| (c.api_version.clone(), c.kind.clone()))
        .collect();
    let existing = loaded
        .iter()
        .flat_map(|l| l.rule.existing.iter())
        .map(|e| (e.api_version.clone(), e.kind.clone()))
        .collect();
    (children, existing)
}

/// The distinct kinds of `wanted`, each resolved by discovery (waited for while not
/// served), and each one's place among them.
async fn resolve(i: &Inputs<'_>, wanted: &[KindName]) -> Option<(Vec<Resolved>, Vec<usize>)> {
    let wanted = wanted.iter().map(|(a, k)| (a.as_str(), k.as_str()));
    distinct_kinds(i.client, i.opts, i.stop, wanted).await
}

pub(super) fn now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

/// The revisions of a Rule object's rule, its own recorded, and those whose rollout was
/// rolled back (read from the Rule itself: what a rollout decided, before anything is
/// reconciled); retried until both are known, or the rule is stopped (None).
async fn recorded(
    client: &Client,
    opts: &Options,
    rule: &CompiledRule,
    pinned: &BTreeSet<i64>,
    stop: &watch::Receiver<bool>,
) -> Option<(History, BTreeSet<i64>)> {
    // A rollout's revisions are kept whatever the history limit: its previous one, and its
    // new one (the previous one of the rollout this edit starts); so are those pinned.
    let keep: Vec<i64> = saved_rollout(rule, opts)
        .map(|r| [r["from"].as_i64(), r["revision"].as_i64()])
        .into_iter()
        .flatten()
        .flatten()
        .chain(pinned.iter().copied())
        .collect();
    let revisions = crate::operator::revisions::ensure;
    loop {
        let read = async {
            let h = revisions(client, &opts.state_namespace, rule, &keep).await?;
            let rolled_back = crate::operator::revisions::rolled_back(client, &rule.name).await?;
            Ok::<_, kube::Error>((h, rolled_back))
        };
        match read.await {
            Ok(got) => return Some(got),
            Err(e) => {
                tracing::warn!(error = %e, namespace = %opts.state_namespace, "the Rule's revisions cannot be read or recorded (ControllerRevisions in the operator's namespace, and the Rule's rolled-back ones); retrying")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(2)) => {}
            _ = stopped(stop.clone()) => return None,
        }
    }
}

/// Where the Rule's status says its rollout stands: as the Rule watch has it now (its
/// status moves on while its spec, and so the compiled rule, stays), else as it was when
/// the rule was compiled.
fn saved_rollout(rule: &CompiledRule, opts: &Options) -> Option<serde_json::Value> {
    let object = rule.object.as_ref()?;
    let key = ObjectRef::new_with(&rule.name, crate::operator::objects::resource());
    let live = opts.rules.as_ref().and_then(|s| s.get(&key));
    match live.filter(|o| o.metadata.uid.as_deref() == Some(object.uid.as_str())) {
        Some(o) => o.data.pointer("/status/rollout").cloned(),
        None => object.rollout.clone(),
    }
}
