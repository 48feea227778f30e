//! The API server as the validator: an object sent as a server-side apply with
//! `dryRun=All`, so the API server's own validation (what no OpenAPI schema says: an
//! Ingress with no rules, a ConfigMap key with a `/`) and its admission webhooks and
//! policies judge it, and nothing is stored. Used by `ruleop check --against-cluster
//! --sample` and `ruleop test --server`; it needs the RBAC of the write itself.

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource};
use serde_json::Value;
use std::collections::HashMap;

/// One reason the API server gave, with the field it names (`spec.rules`, `data[a/b]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    pub field: String,
    pub message: String,
}

/// Why a dry-run apply did not go through.
#[derive(Debug, thiserror::Error)]
pub enum DryRunError {
    /// The API server (or an admission webhook or policy) refused the object.
    #[error("the API server refused it ({code} {reason}): {message}")]
    Refused {
        code: u16,
        reason: String,
        message: String,
        causes: Vec<Cause>,
    },
    /// Discovery does not know the kind: its CRD is not installed, or the API server does
    /// not serve that version.
    #[error("the cluster does not serve {api_version} {kind} (its CRD is not installed?)")]
    NotServed {
        api_version: String,
        kind: String,
        #[source]
        source: kube::Error,
    },
    /// The object's namespace does not exist in this cluster.
    #[error("namespace {0:?} does not exist in this cluster")]
    NoNamespace(String),
    /// The object lacks what names it.
    #[error("the object has no {0}")]
    Malformed(&'static str),
    /// No answer from the API server.
    #[error("could not reach the API server: {0}")]
    Unreachable(#[source] kube::Error),
}

/// Sends objects as dry-run applies, discovering each kind once.
pub struct DryRun {
    client: kube::Client,
    kinds: std::sync::Mutex<HashMap<(String, String), (ApiResource, ApiCapabilities)>>,
}

impl DryRun {
    pub fn new(client: kube::Client) -> DryRun {
        DryRun {
            client,
            kinds: Default::default(),
        }
    }

    /// The client's default namespace.
    pub fn default_namespace(&self) -> &str {
        self.client.default_namespace()
    }

    async fn kind(
        &self,
        api_version: &str,
        kind: &str,
    ) -> Result<(ApiResource, ApiCapabilities), DryRunError> {
        let key = (api_version.to_string(), kind.to_string());
        if let Some(k) = self.kinds.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(k);
        }
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let found = kube::discovery::pinned_kind(&self.client, &gvk)
            .await
            .map_err(|source| match source {
                kube::Error::Api(_) | kube::Error::Discovery(_) => DryRunError::NotServed {
                    api_version: api_version.to_string(),
                    kind: kind.to_string(),
                    source,
                },
                other => DryRunError::Unreachable(other),
            })?;
        if let Ok(mut m) = self.kinds.lock() {
            m.insert(key, found.clone());
        }
        Ok(found)
    }

    /// Sends `obj` as a forced server-side apply with `dryRun=All`, as field manager
    /// `manager`. A namespaced object with no namespace goes to the client's default one.
    pub async fn apply(&self, obj: &Value, manager: &str) -> Result<(), DryRunError> {
        dry_run_apply(self, obj, manager).await
    }
}

async fn dry_run_apply(dr: &DryRun, obj: &Value, manager: &str) -> Result<(), DryRunError> {
    let client = &dr.client;
    let api_version = obj["apiVersion"]
        .as_str()
        .ok_or(DryRunError::Malformed("apiVersion"))?;
    let kind = obj["kind"].as_str().ok_or(DryRunError::Malformed("kind"))?;
    let name = obj["metadata"]["name"]
        .as_str()
        .ok_or(DryRunError::Malformed("metadata.name"))?;
    let (ar, caps) = dr.kind(api_version, kind).await?;
    let api: Api<DynamicObject> = match caps.scope {
        kube::discovery::Scope::Namespaced => {
            let ns = obj["metadata"]["namespace"]
                .as_str()
                .unwrap_or(client.default_namespace());
            Api::namespaced_with(client.clone(), ns, &ar)
        }
        kube::discovery::Scope::Cluster => Api::all_with(client.clone(), &ar),
    };
    let params = PatchParams::apply(manager).force().dry_run();
    match api.patch(name, &params, &Patch::Apply(obj)).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s))
            if s.code == 404 && s.details.as_ref().is_some_and(|d| d.kind == "namespaces") =>
        {
            Err(DryRunError::NoNamespace(
                s.details
                    .as_ref()
                    .map(|d| d.name.clone())
                    .unwrap_or_default(),
            ))
        }
        Err(kube::Error::Api(s)) => Err(DryRunError::Refused {
            code: s.code,
            reason: s.reason.clone(),
            message: s.message.clone(),
            causes: s
                .details
                .as_ref()
                .map(|d| {
                    d.causes
                        .iter()
                        .map(|c| Cause {
                            field: c.field.clone(),
                            message: c.message.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }),
        Err(e) => Err(DryRunError::Unreachable(e)),
    }
}

/// An API server field path (`spec.tls[0].hosts[1]`, `data[a/b.html]`) as a rules file's
/// line index names it under `prefix` (`children[2].template`): list indexes stay, map keys
/// in brackets become dotted keys.
pub fn template_path(prefix: &str, field: &str) -> String {
    let mut out = prefix.to_string();
    let mut rest = field;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('[') {
            let end = after.find(']').unwrap_or(after.len());
            let key = &after[..end];
            if !key.is_empty() && key.bytes().all(|b| b.is_ascii_digit()) {
                out.push_str(&format!("[{key}]"));
            } else {
                out.push('.');
                out.push_str(key);
            }
            rest = after.get(end + 1..).unwrap_or("");
        } else {
            let rest_trim = rest.strip_prefix('.').unwrap_or(rest);
            let end = rest_trim.find(['.', '[']).unwrap_or(rest_trim.len());
            out.push('.');
            out.push_str(&rest_trim[..end]);
            rest = &rest_trim[end..];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::template_path;

    #[test]
    fn an_api_server_field_path_becomes_a_template_path() {
        let p = "children[1].template";
        assert_eq!(template_path(p, "spec"), "children[1].template.spec");
        assert_eq!(
            template_path(p, "spec.tls[0].hosts[1]"),
            "children[1].template.spec.tls[0].hosts[1]"
        );
        assert_eq!(
            template_path(p, "data[a/b.html]"),
            "children[1].template.data.a/b.html"
        );
        assert_eq!(
            template_path(p, "metadata.labels[app]"),
            "children[1].template.metadata.labels.app"
        );
        assert_eq!(template_path(p, ""), p);
        assert_eq!(
            template_path(p, "x[unclosed"),
            "children[1].template.x.unclosed"
        );
    }
}
