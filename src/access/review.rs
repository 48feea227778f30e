//! The pre-flight check: before a rule with a ServiceAccount starts, every permission it
//! needs is asked of the API server as that account (a SelfSubjectAccessReview sent by
//! impersonation, which any authenticated account may send), so a missing one stops that
//! rule, with the RBAC that would grant it, before it touches anything.

use super::{Permissions, policy_rules};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use serde::Serialize;
use std::collections::BTreeSet;

/// A permission the account lacks.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Missing {
    pub api_group: String,
    /// The resource, with its subresource (`websites/status`).
    pub resource: String,
    pub verb: String,
    /// None: in every namespace (or a cluster-scoped kind).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

impl std::fmt::Display for Missing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.api_group.is_empty() {
            "core"
        } else {
            &self.api_group
        };
        write!(f, "{} {} ({group})", self.verb, self.resource)?;
        match &self.namespace {
            Some(ns) => write!(f, " in namespace {ns}"),
            None => write!(f, " in every namespace"),
        }
    }
}

/// What the API server answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Review {
    /// The account holds every permission.
    Granted,
    /// These it lacks.
    Missing(Vec<Missing>),
    /// ruleop itself may not act as the account (no `impersonate` on it): the API server's
    /// message.
    CannotImpersonate(String),
}

/// How many reviews are in flight at once.
const AT_ONCE: usize = 8;

/// Asks, as the account `client` acts as, for every verb of `perms` in `namespace` (None:
/// every namespace); `cluster_scoped` resources are asked without a namespace.
pub async fn review(
    client: &kube::Client,
    perms: &Permissions,
    namespace: Option<&str>,
    cluster_scoped: &BTreeSet<(String, String)>,
) -> Result<Review, kube::Error> {
    let asks: Vec<Missing> = perms
        .iter()
        .flat_map(|((group, resource), verbs)| {
            let ns = (!cluster_scoped.contains(&(group.clone(), resource.clone())))
                .then(|| namespace.map(str::to_string))
                .flatten();
            verbs.iter().map(move |v| Missing {
                api_group: group.clone(),
                resource: resource.clone(),
                verb: v.to_string(),
                namespace: ns.clone(),
            })
        })
        .collect();
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let answers = futures::stream::iter(asks.into_iter().map(|ask| {
        let api = api.clone();
        async move {
            let allowed = ask_one(&api, &ask).await?;
            Ok::<_, kube::Error>((ask, allowed))
        }
    }))
    .buffer_unordered(AT_ONCE)
    .try_collect::<Vec<_>>()
    .await;
    let answers = match answers {
        Ok(a) => a,
        Err(kube::Error::Api(e)) if e.code == 403 => {
            return Ok(Review::CannotImpersonate(e.message));
        }
        Err(e) => return Err(e),
    };
    let mut missing: Vec<Missing> = answers
        .into_iter()
        .filter(|(_, allowed)| !allowed)
        .map(|(m, _)| m)
        .collect();
    missing.sort();
    Ok(if missing.is_empty() {
        Review::Granted
    } else {
        Review::Missing(missing)
    })
}

async fn ask_one(api: &Api<SelfSubjectAccessReview>, ask: &Missing) -> Result<bool, kube::Error> {
    let (resource, subresource) = match ask.resource.split_once('/') {
        Some((r, s)) => (r.to_string(), Some(s.to_string())),
        None => (ask.resource.clone(), None),
    };
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(ask.api_group.clone()),
                resource: Some(resource),
                subresource,
                verb: Some(ask.verb.clone()),
                namespace: ask.namespace.clone(),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = api.create(&PostParams::default(), &review).await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// The RBAC rules that would grant `missing`.
pub fn grant(missing: &[Missing]) -> Vec<serde_json::Value> {
    let mut p = Permissions::new();
    for m in missing {
        if let Some(verb) = super::CHILD
            .iter()
            .chain(super::STATUS)
            .chain(super::EVENTS)
            .chain(super::FINALIZERS)
            .find(|v| **v == m.verb)
        {
            p.entry((m.api_group.clone(), m.resource.clone()))
                .or_default()
                .insert(verb);
        }
    }
    policy_rules(&p)
}

/// One line for a log or a condition: what the account `who` lacks and what grants it.
pub fn describe(who: &str, missing: &[Missing]) -> String {
    let list: Vec<String> = missing.iter().map(|m| m.to_string()).collect();
    let rules: Vec<String> = grant(missing)
        .iter()
        .map(|r| serde_json::to_string(r).unwrap_or_default())
        .collect();
    let role = if missing.iter().all(|m| m.namespace.is_some()) {
        "a Role in that namespace"
    } else {
        "a ClusterRole"
    };
    format!(
        "the ServiceAccount {who} may not {}; grant it with {role} bound to it holding {} (`ruleop rbac --per-rule` prints the whole of it)",
        list.join(", "),
        rules.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(group: &str, resource: &str, verb: &str, ns: Option<&str>) -> Missing {
        Missing {
            api_group: group.into(),
            resource: resource.into(),
            verb: verb.into(),
            namespace: ns.map(str::to_string),
        }
    }

    #[test]
    fn a_missing_permission_is_said_with_the_rule_that_grants_it() {
        let missing = [
            m("", "services", "create", Some("shop")),
            m("", "services", "delete", Some("shop")),
        ];
        let text = describe("team-a/web", &missing);
        assert!(
            text.contains("create services (core) in namespace shop"),
            "{text}"
        );
        assert!(text.contains("a Role in that namespace"), "{text}");
        assert!(
            text.contains(
                r#"{"apiGroups":[""],"resources":["services"],"verbs":["create","delete"]}"#
            ),
            "{text}"
        );
        let text = describe("team-a/web", &[m("apps", "deployments", "list", None)]);
        assert!(
            text.contains("list deployments (apps) in every namespace"),
            "{text}"
        );
        assert!(text.contains("a ClusterRole"), "{text}");
    }
}
