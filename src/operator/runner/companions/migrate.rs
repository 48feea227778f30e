//! A kind in several versions: its stored objects moved to a new storage version, whoever
//! applies the CRD (ruleop with `--install-crds`, or GitOps from `ruleop crd` with ruleop
//! serving its conversions).

use super::shape::{AbortOnDrop, Companion, Early, Flags, StartEarly, spawn};
use crate::operator::migrate::{Migrator, keep_migrating};
use crate::rules::CompiledRule;

pub(super) const COMPANION: Companion<StartEarly> = Companion {
    name: "storage migrator",
    runs,
    start,
};

fn runs(rule: &CompiledRule, flags: Flags) -> bool {
    (flags.install_crds || flags.conversion) && rule.conversion.is_some()
}

fn start(e: &Early<'_>) -> Option<AbortOnDrop> {
    let migrator = Migrator {
        client: e.own.clone(),
        fence: e.opts.process.fence.clone(),
        by: e.opts.storage_migration,
        storage: e.info.storage.clone(),
    };
    Some(spawn(keep_migrating(migrator, e.rule.clone())))
}
