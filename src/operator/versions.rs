//! Which version of a rule is in force across replicas: this replica's version is
//! claimed against the versions the inventory records (the scheme is
//! [`crate::lifecycle::newer`], the same for files and Rule objects), and the rule waits
//! while the cluster has run a newer one.

use super::inventory::{Inventory, InventoryError, key};
use crate::lifecycle::newer::{Mine, ObjectRef, Retire, Standing, Version, pushed, standing};
use crate::metrics::{Metrics, RuleLabels};
use crate::rules::CompiledRule;
use k8s_openapi::jiff::Timestamp;
use std::time::Duration;
use tokio::sync::watch;

/// The inventory key of a rule's versions (rule names cannot start with `_`).
fn versions_key(rule: &str, scope: Option<&str>) -> String {
    format!("_versions.{}", key(rule, scope))
}

async fn claim(
    inventory: &Inventory,
    rule: &CompiledRule,
    scope: Option<&str>,
    loaded: &[String],
    patience: Duration,
) -> Result<Standing, InventoryError> {
    let k = versions_key(&rule.name, scope);
    let log: Vec<Version> = inventory
        .get(&k)
        .await?
        .and_then(|v| serde_json::from_str(&v).ok())
        .unwrap_or_default();
    let now = Timestamp::now();
    let mine = Mine {
        fingerprint: &rule.fingerprint,
        object: rule.object.as_ref().map(|o| ObjectRef {
            uid: &o.uid,
            generation: o.generation,
            created: &o.created,
        }),
    };
    let standing = standing(&log, mine, loaded, now, patience);
    if let Standing::Newer { why } = standing {
        let log = pushed(log, mine, now, why);
        inventory
            .set(&k, serde_json::to_string(&log).unwrap_or_default())
            .await?;
    }
    Ok(standing)
}

/// What a rule may do once it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowed {
    /// Delete (or orphan) the objects its render no longer makes: now, after a wait (its
    /// version may be an old one that never ran), or never (it could not be checked).
    pub prune: Retire,
    /// Retire the kinds the inventory records and it no longer makes.
    pub retire: Retire,
}

/// How many failed reads of the inventory a rule waits through before it runs anyway,
/// deleting nothing.
const TRIES: u32 = 3;

/// Waits until `rule`'s version may run here (recording it as the newest when it is
/// newer), and says what it may delete; None when the rule is stopped meanwhile. When the
/// inventory cannot be read, the rule runs after a few tries but deletes nothing (its
/// version could not be checked).
pub async fn wait_until_newest(
    inventory: &Inventory,
    rule: &CompiledRule,
    scope: Option<&str>,
    loaded: &[String],
    patience: Duration,
    metrics: &Metrics,
    stop: &watch::Receiver<bool>,
) -> Option<Allowed> {
    let older = metrics
        .rule_older
        .get_or_create(&RuleLabels {
            rule: rule.name.clone(),
        })
        .clone();
    let mut told = None;
    let mut failures = 0;
    loop {
        let retry = match claim(inventory, rule, scope, loaded, patience).await {
            Ok(Standing::Older { newest, since }) => {
                older.set(1);
                if told.as_ref() != Some(&newest) && rule.object.is_some() {
                    tracing::warn!(fingerprint = %rule.fingerprint, newest = %newest, since = %since, "this replica's Rule is an older generation than one the cluster has run (its Rule watch lags behind): it does not run (nothing is written or deleted) until the watch catches up");
                    told = Some(newest);
                } else if told.as_ref() != Some(&newest) {
                    tracing::warn!(fingerprint = %rule.fingerprint, newest = %newest, since = %since, waits_up_to_s = patience.as_secs(), "this replica's version of the rule is older than one the cluster has run: it does not run (nothing is written or deleted) until its files catch up, or the newer version has been in force for the whole wait (then this one is taken for a rollback)");
                    told = Some(newest);
                }
                Duration::from_secs(5)
            }
            Ok(standing) => {
                older.set(0);
                if told.is_some() {
                    tracing::info!(fingerprint = %rule.fingerprint, "this replica's rule is now the newest in the cluster; starting it");
                }
                let now = Timestamp::now();
                let prune = standing.prune(now, patience);
                if let Retire::After(wait) = prune {
                    tracing::warn!(fingerprint = %rule.fingerprint, wait_s = wait.as_secs(), "this replica's version of the rule is one the cluster has not run, and this replica did not load the newest one: it may be an old version that never ran, so it deletes nothing until it has been the newest for the whole wait");
                }
                return Some(Allowed {
                    prune,
                    retire: standing.retire(now, patience),
                });
            }
            Err(e) if failures + 1 >= TRIES => {
                tracing::error!(error = %e, "the versions of the rule in the inventory cannot be read or written: the rule runs, but deletes nothing and retires no kind, until ruleop can read its inventory (check the RBAC of --lease-namespace) and restarts the rule");
                return Some(Allowed {
                    prune: Retire::Never,
                    retire: Retire::Never,
                });
            }
            Err(e) => {
                failures += 1;
                tracing::warn!(error = %e, "the versions of the rule in the inventory cannot be read or written; retrying");
                Duration::from_secs(2)
            }
        };
        let mut stop = stop.clone();
        tokio::select! {
            _ = tokio::time::sleep(retry) => {}
            _ = stop.wait_for(|s| *s) => return None,
        }
    }
}
