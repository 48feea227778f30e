//! Which rule served a kind last, and a takeover that keeps that rule's promises. Each
//! rule, when it starts, records in the inventory (`_serves.<key>`) the kind it serves. A
//! rule that starts on a kind another rule served (that rule removed, or refused since)
//! first takes over that rule's children of the kinds it makes itself (the rule label
//! moves to it: from then on they are its own, rendered, pruned or let go as any child of
//! its), and lets go that rule's other children that ask to be orphaned (`onRemove:
//! Orphan`), as the old rule's release would have. Only children whose controller is a
//! resource of the kind move. So the new rule's finalizers are the resources' own, and
//! deleting a resource never takes the old rule's data with it. The old rule's other
//! children (of kinds the new one does not make, not asking to be orphaned) stay owned by
//! their resource and go with it. The takeover runs before the new rule reconciles
//! anything, retried until done.

use super::discover::stopped;
use crate::lifecycle::Made;
use crate::operator::inventory::{Inventory, InventoryError, key, parent_uids};
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
    #[error("taking rule `{rule}`'s {kind} children over: {message}")]
    HandOver {
        rule: String,
        kind: String,
        message: String,
    },
    #[error("not the leader: nothing written")]
    NotLeader,
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

/// Where a takeover acts: the resources listed and the children of the rule's own kinds
/// taken over with the rule's client (as its ServiceAccount when it names one: what it
/// may manage); the old rule's other children let go, and the inventory kept, with
/// ruleop's own (the old rule may have run as an account the new one cannot act as).
pub(super) struct Takeover<'a> {
    pub inventory: Inventory,
    pub client: &'a kube::Client,
    pub rule: &'a CompiledRule,
    pub namespace: Option<&'a str>,
}

/// Lets go the orphans of the rules that served the kind before, then records that `rule`
/// serves it; retried with backoff (1 s doubling to 1 min) until done, or the rule is
/// stopped (None).
pub(super) async fn take_over(
    t: Takeover<'_>,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Option<()> {
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
                    _ = stopped(stop.clone()) => return None,
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
        let uids = parent_uids(t.client, t.rule, t.namespace).await?;
        for (served_key, old, kinds) in before {
            let done = take_from(t, &old.rule, &kinds, &uids).await?;
            tracing::info!(from = %old.rule, kind = %me.kind, taken_over = done.moved, let_go = done.let_go, "the kind was served by another rule: its children of this rule's kinds are this rule's now, its other children that ask to be orphaned let go");
            // (A kind ruleop could not read stays to do: the record stays, and the next
            // start of the rule tries it again.)
            if done.skipped == 0 {
                inventory.remove(&served_key).await?;
            }
        }
    }
    let value = serde_json::to_string(&me).unwrap_or_default();
    inventory
        .set(&served_key(&me.rule, t.namespace), value)
        .await?;
    Ok(())
}

/// What a takeover of one rule's children did.
struct Done {
    moved: usize,
    let_go: usize,
    /// Kinds that could not be read.
    skipped: usize,
}

/// Takes over rule `old`'s children of the kinds `t.rule` makes, lets go its others that
/// ask to be orphaned (of `kinds`, the kinds recorded for it), of the resources `uids`.
async fn take_from(
    t: &Takeover<'_>,
    old: &str,
    kinds: &BTreeSet<Made>,
    uids: &BTreeSet<String>,
) -> Result<Done, TakeoverError> {
    let client = &t.inventory.client;
    let fence = &t.inventory.fence;
    // (Every kind it makes is looked at, recorded for the old rule or not.)
    let mine = crate::lifecycle::kinds::kinds_of(t.rule);
    let mut done = Done {
        moved: 0,
        let_go: 0,
        skipped: 0,
    };
    for made in &mine {
        match hand_over(t, old, made, uids).await? {
            Some(n) => done.moved += n,
            None => done.skipped += 1,
        }
    }
    for made in kinds
        .iter()
        .filter(|k| !mine.iter().any(|m| m.group_kind() == k.group_kind()))
    {
        let pair = [made.pair()];
        match let_go(client, fence, old, pair, t.namespace, uids, false).await {
            Ok(k) => done.let_go += k.len(),
            // ruleop may not read the kind (its RBAC no longer covers it): nothing of it
            // can be let go now, and waiting would not change that.
            Err(LetGoError::Forbidden { kind, message }) => {
                done.skipped += 1;
                tracing::warn!(from = %old, kind = %kind, error = %message, "the previous rule's children of this kind cannot be read: those that ask to be orphaned stay owned by their resource (grant ruleop `list` and `patch` on the kind, and restart the rule, to let them go)");
            }
            Err(source) => {
                return Err(TakeoverError::LetGo {
                    rule: old.to_string(),
                    source,
                });
            }
        }
    }
    Ok(done)
}

/// Moves rule `old`'s label to `t.rule` on its objects of `made` whose controller is one
/// of `uids` (one merge patch each, only if the object is still the version read); how
/// many, None when the rule may not read the kind.
async fn hand_over(
    t: &Takeover<'_>,
    old: &str,
    made: &Made,
    uids: &BTreeSet<String>,
) -> Result<Option<usize>, TakeoverError> {
    use crate::render::RULE_LABEL;
    use kube::ResourceExt;
    use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
    let client = t.client;
    let failed = |message: String| TakeoverError::HandOver {
        rule: old.to_string(),
        kind: made.kind.clone(),
        message,
    };
    let (group, version) = crate::schema::kinds::group_version(&made.api_version);
    let resolved = match crate::cache::discovery::child(client, group, version, &made.kind).await {
        Ok(Some(r)) => r,
        Ok(None) => return Ok(Some(0)),
        Err(e) => return Err(failed(e.to_string())),
    };
    let ar = &*resolved.resource;
    let api: Api<DynamicObject> = match t.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, ar),
        None => Api::all_with(client.clone(), ar),
    };
    let selector = format!("{RULE_LABEL}={old}");
    let list = match api.list(&ListParams::default().labels(&selector)).await {
        Ok(l) => l,
        // The rule may not read the kind (as ruleop): nor could it manage it; what the
        // previous rule made of it stays as it is.
        Err(kube::Error::Api(s)) if s.code == 403 => {
            tracing::warn!(from = %old, kind = %made.kind, error = %s.message, "the previous rule's children of this kind cannot be read: they are not taken over");
            return Ok(None);
        }
        Err(e) => return Err(failed(e.to_string())),
    };
    let mut n = 0;
    for o in &list.items {
        let ours = crate::cache::owners::controller_uid(o).is_some_and(|u| uids.contains(u));
        if !ours {
            continue;
        }
        if !t.inventory.fence.holds() {
            return Err(TakeoverError::NotLeader);
        }
        let ns = o.namespace().unwrap_or_default();
        let body = serde_json::json!({"metadata": {
            "resourceVersion": o.metadata.resource_version,
            "labels": {RULE_LABEL: t.rule.name},
        }});
        let one: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, ar);
        match one
            .patch(&o.name_any(), &PatchParams::default(), &Patch::Merge(&body))
            .await
        {
            Ok(_) => n += 1,
            // Gone, or changed since read: the next try reads it again.
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(failed(e.to_string())),
        }
    }
    Ok(Some(n))
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
