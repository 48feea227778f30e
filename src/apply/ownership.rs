//! Whose is a live object? Every write and delete ruleop makes goes through [`judge`]:
//! ruleop modifies or deletes an object only when it is its own (the controller
//! ownerReference is this custom resource, by uid, and the rule's label is on it), adopts
//! one only as the child's adoption policy allows, and leaves everything else alone.
//! Pure: the live object goes in as JSON, a verdict comes out.

use crate::render::RULE_LABEL;
pub use crate::rules::spec::AdoptPolicy;
use serde_json::Value;

/// What ruleop may do with a live object of a child's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Ours: modify it, delete it when no longer rendered.
    Owned,
    /// Not ours yet, and the policy lets ruleop adopt it (`why` says which way).
    Adopt { why: &'static str },
    /// Someone else's: left untouched. `controller` names its controller, or "none".
    NotOwned { controller: String },
}

/// The controller ownerReference of an object, if any.
pub fn controller_ref(obj: &Value) -> Option<&Value> {
    obj.pointer("/metadata/ownerReferences")?
        .as_array()?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
}

/// "WebSite other (uid 1234)" or "none".
pub fn describe_controller(obj: &Value) -> String {
    match controller_ref(obj) {
        None => "none".into(),
        Some(r) => format!(
            "{} {} (uid {})",
            r.get("kind").and_then(Value::as_str).unwrap_or("?"),
            r.get("name").and_then(Value::as_str).unwrap_or("?"),
            r.get("uid").and_then(Value::as_str).unwrap_or("?"),
        ),
    }
}

fn rule_label(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/labels")?.get(RULE_LABEL)?.as_str()
}

/// Judges a live object for the custom resource `cr_uid` of rule `rule`.
pub fn judge(live: &Value, cr_uid: &str, rule: &str, policy: AdoptPolicy) -> Verdict {
    let controller = controller_ref(live);
    let controller_uid = controller
        .and_then(|r| r.get("uid"))
        .and_then(Value::as_str);
    let ours = controller_uid == Some(cr_uid);
    match rule_label(live) {
        Some(l) if l == rule && ours => return Verdict::Owned,
        // Another rule's object is never taken over, whatever the policy.
        Some(other) if other != rule => {
            return Verdict::NotOwned {
                controller: format!("{}, labelled for rule `{other}`", describe_controller(live)),
            };
        }
        _ => {}
    }
    match (policy, controller) {
        (AdoptPolicy::IfControlled | AdoptPolicy::IfOrphan, Some(_)) if ours => Verdict::Adopt {
            why: "its controller is this resource",
        },
        (AdoptPolicy::IfOrphan, None) => Verdict::Adopt {
            why: "it has no controller and the child's policy is IfOrphan",
        },
        _ => Verdict::NotOwned {
            controller: describe_controller(live),
        },
    }
}

