//! Storage migration by the API server's migrator (`storagemigration.k8s.io`, beta in
//! Kubernetes 1.35, off unless enabled): ruleop asks for one StorageVersionMigration per
//! storage change and follows it; the kube-controller-manager rewrites the objects and
//! trims `storedVersions`.

use kube::api::{Api, DynamicObject, PostParams};
use kube::discovery::ApiResource;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const GROUP: &str = "storagemigration.k8s.io";
const PLURAL: &str = "storageversionmigrations";
/// How often a migration is looked at.
const EVERY: Duration = Duration::from_secs(2);
/// A migration the controller has not started by then is taken back (the API is served,
/// but no controller runs it): ruleop migrates itself.
const PICKED_UP: Duration = Duration::from_secs(60);

/// How a migration asked of the API ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Ended {
    Succeeded,
    /// Failed, or not taken up: why.
    Not(String),
    /// This replica stopped leading.
    Left,
}

/// The migrator's resource, if the cluster serves it (the newest version first).
pub async fn served(client: &kube::Client) -> Option<ApiResource> {
    for version in ["v1", "v1beta1"] {
        let gv = format!("{GROUP}/{version}");
        let Ok(list) = client.list_api_group_resources(&gv).await else {
            continue;
        };
        if list.resources.iter().any(|r| r.name == PLURAL) {
            return Some(ApiResource {
                group: GROUP.into(),
                version: version.into(),
                api_version: gv,
                kind: "StorageVersionMigration".into(),
                plural: PLURAL.into(),
            });
        }
    }
    None
}

/// The migration's name for one generation of a CRD (by its uid: a CRD made again starts
/// anew): the same on every replica, so a new leader follows the one its predecessor
/// asked for.
pub fn name(crd: &str, uid: &str, generation: i64) -> String {
    let uid: String = uid.chars().filter(|c| *c != '-').take(8).collect();
    let tail = format!("-{uid}-{generation}");
    // (A name is at most 253 characters: a long CRD name is cut, its hash kept.)
    let keep = 253 - "ruleop-".len() - tail.len();
    if crd.len() <= keep {
        return format!("ruleop-{crd}{tail}");
    }
    use sha2::Digest as _;
    let sum = sha2::Sha256::digest(crd.as_bytes());
    let hash: String = sum[..5].iter().map(|b| format!("{b:02x}")).collect();
    let cut: String = crd.chars().take(keep - hash.len() - 1).collect();
    format!("ruleop-{}-{hash}{tail}", cut.trim_end_matches(['.', '-']))
}

/// Asks for the migration of `group`/`resource` (or finds it asked) and waits for it.
/// It belongs to the CRD `owner` (name, uid): it goes when the CRD goes.
pub async fn migrate(
    client: &kube::Client,
    ar: &ApiResource,
    name: &str,
    owner: (&str, &str),
    group: &str,
    resource: &str,
    leads: impl Fn() -> bool,
) -> Result<Ended, kube::Error> {
    let api: Api<DynamicObject> = Api::all_with(client.clone(), ar);
    let mut svm = DynamicObject::new(name, ar);
    svm.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "apiextensions.k8s.io/v1".into(),
            kind: "CustomResourceDefinition".into(),
            name: owner.0.into(),
            uid: owner.1.into(),
            ..Default::default()
        },
    ]);
    svm.data = json!({"spec": {"resource": {"group": group, "resource": resource}}});
    match api.create(&PostParams::default(), &svm).await {
        Ok(_) => tracing::info!(migration = %name, "StorageVersionMigration asked for"),
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e),
    }
    let asked = Instant::now();
    loop {
        if !leads() {
            return Ok(Ended::Left);
        }
        let now = api.get(name).await?;
        let status = |t: &str| condition(&now.data, t);
        if status("Succeeded") {
            return Ok(Ended::Succeeded);
        }
        if status("Failed") {
            return Ok(Ended::Not(format!(
                "StorageVersionMigration/{name} failed: {}",
                message(&now.data, "Failed")
            )));
        }
        if !status("Running") && asked.elapsed() > PICKED_UP {
            let _ = api.delete(name, &Default::default()).await;
            return Ok(Ended::Not(format!(
                "StorageVersionMigration/{name} was not started in {} s (is the kube-controller-manager's StorageVersionMigrator feature gate on?)",
                PICKED_UP.as_secs()
            )));
        }
        tokio::time::sleep(EVERY).await;
    }
}

fn conditions(v: &Value) -> impl Iterator<Item = &Value> {
    v["status"]["conditions"].as_array().into_iter().flatten()
}

/// Whether condition `t` is True.
fn condition(v: &Value, t: &str) -> bool {
    conditions(v).any(|c| c["type"] == t && c["status"] == "True")
}

fn message(v: &Value, t: &str) -> String {
    conditions(v)
        .find(|c| c["type"] == t)
        .and_then(|c| c["message"].as_str())
        .unwrap_or("no message")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_migration_is_read_from_its_conditions() {
        let v = json!({"status": {"conditions": [
            {"type": "Running", "status": "False"},
            {"type": "Failed", "status": "True", "message": "object has no meta"}]}});
        assert!(condition(&v, "Failed"));
        assert!(!condition(&v, "Running"));
        assert!(!condition(&json!({}), "Succeeded"));
        assert_eq!(message(&v, "Failed"), "object has no meta");
        assert_eq!(
            name("gateways.example.com", "0f3a-91c2-77d0", 4),
            "ruleop-gateways.example.com-0f3a91c2-4"
        );
        let long = format!("{}.example.com", "a".repeat(240));
        let n = name(&long, "0f3a-91c2-77d0", 4);
        assert!(n.len() <= 253 && n.ends_with("-0f3a91c2-4"), "{n}");
        assert_ne!(
            n,
            name(&format!("{}.example.org", "a".repeat(240)), "0f3a", 4)
        );
    }
}
