//! The validating admission webhook of Rules: `kubectl apply` of an invalid Rule is
//! refused with the check's message, each problem at its path in the Rule. Served over
//! HTTPS by every replica ([`serve`]) with certificates ruleop makes and renews itself
//! ([`certs`]), kept in a Secret; the leader writes the Secret and the
//! ValidatingWebhookConfiguration (its CA bundle included). Its `failurePolicy` is
//! `Ignore`: with ruleop down a Rule is stored, and its status says whether it is in force
//! once ruleop reads it; a stopped operator never blocks the cluster.

pub mod budget;
pub mod certs;
pub mod review;
pub mod serve;

use crate::client::Fence;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// How the webhook is served and reached.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where it listens.
    pub addr: SocketAddr,
    /// How the API server reaches it: a URL (`https://127.0.0.1:9443/validate-rules`),
    /// else the Service `namespace/name` (port 443).
    pub url: Option<String>,
    pub service: (String, String),
    /// The ValidatingWebhookConfiguration's name; the Secret is `<name>-webhook-tls`.
    pub name: String,
    /// ruleop's namespace (the Secret's).
    pub namespace: String,
    /// Only Rules with these labels (`k=v,k2=v2`) are reviewed (as `--rule-selector`).
    pub selector: Option<String>,
    /// This replica's identity (in the user agent of its reviews' requests).
    pub identity: String,
    /// Set to when the serving certificate in use ends (Unix seconds).
    pub expiry: prometheus_client::metrics::gauge::Gauge,
    /// The Secret is written by another (cert-manager): read only.
    pub external: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("--rule-selector {0:?}: the webhook takes only `key=value` pairs, comma-separated")]
    Selector(String),
}

/// How the API server reaches the conversion webhook (the CRDs of kinds with several
/// versions say so), and the CA it trusts it by, once the webhook has one.
#[derive(Debug, Clone)]
pub struct Hook {
    pub client_config: Value,
    pub ca: Arc<std::sync::RwLock<Option<String>>>,
}

impl Hook {
    /// The CA bundle (base64 PEM), once known.
    pub fn ca_bundle(&self) -> Option<String> {
        use base64::Engine as _;
        let ca = self.ca.read().ok()?.clone()?;
        Some(base64::engine::general_purpose::STANDARD.encode(ca))
    }
}

/// Where the API server posts conversions: the webhook's URL (`--webhook-url`) with the
/// conversion path, or its Service `(namespace, name)` (`--webhook-service`), port 443.
pub fn conversion_client_config(url: Option<&str>, service: &(String, String)) -> Value {
    match url {
        Some(url) => {
            let scheme_host = url
                .find("://")
                .and_then(|i| url[i + 3..].find('/').map(|j| &url[..i + 3 + j]))
                .unwrap_or(url);
            json!({"url": format!("{scheme_host}{}", crate::schema::crd::CONVERT_PATH)})
        }
        None => json!({"service": {"namespace": service.0, "name": service.1,
            "path": crate::schema::crd::CONVERT_PATH, "port": 443}}),
    }
}

impl Config {
    /// Where conversions are posted: the webhook's URL with the conversion path, or its
    /// Service.
    pub fn hook(&self) -> Hook {
        Hook {
            client_config: conversion_client_config(self.url.as_deref(), &self.service),
            ca: Arc::default(),
        }
    }

    /// The names the serving certificate is for.
    fn names(&self) -> Vec<String> {
        if let Some(url) = &self.url {
            let host = url
                .split("://")
                .nth(1)
                .unwrap_or(url)
                .split(['/', ':'])
                .next()
                .unwrap_or_default();
            return vec![host.to_string()];
        }
        let (ns, name) = &self.service;
        vec![
            format!("{name}.{ns}.svc"),
            format!("{name}.{ns}.svc.cluster.local"),
        ]
    }

    fn secret(&self) -> String {
        format!("{}-webhook-tls", self.name)
    }

