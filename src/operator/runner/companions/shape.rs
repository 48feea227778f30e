//! The shape every companion has: what it starts from ([`Early`], [`Beside`]), whether
//! it runs ([`Companion::runs`]) and the task it starts, aborted with the rule.

use crate::cache::cached::Cached;
use crate::lifecycle::{Made, Retire};
use crate::operator::runner::parts::{Options, RuleInfo};
use crate::operator::runner::rollout::RolloutChoose;
use crate::reconcile::{PruneFrom, Unwatched};
use crate::rules::CompiledRule;
use kube::Client;
use kube::runtime::reflector::Store;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

/// Aborts its task when dropped: a companion never outlives the rule that started it,
/// however that rule ends (stopped, or cancelled when leadership is lost).
pub(in crate::operator::runner) struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What ruleop was started with, as far as the companions care.
#[derive(Debug, Clone, Copy, Default)]
pub(in crate::operator::runner) struct Flags {
    /// `--install-crds`: ruleop applies each rule's CRD from its `schema`.
    pub install_crds: bool,
    /// ruleop's webhook serves conversions.
    pub conversion: bool,
}

impl Flags {
    pub fn of(opts: &Options) -> Flags {
        Flags {
            install_crds: opts.install_crds,
            conversion: opts.conversion.is_some(),
        }
    }
}

/// What an early companion starts from: the rule, ruleop's own client and the rule's.
pub(in crate::operator::runner) struct Early<'a> {
    pub rule: &'a Arc<CompiledRule>,
    pub opts: &'a Options,
    pub own: &'a Client,
    pub client: &'a Client,
    pub info: &'a Arc<RuleInfo>,
}

/// What a companion of the running rule starts from.
pub(in crate::operator::runner) struct Beside<'a> {
    pub early: Early<'a>,
    /// The watched kind.
    pub parent_kind: &'a str,
    /// The kinds some revision in force makes, and those this process saw the rule's
    /// previous version make (`retired`), and whether the recorded ones may be retired.
    pub in_force: BTreeSet<Made>,
    pub retired: Vec<Made>,
    pub retire: Retire,
    pub unwatched: &'a Arc<Unwatched>,
    pub prune: PruneFrom,
    /// Asks the controller to reconcile every resource.
    pub reconcile_all: &'a tokio::sync::mpsc::Sender<()>,
    pub status_schema: &'a Arc<crate::status::StatusSchema>,
    /// Which revision each resource gets, for a Rule object's rule.
    pub choose: Option<&'a Arc<RolloutChoose>>,
    /// The watched resources' cache, and whether every watch has listed.
    pub resources: &'a Store<Cached>,
    pub synced: &'a Arc<AtomicBool>,
    pub stop: &'a tokio::sync::watch::Receiver<bool>,
}

/// One companion: its name, whether it runs for a rule, and what it starts (None when,
/// on a closer look, there is nothing to do).
pub(in crate::operator::runner) struct Companion<F> {
    pub name: &'static str,
    pub runs: fn(&CompiledRule, Flags) -> bool,
    pub start: F,
}

pub(in crate::operator::runner) type StartEarly = fn(&Early<'_>) -> Option<AbortOnDrop>;
pub(in crate::operator::runner) type StartBeside = fn(&Beside<'_>) -> Option<AbortOnDrop>;

/// Spawns `task` in the rule's span, aborted when the handle is dropped.
pub(super) fn spawn(task: impl std::future::Future<Output = ()> + Send + 'static) -> AbortOnDrop {
    use tracing::Instrument;
    AbortOnDrop(tokio::spawn(task.in_current_span()))
}
