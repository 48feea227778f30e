//! Which rule served a kind last, and a takeover that keeps that rule's promise to its
//! orphans. Each rule, when it starts, records in the inventory (`_serves.<key>`) the kind
//! it serves. A rule that starts on a kind another rule served (that rule removed, or
//! refused since) first lets go the other rule's children that ask to be orphaned
//! (`onRemove: Orphan`) and whose resource is of the kind, as that rule's release would
//! have: from then on the new rule's finalizers are the resources' own, and deleting a
//! resource never takes those children with it. The other children of the old rule stay,
//! owned by their resource (the garbage collector takes them with it), and are not the new
//! rule's. The takeover runs before the new rule reconciles anything, retried until done.

use super::inventory::{Inventory, InventoryError, key, parent_uids};
use crate::lifecycle::Made;
use crate::reconcile::deletion::{LetGoError, let_go};
use crate::rules::CompiledRule;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// The inventory's key prefix of a rule's served kind (`_` is in no rule's name; as
/// `_versions.` is for the versions a rule ran).
const SERVES: &str = "_serves.";

/// Why a takeover is not done yet (retried).
#[derive(Debug, thiserror::Error)]
pub enum TakeoverError {
    #[error(transparent)]
    Inventory(#[from] InventoryError),
    #[error("letting rule `{rule}`'s children that ask to be orphaned go: {source}")]
    LetGo {
        rule: String,
        #[source]
        source: LetGoError,
    },
}

/// The record of the kind one rule serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Served {
    pub rule: String,
    /// `<resource>.<group>` (`<resource>` for the core group).
    pub kind: String,
    /// The namespace its operator watches, when only one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl Served {
    pub fn of(rule: &CompiledRule, namespace: Option<&str>) -> Served {
        let w = &rule.watch;
        let (group, resource) = (w.group.trim(), w.resource.trim());
        let kind = match group {
            "" => resource.to_string(),
            g => format!("{resource}.{g}"),
        };
        Served {
            rule: rule.name.clone(),
            kind: kind.to_ascii_lowercase(),
            namespace: namespace.map(str::to_string),
        }
    }
}

/// The key of a rule's served kind in the inventory.
pub fn served_key(rule: &str, namespace: Option<&str>) -> String {
    format!("{SERVES}{}", key(rule, namespace))
}

/// The rules the inventory says served `me`'s kind (in its scope) other than `me`, each
/// with its served key and the kinds recorded for it (pure).
pub fn predecessors(
    data: &BTreeMap<String, String>,
    me: &Served,
) -> Vec<(String, Served, BTreeSet<Made>)> {
    data.iter()
        .filter(|(k, _)| k.starts_with(SERVES))
        .filter_map(|(k, v)| Some((k.clone(), serde_json::from_str::<Served>(v).ok()?)))
        .filter(|(_, s)| s.kind == me.kind && s.namespace == me.namespace && s.rule != me.rule)
        .map(|(k, s)| {
            let kinds = data
                .get(&key(&s.rule, s.namespace.as_deref()))
                .and_then(|v| serde_json::from_str(v).ok())
                .unwrap_or_default();
            (k, s, kinds)
        })
        .collect()
}

/// Where a takeover acts: ruleop's own client (the rule's predecessor may have run as an
/// account the new rule cannot act as).
pub struct Takeover<'a> {
    pub inventory: Inventory,
    pub rule: &'a CompiledRule,
    pub namespace: Option<&'a str>,
}

/// Lets go the orphans of the rules that served the kind before, then records that `rule`
/// serves it; retried with backoff (1 s doubling to 1 min) until done, or the rule is
/// stopped (None).
pub async fn take_over(t: Takeover<'_>, stop: &tokio::sync::watch::Receiver<bool>) -> Option<()> {
    let mut attempt = 0u32;
    loop {
        match once(&t).await {
            Ok(()) => return Some(()),
            Err(e) => {
                let delay = Duration::from_secs((1u64 << attempt.min(6)).min(60));
                tracing::warn!(error = %e, retry_in_s = delay.as_secs(), "the kind's previous rule's orphans cannot be let go yet: the rule waits");
                attempt += 1;
                tokio::select! {
                    _ = tokio::time::sleep(delay) => {}
                    _ = super::runner::stopped(stop.clone()) => return None,
                }
            }
        }
    }
}

async fn once(t: &Takeover<'_>) -> Result<(), TakeoverError> {
    let inventory = &t.inventory;
    let me = Served::of(t.rule, t.namespace);
    let data = inventory.all().await?;
    let before = predecessors(&data, &me);
    if !before.is_empty() {
        let client = &inventory.client;
        let uids = parent_uids(client, t.rule, t.namespace).await?;
        for (served_key, old, kinds) in before {
            let pairs = kinds.iter().map(Made::pair);
            let n = let_go(
                client,
                &inventory.fence,
                &old.rule,
                pairs,
                t.namespace,
                &uids,
                false,
            )
            .await
            .map_err(|source| TakeoverError::LetGo {
                rule: old.rule.clone(),
                source,
            })?;
            tracing::info!(from = %old.rule, kind = %me.kind, let_go = n, "the kind was served by another rule: its children that ask to be orphaned let go before this rule takes the kind over");
            inventory.remove(&served_key).await?;
        }
    }
    let value = serde_json::to_string(&me).unwrap_or_default();
    inventory
        .set(&served_key(&me.rule, t.namespace), value)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(rule: &str, kind: &str, ns: Option<&str>) -> (String, String) {
        let s = Served {
            rule: rule.into(),
            kind: kind.into(),
            namespace: ns.map(str::to_string),
        };
        (served_key(rule, ns), serde_json::to_string(&s).unwrap())
    }

    #[test]
    fn the_predecessors_are_the_other_rules_that_served_the_kind_in_the_scope() {
        let kinds = r#"[{"apiVersion":"v1","kind":"PersistentVolumeClaim"}]"#;
        let data: BTreeMap<String, String> = [
            served("old", "websites.sre.example.com", None),
            served("me", "websites.sre.example.com", None),
            served("elsewhere", "websites.sre.example.com", Some("team-a")),
            served("other", "boxes.trust.ruleop.dev", None),
            ("old".to_string(), kinds.to_string()),
            ("_serves.broken".to_string(), "{".to_string()),
        ]
        .into();
        let me = Served {
            rule: "me".into(),
            kind: "websites.sre.example.com".into(),
            namespace: None,
        };
        let found = predecessors(&data, &me);
        assert_eq!(found.len(), 1, "{found:?}");
        let (k, s, made) = &found[0];
        assert_eq!((k.as_str(), s.rule.as_str()), ("_serves.old", "old"));
        assert_eq!(made.len(), 1);
    }

    #[test]
    fn a_rule_serves_its_resource_dot_group() {
        let text = "name: r\nwatch: {group: sre.example.com, version: v1, resource: websites}\nchildren: []\n";
        let (rules, errors) = crate::rules::load::load_str(text, std::path::Path::new("r.yaml"));
        let rule = rules.first().unwrap_or_else(|| panic!("{errors:?}"));
        assert_eq!(Served::of(rule, None).kind, "websites.sre.example.com");
    }
}
