//! `ruleop test` of a kind in several versions: a step's resource may be written in any
//! of them (its version's defaults and schema apply, then it is converted to the watched
//! version, as the API server would through ruleop's webhook), and every resource is
//! converted to each other version and back, a difference failing the step with its diff.

use crate::rules::CompiledRule;
use serde_json::Value;

/// The schema (`openAPIV3Schema`) of `version` of the rule's kind.
pub fn schema_of<'a>(rule: &'a CompiledRule, version: &str) -> Option<&'a Value> {
    crate::schema::crd::version_schema(rule.crd.as_ref()?, version)
}

/// The version `cr` is written in, if it is one of the rule's kind (the watched one or one
/// the rule converts).
pub fn written_in<'a>(rule: &CompiledRule, cr: &'a Value) -> Option<&'a str> {
    let v = cr["apiVersion"]
        .as_str()?
        .strip_prefix(&format!("{}/", rule.watch.group))?;
    let known = v == rule.watch.version
        || rule
            .conversion
            .as_ref()
            .is_some_and(|c| c.spokes.iter().any(|s| s.name == v));
    known.then_some(v)
}

/// `cr` as the watched version.
pub fn to_watched(rule: &CompiledRule, cr: &Value) -> Result<Value, String> {
    match &rule.conversion {
        Some(c) => {
            crate::convert::convert(c, &rule.program, cr, &rule.watch.version).map_err(|e| {
                format!(
                    "the resource does not convert to {}: {e}",
                    rule.watch.version
                )
            })
        }
        None => Ok(cr.clone()),
    }
}

/// What converting `cr` (of the watched version) to each other version and back loses:
/// one message per version, with the diff.
pub fn round_trips(rule: &CompiledRule, cr: &Value) -> Vec<String> {
    let Some(c) = &rule.conversion else {
        return Vec::new();
    };
    let convert = |obj: &Value, to: &str| crate::convert::convert(c, &rule.program, obj, to);
    c.spokes
        .iter()
        .filter_map(|s| {
            let trip = convert(cr, &s.name).and_then(|there| convert(&there, &c.hub));
            match trip {
                Err(e) => Some(format!("converting to {} and back fails: {e}", s.name)),
                Ok(back) if &back != cr => Some(format!(
                    "converting to {} and back changes the resource:\n{}",
                    s.name,
                    super::diff::yaml(cr, &back)
                )),
                Ok(_) => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const RULE: &str = "name: c\nwatch: {group: x.io, version: v1, resource: cs}\nschema:\n  kind: C\n  spec:\n    mode: string\n  versions:\n    - name: v1alpha1\n      spec:\n        mode: string\n      convert:\n        - transform: {from: spec.mode, to: spec.mode, toHub: value, fromHub: value | lower}\nchildren: []\n";

    #[test]
    fn a_conversion_that_changes_the_resource_on_its_round_trip_is_shown_with_its_diff() {
        let rule = crate::rules::testing::rule(RULE);
        let cr = json!({"apiVersion": "x.io/v1", "kind": "C", "metadata": {"name": "a"}, "spec": {"mode": "Fast"}});
        let lost = round_trips(&rule, &cr);
        assert_eq!(lost.len(), 1, "{lost:?}");
        assert!(
            lost[0].starts_with("converting to v1alpha1 and back changes the resource"),
            "{}",
            lost[0]
        );
        assert!(
            lost[0].contains("-  mode: Fast") && lost[0].contains("+  mode: fast"),
            "{}",
            lost[0]
        );
        let fine = json!({"apiVersion": "x.io/v1", "kind": "C", "metadata": {"name": "a"}, "spec": {"mode": "fast"}});
        assert!(round_trips(&rule, &fine).is_empty());
    }

    #[test]
    fn a_resource_of_a_converted_version_is_the_kinds() {
        let rule = crate::rules::testing::rule(RULE);
        let old = json!({"apiVersion": "x.io/v1alpha1", "kind": "C", "spec": {"mode": "x"}});
        assert_eq!(written_in(&rule, &old), Some("v1alpha1"));
        assert_eq!(written_in(&rule, &json!({"apiVersion": "x.io/v2"})), None);
        assert_eq!(to_watched(&rule, &old).unwrap()["apiVersion"], "x.io/v1");
        assert!(schema_of(&rule, "v1alpha1").is_some());
    }
}
