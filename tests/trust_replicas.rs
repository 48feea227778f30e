//! Two replicas that see different versions of a rule for a while (a mounted ConfigMap
//! reaches each replica's files up to a minute apart): the one with the older version,
//! leading after a failover, deletes nothing the newer version made.

mod common;

use common::{Operator, eventually, get_json, install_crds, wait_json};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(60);

fn lease_holder(ns: &str, name: &str) -> Option<String> {
    get_json("lease", ns, name)
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
        .filter(|h| !h.is_empty())
}

/// Waits until `id` holds `lease` in `ns`.
async fn leads(ns: &str, lease: &str, id: &str, within: Duration) {
    eventually(within, &format!("{id} leads"), || async {
        (lease_holder(ns, lease).as_deref() == Some(id)).then_some(())
    })
    .await;
}

fn uid(v: &Value) -> String {
    v["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// The arguments of a replica `id` campaigning for `lease` in `ns`.
fn replica_args(ns: &str, lease: &str, id: &str) -> Vec<String> {
    [
        "--leader-elect",
        "--lease-namespace",
        ns,
        "--lease-name",
        lease,
        "--lease-duration",
        "6",
        "--identity",
        id,
        "--rules-poll-seconds",
        "1",
    ]
    .map(str::to_string)
    .to_vec()
}

#[tokio::test]
async fn a_replica_with_an_older_rule_retires_no_kind_the_newer_one_added() {
    let client = common::client().await;
    install_crds(&["tests/fixtures/trust/crd.yaml"]);
    let ns = common::namespace(&client, "trust-stale").await;
    let dir = tempfile::tempdir().unwrap();
    let watch = "watch: {group: trust.ruleop.dev, version: v1, resource: boxes}";
    let config = "  - id: config\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"{{ name }}-a\"}, data: {a: \"1\"}}\n";
    let secret = "  - id: data\n    template: {apiVersion: v1, kind: Secret, metadata: {name: \"{{ name }}-s\"}, stringData: {s: \"1\"}}\n";
    // Each replica reads its own copy of the rules, as each kubelet updates its own mount.
    let a_file = dir.path().join("a.yaml");
    let b_file = dir.path().join("b.yaml");
    let v1 = format!("name: stale\n{watch}\nchildren:\n{config}");
    let v2 = format!("name: stale\n{watch}\nchildren:\n{config}{secret}");
    std::fs::write(&a_file, &v1).unwrap();
    std::fs::write(&b_file, &v1).unwrap();
    let args = |id: &'static str| replica_args(&ns, "trust-stale", id);
    let a_args = args("newer");
    let a_args: Vec<&str> = a_args.iter().map(String::as_str).collect();
    let mut a = Operator::start(&ns, &[a_file.to_str().unwrap()], &a_args);
    leads(&ns, "trust-stale", "newer", T).await;
    common::apply_box(&ns, "b", json!({}));
    wait_json("configmap", &ns, "b-a", "made by the first version", |_| {
        true
    })
    .await;
    // The new version reaches the leader's files first: it adds a Secret.
    std::fs::write(&a_file, &v2).unwrap();
    let made = wait_json("secret", &ns, "b-s", "made by the newer version", |_| true).await;
    let first = uid(&made);

    let b_args = args("older");
    let b_args: Vec<&str> = b_args.iter().map(String::as_str).collect();
    let older_op = Operator::start(&ns, &[b_file.to_str().unwrap()], &b_args);
    older_op.admin_addr().await;
    a.kill();
    leads(&ns, "trust-stale", "older", Duration::from_secs(30)).await;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        let s = get_json("secret", &ns, "b-s")
            .expect("the Secret the newer rule made was deleted by the older replica");
        assert_eq!(uid(&s), first);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        older_op
            .records()
            .iter()
            .any(|r| r["message"].as_str().is_some_and(|m| m.contains("older"))),
        "the older replica says why it waits: {}",
        older_op.logs()
    );
    common::delete_namespace(&ns);
}

/// The standby's files hold v2, which no replica ever ran (its kubelet skipped from v1 to
/// it while the leader went from v1 to v3): after the failover, v2 runs, but prunes
/// nothing v3 made until it has been the newest for --rules-settle-seconds.
#[tokio::test]
async fn a_version_that_never_ran_prunes_nothing_until_it_has_been_the_newest_for_the_wait() {
    let client = common::client().await;
    install_crds(&["tests/fixtures/trust/crd.yaml"]);
    let ns = common::namespace(&client, "trust-unseen").await;
    let dir = tempfile::tempdir().unwrap();
    let watch = "watch: {group: trust.ruleop.dev, version: v1, resource: boxes}";
    let child = |id: &str| {
        format!(
            "  - id: {id}\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: \"{{{{ name }}}}-{id}\"}}, data: {{a: \"1\"}}}}\n"
        )
    };
    let version = |extra: &str| {
        format!(
            "name: unseen\n{watch}\nchildren:\n{}{}",
            child("one"),
            child(extra)
        )
    };
    let (v1, v2, v3) = (version("first"), version("second"), version("third"));
    let a_file = dir.path().join("a.yaml");
    let b_file = dir.path().join("b.yaml");
    std::fs::write(&a_file, &v1).unwrap();
    std::fs::write(&b_file, &v2).unwrap();
    let a_args = replica_args(&ns, "trust-unseen", "leader");
    let a_args: Vec<&str> = a_args.iter().map(String::as_str).collect();
    let mut a = Operator::start(&ns, &[a_file.to_str().unwrap()], &a_args);
    leads(&ns, "trust-unseen", "leader", T).await;
    common::apply_box(&ns, "b", json!({}));
    wait_json("configmap", &ns, "b-first", "made by v1", |_| true).await;
    std::fs::write(&a_file, &v3).unwrap();
    let made = wait_json("configmap", &ns, "b-third", "made by v3", |_| true).await;
    let third = uid(&made);
    eventually(T, "v3 pruned what only v1 made", || async {
        get_json("configmap", &ns, "b-first")
            .is_none()
            .then_some(())
    })
    .await;

    let mut b_args = replica_args(&ns, "trust-unseen", "standby");
    b_args.extend(["--rules-settle-seconds".to_string(), "60".to_string()]);
    let b_args: Vec<&str> = b_args.iter().map(String::as_str).collect();
    let standby = Operator::start(&ns, &[b_file.to_str().unwrap()], &b_args);
    standby.admin_addr().await;
    a.kill();
    leads(&ns, "trust-unseen", "standby", Duration::from_secs(30)).await;
    // v2 runs (it makes its own child) ...
    wait_json("configmap", &ns, "b-second", "made by v2", |_| true).await;
    // ... but deletes nothing for a while: v3's object stays, the same object.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(6) {
        let o = get_json("configmap", &ns, "b-third")
            .expect("v2, a version that never ran, pruned what v3 made before its wait was over");
        assert_eq!(uid(&o), third);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        standby.records().iter().any(|r| r["message"]
            .as_str()
            .is_some_and(|m| m.contains("may be an old version that never ran"))),
        "the standby says why it deletes nothing: {}",
        standby.logs()
    );
    // Once it has been the newest for the whole wait, it is taken for the newest.
    eventually(
        Duration::from_secs(120),
        "v2 prunes after its wait",
        || async {
            get_json("configmap", &ns, "b-third")
                .is_none()
                .then_some(())
        },
    )
    .await;
    common::delete_namespace(&ns);
}

