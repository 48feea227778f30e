//! The resource graph on the real control plane, with the Microservice fixture
//! (tests/fixtures/microservice): collections, a checksum that rolls the pods, a Job the
//! Deployment waits for, a Service's address read back from the cluster, and an existing
//! Secret whose absence makes the resource wait.

mod common;

use common::{Operator, condition, eventually, get_json, install_crds, kubectl_ok, wait_json};
use serde_json::Value;
use std::time::Duration;

const RULES: &str = "tests/fixtures/microservice/rules.yaml";
const CRD: &str = "tests/fixtures/microservice/crd.yaml";

/// After a short settling time, ten seconds with no write by ruleop.
async fn assert_no_writes(addr: &str, what: &str) {
    tokio::time::sleep(Duration::from_secs(3)).await;
    let w0 = common::admin_metric(addr, "ruleop_writes_total");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(
        common::admin_metric(addr, "ruleop_writes_total"),
        w0,
        "{what}"
    );
}

fn patch(ns: &str, json: &str) {
    kubectl_ok(
        &[
            "patch",
            "microservice",
            "shop",
            "-n",
            ns,
            "--type",
            "merge",
            "-p",
            json,
        ],
        None,
    );
}

fn secret(ns: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: shop-db, namespace: {ns}}}\nstringData: {{DATABASE_URL: postgres://db}}\n"
    )
}

fn synced(ms: &Value) -> Option<(String, String, String)> {
    let c = condition(ms, "Synced")?;
    Some((
        c["status"].as_str()?.to_string(),
        c["reason"].as_str()?.to_string(),
        c["message"].as_str()?.to_string(),
    ))
}

/// ReplicaSets of the Deployment `shop` (each a rollout of its pod template).
fn replica_sets(ns: &str) -> usize {
    let out = kubectl_ok(&["get", "replicasets", "-n", ns, "-o", "json"], None);
    let v: Value = serde_json::from_str(&out).unwrap();
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|rs| rs["metadata"]["ownerReferences"][0]["name"] == "shop")
        .count()
}

