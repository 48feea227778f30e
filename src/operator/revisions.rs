//! The revisions of a Rule object: each spec it has run kept as an immutable
//! ControllerRevision (as StatefulSets and DaemonSets keep theirs) in ruleop's namespace,
//! numbered in the order they first ran, owned by the Rule (they go with it), at most
//! `revisionHistoryLimit` of them besides those in use.

use crate::rules::CompiledRule;
use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{Api, DeleteParams, ListParams, PostParams, Preconditions};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

/// The label naming a revision's rule.
pub const RULE_LABEL: &str = "ruleop.dev/rule";
/// The annotation holding a revision's fingerprint (the rule's, as compiled).
pub const FINGERPRINT: &str = "ruleop.dev/fingerprint";
/// The Rule's annotation listing its revisions whose rollout was rolled back (aborted, or
/// failed with `onFailure: Rollback`), as `2,5`: kept on the Rule's metadata, so that what
/// a rollout decided outlives the Rule's status (a restore from a backup, a status written
/// over) and a new leader reads it back before it reconciles anything. (A revision's
/// ControllerRevision cannot carry it: the API server refuses any change to one.)
pub const ROLLED_BACK: &str = "ruleop.dev/rolled-back";
/// How many rolled-back revisions the annotation keeps (the newest).
const ROLLED_BACK_KEPT: usize = 16;

/// One revision of a Rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Revision {
    pub number: i64,
    pub fingerprint: String,
    /// The Rule's `spec` of that revision.
    pub spec: Value,
}

/// A Rule's revisions: the one of its spec now, and every one kept, by number.
#[derive(Debug, Clone, PartialEq)]
pub struct History {
    pub current: i64,
    pub kept: BTreeMap<i64, Revision>,
}

fn revision_of(cr: &ControllerRevision) -> Revision {
    Revision {
        number: cr.revision,
        fingerprint: cr
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(FINGERPRINT).cloned())
            .unwrap_or_default(),
        spec: cr
            .data
            .as_ref()
            .map(|d| d.0["spec"].clone())
            .unwrap_or_default(),
    }
}

impl History {
    /// The revision the resources are on when no rollout says otherwise: the newest kept
    /// before the current one that was not rolled back (an aborted revision is never one
    /// to roll from: no resource is to be put back on it).
    pub fn previous(&self, rolled_back: &BTreeSet<i64>) -> Option<i64> {
        self.kept
            .keys()
            .copied()
            .filter(|n| *n < self.current && !rolled_back.contains(n))
            .max()
    }
}

/// The revisions [`ROLLED_BACK`] lists.
pub fn parse_rolled_back(annotation: Option<&str>) -> BTreeSet<i64> {
    annotation
        .unwrap_or_default()
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect()
}

fn rules_api(client: &kube::Client) -> Api<kube::api::DynamicObject> {
    Api::all_with(client.clone(), &crate::operator::objects::resource())
}

/// The revisions of Rule `name` whose rollout was rolled back, as the Rule says now.
pub async fn rolled_back(client: &kube::Client, name: &str) -> Result<BTreeSet<i64>, kube::Error> {
    let rule = rules_api(client).get_opt(name).await?;
    let annotations = rule.as_ref().and_then(|r| r.metadata.annotations.as_ref());
    Ok(parse_rolled_back(
        annotations
            .and_then(|a| a.get(ROLLED_BACK))
            .map(String::as_str),
    ))
}

