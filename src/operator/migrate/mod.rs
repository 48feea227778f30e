//! Storage migration: once a kind's storage version changes, the objects stored in the
//! old one are written again (the API server stores each in the new version) and the CRD's
//! `status.storedVersions` is trimmed to the storage version, so that an old version can
//! later be dropped. Where the cluster serves the API server's migrator
//! (`storagemigration.k8s.io`), ruleop asks it ([`api`]); else ruleop writes each object
//! again as it is read, a few a second. The leader does it, for the CRDs it installs
//! (`--install-crds`), on each change of the CRD; progress shows in the Rule's
//! `status.storage` ([`progress`]).

pub mod api;
pub mod progress;

use crate::client::Fence;
use crate::rules::CompiledRule;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use progress::{Migration, Phase, Shared};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// Objects rewritten per second.
const PER_SECOND: u64 = 20;
/// How often the kind is looked at without a change of its CRD.
const AGAIN: Duration = Duration::from_secs(600);
/// How soon after a failure.
const SOON: Duration = Duration::from_secs(5);

/// Who migrates the stored objects (`--storage-migration`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum By {
    /// The API server's migrator where the cluster serves it, else ruleop.
    #[default]
    Auto,
    /// ruleop, always.
    Ruleop,
}

/// What a migration needs besides the rule.
#[derive(Clone)]
pub struct Migrator {
    pub client: kube::Client,
    pub fence: Arc<Fence>,
    pub by: By,
    /// Where it stands, for the Rule's status.
    pub storage: Arc<Shared>,
}

/// What one look at the kind found or did.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// `storedVersions` is the storage version alone.
    Done,
    /// The API server does not store in the new version yet (the CRD is being updated),
    /// the CRD changed meanwhile, or this replica stopped leading: looked at again on the
    /// next change.
    NotYet,
    /// The objects were written again (this many, when ruleop wrote them), and
    /// `storedVersions` trimmed.
    Migrated {
        objects: Option<usize>,
        from: Vec<String>,
    },
}

