//! The conversion webhook's CA, kept in the CRDs ruleop does not install (applied by
//! GitOps from `ruleop crd`): while a rule of a kind in several versions runs without
//! `--install-crds`, the leader writes ruleop's CA into its CRD's
//! `spec.conversion.webhook.clientConfig.caBundle`, if the CRD sends its conversions to
//! ruleop's webhook (the same Service or URL) and does not trust that CA yet. One watch of
//! the CRD: nothing asked in steady state.

use super::webhook::Hook;
use crate::client::Fence;
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// How often the CA in memory and the leadership are looked at (nothing is asked).
const LOOK: Duration = Duration::from_secs(15);

/// Keeps ruleop's CA in CRD `name` while the rule runs.
pub async fn keep(client: kube::Client, name: String, hook: Hook, fence: Arc<Fence>) {
    let api: Api<CustomResourceDefinition> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut changes = watcher(api.clone(), config)
        .default_backoff()
        .applied_objects()
        .boxed();
    let mut last: Option<Value> = None;
    // The CA bundle ruleop replaced last, and its own it wrote: the same one put back
    // (a GitOps tool restoring its manifest) is not fought over.
    let mut replaced: Option<(Value, String)> = None;
    let mut warned = false;
    let mut look = tokio::time::interval(LOOK);
    loop {
        tokio::select! {
            change = changes.next() => match change {
                Some(Ok(crd)) => last = serde_json::to_value(crd).ok(),
                Some(Err(_)) => continue,
                None => return,
            },
            _ = look.tick() => {}
        }
        let (Some(crd), Some(ca)) = (&last, hook.ca_bundle()) else {
            continue;
        };
        let Some(patch) = needed(crd, &hook.client_config, &ca).filter(|_| fence.holds()) else {
            continue;
        };
        let theirs = crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"].clone();
        if replaced.as_ref() == Some(&(theirs.clone(), ca.clone())) {
            if !warned {
                tracing::warn!(crd = %name, "another writer put its caBundle back into the CRD's conversion webhook: conversions fail until the CRD trusts ruleop's CA (the ca.crt of its webhook Secret); ruleop does not write it again until its CA changes (a GitOps tool must ignore the field)");
                warned = true;
            }
            continue;
        }
        warned = false;
        replaced = Some((theirs, ca.clone()));
        match api
            .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                tracing::info!(crd = %name, "ruleop's CA written into the CRD's conversion webhook")
            }
            Err(e) => {
                tracing::warn!(crd = %name, error = %e, "the CRD's conversion webhook still lacks ruleop's CA; trying again")
            }
        }
    }
}

/// The merge patch that makes `crd` trust `ca`, if its conversions go to ruleop's webhook
/// (`ours`) and it does not trust `ca` yet.
pub fn needed(crd: &Value, ours: &Value, ca: &str) -> Option<Value> {
    let conversion = &crd["spec"]["conversion"];
    if conversion["strategy"] != "Webhook" {
        return None;
    }
    let cc = &conversion["webhook"]["clientConfig"];
    let same = match (cc.get("url"), ours.get("url")) {
        (Some(theirs), Some(url)) => theirs == url,
        (None, None) => {
            let (a, b) = (&cc["service"], &ours["service"]);
            a["namespace"] == b["namespace"] && a["name"] == b["name"]
        }
        _ => false,
    };
    (same && cc["caBundle"] != ca)
        .then(|| json!({"spec": {"conversion": {"webhook": {"clientConfig": {"caBundle": ca}}}}}))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(cc: Value) -> Value {
        json!({"spec": {"conversion": {"strategy": "Webhook", "webhook": {"clientConfig": cc}}}})
    }

    #[test]
    fn only_a_crd_converted_by_ruleops_webhook_gets_its_ca_and_only_once() {
        let ours = json!({"service": {"namespace": "ruleop-system", "name": "ruleop-webhook", "path": "/convert", "port": 443}});
        let bare = crd(
            json!({"service": {"namespace": "ruleop-system", "name": "ruleop-webhook", "path": "/convert"}}),
        );
        let patch = needed(&bare, &ours, "Q0E=").expect("no CA yet");
        assert_eq!(
            patch["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"],
            "Q0E="
        );
        let mut trusted = bare.clone();
        json_patch::merge(&mut trusted, &patch);
        assert_eq!(needed(&trusted, &ours, "Q0E="), None);
        // A new CA: written again.
        assert!(needed(&trusted, &ours, "TkVX").is_some());
        // Another's webhook, a URL where ruleop has a Service, no webhook: left alone.
        let other = crd(json!({"service": {"namespace": "cert-system", "name": "converter"}}));
        assert_eq!(needed(&other, &ours, "Q0E="), None);
        let url = crd(json!({"url": "https://10.0.0.1/convert"}));
        assert_eq!(needed(&url, &ours, "Q0E="), None);
        let none = json!({"spec": {"conversion": {"strategy": "None"}}});
        assert_eq!(needed(&none, &ours, "Q0E="), None);
        // The same URL: written.
        let ours_url = json!({"url": "https://10.0.0.1/convert"});
        assert!(needed(&url, &ours_url, "Q0E=").is_some());
    }
}
