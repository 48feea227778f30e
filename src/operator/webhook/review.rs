//! The webhook's answer to an AdmissionReview of a Rule (pure): the Rule loaded as
//! `ruleop run` loads it, and refused with every problem, each at its path in the Rule,
//! as `ruleop check` says it.

use crate::access::authority::{Demand, Requester, demand};
use crate::rules::CompiledRule;
use crate::rules::object::{ObjectLoad, load_object};
use crate::rules::policy::Policy;
use serde_json::{Value, json};
use std::sync::{Arc, RwLock};

/// A kind a rule serves on this replica now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Serving {
    pub group: String,
    pub resource: String,
    /// Every name of the kind it serves (its resource, its kind, its CRD).
    pub claims: Vec<crate::rules::claims::Claim>,
    pub rule: String,
    /// Where the rule comes from: its file, or `Rule/<name>`.
    pub source: String,
}

/// The kinds served now, kept up to date by the operator each time it puts rules in force,
/// and the conversions of the kinds in several versions: each the last a rule in force had,
/// kept after that rule leaves (its CRD may stay, with objects stored in a version, and the
/// API server still asks to convert them).
#[derive(Debug, Default)]
pub struct Served(RwLock<Vec<Serving>>, RwLock<Vec<Arc<CompiledRule>>>);

impl Served {
    pub fn new() -> Arc<Served> {
        Arc::new(Served::default())
    }

    /// The rules in force from now on.
    pub fn set(&self, rules: &[Arc<CompiledRule>]) {
        let now = rules
            .iter()
            .map(|r| Serving {
                group: r.watch.group.clone(),
                resource: r.watch.resource.clone(),
                claims: crate::rules::claims::claims(r),
                rule: r.name.clone(),
                source: r.at.file.display().to_string(),
            })
            .collect();
        if let Ok(mut s) = self.0.write() {
            *s = now;
        }
        // (A rule that runs as an account converts once that account may define its kind:
        // see `allow_conversion`.)
        for r in rules.iter().filter(|r| r.identity.is_none()) {
            self.allow_conversion(r);
        }
    }

    /// `rule`'s conversions served from now on (for its group and kind), if it has any.
    pub fn allow_conversion(&self, rule: &Arc<CompiledRule>) {
        if rule.conversion.is_none() {
            return;
        }
        if let Ok(mut c) = self.1.write() {
            let kind = rule.crd_kind();
            c.retain(|old| !(old.watch.group == rule.watch.group && old.crd_kind() == kind));
            c.push(rule.clone());
        }
    }

    /// The rule that converts the versions of `kind` in `group`: the one in force, else the
    /// last one that was.
    pub fn converting(&self, group: &str, kind: &str) -> Option<Arc<CompiledRule>> {
        let rules = self.1.read().ok()?;
        rules
            .iter()
            .find(|r| r.watch.group == group && r.crd_kind() == Some(kind))
            .cloned()
    }

    /// Whether a rule in force serves `group`'s `resource`.
    pub fn serves(&self, group: &str, resource: &str) -> bool {
        self.snapshot()
            .iter()
            .any(|s| s.group == group && s.resource == resource)
    }

    fn snapshot(&self) -> Vec<Serving> {
        self.0.read().map(|s| s.clone()).unwrap_or_default()
    }
}

/// The answer to a review, before its author's right is asked.
#[derive(Debug)]
pub struct Answer {
    /// The AdmissionReview to send if the author holds the right (or none is asked).
    pub review: Value,
    /// The author and the rights their Rule demands (see [`crate::access::authority`]):
    /// for an update, the Rule as it was demands its own too (no one takes over a Rule
    /// that runs as an account they may not act as).
    pub ask: Option<(Option<Requester>, Vec<Demand>)>,
}

