//! Which kinds a rule's revisions make, and so which recorded kinds no revision in force
//! makes any more (by group and kind: a new version of a kind is the same objects).

use crate::render::group_of;
use crate::rules::CompiledRule;
use std::collections::BTreeSet;

/// A kind, as recorded: `apiVersion` and `kind` (compared by group and kind).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct Made {
    #[serde(rename = "apiVersion")]
    pub api_version: String,
    pub kind: String,
}

impl Made {
    pub fn group_kind(&self) -> (&str, &str) {
        (group_of(&self.api_version), &self.kind)
    }

    /// As an (apiVersion, kind) pair.
    pub fn pair(&self) -> (String, String) {
        (self.api_version.clone(), self.kind.clone())
    }
}

/// The kinds a rule makes.
pub fn kinds_of(rule: &CompiledRule) -> BTreeSet<Made> {
    rule.children
        .iter()
        .map(|c| Made {
            api_version: c.api_version.clone(),
            kind: c.kind.clone(),
        })
        .collect()
}

/// The kinds a rule's spec (as a Rule holds it) names for its children, read without
/// compiling it: those of a revision in force that no longer compiles.
pub fn kinds_of_spec(spec: &serde_json::Value) -> BTreeSet<Made> {
    spec["children"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| {
            let t = &c["template"];
            Some(Made {
                api_version: t["apiVersion"].as_str()?.to_string(),
                kind: t["kind"].as_str()?.to_string(),
            })
        })
        .collect()
}

/// The union of the kinds of every revision in force: those that compile (the newest; in
/// a rollout, the one it comes from; the pinned ones), and the specs of those that no
/// longer do (a held `from`).
pub fn kinds_in_force<'a>(
    revisions: impl IntoIterator<Item = &'a CompiledRule>,
    uncompiled: impl IntoIterator<Item = &'a serde_json::Value>,
) -> BTreeSet<Made> {
    let mut kinds: BTreeSet<Made> = revisions.into_iter().flat_map(kinds_of).collect();
    kinds.extend(uncompiled.into_iter().flat_map(kinds_of_spec));
    kinds
}

/// The recorded kinds that no revision in force makes, by group and kind.
pub fn retired(recorded: &BTreeSet<Made>, in_force: &BTreeSet<Made>) -> Vec<Made> {
    recorded
        .iter()
        .filter(|r| !in_force.iter().any(|n| n.group_kind() == r.group_kind()))
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn made(api_version: &str, kind: &str) -> Made {
        Made {
            api_version: api_version.into(),
            kind: kind.into(),
        }
    }

    #[test]
    fn the_kinds_of_a_spec_that_no_longer_compiles_are_read_from_its_templates() {
        let spec = serde_json::json!({"children": [
            {"id": "a", "template": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "{{ broken"}}},
            {"id": "b", "template": {"apiVersion": "apps/v1", "kind": "Deployment"}},
            {"id": "c"}]});
        let kinds: Vec<Made> = kinds_of_spec(&spec).into_iter().collect();
        assert_eq!(
            kinds,
            vec![made("apps/v1", "Deployment"), made("v1", "ConfigMap")]
        );
        let union = kinds_in_force([], [&spec]);
        assert_eq!(union.len(), 2);
    }

    #[test]
    fn a_new_version_of_a_kind_is_not_retired_and_a_removed_kind_is() {
        let recorded: BTreeSet<Made> = [
            made("autoscaling/v1", "HorizontalPodAutoscaler"),
            made("v1", "ConfigMap"),
            made("apps/v1", "Deployment"),
        ]
        .into();
        let now: BTreeSet<Made> = [
            made("autoscaling/v2", "HorizontalPodAutoscaler"),
            made("apps/v1", "Deployment"),
        ]
        .into();
        assert_eq!(retired(&recorded, &now), vec![made("v1", "ConfigMap")]);
    }
}
