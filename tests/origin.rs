//! The origin's operators, exactly: its walkthrough with its own sample files, and a
//! switch from the typed operators to ruleop that recreates nothing and restarts no pod.

mod common;

use common::{Operator, condition, eventually, get_json, install_crds, kubectl_ok, wait_json};
use serde_json::Value;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(60);

fn uid(v: &Value) -> String {
    v["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn columns(kind: &str, ns: &str, name: &str) -> Vec<String> {
    kubectl_ok(&["get", kind, name, "-n", ns, "--no-headers"], None)
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

fn replica_sets(ns: &str, selector: &str) -> Vec<String> {
    let out = kubectl_ok(&["get", "rs", "-n", ns, "-l", selector, "-o", "name"], None);
    let mut v: Vec<String> = out.lines().map(str::to_string).collect();
    v.sort();
    v
}

async fn gone(kind: &str, ns: &str, name: &str) {
    eventually(T, &format!("{kind}/{name} gone"), || async {
        get_json(kind, ns, name).is_none().then_some(())
    })
    .await
}

#[tokio::test]
async fn the_origins_website_walkthrough_runs_with_its_own_sample() {
    let _ = common::client().await;
    install_crds(&["deploy/crds/websites.sre.example.com.yaml"]);
    let ns = "default";
    let _op = Operator::start(ns, &["rules/website.yaml"], &[]);
    let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/website.yaml");
    kubectl_ok(&["apply", "-f", sample], None);
    wait_json("website", ns, "my-blog", "3 ready", |w| {
        w["status"]["readyReplicas"] == 3
    })
    .await;
    // kubectl get website: NAME IMAGE REPLICAS READY AGE
    let row = columns("website", ns, "my-blog");
    assert_eq!(&row[..4], ["my-blog", "nginx:1.27", "3", "3"], "{row:?}");
    let d = columns("deployment", ns, "my-blog-web");
    assert_eq!(&d[..2], ["my-blog-web", "3/3"], "{d:?}");
    let s = columns("service", ns, "my-blog-web");
    assert_eq!(s[1], "ClusterIP", "{s:?}");
    assert_eq!(s[4], "80/TCP", "{s:?}");
    let described = kubectl_ok(&["describe", "website", "my-blog", "-n", ns], None);
    assert!(
        described
            .lines()
            .any(|l| l.contains("Ready Replicas:") && l.trim_end().ends_with('3')),
        "{described}"
    );
    assert!(
        described.contains("http://my-blog-web.default.svc.cluster.local:80"),
        "{described}"
    );
    kubectl_ok(
        &[
            "patch",
            "website",
            "my-blog",
            "-n",
            ns,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"replicas":5}}"#,
        ],
        None,
    );
    wait_json("deployment", ns, "my-blog-web", "scaled to 5", |d| {
        d["spec"]["replicas"] == 5
    })
    .await;
    kubectl_ok(&["delete", "-f", sample], None);
    gone("deployment", ns, "my-blog-web").await;
    gone("service", ns, "my-blog-web").await;
}