/// The AdmissionReview answering `review`, given the kinds served now and the policy: a
/// Rule that loads is admitted only once its author is found to hold [`Answer::ask`].
pub fn answer(review: &Value, served: &Served, policy: &Policy) -> Answer {
    let request = &review["request"];
    let uid = request["uid"].clone();
    if metadata_only(request) || !request["object"].is_object() {
        // An edit of its metadata alone (an annotation such as `ruleop.dev/rollout=abort`,
        // a finalizer) is always admitted: a stored Rule that no longer loads must stay
        // manageable, and its spec is what is checked. (A delete has no object.)
        return Answer {
            review: allowed(&uid),
            ask: None,
        };
    }
    let object = &request["object"];
    let load = load_object(object);
    match verdict(&load, &served.snapshot(), policy) {
        Some(message) => Answer {
            review: refused(&uid, 422, "Invalid", &message),
            ask: None,
        },
        None => {
            let mut demands = match &load.rule {
                Some(r) => crate::access::authority::demands(r),
                None => vec![demand(&load.name, None)],
            };
            if request["operation"] == "UPDATE" && request["oldObject"].is_object() {
                let was = demand(&load.name, identity_of(&request["oldObject"]).as_ref());
                if !demands.contains(&was) {
                    demands.push(was);
                }
            }
            Answer {
                review: allowed(&uid),
                ask: Some((Requester::from_user_info(&request["userInfo"]), demands)),
            }
        }
    }
}

/// The account a stored Rule names (read as it is: it may no longer compile).
fn identity_of(rule: &Value) -> Option<crate::rules::Identity> {
    let sa = &rule["spec"]["serviceAccount"];
    Some(crate::rules::Identity {
        name: sa["name"].as_str()?.to_string(),
        namespace: sa["namespace"].as_str()?.to_string(),
    })
}

fn allowed(uid: &Value) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": true}})
}

/// A refusal of the request `uid`, with `message`.
pub fn refused(uid: &Value, code: u16, reason: &str, message: &str) -> Value {
    json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "response": {"uid": uid, "allowed": false,
            "status": {"code": code, "reason": reason, "message": message}}})
}

/// The answer once the author's right is known: refused, naming what they lack.
pub fn forbidden(review: &Value, name: &str, why: &str) -> Value {
    let message = format!("Rule {name:?} is refused by ruleop: {why}");
    refused(
        &review["request"]["uid"],
        403,
        "Forbidden",
        &crate::status::verdict::bounded([message.as_str()]),
    )
}

/// Whether the request is an update that leaves the Rule's spec and labels as they were
/// (a label may bring an unreviewed Rule into an installation's `--rule-selector`: that
/// is reviewed in full).
fn metadata_only(request: &Value) -> bool {
    let (new, old) = (&request["object"], &request["oldObject"]);
    request["operation"] == "UPDATE"
        && old.is_object()
        && new["spec"] == old["spec"]
        && new["metadata"]["labels"] == old["metadata"]["labels"]
}