/// Migrates the storage of `rule`'s kind whenever it needs it, while this replica leads:
/// looked at on each change of its CRD (a watch: nothing asked in steady state), and
/// again after a failure.
pub async fn keep_migrating(m: Migrator, rule: Arc<CompiledRule>) {
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
    let api: Api<CustomResourceDefinition> = Api::all(m.client.clone());
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
        while m.fence.holds() {
            match once(&m, &rule, &name).await {
                Ok(Outcome::Migrated { objects, from }) => {
                    tracing::info!(crd = %name, objects = ?objects, from = %from.join(","), "storage migrated: storedVersions trimmed");
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

/// A CRD's storage as read: its generation, storage version and `storedVersions`.
struct Read {
    uid: String,
    generation: i64,
    version: Option<String>,
    stored: Vec<String>,
    resource_version: Option<String>,
}

fn read(crd: &CustomResourceDefinition) -> Read {
    Read {
        uid: crd.metadata.uid.clone().unwrap_or_default(),
        generation: crd.metadata.generation.unwrap_or(0),
        version: crd
            .spec
            .versions
            .iter()
            .find(|v| v.storage)
            .map(|v| v.name.clone()),
        stored: crd
            .status
            .as_ref()
            .and_then(|s| s.stored_versions.clone())
            .unwrap_or_default(),
        resource_version: crd.metadata.resource_version.clone(),
    }
}

/// One look: the objects stored in another version than the storage one written again
/// (by the API server's migrator where served, else by ruleop), then `storedVersions`
/// trimmed.
pub async fn once(m: &Migrator, rule: &CompiledRule, name: &str) -> Result<Outcome, kube::Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(m.client.clone());
    let at = read(&crds.get(name).await?);
    let Some(version) = at.version.clone() else {
        return Ok(Outcome::NotYet);
    };
    m.storage.observe(&version, &at.stored);
    if at.stored == [version.clone()] {
        return Ok(Outcome::Done);
    }
    if !at.stored.contains(&version) {
        return Ok(Outcome::NotYet);
    }
    let from: Vec<String> = at
        .stored
        .iter()
        .filter(|v| **v != version)
        .cloned()
        .collect();
    let mut objects = None;
    let by_ruleop = |message: Option<String>| Migration {
        phase: Phase::Migrating,
        by: "ruleop".into(),
        from: from.clone(),
        objects: Some(0),
        rewritten: Some(0),
        message,
    };
    let ar = ApiResource {
        group: rule.watch.group.clone(),
        version: version.clone(),
        api_version: format!("{}/{version}", rule.watch.group),
        kind: rule
            .crd
            .as_ref()
            .and_then(|c| c["spec"]["names"]["kind"].as_str())
            .unwrap_or_default()
            .to_string(),
        plural: rule.watch.resource.clone(),
    };
    let asked = match (m.by, api::served(&m.client).await) {
        (By::Auto, Some(svm)) => Some(svm),
        _ => None,
    };
    let rewrite = match asked {
        Some(svm) => {
            let svm_name = api::name(name, &at.uid, at.generation);
            m.storage.start(Migration {
                phase: Phase::Migrating,
                by: format!("StorageVersionMigration/{svm_name}"),
                from: from.clone(),
                objects: None,
                rewritten: None,
                message: None,
            });
            let leads = || m.fence.holds();
            match api::migrate(&m.client, &svm, &svm_name, &ar.group, &ar.plural, leads).await? {
                api::Ended::Succeeded => None,
                api::Ended::Left => return Ok(Outcome::NotYet),
                api::Ended::Not(why) => {
                    tracing::warn!(crd = %name, reason = %why, "the API server's migration did not run; ruleop migrates the objects itself");
                    Some(by_ruleop(Some(why)))
                }
            }
        }
        None => Some(by_ruleop(None)),
    };
    if let Some(started) = rewrite {
        m.storage.start(started);
        objects = Some(rewrite_all(m, &ar).await?);
        if !m.fence.holds() {
            return Ok(Outcome::NotYet);
        }
    }
    if !trim(&crds, name, &at, &version).await? {
        return Ok(Outcome::NotYet);
    }
    m.storage.observe(&version, std::slice::from_ref(&version));
    m.storage.update(|g| g.phase = Phase::Done);
    Ok(Outcome::Migrated { objects, from })
}

/// Trims `storedVersions` to `version`, unless the CRD's storage changed since `at` (a
/// storage version changed again meanwhile may have stored objects in a version this
/// would drop); the API server's migrator may have trimmed it already. Whether it is
/// trimmed.
async fn trim(
    crds: &Api<CustomResourceDefinition>,
    name: &str,
    at: &Read,
    version: &str,
) -> Result<bool, kube::Error> {
    let now = read(&crds.get(name).await?);
    if now.version.as_deref() == Some(version) && now.stored == [version] {
        return Ok(true);
    }
    if now.generation != at.generation || now.stored != at.stored || now.version != at.version {
        return Ok(false);
    }
    // (With the resourceVersion read: a change since is a conflict, and looked at again.)
    crds.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"resourceVersion": now.resource_version},
            "status": {"storedVersions": [version]}}),
        ),
    )
    .await?;
    Ok(true)
}

/// Writes every object of the kind again as it is read, `PER_SECOND` at most; one changed
/// or deleted meanwhile needs nothing (its own write stored it anew).
async fn rewrite_all(m: &Migrator, ar: &ApiResource) -> Result<usize, kube::Error> {
    let (client, fence) = (&m.client, &m.fence);
    let all: Api<DynamicObject> = Api::all_with(client.clone(), ar);
    let mut params = ListParams::default().limit(500);
    let (mut seen, mut done) = (0, 0);
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
            seen += 1;
            m.storage.update(|g| {
                g.objects = Some(seen);
                g.rewritten = Some(done);
            });
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(done),
        }
    }
}
