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

fn uid(v: &Value) -> String {
    v["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
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
    let args = |id: &'static str| {
        vec![
            "--leader-elect".to_string(),
            "--lease-namespace".to_string(),
            ns.clone(),
            "--lease-name".to_string(),
            "trust-stale".to_string(),
            "--lease-duration".to_string(),
            "6".to_string(),
            "--identity".to_string(),
            id.to_string(),
            "--rules-poll-seconds".to_string(),
            "1".to_string(),
        ]
    };
    let a_args = args("newer");
    let a_args: Vec<&str> = a_args.iter().map(String::as_str).collect();
    let mut a = Operator::start(&ns, &[a_file.to_str().unwrap()], &a_args);
    eventually(T, "the first replica leads", || async {
        (lease_holder(&ns, "trust-stale").as_deref() == Some("newer")).then_some(())
    })
    .await;
    let b = json!({"apiVersion": "trust.ruleop.dev/v1", "kind": "Box",
        "metadata": {"name": "b", "namespace": ns}, "spec": {}});
    common::kubectl_ok(&["apply", "-f", "-"], Some(&b.to_string()));
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
    eventually(
        Duration::from_secs(30),
        "the older replica leads",
        || async { (lease_holder(&ns, "trust-stale").as_deref() == Some("older")).then_some(()) },
    )
    .await;
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