#[tokio::test]
async fn the_typed_website_operators_children_are_taken_over_and_roll_out_normally() {
    let client = common::client().await;
    install_crds(&["deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "origin-takeover").await;
    let cr = format!(
        "apiVersion: sre.example.com/v1alpha1\nkind: WebSite\nmetadata: {{name: shop, namespace: {ns}}}\nspec: {{image: \"nginx:1.27\", replicas: 2}}\n"
    );
    kubectl_ok(&["apply", "-f", "-"], Some(&cr));
    let site = get_json("website", &ns, "shop").unwrap();
    kubectl_ok(
        &["create", "--field-manager=manager", "-f", "-"],
        Some(&common::typed_website_children(
            &ns,
            "shop",
            &uid(&site),
            "nginx:1.27",
            2,
            "",
        )),
    );
    let selector = "app.kubernetes.io/instance=shop";
    eventually(T, "the typed operator's pods ready", || async {
        get_json("deployment", &ns, "shop-web")
            .filter(|d| d["status"]["readyReplicas"] == 2)
            .map(|_| ())
    })
    .await;
    let d0 = get_json("deployment", &ns, "shop-web").unwrap();
    let s0 = get_json("service", &ns, "shop-web").unwrap();
    let rs0 = replica_sets(&ns, selector);
    assert_eq!(rs0.len(), 1);

    let started = Instant::now();
    let _op = Operator::start(&ns, &["rules/website.yaml"], &[]);
    let w = wait_json("website", &ns, "shop", "Synced and status", |w| {
        condition(w, "Synced").is_some_and(|c| c["reason"] == "Applied")
            && w["status"]["readyReplicas"] == 2
    })
    .await;
    println!(
        "typed children taken over, status filled {:.1}s after ruleop started",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        w["status"]["url"],
        format!("http://shop-web.{ns}.svc.cluster.local:80")
    );
    let d1 = get_json("deployment", &ns, "shop-web").unwrap();
    let s1 = get_json("service", &ns, "shop-web").unwrap();
    assert_eq!(uid(&d1), uid(&d0), "same Deployment");
    assert_eq!(uid(&s1), uid(&s0), "same Service");
    assert_eq!(
        d1["spec"]["template"], d0["spec"]["template"],
        "no pod restarted"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(replica_sets(&ns, selector), rs0, "no new ReplicaSet");

    // A change of the resource rolls out as usual.
    kubectl_ok(
        &[
            "patch",
            "website",
            "shop",
            "-n",
            &ns,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"image":"nginx:1.28"}}"#,
        ],
        None,
    );
    wait_json("deployment", &ns, "shop-web", "new image", |d| {
        d["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.28"
    })
    .await;
    eventually(T, "a new ReplicaSet for the new image", || async {
        (replica_sets(&ns, selector).len() == 2).then_some(())
    })
    .await;
    common::delete_namespace(&ns);
}

/// Whether the API server serves `myapps/status` (the shipped CRD) or not (the origin's).
fn serves_myapp_status() -> bool {
    let out = kubectl_ok(&["get", "--raw", "/apis/myscheme.example.com/v1"], None);
    out.contains("myapps/status")
}

async fn install_myapp_crd(file: &str, with_status: bool) {
    install_crds(&[file]);
    eventually(T, "the MyApp CRD served as installed", || async {
        (serves_myapp_status() == with_status).then_some(())
    })
    .await;
}

#[tokio::test]
async fn the_origins_myapp_runs_with_its_crd_as_printed_and_its_children_are_taken_over() {
    let _ = common::client().await;
    // The origin's CRD has no status subresource: ruleop writes status through the object.
    install_myapp_crd("tests/fixtures/origin/myapp-crd.yaml", false).await;
    let ns = "default";
    let op = Operator::start(ns, &["rules/myapp.yaml"], &[]);
    let sample = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/myapp.yaml");
    kubectl_ok(&["apply", "-f", sample], None);
    wait_json("deployment", ns, "my-app", "2 ready", |d| {
        d["status"]["readyReplicas"] == 2
    })
    .await;
    let d = get_json("deployment", ns, "my-app").unwrap();
    assert_eq!(d["metadata"]["labels"]["app"], "my-app");
    assert_eq!(d["spec"]["selector"]["matchLabels"]["app"], "my-app");
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["name"],
        "app"
    );
    let m = wait_json("myapp", ns, "my-app", "status.replicas", |m| {
        m["status"]["replicas"] == 2
    })
    .await;
    // The schema keeps only `replicas`: ruleop learns it and stops writing the rest, so
    // the resource settles (no status write on every reconcile).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let settled = get_json("myapp", ns, "my-app").unwrap();
    assert_eq!(
        common::view::written_view(&settled, true),
        common::view::written_view(&m, true),
        "the status settles"
    );
    assert!(
        op.logs().contains("status schema drops this field"),
        "{}",
        op.logs()
    );
    kubectl_ok(
        &[
            "patch",
            "myapp",
            "my-app",
            "-n",
            ns,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"replicas":3}}"#,
        ],
        None,
    );
    wait_json("deployment", ns, "my-app", "scaled to 3", |d| {
        d["spec"]["replicas"] == 3
    })
    .await;
    wait_json("myapp", ns, "my-app", "status.replicas 3", |m| {
        m["status"]["replicas"] == 3
    })
    .await;
    kubectl_ok(&["delete", "-f", sample], None);
    gone("deployment", ns, "my-app").await;
    drop(op);

    // The typed MyApp operator's Deployment is taken over: same uid, same ReplicaSet.
    let client = common::client().await;
    let tns = common::namespace(&client, "origin-myapp").await;
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: myscheme.example.com/v1\nkind: MyApp\nmetadata: {{name: legacy, namespace: {tns}}}\nspec: {{replicas: 1, image: \"nginx:1.27\"}}\n"
        )),
    );
    let app = get_json("myapp", &tns, "legacy").unwrap();
    kubectl_ok(
        &["create", "--field-manager=manager", "-f", "-"],
        Some(&format!(
            "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: legacy, namespace: {tns}, labels: {{app: legacy}}, ownerReferences: [{{apiVersion: myscheme.example.com/v1, kind: MyApp, name: legacy, uid: {}, controller: true, blockOwnerDeletion: true}}]}}\nspec:\n  replicas: 1\n  selector: {{matchLabels: {{app: legacy}}}}\n  template:\n    metadata: {{labels: {{app: legacy}}}}\n    spec: {{containers: [{{name: app, image: \"nginx:1.27\"}}]}}\n",
            uid(&app)
        )),
    );
    eventually(T, "the typed operator's ReplicaSet", || async {
        (replica_sets(&tns, "app=legacy").len() == 1).then_some(())
    })
    .await;
    let d0 = get_json("deployment", &tns, "legacy").unwrap();
    let rs0 = replica_sets(&tns, "app=legacy");
    let _op = Operator::start(&tns, &["rules/myapp.yaml"], &[]);
    wait_json("deployment", &tns, "legacy", "adopted", |d| {
        d["metadata"]["labels"]["ruleop.dev/rule"] == "myapp"
    })
    .await;
    wait_json("myapp", &tns, "legacy", "status", |m| {
        m["status"]["replicas"] == 1
    })
    .await;
    let d1 = get_json("deployment", &tns, "legacy").unwrap();
    assert_eq!(uid(&d1), uid(&d0));
    assert_eq!(d1["spec"]["template"], d0["spec"]["template"]);
    assert_eq!(replica_sets(&tns, "app=legacy"), rs0, "no new ReplicaSet");
    common::delete_namespace(&tns);
    // Leave the shipped CRD in place for the other tests.
    install_myapp_crd("deploy/crds/myapps.myscheme.example.com.yaml", true).await;
}