/// Adds revision `number` to the rolled-back ones of Rule `name` (the newest few kept).
pub async fn mark_rolled_back(
    client: &kube::Client,
    name: &str,
    number: i64,
) -> Result<(), kube::Error> {
    let mut all = rolled_back(client, name).await?;
    if !all.insert(number) {
        return Ok(());
    }
    let value = all
        .iter()
        .rev()
        .take(ROLLED_BACK_KEPT)
        .rev()
        .map(i64::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let patch = serde_json::json!({"metadata": {"annotations": {ROLLED_BACK: value}}});
    rules_api(client)
        .patch(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .map(|_| ())
}

fn owned_by(cr: &ControllerRevision, uid: &str) -> bool {
    cr.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.uid == uid)
}

/// The spec of revision `number` of Rule `name` (uid `uid`), if it is kept.
pub async fn spec_of(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    uid: &str,
    number: i64,
) -> Result<Option<Value>, kube::Error> {
    let api: Api<ControllerRevision> = Api::namespaced(client.clone(), namespace);
    let lp = ListParams::default().labels(&format!("{RULE_LABEL}={name}"));
    Ok(api
        .list(&lp)
        .await?
        .items
        .iter()
        .filter(|c| owned_by(c, uid) && c.revision == number)
        .map(|c| revision_of(c).spec)
        .next())
}

/// Finds the revision of `rule`'s spec (a Rule object's), or records it as the next one;
/// then deletes the oldest past its history limit, never one of `keep`.
pub async fn ensure(
    client: &kube::Client,
    namespace: &str,
    rule: &CompiledRule,
    keep: &[i64],
) -> Result<History, kube::Error> {
    let Some(object) = &rule.object else {
        return Ok(History {
            current: 0,
            kept: BTreeMap::new(),
        });
    };
    let api: Api<ControllerRevision> = Api::namespaced(client.clone(), namespace);
    let lp = ListParams::default().labels(&format!("{RULE_LABEL}={}", rule.name));
    // Revisions of an earlier Rule of this name (deleted, its revisions not collected
    // yet) are not this one's.
    let mut mine: Vec<ControllerRevision> = api
        .list(&lp)
        .await?
        .items
        .into_iter()
        .filter(|c| owned_by(c, &object.uid))
        .collect();
    let newest = mine.iter().map(|c| c.revision).max().unwrap_or(0);
    let found = mine
        .iter()
        .position(|c| revision_of(c).fingerprint == rule.fingerprint);
    let current = match found {
        // An older spec applied again is the newest revision again (as a StatefulSet's
        // rollback is): renumbered, so what comes after it is rolled out from the one
        // that was in force, not from the one before it.
        // (Made again under the new number: the API server refuses to change a revision
        // in place, its data being compared byte for byte after a patch's round trip.)
        Some(i) if mine[i].revision < newest => {
            let old = mine.remove(i);
            delete_exactly(&api, &old).await?;
            let made = api
                .create(
                    &PostParams::default(),
                    &new_revision(rule, object, namespace, newest + 1),
                )
                .await?;
            tracing::info!(rule = %rule.name, revision = newest + 1, fingerprint = %rule.fingerprint, "an earlier revision applied again: renumbered as the newest");
            return finish(&api, rule, made, mine, keep).await;
        }
        Some(i) => mine[i].revision,
        None => {
            let next = mine.iter().map(|c| c.revision).max().unwrap_or(0) + 1;
            let made = api
                .create(
                    &PostParams::default(),
                    &new_revision(rule, object, namespace, next),
                )
                .await?;
            tracing::info!(rule = %rule.name, revision = next, fingerprint = %rule.fingerprint, "new revision");
            return finish(&api, rule, made, mine, keep).await;
        }
    };
    let kept = prune(&api, rule, mine, current, keep).await;
    Ok(History { current, kept })
}

/// The history once revision `made` was created.
async fn finish(
    api: &Api<ControllerRevision>,
    rule: &CompiledRule,
    made: ControllerRevision,
    mut mine: Vec<ControllerRevision>,
    keep: &[i64],
) -> Result<History, kube::Error> {
    let current = made.revision;
    mine.push(made);
    let kept = prune(api, rule, mine, current, keep).await;
    Ok(History { current, kept })
}

fn new_revision(
    rule: &CompiledRule,
    object: &crate::rules::compile::ObjectSource,
    namespace: &str,
    number: i64,
) -> ControllerRevision {
    let fp: String = rule.fingerprint.chars().take(10).collect();
    ControllerRevision {
        metadata: ObjectMeta {
            name: Some(format!("{}-{fp}", rule.name)),
            namespace: Some(namespace.to_string()),
            labels: Some([(RULE_LABEL.to_string(), rule.name.clone())].into()),
            annotations: Some([(FINGERPRINT.to_string(), rule.fingerprint.clone())].into()),
            owner_references: Some(vec![OwnerReference {
                api_version: crate::rules::object::api_version(),
                kind: crate::rules::object::KIND.into(),
                name: rule.name.clone(),
                uid: object.uid.clone(),
                ..Default::default()
            }]),
            ..Default::default()
        },
        data: Some(RawExtension(serde_json::json!({"spec": &*object.spec}))),
        revision: number,
    }
}

/// Deletes the revisions past the rule's history limit (the oldest first), never the
/// current one or one of `keep`; gives those left.
async fn prune(
    api: &Api<ControllerRevision>,
    rule: &CompiledRule,
    mut mine: Vec<ControllerRevision>,
    current: i64,
    keep: &[i64],
) -> BTreeMap<i64, Revision> {
    mine.sort_by_key(|c| std::cmp::Reverse(c.revision));
    let mut kept = BTreeMap::new();
    for (i, c) in mine.into_iter().enumerate() {
        let wanted =
            i < rule.history_limit.max(1) || c.revision == current || keep.contains(&c.revision);
        if wanted {
            kept.insert(c.revision, revision_of(&c));
            continue;
        }
        if let Err(e) = delete_exactly(api, &c).await {
            tracing::warn!(rule = %rule.name, revision = c.revision, error = %e, "an old revision could not be deleted; kept until the next change");
            kept.insert(c.revision, revision_of(&c));
        }
    }
    kept
}
/// Deletes revision `c`, and only that object (its uid as a precondition: a revision
/// made again under its name since is left alone).
async fn delete_exactly(
    api: &Api<ControllerRevision>,
    c: &ControllerRevision,
) -> Result<(), kube::Error> {
    let name = c.metadata.name.clone().unwrap_or_default();
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: c.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    api.delete(&name, &dp).await.map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_previous_revision_is_never_one_rolled_back() {
        let rev = |number| Revision {
            number,
            fingerprint: String::new(),
            spec: Value::Null,
        };
        let h = History {
            current: 3,
            kept: [(1, rev(1)), (2, rev(2)), (3, rev(3))].into(),
        };
        assert_eq!(h.previous(&BTreeSet::new()), Some(2));
        assert_eq!(h.previous(&parse_rolled_back(Some("2"))), Some(1));
        assert_eq!(h.previous(&parse_rolled_back(Some("1, 2,x"))), None);
    }
}
