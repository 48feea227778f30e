//! The webhook's answer to an AdmissionReview of a Rule (pure): the Rule loaded as
//! `ruleop run` loads it, and refused with every problem, each at its path in the Rule,
//! as `ruleop check` says it.

use crate::rules::object::load_object;
use serde_json::{Value, json};

/// The AdmissionReview answering `review`.
pub fn answer(review: &Value) -> Value {
    let request = &review["request"];
    let uid = request["uid"].clone();
    let (allowed, message) = verdict(&request["object"]);
    let mut response = json!({"uid": uid, "allowed": allowed});
    if let Some(m) = message {
        response["status"] = json!({"code": 422, "reason": "Invalid", "message": m});
    }
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response})
}

/// Whether the Rule may be stored, and why not.
fn verdict(rule: &Value) -> (bool, Option<String>) {
    // A delete has no object: nothing to check.
    if !rule.is_object() {
        return (true, None);
    }
    let load = load_object(rule);
    if load.problems.is_empty() {
        return (true, None);
    }
    let problems: Vec<String> = load.problems.iter().map(ToString::to_string).collect();
    let message = format!(
        "Rule {:?} is refused by ruleop ({} problem(s)):\n{}",
        load.name,
        problems.len(),
        problems.join("\n")
    );
    (
        false,
        Some(crate::status::verdict::bounded([message.as_str()])),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn review(object: Value) -> Value {
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
               "request": {"uid": "u-1", "operation": "CREATE", "object": object}})
    }

    fn rule(replicas: Value) -> Value {
        json!({"apiVersion": "ruleop.dev/v1alpha1", "kind": "Rule", "metadata": {"name": "web"},
            "spec": {"watch": {"group": "x.io", "version": "v1", "resource": "webs"},
                "children": [{"id": "d", "template": {"apiVersion": "apps/v1", "kind": "Deployment",
                    "metadata": {"name": "{{ name }}"},
                    "spec": {"replicas": replicas, "selector": {"matchLabels": {"a": "b"}},
                        "template": {"metadata": {"labels": {"a": "b"}},
                            "spec": {"containers": [{"name": "c", "image": "i"}]}}}}}]}})
    }

    #[test]
    fn a_valid_rule_is_allowed_and_an_invalid_one_refused_naming_each_path() {
        let ok = answer(&review(rule(json!(2))));
        assert_eq!(ok["response"], json!({"uid": "u-1", "allowed": true}));
        let bad = answer(&review(rule(json!("three"))));
        assert_eq!(bad["response"]["allowed"], false);
        assert_eq!(bad["response"]["uid"], "u-1");
        let m = bad["response"]["status"]["message"].as_str().unwrap();
        assert!(m.contains("spec.children[0].template.spec.replicas"), "{m}");
        assert!(m.contains("fix:"), "{m}");
        let delete = json!({"request": {"uid": "u-2", "operation": "DELETE", "object": null}});
        assert_eq!(answer(&delete)["response"]["allowed"], true);
    }
}
