//! A rule's companions: the tasks that run beside it. Each is a module that says, from the
//! rule and what ruleop was started with ([`Flags`]), whether it runs, and what it starts.
//! The runner starts the [`EARLY`] ones as soon as the rule may run (they define its kind:
//! the CRD, the CA in its conversion, the storage migration; the rule waits for the kind to
//! be served meanwhile) and the [`BESIDE`] ones once its controller is built (retirement of
//! the kinds it no longer makes, the wait before it prunes, its CRD followed, its rollout).
//! Each is aborted when the rule ends, however it ends. A new companion is one module here
//! and one line in one of the two lists.

mod ca;
mod crd_follow;
mod driver;
mod install;
mod migrate;
mod prune_wait;
mod retire;

use super::parts::{Options, RuleInfo};
use super::rollout::RolloutChoose;
use crate::cache::cached::Cached;
use crate::lifecycle::{Made, Retire};
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

type StartEarly = fn(&Early<'_>) -> Option<AbortOnDrop>;
type StartBeside = fn(&Beside<'_>) -> Option<AbortOnDrop>;

/// The companions that define the rule's kind, in the order they start.
pub(in crate::operator::runner) const EARLY: &[Companion<StartEarly>] =
    &[install::COMPANION, ca::COMPANION, migrate::COMPANION];

/// The companions of the running rule, in the order they start.
pub(in crate::operator::runner) const BESIDE: &[Companion<StartBeside>] = &[
    retire::COMPANION,
    prune_wait::COMPANION,
    crd_follow::COMPANION,
    driver::COMPANION,
];

/// The names of the companions of `list` that run for `rule`.
pub(in crate::operator::runner) fn running<F>(
    list: &[Companion<F>],
    rule: &CompiledRule,
    flags: Flags,
) -> Vec<&'static str> {
    list.iter()
        .filter(|c| (c.runs)(rule, flags))
        .map(|c| c.name)
        .collect()
}

/// Starts the early companions that run for the rule.
pub(in crate::operator::runner) fn start_early(from: &Early<'_>) -> Vec<AbortOnDrop> {
    let flags = Flags::of(from.opts);
    tracing::debug!(companions = ?running(EARLY, from.rule, flags), "the rule's early companions start");
    EARLY
        .iter()
        .filter(|c| (c.runs)(from.rule, flags))
        .filter_map(|c| (c.start)(from))
        .collect()
}

/// Starts the companions of the running rule.
pub(in crate::operator::runner) fn start_beside(from: &Beside<'_>) -> Vec<AbortOnDrop> {
    let flags = Flags::of(from.early.opts);
    tracing::debug!(companions = ?running(BESIDE, from.early.rule, flags), "the rule's companions start");
    BESIDE
        .iter()
        .filter(|c| (c.runs)(from.early.rule, flags))
        .filter_map(|c| (c.start)(from))
        .collect()
}

/// Spawns `task` in the rule's span, aborted when the handle is dropped.
fn spawn(task: impl std::future::Future<Output = ()> + Send + 'static) -> AbortOnDrop {
    use tracing::Instrument;
    AbortOnDrop(tokio::spawn(task.in_current_span()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> Arc<CompiledRule> {
        let (rules, errors) = crate::rules::load::load_str(text, std::path::Path::new("r.yaml"));
        rules
            .into_iter()
            .next()
            .unwrap_or_else(|| panic!("{errors:?}"))
    }

    const PLAIN: &str =
        "name: plain\nwatch: {group: x.example.com, version: v1, resource: things}\nchildren: []\n";
    const SCHEMA: &str = "name: typed\nwatch: {group: x.example.com, version: v1, resource: things}\nschema:\n  kind: Thing\n  spec: {text: string}\nchildren: []\n";

    #[test]
    fn a_plain_rule_has_no_early_companion_and_every_rule_has_its_watchers() {
        let flags = Flags {
            install_crds: true,
            conversion: true,
        };
        assert!(running(EARLY, &rule(PLAIN), flags).is_empty());
        assert_eq!(
            running(BESIDE, &rule(PLAIN), Flags::default()),
            ["retirement", "prune wait", "CRD followed"]
        );
    }

    #[test]
    fn a_schema_gets_its_crd_installed_only_with_install_crds() {
        let typed = rule(SCHEMA);
        assert_eq!(
            running(
                EARLY,
                &typed,
                Flags {
                    install_crds: true,
                    conversion: false
                }
            ),
            ["CRD installer"]
        );
        assert!(running(EARLY, &typed, Flags::default()).is_empty());
    }

    #[test]
    fn a_kind_in_several_versions_is_converted_and_migrated_whoever_applies_its_crd() {
        let text = include_str!("../../../../tests/fixtures/conversion/sizes.yaml");
        let (rules, errors) =
            crate::rules::load::load_str(text, std::path::Path::new("sizes.yaml"));
        let versions = rules.first().unwrap_or_else(|| panic!("{errors:?}"));
        let gitops = Flags {
            install_crds: false,
            conversion: true,
        };
        assert_eq!(
            running(EARLY, versions, gitops),
            ["CA injector", "storage migrator"]
        );
        let installs = Flags {
            install_crds: true,
            conversion: true,
        };
        assert_eq!(
            running(EARLY, versions, installs),
            ["CRD installer", "storage migrator"]
        );
        assert!(running(EARLY, versions, Flags::default()).is_empty());
    }

    #[test]
    fn only_a_rule_object_with_a_rollout_has_a_driver() {
        let text = format!("{PLAIN}rollout:\n  steps: [{{percent: 100}}]\n");
        assert!(!running(BESIDE, &rule(&text), Flags::default()).contains(&"rollout driver"));
    }
}