fn uid(kind: &str, ns: &str, name: &str) -> Value {
    get_json(kind, ns, name)
        .map(|o| o["metadata"]["uid"].clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_microservice_is_built_in_order_and_follows_its_spec_and_its_secret() {
    let client = common::client().await;
    install_crds(&[CRD]);
    let ns = common::namespace(&client, "e2e-graph").await;
    let op = Operator::start(&ns, &[RULES], &[]);
    let addr = op.admin_addr().await;
    let example = common::manifest_in("tests/fixtures/microservice/example.yaml", &ns);
    kubectl_ok(&["apply", "-f", "-"], Some(&example));

    // No Secret yet: the resource waits, naming it; what needs nothing is made.
    let ms = wait_json("microservice", &ns, "shop", "waiting for the Secret", |m| {
        synced(m).is_some_and(|(s, r, m)| {
            s == "False" && r == "Waiting" && m.contains("Secret `shop-db`")
        })
    })
    .await;
    let ready = condition(&ms, "Ready").unwrap();
    assert_eq!(ready["status"], "False");
    assert!(
        ready["message"]
            .as_str()
            .unwrap()
            .contains("child `migrate`"),
        "{ready}"
    );
    wait_json("configmap", &ns, "shop-config", "exists", |_| true).await;
    assert!(
        get_json("deployment", &ns, "shop").is_none(),
        "the Deployment waits"
    );

    // The Secret appears: the Job, then (once kwok completed it) the Deployment; the
    // Service's cluster IP lands in a ConfigMap; one NetworkPolicy per peer.
    kubectl_ok(&["apply", "-f", "-"], Some(&secret(&ns)));
    let ms = wait_json("microservice", &ns, "shop", "ready", |m| {
        condition(m, "Ready").is_some_and(|c| c["status"] == "True")
    })
    .await;
    assert_eq!(ms["status"]["readyReplicas"], 2);
    assert_eq!(
        ms["status"]["endpoints"],
        serde_json::json!([format!("shop.{ns}.svc:8080"), format!("shop.{ns}.svc:9090")])
    );
    assert_eq!(
        ms["status"]["allowedFrom"],
        serde_json::json!(["shop-from-frontend", "shop-from-prometheus"])
    );
    let jobs = kubectl_ok(&["get", "jobs", "-n", &ns, "-o", "name"], None);
    assert_eq!(jobs.lines().count(), 1, "{jobs}");
    let svc = get_json("service", &ns, "shop").unwrap();
    let ports: Vec<i64> = svc["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["port"].as_i64().unwrap())
        .collect();
    assert_eq!(ports, vec![8080, 9090]);
    let address = get_json("configmap", &ns, "shop-address").unwrap();
    assert_eq!(address["data"]["clusterIP"], svc["spec"]["clusterIP"]);
    let d = get_json("deployment", &ns, "shop").unwrap();
    let env = &d["spec"]["template"]["spec"]["containers"][0]["envFrom"];
    assert_eq!(env[0]["secretRef"]["name"], "shop-db");
    assert!(get_json("horizontalpodautoscaler", &ns, "shop").is_none());

    // Steady state: nothing written.
    assert_no_writes(&addr, "writes in steady state").await;

    // A config value changes: the checksum rolls the pods, exactly once.
    let generation = d["metadata"]["generation"].as_i64().unwrap();
    assert_eq!(replica_sets(&ns), 1);
    patch(&ns, r#"{"spec":{"config":{"LOG_LEVEL":"debug"}}}"#);
    wait_json("configmap", &ns, "shop-config", "new value", |c| {
        c["data"]["LOG_LEVEL"] == "debug"
    })
    .await;
    wait_json("deployment", &ns, "shop", "rolled", |d| {
        d["metadata"]["generation"].as_i64() > Some(generation)
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let d = get_json("deployment", &ns, "shop").unwrap();
    assert_eq!(
        d["metadata"]["generation"].as_i64(),
        Some(generation + 1),
        "one rollout"
    );
    // The Deployment controller makes the new ReplicaSet when it gets to it (a busy
    // machine may take a while); once it has, no third one comes.
    eventually(Duration::from_secs(60), "the new ReplicaSet", || async {
        (replica_sets(&ns) >= 2).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(replica_sets(&ns), 2, "one new ReplicaSet");

    // A peer and a port go: exactly that NetworkPolicy and that Service port.
    let kept = uid("networkpolicy", &ns, "shop-from-frontend");
    patch(
        &ns,
        r#"{"spec":{"allowFrom":["frontend"],"ports":[{"name":"http","port":8080}]}}"#,
    );
    eventually(Duration::from_secs(60), "policy pruned", || async {
        get_json("networkpolicy", &ns, "shop-from-prometheus")
            .is_none()
            .then_some(())
    })
    .await;
    assert_eq!(
        uid("networkpolicy", &ns, "shop-from-frontend"),
        kept,
        "the other policy is untouched"
    );
    wait_json("service", &ns, "shop", "one port", |s| {
        s["spec"]["ports"].as_array().is_some_and(|p| p.len() == 1)
    })
    .await;
    let d = wait_json("deployment", &ns, "shop", "one container port", |d| {
        d["spec"]["template"]["spec"]["containers"][0]["ports"]
            .as_array()
            .is_some_and(|p| p.len() == 1)
    })
    .await;
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["ports"][0]["name"],
        "http"
    );

    // Autoscaling on: an HPA; off: gone.
    patch(&ns, r#"{"spec":{"autoscale":{"max":4}}}"#);
    wait_json("horizontalpodautoscaler", &ns, "shop", "exists", |h| {
        h["spec"]["maxReplicas"] == 4
    })
    .await;
    patch(&ns, r#"{"spec":{"autoscale":null}}"#);
    eventually(Duration::from_secs(60), "HPA pruned", || async {
        get_json("horizontalpodautoscaler", &ns, "shop")
            .is_none()
            .then_some(())
    })
    .await;

    // The Secret is deleted: the resource waits naming it, and nothing it made is lost;
    // recreated, it resumes.
    let deployment = get_json("deployment", &ns, "shop").unwrap();
    let job = kubectl_ok(&["get", "jobs", "-n", &ns, "-o", "name"], None);
    kubectl_ok(&["delete", "secret", "shop-db", "-n", &ns], None);
    wait_json("microservice", &ns, "shop", "waiting again", |m| {
        synced(m).is_some_and(|(s, r, m)| {
            s == "False" && r == "Waiting" && m.contains("Secret `shop-db`")
        })
    })
    .await;
    let now = get_json("deployment", &ns, "shop").unwrap();
    assert_eq!(
        now["metadata"]["uid"], deployment["metadata"]["uid"],
        "a waiting child is kept"
    );
    assert_eq!(
        now["metadata"]["generation"], deployment["metadata"]["generation"],
        "and left as it is"
    );
    assert_eq!(
        kubectl_ok(&["get", "jobs", "-n", &ns, "-o", "name"], None),
        job,
        "the Job too"
    );
    kubectl_ok(&["apply", "-f", "-"], Some(&secret(&ns)));
    wait_json("microservice", &ns, "shop", "synced and ready", |m| {
        synced(m).is_some_and(|(s, _, _)| s == "True")
            && condition(m, "Ready").is_some_and(|c| c["status"] == "True")
    })
    .await;

    // A new image: a new migration Job (the old one pruned), then the Deployment.
    patch(&ns, r#"{"spec":{"image":"registry.example/shop:1.5"}}"#);
    wait_json("deployment", &ns, "shop", "new image", |d| {
        d["spec"]["template"]["spec"]["containers"][0]["image"] == "registry.example/shop:1.5"
    })
    .await;
    let jobs = kubectl_ok(&["get", "jobs", "-n", &ns, "-o", "name"], None);
    assert_eq!(jobs.lines().count(), 1, "{jobs}");
    assert_ne!(jobs, job, "a Job for the new image");
    wait_json("microservice", &ns, "shop", "ready again", |m| {
        condition(m, "Ready").is_some_and(|c| c["status"] == "True")
    })
    .await;

    // And steady again: nothing written.
    assert_no_writes(&addr, "writes in steady state after the edits").await;
    common::delete_namespace(&ns);
}

#[tokio::test]
async fn ordered_deletion_removes_dependents_first_then_releases_the_resource() {
    let client = common::client().await;
    install_crds(&["tests/fixtures/ordered/crd.yaml"]);
    let ns = common::namespace(&client, "e2e-ordered").await;
    let op = Operator::start(&ns, &["tests/fixtures/ordered/rules.yaml"], &[]);
    let stack = format!(
        "apiVersion: ordered.ruleop.dev/v1\nkind: Stack\nmetadata: {{name: s, namespace: {ns}}}\nspec: {{}}\n"
    );
    kubectl_ok(&["apply", "-f", "-"], Some(&stack));
    let s = wait_json("stack", &ns, "s", "ready, held by the finalizer", |s| {
        condition(s, "Ready").is_some_and(|c| c["status"] == "True")
            && s["metadata"]["finalizers"]
                .as_array()
                .is_some_and(|f| f.iter().any(|x| x == "ruleop.dev/ordered-deletion"))
    })
    .await;
    assert!(s["metadata"]["finalizers"].as_array().unwrap().len() == 1);
    kubectl_ok(&["delete", "stack", "s", "-n", &ns, "--wait=false"], None);
    eventually(Duration::from_secs(90), "stack released", || async {
        get_json("stack", &ns, "s").is_none().then_some(())
    })
    .await;
    for (kind, name) in [
        ("configmap", "s-config"),
        ("deployment", "s"),
        ("service", "s"),
    ] {
        assert!(
            get_json(kind, &ns, name).is_none(),
            "{kind} {name} left behind"
        );
    }
    let order: Vec<String> = op
        .records()
        .iter()
        .filter(|r| r["message"] == "deleted child in order")
        .map(|r| r["kind"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(
        order,
        vec!["Service", "Deployment", "ConfigMap"],
        "{order:?}"
    );
    common::delete_namespace(&ns);
}
