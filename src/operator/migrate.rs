//! Storage migration: once a kind's storage version changes, the objects stored in the
//! old one are written again (each as it is read: the API server stores it in the new
//! version), a few a second, and the CRD's `status.storedVersions` is trimmed to the
//! storage version, so that an old version can later be dropped. The leader does it, for
//! the CRDs it installs (`--install-crds`); it looks again every few minutes.

use crate::client::Fence;
use crate::rules::CompiledRule;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// Objects rewritten per second.
const PER_SECOND: u64 = 20;
/// How often the kind is looked at without a change of its CRD.
const AGAIN: Duration = Duration::from_secs(600);
/// How soon after a failure.
const SOON: Duration = Duration::from_secs(5);

/// What one look at the kind found or did.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `storedVersions` is the storage version alone.
    Done,
    /// The API server does not store in the new version yet (the CRD is being updated).
    NotYet,
    /// This many objects were written again, and `storedVersions` trimmed.
    Migrated { objects: usize, from: Vec<String> },
}

/// Migrates the storage of `rule`'s kind whenever it needs it, while this replica leads:
/// looked at on each change of its CRD (a watch: nothing asked in steady state), and
/// again after a failure.
pub async fn keep_migrating(client: kube::Client, rule: Arc<CompiledRule>, fence: Arc<Fence>) {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let Some(name) = rule
        .crd
        .as_ref()
        .and_then(|c| c["metadata"]["name"].as_str())
        .map(str::to_string)
    else {
        return;
    };
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut changes = watcher(api, config)
        .default_backoff()
        .applied_objects()
        .boxed();
    // A standby that becomes the leader looks at least this often.
    let mut backstop = tokio::time::interval(AGAIN);
    loop {
        tokio::select! {
            change = changes.next() => if change.is_none() { return },
            _ = backstop.tick() => {}
        }
        let mut wait = SOON;
        while fence.holds() {
            match once(&client, &rule, &name, &fence).await {
                Ok(Outcome::Migrated { objects, from }) => {
                    tracing::info!(crd = %name, objects, from = %from.join(","), "storage migrated: storedVersions trimmed");
                    break;
                }
                Ok(Outcome::Done | Outcome::NotYet) => break,
                Err(kube::Error::Api(e)) if e.code == 404 => break,
                Err(e) => {
                    tracing::warn!(crd = %name, error = %e, retry_in_s = wait.as_secs(), "storage migration stopped; trying again");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(AGAIN);
                }
            }
        }
    }
}

/// One look: the objects stored in another version than the storage one written again,
/// then `storedVersions` trimmed.
pub async fn once(
    client: &kube::Client,
    rule: &CompiledRule,
    name: &str,
    fence: &Fence,
) -> Result<Outcome, kube::Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = crds.get(name).await?;
    let Some(storage) = crd
        .spec
        .versions
        .iter()
        .find(|v| v.storage)
        .map(|v| v.name.clone())
    else {
        return Ok(Outcome::NotYet);
    };
    let stored = crd
        .status
        .as_ref()
        .and_then(|s| s.stored_versions.clone())
        .unwrap_or_default();
    if stored == [storage.clone()] {
        return Ok(Outcome::Done);
    }
    if !stored.contains(&storage) {
        return Ok(Outcome::NotYet);
    }
    let ar = ApiResource {
        group: rule.watch.group.clone(),
        version: storage.clone(),
        api_version: format!("{}/{storage}", rule.watch.group),
        kind: crd.spec.names.kind.clone(),
        plural: rule.watch.resource.clone(),
    };
    let objects = rewrite_all(client, &ar, fence).await?;
    if !fence.holds() {
        return Ok(Outcome::NotYet);
    }
    // Only if the CRD is still as read (a storage version changed again meanwhile may
    // have stored objects in a version this would drop): a conflict looks again.
    let read_at = crd.metadata.resource_version.clone();
    crds.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"resourceVersion": read_at},
            "status": {"storedVersions": [storage]}})),
    )
    .await?;
    let from = stored.into_iter().filter(|v| *v != storage).collect();
    Ok(Outcome::Migrated { objects, from })
}

/// Writes every object of the kind again as it is read, `PER_SECOND` at most; one changed
/// or deleted meanwhile needs nothing (its own write stored it anew).
async fn rewrite_all(
    client: &kube::Client,
    ar: &ApiResource,
    fence: &Fence,
) -> Result<usize, kube::Error> {
    let all: Api<DynamicObject> = Api::all_with(client.clone(), ar);
    let mut params = ListParams::default().limit(500);
    let mut done = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(1000 / PER_SECOND));
    loop {
        let page = all.list(&params).await?;
        for obj in &page.items {
            if !fence.holds() {
                return Ok(done);
            }
            tick.tick().await;
            let ns = obj.metadata.namespace.clone().unwrap_or_default();
            let one: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, ar);
            let name = obj.metadata.name.clone().unwrap_or_default();
            match one.replace(&name, &PostParams::default(), obj).await {
                Ok(_) => done += 1,
                Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(done),
        }
    }
}
