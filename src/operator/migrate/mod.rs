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
    /// The API server refused to write these objects again (a validation or an admission
    /// webhook): `storedVersions` stays, and this generation of the CRD is not migrated
    /// again (a change of the CRD is).
    Refused { generation: i64, names: Vec<String> },
    /// This generation of the CRD was refused before: nothing done.
    Stuck,
}

/// Migrates the storage of `rule`'s kind whenever it needs it, while this replica leads:
/// looked at on each change of its CRD (a watch: nothing asked in steady state), and
/// again after a failure.
pub async fn keep_migrating(m: Migrator, rule: Arc<CompiledRule>) {
    use futures::StreamExt;
    use kube::runtime::{WatchStreamExt, watcher};
    let Some(name) = rule.crd_name().map(str::to_string) else {
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
    // The CRD generation whose migration the API server refused.
    let mut stuck = None;
    loop {
        tokio::select! {
            change = changes.next() => if change.is_none() { return },
            _ = backstop.tick() => {}
        }
        let mut wait = SOON;
        while m.fence.holds() {
            match once(&m, &rule, &name, stuck).await {
                Ok(Outcome::Migrated { objects, from }) => {
                    tracing::info!(crd = %name, objects = ?objects, from = %from.join(","), "storage migrated: storedVersions trimmed");
                    break;
                }
                Ok(Outcome::Refused { generation, names }) => {
                    tracing::warn!(crd = %name, refused = %names.join(", "), "storage migration refused by the API server for these objects: storedVersions stays; fix them (or what refuses them), then change the CRD to migrate again");
                    stuck = Some(generation);
                    break;
                }
                Ok(Outcome::Done | Outcome::NotYet | Outcome::Stuck) => break,
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
/// `stuck`: a CRD generation whose migration was refused (not tried again).
pub async fn once(
    m: &Migrator,
    rule: &CompiledRule,
    name: &str,
    stuck: Option<i64>,
) -> Result<Outcome, kube::Error> {
    let crds: Api<CustomResourceDefinition> = Api::all(m.client.clone());
    let at = read(&crds.get(name).await?);
    let Some(version) = at.version.clone() else {
        return Ok(Outcome::NotYet);
    };
    m.storage.observe(&version, &at.stored);
    if at.stored == [version.clone()] {
        // (A migration interrupted here, then finished by another leader.)
        m.storage.update(|g| g.phase = Phase::Done);
        return Ok(Outcome::Done);
    }
    if !at.stored.contains(&version) {
        return Ok(Outcome::NotYet);
    }
    if stuck == Some(at.generation) {
        return Ok(Outcome::Stuck);
    }
    let kind = rule.crd_kind().unwrap_or_default().to_string();
    // The API server swaps its storage when its own watch of the CRD catches up: an
    // object written before that would be stored in the old version again.
    if !stores_in(
        &m.client,
        &rule.watch.group,
        &version,
        &kind,
        &rule.watch.resource,
    )
    .await
    {
        tracing::warn!(crd = %name, version = %version, "the API server does not say it stores the kind in its new storage version yet; migration waits");
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
        kind,
        plural: rule.watch.resource.clone(),
    };
    // (Discovery asked only when the API server's migrator may be used.)
    let asked = match m.by {
        By::Auto => api::served(&m.client).await,
        By::Ruleop => None,
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
            let owner = (name, at.uid.as_str());
            match api::migrate(
                &m.client, &svm, &svm_name, owner, &ar.group, &ar.plural, leads,
            )
            .await?
            {
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
        let done = rewrite_all(m, &ar).await?;
        if !m.fence.holds() {
            return Ok(Outcome::NotYet);
        }
        if !done.refused.is_empty() {
            let names = done.refused;
            m.storage.update(|g| {
                g.message = Some(format!(
                    "the API server refused to write again: {}; storedVersions stays",
                    names.join(", ")
                ));
            });
            let generation = at.generation;
            return Ok(Outcome::Refused { generation, names });
        }
        objects = Some(done.rewritten);
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
/// What ruleop's rewrite did.
struct Rewrite {
    rewritten: usize,
    /// `namespace/name` of the objects the API server refused to write (at most ten).
    refused: Vec<String>,
}

async fn rewrite_all(m: &Migrator, ar: &ApiResource) -> Result<Rewrite, kube::Error> {
    let (client, fence) = (&m.client, &m.fence);
    let all: Api<DynamicObject> = Api::all_with(client.clone(), ar);
    let mut params = ListParams::default().limit(500);
    let mut seen = 0;
    let mut done = Rewrite {
        rewritten: 0,
        refused: Vec::new(),
    };
    let mut tick = tokio::time::interval(Duration::from_millis(1000 / PER_SECOND));
    // (A slow page does not make the next ones faster.)
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
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
                Ok(_) => done.rewritten += 1,
                // Changed or deleted meanwhile: that write stored it anew.
                Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {}
                // Refused (a validation, an admission webhook, a permission): counted and
                // named, the others migrated all the same.
                Err(kube::Error::Api(e)) if matches!(e.code, 400 | 403 | 422) => {
                    if done.refused.len() < 10 {
                        done.refused.push(format!("{ns}/{name} ({})", e.message));
                    }
                }
                Err(e) => return Err(e),
            }
            seen += 1;
            m.storage.update(|g| {
                g.objects = Some(seen);
                g.rewritten = Some(done.rewritten);
            });
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(done),
        }
    }
}

/// The API server's hash of a storage version (`storageVersionHash` in discovery): the
/// first 8 bytes of the SHA-256 of `group/version/kind`, in base64.
pub fn storage_version_hash(group: &str, version: &str, kind: &str) -> String {
    use base64::Engine as _;
    use sha2::Digest as _;
    let sum = sha2::Sha256::digest(format!("{group}/{version}/{kind}").as_bytes());
    base64::engine::general_purpose::STANDARD.encode(&sum[..8])
}

/// How long after discovery says the new storage version, before objects are written
/// again: other API servers of the cluster follow the CRD on their own time.
const SETTLE: Duration = Duration::from_secs(5);

/// Waits (a minute at most) until the API server's discovery says it stores the kind in
/// `version`, then [`SETTLE`]: whether it does.
async fn stores_in(
    client: &kube::Client,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> bool {
    let want = storage_version_hash(group, version, kind);
    for _ in 0..60 {
        let stored = client
            .list_api_group_resources(&format!("{group}/{version}"))
            .await
            .is_ok_and(|list| {
                list.resources
                    .iter()
                    .any(|r| r.name == plural && r.storage_version_hash.as_deref() == Some(&want))
            });
        if stored {
            tokio::time::sleep(SETTLE).await;
            return true;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    false
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_storage_version_hash_is_the_api_servers() {
        // As the API server gives it for apps/v1 Deployments (`kubectl get --raw /apis/apps/v1`).
        assert_eq!(
            super::storage_version_hash("apps", "v1", "Deployment"),
            "8aSe+NMegvE="
        );
    }
}
