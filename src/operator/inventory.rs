//! Which kinds each rule has made children of, kept in the cluster (a ConfigMap
//! `ruleop-inventory` in the operator's namespace), so a kind removed from a rule is
//! cleaned up even when the change happened while this replica was standby or stopped.
//!
//! When a rule starts, the kinds recorded for it that it no longer makes (by group and
//! kind: a new version of a kind is the same objects) are *retired*: their children that
//! this rule owns are deleted, retried with backoff until it succeeds; only then is the
//! record set to the rule's current kinds. Written only when it changes.

use crate::cache::discovery;
use crate::client::Fence;
use crate::lifecycle::kinds::retired;
use crate::lifecycle::planner::{Removal, owned_by_rule, removal};
use crate::lifecycle::{Made, Retire};
use crate::render::{RULE_LABEL, group_of};
use crate::rules::CompiledRule;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::{Client, ResourceExt};
use std::collections::BTreeSet;
use std::time::Duration;

/// The name of the inventory ConfigMap.
pub const INVENTORY: &str = "ruleop-inventory";

/// Why the inventory or a cleanup failed (retried).
#[derive(Debug, thiserror::Error)]
pub enum InventoryError {
    #[error("reading or writing the inventory {namespace}/{INVENTORY}: {source}")]
    Store {
        namespace: String,
        #[source]
        source: kube::Error,
    },
    #[error("cleaning up {kind} children: {message}")]
    Cleanup { kind: String, message: String },
    #[error("discovery of the retired kind {kind}: {message}")]
    Discovery { kind: String, message: String },
    #[error("not the leader: nothing written")]
    NotLeader,
}

/// Where the inventory lives, and who may write.
pub struct Inventory {
    pub client: Client,
    pub namespace: String,
    pub fence: std::sync::Arc<Fence>,
}

/// Makes a write of the inventory again while it lost a race (409: the ConfigMap made or
/// changed meanwhile, as rules starting together do), on what the other wrote.
async fn again<F: std::future::Future<Output = Result<(), InventoryError>>>(
    mut write: impl FnMut() -> F,
) -> Result<(), InventoryError> {
    let mut tries = 0;
    loop {
        match write().await {
            Err(InventoryError::Store {
                source: kube::Error::Api(s),
                ..
            }) if s.code == 409 && tries < 5 => {
                tries += 1;
                tracing::debug!(tries, "the inventory changed meanwhile; writing again");
                tokio::time::sleep(Duration::from_millis(50 * tries)).await;
            }
            other => return other,
        }
    }
}

/// The inventory key of a rule: its name, or `<name>.<namespace>` for an operator that
/// runs in one namespace only (two such operators keep apart).
pub fn key(rule: &str, scope: Option<&str>) -> String {
    match scope {
        Some(ns) => format!("{rule}.{ns}"),
        None => rule.to_string(),
    }
}

impl Inventory {
    fn api(&self) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    fn err(&self, source: kube::Error) -> InventoryError {
        InventoryError::Store {
            namespace: self.namespace.clone(),
            source,
        }
    }

    /// The value of `key` in the inventory, if any.
    pub async fn get(&self, key: &str) -> Result<Option<String>, InventoryError> {
        let cm = self
            .api()
            .get_opt(INVENTORY)
            .await
            .map_err(|e| self.err(e))?;
        Ok(cm.and_then(|c| c.data).and_then(|d| d.get(key).cloned()))
    }

    /// Every key of the inventory and its value.
    pub async fn all(&self) -> Result<std::collections::BTreeMap<String, String>, InventoryError> {
        let cm = self
            .api()
            .get_opt(INVENTORY)
            .await
            .map_err(|e| self.err(e))?;
        Ok(cm.and_then(|c| c.data).unwrap_or_default())
    }

    /// Removes `key` from the inventory, if it is there.
    pub async fn remove(&self, key: &str) -> Result<(), InventoryError> {
        again(|| self.remove_once(key)).await
    }

    async fn remove_once(&self, key: &str) -> Result<(), InventoryError> {
        let api = self.api();
        let Some(mut cm) = api.get_opt(INVENTORY).await.map_err(|e| self.err(e))? else {
            return Ok(());
        };
        if cm.data.as_mut().and_then(|d| d.remove(key)).is_none() {
            return Ok(());
        }
        if !self.fence.holds() {
            return Err(InventoryError::NotLeader);
        }
        api.replace(INVENTORY, &PostParams::default(), &cm)
            .await
            .map_err(|e| self.err(e))?;
        Ok(())
    }

    /// Sets `key` to `value` in the inventory, if that changes anything.
    pub async fn set(&self, key: &str, value: String) -> Result<(), InventoryError> {
        again(|| self.set_once(key, &value)).await
    }