    /// The selector as labels to match.
    fn match_labels(&self) -> Result<Option<BTreeMap<String, String>>, WebhookError> {
        let Some(s) = &self.selector else {
            return Ok(None);
        };
        s.split(',')
            .map(|pair| match pair.split_once('=') {
                Some((k, v)) if !k.trim().is_empty() && !v.contains(['!', '=']) => {
                    Ok((k.trim().to_string(), v.trim().to_string()))
                }
                _ => Err(WebhookError::Selector(s.clone())),
            })
            .collect::<Result<_, _>>()
            .map(Some)
    }

    /// The ValidatingWebhookConfiguration, with `ca` (PEM) as its CA bundle.
    fn configuration(&self, ca: &str) -> Result<Value, WebhookError> {
        use base64::Engine as _;
        let bundle = base64::engine::general_purpose::STANDARD.encode(ca);
        let client = match &self.url {
            Some(url) => json!({"url": url, "caBundle": bundle}),
            None => json!({"service": {"namespace": self.service.0, "name": self.service.1,
                "path": serve::PATH, "port": 443}, "caBundle": bundle}),
        };
        let mut hook = json!({
            "name": HOOK,
            "clientConfig": client,
            "rules": [{"apiGroups": [crate::rules::object::GROUP], "apiVersions": ["*"],
                       "operations": ["CREATE", "UPDATE"], "resources": [crate::rules::object::PLURAL],
                       "scope": "Cluster"}],
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 5,
        });
        if let Some(labels) = self.match_labels()? {
            hook["objectSelector"] = json!({"matchLabels": labels});
        }
        Ok(json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": {"name": self.name, "labels": {"app.kubernetes.io/name": "ruleop"}},
            "webhooks": [hook],
        }))
    }
}

/// Starts the webhook: listens now, serves once it has a certificate, and keeps the
/// certificates and the configuration (the leader writes them; every replica serves what
/// the Secret holds).
pub async fn start(
    cfg: Config,
    client: kube::Client,
    fence: Arc<Fence>,
    served: Arc<review::Served>,
    policy: crate::rules::policy::Policy,
    hook: Hook,
) -> Result<Vec<tokio::task::JoinHandle<()>>, WebhookError> {
    cfg.match_labels()?;
    let listener = std::net::TcpListener::bind(cfg.addr)
        .and_then(|l| l.set_nonblocking(true).map(|()| l))
        .map_err(|source| WebhookError::Listen {
            addr: cfg.addr,
            source,
        })?;
    let current = Arc::new(serve::Current::default());
    let identity = cfg.identity.clone();
    // Reviews run on a runtime of their own: a burst of Rules to compile never delays the
    // Lease's renewal or a reconcile.
    let serving_current = current.clone();
    std::thread::Builder::new()
        .name("ruleop-webhook".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("ruleop-webhook")
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::error!(error = %e, "the webhook's runtime did not start");
                    return;
                }
            };
            rt.block_on(async move {
                // Its own client, on its own runtime: a standby answers reviews too (the
                // leader fence would stop its SubjectAccessReviews), and a burst of them
                // never waits in the reconciles' token bucket.
                let client = loop {
                    match crate::client::unguarded(&identity).await {
                        Ok(c) => break c,
                        Err(e) => {
                            tracing::warn!(error = %e, "the webhook's client could not be made; retrying");
                            tokio::time::sleep(Duration::from_secs(2)).await;
                        }
                    }
                };
                let reviewer = Arc::new(serve::Reviewer {
                    served,
                    policy,
                    client,
                    budget: budget::Budget::new(),
                });
                match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => serve::serve(l, serving_current, reviewer).await,
                    Err(e) => tracing::error!(error = %e, "the webhook cannot listen"),
                }
            });
        })
        .map_err(|source| WebhookError::Listen {
            addr: cfg.addr,
            source,
        })?;
    let keeping = tokio::spawn(keep(cfg, client, fence, current, hook));
    Ok(vec![keeping])
}