/// Whether `live` is an object `ruleop release` let go from the resource whose
/// `released` uids name it: its uid among them, no controller, no rule's label, and fields
/// applied by ruleop's field manager. (Another team's object of the name has another uid,
/// and a uid written into the resource by hand names no object ruleop applied.)
pub fn released(live: &Value, released: &[String]) -> bool {
    let uid = live.pointer("/metadata/uid").and_then(Value::as_str);
    let applied_by_ruleop = live
        .pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .is_some_and(|m| {
            m.iter()
                .any(|e| e["manager"] == crate::render::FIELD_MANAGER && e["operation"] == "Apply")
        });
    uid.is_some_and(|u| released.iter().any(|r| r == u))
        && controller_ref(live).is_none()
        && rule_label(live).is_none()
        && applied_by_ruleop
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(owner: Option<(&str, bool)>, label: Option<&str>) -> Value {
        let mut o = json!({"metadata": {"name": "x", "labels": {}}});
        if let Some((uid, controller)) = owner {
            o["metadata"]["ownerReferences"] =
                json!([{"kind": "WebSite", "name": "w", "uid": uid, "controller": controller}]);
        }
        if let Some(l) = label {
            o["metadata"]["labels"][RULE_LABEL] = json!(l);
        }
        o
    }

    #[test]
    fn an_object_controlled_by_this_resource_with_the_rules_label_is_owned() {
        let o = obj(Some(("u1", true)), Some("website"));
        assert_eq!(
            judge(&o, "u1", "website", AdoptPolicy::Never),
            Verdict::Owned
        );
    }

    #[test]
    fn a_copied_label_without_the_controller_reference_is_not_ours() {
        let o = obj(None, Some("website"));
        assert_eq!(
            judge(&o, "u1", "website", AdoptPolicy::IfControlled),
            Verdict::NotOwned {
                controller: "none".into()
            }
        );
        let other = obj(Some(("u2", true)), Some("website"));
        assert_eq!(
            judge(&other, "u1", "website", AdoptPolicy::IfOrphan),
            Verdict::NotOwned {
                controller: "WebSite w (uid u2)".into()
            },
            "another resource's child is never adopted"
        );
    }

    #[test]
    fn the_label_of_another_rule_is_never_adopted() {
        for owner in [Some(("u1", true)), None] {
            let o = obj(owner, Some("other-rule"));
            for policy in [
                AdoptPolicy::IfControlled,
                AdoptPolicy::IfOrphan,
                AdoptPolicy::Never,
            ] {
                let v = judge(&o, "u1", "website", policy);
                assert!(
                    matches!(&v, Verdict::NotOwned { controller } if controller.contains("other-rule")),
                    "{owner:?} {policy:?}: {v:?}"
                );
            }
        }
    }

    #[test]
    fn adoption_follows_the_policy() {
        let typed = obj(Some(("u1", true)), None);
        assert!(matches!(
            judge(&typed, "u1", "website", AdoptPolicy::IfControlled),
            Verdict::Adopt { .. }
        ));
        assert!(matches!(
            judge(&typed, "u1", "website", AdoptPolicy::Never),
            Verdict::NotOwned { .. }
        ));
        let hand_made = obj(None, None);
        assert!(matches!(
            judge(&hand_made, "u1", "website", AdoptPolicy::IfControlled),
            Verdict::NotOwned { .. }
        ));
        assert!(matches!(
            judge(&hand_made, "u1", "website", AdoptPolicy::IfOrphan),
            Verdict::Adopt { .. }
        ));
        let non_controller_owner = obj(Some(("u1", false)), None);
        assert!(
            matches!(
                judge(
                    &non_controller_owner,
                    "u1",
                    "website",
                    AdoptPolicy::IfOrphan
                ),
                Verdict::Adopt { .. }
            ),
            "an owner that is not a controller leaves the object an orphan"
        );
    }

    #[test]
    fn a_released_child_is_known_by_its_uid_and_ruleops_applied_fields() {
        let mut o = obj(None, None);
        o["metadata"]["uid"] = json!("c1");
        o["metadata"]["managedFields"] =
            json!([{"manager": crate::render::FIELD_MANAGER, "operation": "Apply"}]);
        let released = ["c0".to_string(), "c1".to_string()];
        assert!(super::released(&o, &released));
        // Not named by the resource.
        assert!(!super::released(&o, &released[..1]));
        // Someone else's namesake: no field of ruleop's.
        let mut theirs = o.clone();
        theirs["metadata"]["managedFields"] =
            json!([{"manager": "kubectl-client-side-apply", "operation": "Update"}]);
        assert!(!super::released(&theirs, &released));
        // Controlled by something since, or labelled for a rule.
        assert!(!super::released(&obj(Some(("u9", true)), None), &released));
        let mut labelled = o.clone();
        labelled["metadata"]["labels"][RULE_LABEL] = json!("other");
        assert!(!super::released(&labelled, &released));
    }
}
