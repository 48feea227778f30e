//! `ruleop run --install-crds`: each rule's CRD (made from its `schema`) is created, or
//! updated when the change is additive; a change that would break the resources stored
//! under the CRD the cluster serves is refused, with its reasons, and the old CRD keeps
//! serving. Done when a rule starts, so a rule edited live installs its new CRD; the Rule
//! kind's own CRD is applied the same way when ruleop starts (Helm installs a chart's CRDs
//! only once and never upgrades them).

use crate::client::Fence;
use crate::render::FIELD_MANAGER;
use crate::rules::CompiledRule;
use crate::schema::evolve::{Breaking, breaking_changes};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::discovery::ApiResource;
use kube::{Client, ResourceExt};
use serde_json::Value;

/// Why a CRD was not installed.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    #[error("the new CRD {name} would break what the cluster stores: {}; the CRD the cluster serves is kept (make the change additive, or migrate the resources first)", list(.changes))]
    Breaking {
        name: String,
        changes: Vec<Breaking>,
    },
    #[error("not the leader: the CRD was not written")]
    NotLeader,
    #[error(
        "the CRD {name} has several versions, converted by ruleop's webhook, which this ruleop does not serve: run it with --webhook-addr (and --webhook-url or --webhook-service) so that the API server can convert them"
    )]
    NoWebhook { name: String },
    #[error(
        "the CRD {name} waits for the webhook's certificate, which its conversion webhook is trusted by"
    )]
    NoCertificate { name: String },
    #[error("installing the CRD {name}: {source}")]
    Api {
        name: String,
        #[source]
        source: kube::Error,
    },
}

fn list(changes: &[Breaking]) -> String {
    changes
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// What became of a rule's CRD.
#[derive(Debug, PartialEq, Eq)]
pub enum Installed {
    /// The rule has no `schema`.
    NoSchema,
    Created,
    /// Applied over the served one (an additive change, or none).
    Applied,
}

/// The stored resources of the kind the served CRD defines, as they read in each version
/// objects may be stored in (`status.storedVersions`; unknown: every version): an object
/// stored in a version is among those listed in it, so a field one of them holds there
/// counts as used (listed in the storage version alone, every other version's objects
/// would read as that one's). None when they cannot all be listed (a stored version no
/// longer served): then every removed field counts as used.
async fn stored(client: &Client, old: &Value) -> Option<Vec<Value>> {
    let spec = &old["spec"];
    let versions = spec["versions"].as_array()?;
    let group = spec["group"].as_str()?;
    let kind = spec["names"]["kind"].as_str()?;
    let plural = spec["names"]["plural"].as_str()?;
    let names: Vec<&str> = match old["status"]["storedVersions"].as_array() {
        Some(s) => s.iter().filter_map(Value::as_str).collect(),
        None => versions.iter().filter_map(|v| v["name"].as_str()).collect(),
    };
    let mut all = Vec::new();
    for version in names {
        let served = versions
            .iter()
            .any(|v| v["name"] == version && v["served"] == true);
        if !served {
            return None;
        }
        let ar = ApiResource {
            group: group.into(),
            version: version.into(),
            api_version: format!("{group}/{version}"),
            kind: kind.into(),
            plural: plural.into(),
        };
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &ar);
        let objects = api.list(&ListParams::default()).await.ok()?;
        all.extend(
            objects
                .items
                .iter()
                .filter_map(|o| serde_json::to_value(o).ok()),
        );
    }
    Some(all)
}

/// The changes from the CRD the cluster serves to `new` that would break what it stores
/// (none when the cluster has no such CRD).
pub async fn against_cluster(client: &Client, new: &Value) -> Result<Vec<Breaking>, kube::Error> {
    let old = served(client, new).await?;
    Ok(breaking(client, old.as_ref(), new).await)
}

/// The CRD of `new`'s name the cluster serves, if any.
async fn served(client: &Client, new: &Value) -> Result<Option<Value>, kube::Error> {
    let name = new["metadata"]["name"].as_str().unwrap_or_default();
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    Ok(api
        .get_opt(name)
        .await?
        .map(|old| serde_json::to_value(&old).unwrap_or_default()))
}

/// The breaking changes from the served CRD `old` (none when there is none) to `new`.
async fn breaking(client: &Client, old: Option<&Value>, new: &Value) -> Vec<Breaking> {
    match old {
        Some(old) => breaking_changes(old, new, stored(client, old).await.as_deref()),
        None => Vec::new(),
    }
}