/// Every minute (every two seconds until it serves): the certificates renewed when due and
/// the configuration written (by the leader), the serving certificate taken from the Secret.
async fn keep(
    cfg: Config,
    client: kube::Client,
    fence: Arc<Fence>,
    current: Arc<serve::Current>,
    hook: Hook,
) {
    let mut served: Option<String> = None;
    loop {
        let got = round(&cfg, &client, &fence).await;
        if let (Ok(Some(c)), Ok(mut ca)) = (&got, hook.ca.write()) {
            *ca = Some(c.ca_cert.clone());
        }
        match got {
            Ok(Some(c)) if served.as_deref() != Some(c.cert.as_str()) => {
                match current.set(&c.cert, &c.key) {
                    Ok(()) => {
                        tracing::info!(not_after = %c.not_after, "webhook serving certificate in use");
                        cfg.expiry.set(c.not_after.unix_timestamp());
                        served = Some(c.cert);
                    }
                    Err(e) => tracing::warn!(error = %e, "webhook certificate not usable"),
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "webhook certificates or configuration not written; retrying")
            }
        }
        let wait = if current.is_set() { 60 } else { 2 };
        tokio::time::sleep(Duration::from_secs(wait)).await;
    }
}

fn decode(s: &Secret) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let data = s
        .data
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), String::from_utf8_lossy(&v.0).into_owned()))
        .collect();
    (data, s.metadata.annotations.clone().unwrap_or_default())
}

/// One round: the Secret read (and, by the leader, renewed and the configuration
/// written); the certificates to serve, once there are some.
async fn round(
    cfg: &Config,
    client: &kube::Client,
    fence: &Fence,
) -> Result<Option<certs::Certs>, Box<dyn std::error::Error + Send + Sync>> {
    let api: Api<Secret> = Api::namespaced(client.clone(), &cfg.namespace);
    let secret = api.get_opt(&cfg.secret()).await?;
    if cfg.external {
        let Some(s) = &secret else {
            return Err(format!("the Secret {}/{} is not there yet (--webhook-certificates=external: its Certificate writes it)", cfg.namespace, cfg.secret()).into());
        };
        let have = certs::from_external_secret(&decode(s).0)?;
        if fence.holds() {
            configure(cfg, client, &have.ca_cert).await?;
        }
        return Ok(Some(have));
    }
    let have = secret.as_ref().and_then(|s| {
        let (data, ann) = decode(s);
        certs::from_secret(&data, &ann).ok()
    });
    if !fence.holds() {
        return Ok(have);
    }
    let now = time::OffsetDateTime::now_utc();
    let certs = match certs::renew(have.as_ref(), &cfg.names(), now)? {
        None => have,
        Some(new) => {
            write_secret(&api, cfg, secret, &new).await?;
            tracing::info!(names = %new.names.join(","), "webhook certificates made");
            Some(new)
        }
    };
    if let Some(c) = &certs {
        configure(cfg, client, &c.ca_cert).await?;
    }
    Ok(certs)
}

fn configurations(client: &kube::Client) -> Api<DynamicObject> {
    let ar = ApiResource {
        group: "admissionregistration.k8s.io".into(),
        version: "v1".into(),
        api_version: "admissionregistration.k8s.io/v1".into(),
        kind: "ValidatingWebhookConfiguration".into(),
        plural: "validatingwebhookconfigurations".into(),
    };
    Api::all_with(client.clone(), &ar)
}

/// Deletes the ValidatingWebhookConfiguration `name` if it still sends reviews to `url`
/// (this process's: none will answer there once it exits), as it stood when read (another
/// run that took it over meanwhile keeps it). True when deleted.
pub async fn remove_configuration(
    client: &kube::Client,
    name: &str,
    url: &str,
) -> Result<bool, kube::Error> {
    let vwcs = configurations(client);
    let Some(live) = vwcs.get_opt(name).await? else {
        return Ok(false);
    };
    let ours = live.data["webhooks"]
        .as_array()
        .is_some_and(|w| w.iter().all(|h| h["clientConfig"]["url"] == url));
    if !ours {
        return Ok(false);
    }
    let dp = kube::api::DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: live.metadata.uid.clone(),
            resource_version: live.metadata.resource_version.clone(),
        }),
        ..Default::default()
    };
    match vwcs.delete(name, &dp).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Keeps the ValidatingWebhookConfiguration saying what `cfg` says, with `ca` as its CA