/// Why the Rule may not be stored, if it may not: it compiles, the installation's policy
/// allows it, and it watches no kind another rule serves.
fn verdict(load: &ObjectLoad, served: &[Serving], policy: &Policy) -> Option<String> {
    let mut problems: Vec<String> = load.problems.iter().map(ToString::to_string).collect();
    // (Served entries of this Rule itself are its own edit.)
    let own = crate::rules::object::source_path(&load.name)
        .display()
        .to_string();
    if let Some(file) = served
        .iter()
        .find(|s| s.rule == load.name && s.source != own)
    {
        problems.push(format!(
            "metadata.name: a rule named {:?} is served from {}; a Rule of that name would be refused and that rule would go on serving\n  fix: name the Rule otherwise, or remove the rule from its file first",
            load.name, file.source
        ));
    }
    if let Some(r) = &load.rule {
        problems.extend(
            crate::rules::policy::object_problems(r, policy)
                .iter()
                .map(ToString::to_string),
        );
    }
    if let Some(r) = &load.rule {
        let mine = crate::rules::claims::claims(r);
        if let Some((other, on)) = served
            .iter()
            .filter(|s| s.source != own)
            .find_map(|s| crate::rules::claims::shared(&mine, &s.claims).map(|on| (s, on)))
        {
            problems.push(format!(
                "spec.watch: {} is served by rule `{}` ({}); a second rule on it would be refused and `{}` would go on serving\n  fix: one rule per kind (by its resource, its kind and its CRD alike): edit `{}` instead, or watch another kind",
                crate::rules::claims::describe(r, Some(on)), other.rule, other.source, other.rule, other.rule
            ));
        }
    }
    if problems.is_empty() {
        return None;
    }
    let message = format!(
        "Rule {:?} is refused by ruleop ({} problem(s)):\n{}",
        load.name,
        problems.len(),
        problems.join("\n")
    );
    Some(crate::status::verdict::bounded([message.as_str()]))
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
    fn a_kinds_conversion_outlives_its_rule_until_another_replaces_it() {
        let text = include_str!("../../../tests/fixtures/versions/gateway.yaml");
        let load = |t: &str| {
            let (mut rules, errors) =
                crate::rules::load_str(t, std::path::Path::new("gateway.yaml"));
            assert!(errors.is_empty(), "{errors:?}");
            rules.remove(0)
        };
        let served = Served::new();
        served.set(&[load(text)]);
        assert!(served.serves("versions.ruleop.dev", "gateways"));
        assert!(
            served
                .converting("versions.ruleop.dev", "Gateway")
                .is_some()
        );
        // The rule leaves: its kind is no longer served, but its CRD may stay.
        served.set(&[]);
        assert!(!served.serves("versions.ruleop.dev", "gateways"));
        let kept = served.converting("versions.ruleop.dev", "Gateway").unwrap();
        assert_eq!(kept.name, "gateway");
        // A new rule of the kind replaces it.
        served.set(&[load(&text.replace("name: gateway\n", "name: gateway2\n"))]);
        let now = served.converting("versions.ruleop.dev", "Gateway").unwrap();
        assert_eq!(now.name, "gateway2");
        assert!(served.converting("versions.ruleop.dev", "Other").is_none());
    }

    #[test]
    fn a_valid_rule_is_allowed_and_an_invalid_one_refused_naming_each_path() {
        let served = Served::default();
        let ok = answer(&review(rule(json!(2))), &served, &Policy::default()).review;
        assert_eq!(ok["response"], json!({"uid": "u-1", "allowed": true}));
        let bad = answer(&review(rule(json!("three"))), &served, &Policy::default()).review;
        assert_eq!(bad["response"]["allowed"], false);
        assert_eq!(bad["response"]["uid"], "u-1");
        let m = bad["response"]["status"]["message"].as_str().unwrap();
        assert!(m.contains("spec.children[0].template.spec.replicas"), "{m}");
        assert!(m.contains("fix:"), "{m}");
        let delete = json!({"request": {"uid": "u-2", "operation": "DELETE", "object": null}});
        assert_eq!(
            answer(&delete, &served, &Policy::default()).review["response"]["allowed"],
            true
        );
    }

    #[test]
    fn a_rule_reading_a_field_its_childs_kind_does_not_have_is_refused() {
        let mut typo = rule(json!(2));
        typo["spec"]["status"] = json!({"fields": [{"name": "ready", "type": "integer",
            "from": "d", "path": "$.status.readyReplica"}]});
        let bad = answer(&review(typo), &Served::default(), &Policy::default()).review;
        assert_eq!(bad["response"]["allowed"], false, "{bad}");
        let m = bad["response"]["status"]["message"].as_str().unwrap();
        assert!(m.contains("spec.status.fields[0].path"), "{m}");
        assert!(
            m.contains("Deployment has no field `status.readyReplica`")
                && m.contains("did you mean `readyReplicas`?"),
            "{m}"
        );
    }

    #[test]
    fn a_stored_invalid_rule_can_still_have_its_metadata_edited_but_not_its_spec() {
        let served = Served::default();
        let stored = rule(json!("three"));
        let mut annotated = stored.clone();
        annotated["metadata"]["annotations"] = json!({"ruleop.dev/rollout": "abort"});
        let update = |object: &Value| {
            json!({"request": {"uid": "u-3", "operation": "UPDATE",
                "object": object, "oldObject": stored}})
        };
        let ok = answer(&update(&annotated), &served, &Policy::default()).review;
        assert_eq!(ok["response"]["allowed"], true, "{ok}");
        let mut still_broken = annotated.clone();
        still_broken["spec"]["children"][0]["template"]["spec"]["replicas"] = json!("four");
        let bad = answer(&update(&still_broken), &served, &Policy::default()).review;
        assert_eq!(bad["response"]["allowed"], false, "{bad}");
        let mut labelled = annotated.clone();
        labelled["metadata"]["labels"] = json!({"team": "a"});
        let bad = answer(&update(&labelled), &served, &Policy::default()).review;
        assert_eq!(
            bad["response"]["allowed"], false,
            "a label is reviewed: {bad}"
        );
        let fixed = rule(json!(2));
        assert_eq!(
            answer(&update(&fixed), &served, &Policy::default()).review["response"]["allowed"],
            true
        );
    }

    #[test]
    fn a_rule_on_a_kind_another_rule_serves_is_refused_naming_it() {
        let served = Served::default();
        let serving = |rule: &str| Serving {
            group: "x.io".into(),
            resource: "webs".into(),
            claims: vec![crate::rules::claims::Claim::Resource {
                group: "x.io".into(),
                resource: "webs".into(),
            }],
            rule: rule.into(),
            source: format!("Rule/{rule}"),
        };
        *served.0.write().unwrap() = vec![serving("site")];
        let bad = answer(&review(rule(json!(2))), &served, &Policy::default()).review;
        assert_eq!(bad["response"]["allowed"], false, "{bad}");
        let m = bad["response"]["status"]["message"].as_str().unwrap();
        assert!(
            m.contains("spec.watch: x.io/v1 webs is served by rule `site` (Rule/site)"),
            "{m}"
        );
        // The serving rule's own edit is allowed.
        *served.0.write().unwrap() = vec![serving("web")];
        let ok = answer(&review(rule(json!(2))), &served, &Policy::default()).review;
        assert_eq!(ok["response"]["allowed"], true, "{ok}");
        // A Rule named as a file's rule is refused, whatever it watches.
        let mut file = serving("web");
        file.source = "/etc/ruleop/rules/web.yaml".into();
        file.resource = "others".into();
        file.claims = vec![crate::rules::claims::Claim::Resource {
            group: "x.io".into(),
            resource: "others".into(),
        }];
        *served.0.write().unwrap() = vec![file];
        let bad = answer(&review(rule(json!(2))), &served, &Policy::default()).review;
        let m = bad["response"]["status"]["message"].as_str().unwrap();
        assert!(
            m.contains("is served from /etc/ruleop/rules/web.yaml"),
            "{m}"
        );
    }

    /// A tenant's Rule on another resource name with the served kind's `schema.kind` would
    /// take over that kind's conversion: refused, naming the kind, and the conversion stays
    /// the serving rule's.
    #[test]
    fn a_rule_naming_a_served_kind_by_another_resource_is_refused_and_converts_nothing() {
        let website = crate::rules::testing::website();
        let served = Served::new();
        served.set(std::slice::from_ref(&website));
        let tenant = json!({"apiVersion": "ruleop.dev/v1alpha1", "kind": "Rule",
            "metadata": {"name": "zzz"},
            "spec": {"watch": {"group": "sre.example.com", "version": "v1", "resource": "zzsites"},
                "schema": {"kind": "WebSite", "spec": {"image": "string"}}}});
        let bad = answer(&review(tenant), &served, &Policy::default()).review;
        assert_eq!(bad["response"]["allowed"], false, "{bad}");
        let m = bad["response"]["status"]["message"].as_str().unwrap();
        assert!(
            m.contains("sre.example.com/v1 zzsites (the kind website of sre.example.com) is served by rule `website`"),
            "{m}"
        );
        let converting = served.converting("sre.example.com", "WebSite");
        assert!(converting.is_none_or(|r| r.name == "website"));
    }

    #[test]
    fn a_rule_that_loads_asks_its_authors_right_and_the_policy_is_checked_first() {
        let served = Served::default();
        let a = answer(&review(rule(json!(2))), &served, &Policy::default());
        let (who, demands) = a.ask.expect("a right to ask");
        assert!(who.is_none(), "no userInfo in this review");
        assert_eq!(
            (demands[0].verb.as_str(), demands[0].name.as_str()),
            ("escalate", "web")
        );
        // An update of a Rule that ran as an account demands that account too.
        let mut old = rule(json!(2));
        old["spec"]["serviceAccount"] = json!({"name": "b", "namespace": "team-b"});
        let update = json!({"request": {"uid": "u", "operation": "UPDATE",
            "object": rule(json!(3)), "oldObject": old}});
        let (_, demands) = answer(&update, &served, &Policy::default()).ask.unwrap();
        assert_eq!(demands.len(), 2);
        assert_eq!(
            (demands[1].verb.as_str(), demands[1].namespace.as_deref()),
            ("impersonate", Some("team-b"))
        );
        let strict = Policy {
            require_identity: true,
            ..Policy::default()
        };
        let a = answer(&review(rule(json!(2))), &served, &strict);
        assert!(a.ask.is_none());
        let m = a.review["response"]["status"]["message"].as_str().unwrap();
        assert!(
            m.contains("spec.serviceAccount: ") && m.contains("--require-identity"),
            "{m}"
        );
    }
}