/// A kind that leaves the rule with its `onRemove: Orphan` child (a Secret standing for a
/// PVC), on a replica whose version must wait before it retires kinds: a resource deleted
/// meanwhile keeps its orphans' finalizer until the retirement has let the object go, so
/// the garbage collector never takes it.
#[tokio::test]
async fn an_orphan_of_a_kind_being_retired_is_let_go_before_its_resource_is_released() {
    let client = common::client().await;
    install_crds(&["tests/fixtures/trust/crd.yaml"]);
    let ns = common::namespace(&client, "trust-orphan-kind").await;
    let dir = tempfile::tempdir().unwrap();
    let watch = "watch: {group: trust.ruleop.dev, version: v1, resource: boxes}";
    let config = "  - id: config\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"{{ name }}-a\"}, data: {a: \"1\"}}\n";
    let keep = "  - id: keep\n    onRemove: Orphan\n    template: {apiVersion: v1, kind: Secret, metadata: {name: \"{{ name }}-keep\"}, stringData: {s: \"1\"}}\n";
    let a_file = dir.path().join("a.yaml");
    let b_file = dir.path().join("b.yaml");
    std::fs::write(
        &a_file,
        format!("name: orphankind\n{watch}\nchildren:\n{config}{keep}"),
    )
    .unwrap();
    // The standby's files already drop the Secret child, and its kind with it.
    std::fs::write(
        &b_file,
        format!("name: orphankind\n{watch}\nchildren:\n{config}"),
    )
    .unwrap();
    let lease = "trust-orphan-kind";
    let a_args = replica_args(&ns, lease, "leader");
    let a_args: Vec<&str> = a_args.iter().map(String::as_str).collect();
    let mut a = Operator::start(&ns, &[a_file.to_str().unwrap()], &a_args);
    leads(&ns, lease, "leader", T).await;
    common::apply_box(&ns, "b", json!({}));
    let kept = wait_json("secret", &ns, "b-keep", "the orphaned child", |_| true).await;
    let first = uid(&kept);
    wait_json("box", &ns, "b", "held by the orphans' finalizer", |b| {
        b["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|f| f == "ruleop.dev/orphan"))
    })
    .await;

    let mut b_args = replica_args(&ns, lease, "standby");
    b_args.extend(["--rules-settle-seconds".to_string(), "20".to_string()]);
    let b_args: Vec<&str> = b_args.iter().map(String::as_str).collect();
    let standby = Operator::start(&ns, &[b_file.to_str().unwrap()], &b_args);
    standby.admin_addr().await;
    a.kill();
    leads(&ns, lease, "standby", Duration::from_secs(30)).await;
    // The resource deleted while the standby's version waits to retire the Secret kind.
    common::kubectl(&["delete", "box", "b", "-n", &ns, "--wait=false"], None);
    let start = Instant::now();
    loop {
        let s = get_json("secret", &ns, "b-keep")
            .expect("the orphaned child was deleted with its resource");
        assert_eq!(uid(&s), first, "the same object");
        let released = s["metadata"]["ownerReferences"]
            .as_array()
            .is_none_or(Vec::is_empty);
        if released && get_json("box", &ns, "b").is_none() {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "the Secret let go and the resource released: {s}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // And it stays: nothing collects it later.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(get_json("secret", &ns, "b-keep").is_some());
    common::delete_namespace(&ns);
}
