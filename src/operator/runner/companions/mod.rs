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

mod shape;

use crate::rules::CompiledRule;
pub(in crate::operator::runner) use shape::{AbortOnDrop, Beside, Early};
use shape::{Companion, Flags, StartBeside, StartEarly};

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

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
