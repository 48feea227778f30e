//! The CRD of the rule's kind installed from its `schema` (`--install-crds`), tried again
//! while it fails; the rule runs against the CRD the cluster serves meanwhile.

use super::shape::{AbortOnDrop, Companion, Early, Flags, StartEarly, spawn};
use crate::operator::crds::{CrdError, keep_installing};
use crate::rules::CompiledRule;

pub(super) const COMPANION: Companion<StartEarly> = Companion {
    name: "CRD installer",
    runs,
    start,
};

fn runs(rule: &CompiledRule, flags: Flags) -> bool {
    flags.install_crds && rule.crd.is_some()
}

fn start(e: &Early<'_>) -> Option<AbortOnDrop> {
    let metrics = e.opts.process.metrics.clone();
    let name = e.rule.name.clone();
    let failed = move |err: &CrdError| {
        let category = match err {
            CrdError::Breaking { .. } => "crd_refused",
            _ => "crd_error",
        };
        metrics.error(&name, category);
        tracing::error!(error = %err, "CRD not installed");
    };
    let install = keep_installing(
        e.own.clone(),
        e.client.clone(),
        e.rule.crd.clone()?,
        e.opts.conversion.clone(),
        e.opts.process.fence.clone(),
        failed,
    );
    Some(spawn(install))
}