/// Creates or updates the CRD `new`, refusing a breaking change; the stored resources of
/// the kind are read with `reader` (a rule's client: as its ServiceAccount when it names
/// one). Only the leader reads or writes anything.
pub async fn install(
    client: &Client,
    reader: &Client,
    new: &Value,
    fence: &Fence,
) -> Result<Installed, CrdError> {
    if !fence.holds() {
        return Err(CrdError::NotLeader);
    }
    let name = new["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let err = |source| CrdError::Api {
        name: name.clone(),
        source,
    };
    let old = served(client, new).await.map_err(err)?;
    let created = old.is_none();
    let changes = breaking(reader, old.as_ref(), new).await;
    if !changes.is_empty() {
        return Err(CrdError::Breaking { name, changes });
    }
    if !fence.holds() {
        return Err(CrdError::NotLeader);
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    let applied = api
        .patch(&name, &params, &Patch::Apply(new))
        .await
        .map_err(err)?;
    tracing::info!(crd = %applied.name_any(), created, "CRD installed");
    Ok(if created {
        Installed::Created
    } else {
        Installed::Applied
    })
}

/// Installs the CRD of `rule` (nothing for a rule with no `schema`).
pub async fn install_rule(
    client: &Client,
    reader: &Client,
    rule: &CompiledRule,
    fence: &Fence,
) -> Result<Installed, CrdError> {
    match &rule.crd {
        Some(new) => install(client, reader, new, fence).await,
        None => Ok(Installed::NoSchema),
    }
}

/// Whether `crd` says its versions convert through a webhook.
fn converted(crd: &Value) -> bool {
    crd["spec"]["conversion"]["strategy"] == "Webhook"
}

/// `crd` with its conversion webhook where ruleop serves it (unchanged with one version).
pub fn converted_by(crd: &Value, hook: Option<&super::webhook::Hook>) -> Result<Value, CrdError> {
    if !converted(crd) {
        return Ok(crd.clone());
    }
    let name = crd["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let hook = hook.ok_or_else(|| CrdError::NoWebhook { name: name.clone() })?;
    let ca = hook.ca_bundle().ok_or(CrdError::NoCertificate { name })?;
    Ok(crate::schema::crd::with_conversion(
        crd.clone(),
        hook.client_config.clone(),
        Some(&ca),
    ))
}

/// How long to wait before trying again after `failure`, the `attempt`-th in a row: an
/// API error backs off from 1 s, doubling, to 5 min; a refused change is looked at again
/// every 5 min (the stored resources may have been migrated since).
pub fn retry_after(failure: &CrdError, attempt: u32) -> std::time::Duration {
    const MAX: u64 = 300;
    let secs = match failure {
        CrdError::Breaking { .. } => MAX,
        // A standby asks nothing: it looks again soon, to be quick once it leads.
        CrdError::NotLeader | CrdError::NoCertificate { .. } => 2,
        _ => 2u64.saturating_pow(attempt.min(16)).min(MAX),
    };
    std::time::Duration::from_secs(secs)
}

/// Installs the CRD `new` (see [`install`]), trying again while it fails (see
/// [`retry_after`]). Each failure unlike the one before is reported once through `failed`
/// (not leading is no failure); runs until done, or until dropped.
pub async fn keep_installing(
    client: Client,
    reader: Client,
    new: Value,
    hook: Option<super::webhook::Hook>,
    fence: std::sync::Arc<Fence>,
    failed: impl Fn(&CrdError),
) {
    let mut last = None;
    let mut attempt = 0;
    loop {
        let done = match converted_by(&new, hook.as_ref()) {
            Ok(crd) => install(&client, &reader, &crd, &fence).await,
            Err(e) => Err(e),
        };
        let e = match done {
            // A CRD converted by ruleop's webhook is written again when the webhook's CA
            // changes (a new Secret): the API server must trust the new certificate.
            Ok(_) => match hook.as_ref().filter(|_| converted(&new)) {
                Some(h) => {
                    let used = h.ca_bundle();
                    while h.ca_bundle() == used {
                        tokio::time::sleep(std::time::Duration::from_secs(15)).await;
                    }
                    continue;
                }
                None => return,
            },
            Err(e) => e,
        };
        let text = e.to_string();
        if last.as_ref() != Some(&text)
            && !matches!(e, CrdError::NotLeader | CrdError::NoCertificate { .. })
        {
            failed(&e);
            // A new failure starts its backoff afresh.
            attempt = 0;
            last = Some(text);
        }
        tokio::time::sleep(retry_after(&e, attempt)).await;
        attempt = attempt.saturating_add(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_error_backs_off_doubling_a_refusal_waits_five_minutes_and_a_standby_two_seconds() {
        let status: kube::core::Status = serde_json::from_value(
            serde_json::json!({"status": "Failure", "code": 500, "message": "etcd timeout"}),
        )
        .unwrap();
        let api = CrdError::Api {
            name: "x".into(),
            source: kube::Error::Api(Box::new(status)),
        };
        let waits: Vec<u64> = (0..12).map(|n| retry_after(&api, n).as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        let refused = CrdError::Breaking {
            name: "x".into(),
            changes: Vec::new(),
        };
        assert_eq!(retry_after(&refused, 0), Duration::from_secs(300));
        assert_eq!(retry_after(&api, u32::MAX), Duration::from_secs(300));
        assert_eq!(retry_after(&CrdError::NotLeader, 9), Duration::from_secs(2));
    }
}