    async fn set_once(&self, key: &str, value: &str) -> Result<(), InventoryError> {
        let api = self.api();
        let existing = api.get_opt(INVENTORY).await.map_err(|e| self.err(e))?;
        if !self.fence.holds() {
            return Err(InventoryError::NotLeader);
        }
        match existing {
            Some(mut cm) => {
                let data = cm.data.get_or_insert_with(Default::default);
                if data.get(key).map(String::as_str) == Some(value) {
                    return Ok(());
                }
                data.insert(key.to_string(), value.to_string());
                api.replace(INVENTORY, &PostParams::default(), &cm)
                    .await
                    .map_err(|e| self.err(e))?;
            }
            None => {
                let mut cm = ConfigMap::default();
                cm.metadata.name = Some(INVENTORY.into());
                cm.data = Some([(key.to_string(), value.to_string())].into());
                api.create(&PostParams::default(), &cm)
                    .await
                    .map_err(|e| self.err(e))?;
            }
        }
        Ok(())
    }

    /// The kinds recorded for `rule`.
    pub async fn recorded(&self, rule: &str) -> Result<BTreeSet<Made>, InventoryError> {
        Ok(self
            .get(rule)
            .await?
            .and_then(|v| serde_json::from_str(&v).ok())
            .unwrap_or_default())
    }

    /// Records `kinds` for `rule`, if that changes anything.
    pub async fn record(&self, rule: &str, kinds: &BTreeSet<Made>) -> Result<(), InventoryError> {
        self.set(rule, serde_json::to_string(kinds).unwrap_or_default())
            .await
    }
}

/// The uids of the rule's custom resources, in scope.
pub(crate) async fn parent_uids(
    client: &Client,
    rule: &CompiledRule,
    namespace: Option<&str>,
) -> Result<BTreeSet<String>, InventoryError> {
    let w = &rule.watch;
    let resolved = discovery::watched(client, w)
        .await
        .map_err(|e| InventoryError::Discovery {
            kind: w.resource.clone(),
            message: e.to_string(),
        })?
        .ok_or_else(|| InventoryError::Discovery {
            kind: w.resource.clone(),
            message: "not served".into(),
        })?;
    // (Read tolerantly: a resource nested too deep to decode must not fail the list.)
    let api: Api<crate::cache::tolerant::Tolerant> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &*resolved.resource),
        None => Api::all_with(client.clone(), &*resolved.resource),
    };
    let list = api
        .list(&ListParams::default())
        .await
        .map_err(|e| InventoryError::Cleanup {
            kind: w.resource.clone(),
            message: e.to_string(),
        })?;
    Ok(list
        .items
        .iter()
        .filter_map(|o| o.0.metadata.uid.clone())
        .collect())
}

/// Deletes the children of `rule` of one retired kind (only those it owns).
pub async fn clean_up(
    client: &Client,
    rule: &CompiledRule,
    parent_kind: &str,
    made: &Made,
    namespace: Option<&str>,
    fence: &Fence,
) -> Result<usize, InventoryError> {
    let what = format!("{} {}", made.api_version, made.kind);
    let group = group_of(&made.api_version);
    let version = made
        .api_version
        .rsplit('/')
        .next()
        .unwrap_or(&made.api_version);
    let resolved = match discovery::child(client, group, version, &made.kind).await {
        Ok(Some(r)) => r,
        // The kind is not served any more: nothing of it can be left.
        Ok(None) => return Ok(0),
        Err(e) => {
            return Err(InventoryError::Discovery {
                kind: what,
                message: e.to_string(),
            });
        }
    };
    let ar = &*resolved.resource;
    let api: Api<DynamicObject> = match namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    let cleanup_err = |e: kube::Error| InventoryError::Cleanup {
        kind: what.clone(),
        message: e.to_string(),
    };
    let selector = format!("{RULE_LABEL}={}", rule.name);
    let list = api
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(cleanup_err)?;
    let parents = parent_uids(client, rule, namespace).await?;
    let mut deleted = 0;
    for o in list
        .items
        .iter()
        .filter(|o| owned_by_rule(o, &rule.watch.group, parent_kind, Some(&parents)))
    {
        if !fence.holds() {
            return Err(InventoryError::NotLeader);
        }
        let ns_api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), &o.namespace().unwrap_or_default(), ar);
        let failed = |e: crate::apply::ApplyError| InventoryError::Cleanup {
            kind: what.clone(),
            message: e.to_string(),
        };
        // An object that asked to be orphaned (`onRemove: Orphan`) is let go, not deleted.
        let action = if removal(o, false) == Removal::Orphan {
            let owner = crate::cache::owners::controller_uid(o).unwrap_or_default();
            crate::apply::orphan(&ns_api, ar, o, owner)
                .await
                .map_err(failed)?;
            "orphaned"
        } else {
            crate::apply::prune(&ns_api, ar, &o.name_any(), o.uid())
                .await
                .map_err(failed)?;
            "pruned"
        };
        tracing::info!(kind = %made.kind, name = %o.name_any(), namespace = %o.namespace().unwrap_or_default(), action, "child of a kind the rule no longer makes let go");
        deleted += 1;
    }
    Ok(deleted)
}

