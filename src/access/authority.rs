//! Who may write a Rule. A Rule directs ruleop, which holds more rights than most of the
//! people who may write Rules, so its author must hold, in the cluster's own RBAC, the
//! right the Rule would use:
//!
//! - a Rule that names a `serviceAccount` runs as that account: its author must be allowed
//!   to `impersonate` it (as `kubectl --as` needs);
//! - a Rule that names none runs with ruleop's own rights: its author must be allowed to
//!   `escalate` on that Rule (`rules.ruleop.dev`, as `escalate` on a Role is what lets one
//!   grant rights one does not hold). Cluster admins are; a namespace's users are not.
//!
//! - a Rule with a `schema` has ruleop apply its kind's CRD (and convert its versions): its
//!   author must be allowed to `update` that CRD by name, as applying it would need.
//!
//! The same check runs in three places: the webhook (each Rule written, with the author
//! from the AdmissionReview), the ValidatingAdmissionPolicy shipped in `deploy/` (in the
//! API server, so it holds while ruleop is down), and `ruleop check --against-cluster --as`.

use crate::rules::Identity;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use serde_json::Value;
use std::collections::BTreeMap;

/// Who asks: the user of an admission request (its `userInfo`), or `--as`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requester {
    pub user: String,
    pub groups: Vec<String>,
    pub uid: Option<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl Requester {
    /// The requester of an AdmissionReview's `request.userInfo`; None without a user name.
    pub fn from_user_info(info: &Value) -> Option<Requester> {
        let user = info["username"].as_str().filter(|u| !u.is_empty())?;
        let strings = |v: &Value| -> Vec<String> {
            v.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|s| s.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default()
        };
        Some(Requester {
            user: user.to_string(),
            groups: strings(&info["groups"]),
            uid: info["uid"].as_str().map(str::to_string),
            extra: info["extra"]
                .as_object()
                .map(|m| m.iter().map(|(k, v)| (k.clone(), strings(v))).collect())
                .unwrap_or_default(),
        })
    }
}

/// The right the author of a Rule must hold, and what to say if they do not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Demand {
    pub group: String,
    pub resource: String,
    pub namespace: Option<String>,
    pub name: String,
    pub verb: String,
    /// The Rule's field it comes from (`spec.serviceAccount`, `spec`).
    pub path: &'static str,
}

/// What writing Rule `rule`, running as `identity`, demands of its author.
pub fn demand(rule: &str, identity: Option<&Identity>) -> Demand {
    match identity {
        Some(id) => Demand {
            group: String::new(),
            resource: "serviceaccounts".into(),
            namespace: Some(id.namespace.clone()),
            name: id.name.clone(),
            verb: "impersonate".into(),
            path: "spec.serviceAccount",
        },
        None => Demand {
            group: crate::rules::object::GROUP.into(),
            resource: crate::rules::object::PLURAL.into(),
            namespace: None,
            name: rule.to_string(),
            verb: "escalate".into(),
            path: "spec",
        },
    }
}

/// The CRD group and resource a Rule's `schema` has ruleop apply.
const CRDS: (&str, &str) = ("apiextensions.k8s.io", "customresourcedefinitions");

/// Everything writing `rule` as a Rule demands of its author: who it runs as
/// ([`demand`]), and, for a rule whose `schema` ruleop applies as a CRD (its versions,
/// its conversion through ruleop's webhook, `--install-crds`), `update` on that CRD by
/// name: serving a kind takes the right Kubernetes would ask to define it.
pub fn demands(rule: &crate::rules::CompiledRule) -> Vec<Demand> {
    let mut out = vec![demand(&rule.name, rule.identity.as_ref())];
    if let Some(crd) = rule.crd_name() {
        out.push(Demand {
            group: CRDS.0.into(),
            resource: CRDS.1.into(),
            namespace: None,
            name: crd.to_string(),
            verb: "update".into(),
            path: "spec.schema",
        });
    }
    out
}

