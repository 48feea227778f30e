//! A rule that names a ServiceAccount runs as it: its client acts as the account (by
//! impersonation), and it starts only once the API server says the account holds every
//! permission the rule needs (asked again every [`RECHECK`] until it does: granting the
//! permission starts the rule, with no restart).

use super::discover::stopped;
use super::parts::{Blocked, Options, RuleInfo};
use crate::access::review::{self, Review};
use crate::cache::discovery::Resolved;
use crate::reconcile::Process;
use crate::rules::CompiledRule;
use kube::Client;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// How often a rule waiting for permissions asks again.
pub const RECHECK: Duration = Duration::from_secs(5);

/// The process parts and the client the rule's requests are made with: ruleop's own, or
/// acting as the rule's ServiceAccount. None when stopped before the client was made.
pub(super) async fn acting(
    rule: &CompiledRule,
    opts: &Options,
    stop: &watch::Receiver<bool>,
) -> Option<(Arc<Process>, Client)> {
    let Some(id) = &rule.identity else {
        return Some((opts.process.clone(), opts.process.client.clone()));
    };
    let user = id.user();
    loop {
        match opts.clients.acting_as(&user).await {
            Ok(c) => return Some((Arc::new(opts.process.acting_as(c.clone())), c)),
            Err(e) => {
                tracing::warn!(error = %e, identity = %user, "no client for the rule's ServiceAccount; retrying")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(RECHECK) => {}
            _ = stopped(stop.clone()) => return None,
        }
    }
}

/// The kinds a rule's revisions use, as discovery resolved them.
pub(super) struct ResolvedKinds<'a> {
    pub parent: &'a Resolved,
    pub children: &'a [Resolved],
    pub existing: &'a [Resolved],
}

impl ResolvedKinds<'_> {
    fn all(&self) -> impl Iterator<Item = &Resolved> {
        std::iter::once(self.parent)
            .chain(self.children)
            .chain(self.existing)
    }

    /// The resource name discovery gave the kind (the guessed plural if it has none).
    fn resource(&self, group: &str, kind: &str) -> String {
        self.all()
            .find(|r| r.resource.group == group && r.resource.kind == kind)
            .map(|r| r.resource.plural.clone())
            .unwrap_or_else(|| crate::access::plural_of(kind))
    }

    fn cluster_scoped(&self) -> BTreeSet<(String, String)> {
        self.all()
            .filter(|r| !r.namespaced)
            .map(|r| (r.resource.group.clone(), r.resource.plural.clone()))
            .collect()
    }
}

/// Waits until the rule's ServiceAccount holds every permission `rules` need (the
/// revisions that run), saying what is missing in `info` and the log meanwhile. True once
/// granted (at once for a rule with no ServiceAccount); false when stopped first.
pub(super) async fn preflight(
    rules: &[&CompiledRule],
    client: &Client,
    opts: &Options,
    kinds: ResolvedKinds<'_>,
    info: &RuleInfo,
    stop: &watch::Receiver<bool>,
) -> bool {
    let Some(id) = rules.first().and_then(|r| r.identity.as_ref()) else {
        return true;
    };
    let mut perms = crate::access::Permissions::new();
    for r in rules {
        crate::access::add_needs(&mut perms, r, !kinds.parent.status_subresource, &|g, k| {
            kinds.resource(g, k)
        });
    }
    let scoped = kinds.cluster_scoped();
    let namespace = opts.scope.namespace.as_deref();
    let name = rules[0].name.clone();
    let gauge = opts
        .process
        .metrics
        .rule_missing_permissions
        .get_or_create(&crate::metrics::RuleLabels { rule: name })
        .clone();
    // The gauge goes with the rule if it stops before it has every permission.
    let mut done = Forget {
        metrics: opts.process.metrics.clone(),
        rule: rules[0].name.clone(),
        armed: true,
    };
    let mut said = None;
    loop {
        let blocked = match review::review(client, &perms, namespace, &scoped).await {
            Ok(Review::Granted) => None,
            Ok(Review::Missing(m)) => Some(Blocked::Missing(m)),
            Ok(Review::CannotImpersonate(msg)) => Some(Blocked::CannotImpersonate(msg)),
            // Never started unchecked: what was said stands, or it waits unchecked.
            Err(e) => {
                tracing::warn!(error = %e, identity = %id, "the access review of the rule's ServiceAccount failed; asking again");
                Some(said.clone().unwrap_or(Blocked::Unchecked(e.to_string())))
            }
        };
        gauge.set(match &blocked {
            Some(Blocked::Missing(m)) => m.len() as i64,
            Some(
                Blocked::CannotImpersonate(_) | Blocked::Unchecked(_) | Blocked::MayNotDefine(_),
            ) => 1,
            None => 0,
        });
        info.set_blocked(blocked.clone());
        let Some(b) = blocked else {
            if said.is_some() {
                tracing::info!(identity = %id, "the rule's ServiceAccount now holds every permission the rule needs; starting");
            }
            done.armed = false;
            return true;
        };
        if said.as_ref() != Some(&b) {
            tracing::error!(identity = %id, problem = %b.describe(&id.to_string()), "rule not started: its ServiceAccount lacks permissions it needs (asked again every {}s)", RECHECK.as_secs());
            said = Some(b);
        }
        tokio::select! {
            _ = tokio::time::sleep(RECHECK) => {}
            _ = stopped(stop.clone()) => return false,
        }
    }
}

/// Removes the rule's `ruleop_rule_missing_permissions` when dropped armed (the rule
/// stopped while waiting).
struct Forget {
    metrics: Arc<crate::metrics::Metrics>,
    rule: String,
    armed: bool,
}

impl Drop for Forget {
    fn drop(&mut self) {
        if self.armed {
            let _ = self
                .metrics
                .rule_missing_permissions
                .remove(&crate::metrics::RuleLabels {
                    rule: self.rule.clone(),
                });
        }
    }
}