/// One rule's retirement of the kinds it no longer makes.
pub struct Retirement {
    pub inventory: Inventory,
    /// The rule's client (as its ServiceAccount when it names one).
    pub children: Client,
    pub rule: std::sync::Arc<CompiledRule>,
    pub parent_kind: String,
    pub namespace: Option<String>,
    /// The kinds the rule's previous version in this process made.
    pub also: Vec<Made>,
    pub policy: Retire,
    /// The kinds some revision in force makes (the newest's; in a rollout, the previous
    /// one's too; a pinned revision's): none of these is retired, whichever revision a
    /// resource is on.
    pub in_force: BTreeSet<Made>,
    /// The kinds recorded and not in force (being retired, or kept), for the resources'
    /// deletions: each lets go its own objects of them that ask to be orphaned before its
    /// finalizer goes. Unknown until the inventory is read.
    pub unwatched: std::sync::Arc<crate::reconcile::Unwatched>,
    pub metrics: std::sync::Arc<crate::metrics::Metrics>,
}

/// Cleans up the kinds no revision in force makes (recorded in the inventory, when the
/// policy allows, or `also`, from the rule's previous version in this process). The record
/// first becomes what was recorded plus what is in force (so a kind added now is known even
/// while a cleanup is pending); each retired kind leaves it once its children are gone.
/// Kinds whose cleanup fails (a 403: the RBAC of the new rules no longer covers the kind)
/// are retried with backoff, counted in `ruleop_retired_kinds_pending`, until they succeed
/// or the rule stops.
pub async fn retire(r: Retirement) {
    let unwatched = |kinds: &[Made]| {
        r.unwatched.set(
            kinds
                .iter()
                .map(|m| (m.api_version.clone(), m.kind.clone()))
                .collect(),
        )
    };
    let Retirement {
        inventory,
        children,
        rule,
        parent_kind,
        namespace,
        also,
        policy,
        in_force: now,
        metrics,
        ..
    } = &r;
    let key = key(&rule.name, namespace.as_deref());
    let pending = metrics
        .retired_kinds_pending
        .get_or_create(&crate::metrics::RuleLabels {
            rule: rule.name.clone(),
        })
        .clone();
    let seen_here = |m: &Made| also.iter().any(|a| a.group_kind() == m.group_kind());
    let mut recorded_too = *policy == Retire::Now;
    let mut attempt = 0;
    loop {
        let result = async {
            let mut record = inventory.recorded(&key).await?;
            record.extend(also.iter().cloned());
            let gone = retired(&record, now);
            unwatched(&gone);
            record.extend(now.iter().cloned());
            inventory.record(&key, &record).await?;
            let (go, kept): (Vec<Made>, Vec<Made>) =
                gone.into_iter().partition(|m| recorded_too || seen_here(m));
            pending.set(go.len() as i64);
            let mut failed = None;
            for m in &go {
                match clean_up(
                    children,
                    rule,
                    parent_kind,
                    m,
                    namespace.as_deref(),
                    &inventory.fence,
                )
                .await
                {
                    Ok(n) => {
                        tracing::info!(kind = %m.kind, deleted = n, "kind retired from the rule: its children cleaned up");
                        record.remove(m);
                        inventory.record(&key, &record).await?;
                        pending.dec();
                        unwatched(&retired(&record, now));
                    }
                    Err(e) => {
                        tracing::warn!(kind = %m.kind, error = %e, "cleanup of a retired kind failed");
                        failed = Some(e);
                    }
                }
            }
            failed.map_or(Ok(kept), Err)
        }
        .await;
        match result {
            Ok(kept) if kept.is_empty() => return,
            Ok(kept) => {
                let kinds: Vec<&str> = kept.iter().map(|m| m.kind.as_str()).collect();
                match policy {
                    Retire::After(wait) if !recorded_too => {
                        tracing::info!(kinds = ?kinds, wait_s = wait.as_secs(), "kinds an earlier version recorded are retired once this version has been the newest for the whole wait (it may be an old version that never ran)");
                        tokio::time::sleep(*wait).await;
                        recorded_too = true;
                    }
                    _ => {
                        tracing::warn!(kinds = ?kinds, "kinds another version of the rule recorded are kept: this replica has not seen them leave the rule (its version was taken for a rollback, or could not be checked); remove their objects by hand if they are to go");
                        return;
                    }
                }
            }
            Err(e) => {
                let delay = retry_delay(attempt);
                // (While the inventory cannot be read, the kinds it records are not known:
                // deletions of resources held for their orphans wait.)
                tracing::warn!(error = %e, retry_in_s = delay.as_secs(), "cleanup of retired kinds pending; retrying");
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
        }
    }
}

/// Backoff between cleanup attempts: 1 s doubling to 5 minutes.
pub fn retry_delay(attempt: u32) -> Duration {
    Duration::from_secs((1u64 << attempt.min(9)).min(300))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleanup_retries_back_off_to_five_minutes() {
        assert_eq!(retry_delay(0), Duration::from_secs(1));
        assert_eq!(retry_delay(3), Duration::from_secs(8));
        assert_eq!(retry_delay(30), Duration::from_secs(300));
    }
}