/// bundle. Written only when it says something else (nothing in steady state). The one
/// `deploy/` ships (`webhook.yaml`) differs only by its CA bundle: that field alone is
/// written, so ruleop needs `patch` on that one configuration and never `create`. One that
/// is not there is created (a local run with an admin's kubeconfig); one that says
/// something else (another URL, another selector) is written whole.
async fn configure(
    cfg: &Config,
    client: &kube::Client,
    ca: &str,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let vwc = cfg.configuration(ca)?;
    let vwcs = configurations(client);
    let Some(live) = vwcs
        .get_opt(&cfg.name)
        .await?
        .and_then(|o| serde_json::to_value(o).ok())
    else {
        let obj: DynamicObject = serde_json::from_value(vwc)?;
        return match vwcs.create(&PostParams::default(), &obj).await {
            Err(kube::Error::Api(e)) if e.code == 403 => Err(format!(
                "the ValidatingWebhookConfiguration {} is not there and ruleop may not create it: apply deploy/webhook.yaml (named as --webhook-name)",
                cfg.name
            )
            .into()),
            r => r.map(|_| ()).map_err(Into::into),
        };
    };
    if crate::apply::project(&vwc, &live) == vwc {
        return Ok(());
    }
    let mut without_ca = vwc.clone();
    without_ca["webhooks"][0]["clientConfig"]
        .as_object_mut()
        .map(|c| c.remove("caBundle"));
    let (manager, patch) = if crate::apply::project(&without_ca, &live) == without_ca {
        let bundle = vwc["webhooks"][0]["clientConfig"]["caBundle"].clone();
        let only_ca = json!({"apiVersion": vwc["apiVersion"], "kind": vwc["kind"],
            "metadata": {"name": cfg.name},
            "webhooks": [{"name": HOOK, "clientConfig": {"caBundle": bundle}}]});
        (CA_MANAGER, only_ca)
    } else {
        (crate::render::FIELD_MANAGER, vwc)
    };
    let params = PatchParams::apply(manager).force();
    vwcs.patch(&cfg.name, &params, &Patch::Apply(&patch))
        .await?;
    Ok(())
}

/// The webhook's name in its configuration.
const HOOK: &str = "rules.ruleop.dev";
/// The field manager of the CA bundle alone.
const CA_MANAGER: &str = "ruleop-webhook-ca";

/// Writes the Secret holding `c`: created, or replaced if it is still the one read
/// (another replica's write in between is a conflict: the next round reads it).
async fn write_secret(
    api: &Api<Secret>,
    cfg: &Config,
    old: Option<Secret>,
    c: &certs::Certs,
) -> Result<(), kube::Error> {
    let (data, annotations) = certs::to_secret(c);
    let mut s = old.unwrap_or_default();
    s.metadata.name = Some(cfg.secret());
    s.metadata.namespace = Some(cfg.namespace.clone());
    s.metadata.annotations = Some(annotations);
    s.type_ = Some("kubernetes.io/tls".into());
    s.data = Some(
        data.into_iter()
            .map(|(k, v)| (k, ByteString(v.into_bytes())))
            .collect(),
    );
    if s.metadata.resource_version.is_some() {
        api.replace(&cfg.secret(), &PostParams::default(), &s)
            .await?;
    } else {
        api.create(&PostParams::default(), &s).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployed() -> Config {
        Config {
            addr: "0.0.0.0:9443".parse().unwrap(),
            url: None,
            service: ("ruleop-system".into(), "ruleop-webhook".into()),
            name: "ruleop".into(),
            namespace: "ruleop-system".into(),
            selector: None,
            identity: "test".into(),
            expiry: Default::default(),
            external: false,
        }
    }

    #[test]
    fn the_shipped_configuration_is_what_ruleop_writes_but_its_ca_bundle() {
        let mut want = deployed().configuration("CA").unwrap();
        want["webhooks"][0]["clientConfig"]
            .as_object_mut()
            .unwrap()
            .remove("caBundle");
        let shipped: Value =
            serde_yaml::from_str(include_str!("../../../deploy/webhook.yaml")).unwrap();
        assert_eq!(
            shipped, want,
            "deploy/webhook.yaml says something else than ruleop writes"
        );
    }
}
