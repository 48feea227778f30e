//! A kind in several versions whose CRD others apply (GitOps, from `ruleop crd`): ruleop's
//! CA kept in its conversion webhook.

use super::shape::{AbortOnDrop, Companion, Early, Flags, StartEarly, spawn};
use crate::rules::CompiledRule;

pub(super) const COMPANION: Companion<StartEarly> = Companion {
    name: "CA injector",
    runs,
    start,
};

fn runs(rule: &CompiledRule, flags: Flags) -> bool {
    !flags.install_crds && flags.conversion && rule.conversion.is_some()
}

fn start(e: &Early<'_>) -> Option<AbortOnDrop> {
    let name = e.rule.crd_name()?.to_string();
    let keep = crate::operator::ca_inject::keep(
        e.own.clone(),
        name,
        e.opts.conversion.clone()?,
        e.opts.process.fence.clone(),
    );
    Some(spawn(keep))
}
