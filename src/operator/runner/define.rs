//! A rule that has ruleop define its kind — apply its CRD from `schema` (`--install-crds`)
//! or serve its conversions through ruleop's webhook — and runs as a ServiceAccount: none
//! of that is done until the account may `update` that CRD, by name, as Kubernetes would
//! ask of whoever defines the kind themselves. Asked again every [`super::identity::RECHECK`]
//! until granted (the CRD installed and the conversions served then, with no restart). A
//! rule with no account runs as ruleop: its Rule's admission asked its author for
//! `escalate`, and nothing more is asked here.

use super::discover::stopped;
use super::parts::{Blocked, Options, RuleInfo};
use crate::access::authority::{Demand, Requester, denied};
use crate::rules::CompiledRule;
use tokio::sync::watch;

/// The CRD ruleop defines for `rule`, if any: its `schema`'s with `--install-crds`, or
/// that of a kind whose conversions ruleop's webhook serves.
pub(super) fn defined(rule: &CompiledRule, opts: &Options) -> Option<String> {
    let installs = opts.install_crds && rule.crd.is_some();
    let converts = opts.conversion.is_some() && rule.conversion.is_some();
    (installs || converts)
        .then(|| rule.crd_name().map(str::to_string))
        .flatten()
}

/// The account as a SubjectAccessReview names it.
fn requester(id: &crate::rules::compile::Identity) -> Requester {
    Requester {
        user: id.user(),
        groups: vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{}", id.namespace),
            "system:authenticated".into(),
        ],
        uid: None,
        extra: Default::default(),
    }
}

/// Waits until the rule's account may `update` the CRD ruleop defines for it, saying what
/// is missing in `info` and the log meanwhile. True once it may (at once when ruleop
/// defines nothing for the rule, or it names no account); false when stopped first.
pub(super) async fn may_define(
    rule: &CompiledRule,
    opts: &Options,
    info: &RuleInfo,
    stop: &watch::Receiver<bool>,
) -> bool {
    let (Some(id), Some(crd)) = (&rule.identity, defined(rule, opts)) else {
        return true;
    };
    let demand = Demand {
        group: "apiextensions.k8s.io".into(),
        resource: "customresourcedefinitions".into(),
        namespace: None,
        name: crd.clone(),
        verb: "update".into(),
        path: "spec.schema",
    };
    let who = requester(id);
    let mut said = None;
    loop {
        let blocked = match denied(&opts.process.client, &who, &demand).await {
            Ok(None) => None,
            Ok(Some(_)) => Some(Blocked::MayNotDefine(crd.clone())),
            Err(e) => Some(said.clone().unwrap_or(Blocked::Unchecked(e.to_string()))),
        };
        info.set_blocked(blocked.clone());
        let Some(b) = blocked else {
            if said.is_some() {
                tracing::info!(identity = %id, crd = %crd, "the rule's ServiceAccount may now update its kind's CRD: ruleop defines it");
            }
            return true;
        };
        if said.as_ref() != Some(&b) {
            tracing::error!(identity = %id, problem = %b.describe(&id.to_string()), "rule not started: ruleop would define its kind's CRD, which its ServiceAccount may not update (asked again every {}s)", super::identity::RECHECK.as_secs());
            said = Some(b);
        }
        tokio::select! {
            _ = tokio::time::sleep(super::identity::RECHECK) => {}
            _ = stopped(stop.clone()) => return false,
        }
    }
}