impl Demand {
    /// The refusal of `who`, with the fix.
    pub fn refusal(&self, who: &str) -> String {
        if (self.group.as_str(), self.resource.as_str()) == CRDS {
            return format!(
                "{}: the Rule has ruleop apply the CRD {} (its schema, versions and conversion), and {who} may not `update` customresourcedefinitions/{}\n  fix: leave `schema` out and have the CRD applied by whoever owns the kind, or be granted `update` on customresourcedefinitions named {}",
                self.path, self.name, self.name, self.name
            );
        }
        match self.namespace.as_deref() {
            Some(ns) => format!(
                "{}: {who} may not impersonate ServiceAccount {ns}/{}, and a Rule runs as the account it names\n  fix: name an account you may impersonate, or be granted `impersonate` on serviceaccounts/{} in namespace {ns}",
                self.path, self.name, self.name
            ),
            None => format!(
                "{}: the Rule names no serviceAccount, so it would run with ruleop's own rights, and {who} may not `escalate` on rules.ruleop.dev/{}\n  fix: add `serviceAccount: {{name: <account>, namespace: <namespace>}}` naming an account you may impersonate that holds what the rule needs (`ruleop rbac --per-rule` prints its RBAC), or have a cluster admin write it",
                self.path, self.name
            ),
        }
    }
}

/// Whether `who` holds `demand`, as the API server's authorizers answer (a
/// SubjectAccessReview). Some(reason) when denied.
pub async fn denied(
    client: &kube::Client,
    who: &Requester,
    demand: &Demand,
) -> Result<Option<String>, kube::Error> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(who.user.clone()),
            groups: Some(who.groups.clone()),
            uid: who.uid.clone(),
            extra: (!who.extra.is_empty()).then(|| who.extra.clone()),
            resource_attributes: Some(ResourceAttributes {
                group: Some(demand.group.clone()),
                resource: Some(demand.resource.clone()),
                namespace: demand.namespace.clone(),
                name: Some(demand.name.clone()),
                verb: Some(demand.verb.clone()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let answer = api.create(&PostParams::default(), &review).await?;
    let status = answer.status.unwrap_or_default();
    Ok((!status.allowed).then(|| demand.refusal(&who.user)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_rule_with_an_account_demands_impersonating_it_and_one_without_demands_escalate() {
        let id = Identity {
            name: "web".into(),
            namespace: "team-a".into(),
        };
        let d = demand("site", Some(&id));
        assert_eq!(
            (d.resource.as_str(), d.verb.as_str(), d.namespace.as_deref()),
            ("serviceaccounts", "impersonate", Some("team-a"))
        );
        assert!(
            d.refusal("alice")
                .contains("alice may not impersonate ServiceAccount team-a/web")
        );
        let d = demand("site", None);
        assert_eq!(
            (
                d.group.as_str(),
                d.resource.as_str(),
                d.verb.as_str(),
                d.name.as_str()
            ),
            ("ruleop.dev", "rules", "escalate", "site")
        );
        assert!(d.refusal("alice").contains("fix: add `serviceAccount:"));
    }

    #[test]
    fn a_rule_with_a_schema_demands_updating_its_crd_by_name() {
        let web = crate::rules::testing::website();
        let d = demands(&web);
        assert_eq!(d.len(), 2, "{d:?}");
        assert_eq!(
            (
                d[1].group.as_str(),
                d[1].resource.as_str(),
                d[1].name.as_str(),
                d[1].verb.as_str()
            ),
            (
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                "websites.sre.example.com",
                "update"
            )
        );
        assert!(
            d[1].refusal("alice").contains(
                "alice may not `update` customresourcedefinitions/websites.sre.example.com"
            )
        );
        let plain = crate::rules::testing::rule(
            "name: p\nwatch: {group: x.io, version: v1, resource: ps}\n",
        );
        assert_eq!(demands(&plain).len(), 1);
    }

    #[test]
    fn the_requester_is_read_from_user_info() {
        let r = Requester::from_user_info(&json!({"username": "alice", "uid": "u1",
            "groups": ["team-a", "system:authenticated"], "extra": {"scopes": ["x"]}}))
        .unwrap();
        assert_eq!(r.user, "alice");
        assert_eq!(r.groups.len(), 2);
        assert_eq!(r.extra["scopes"], vec!["x".to_string()]);
        assert!(Requester::from_user_info(&json!({})).is_none());
    }
}
