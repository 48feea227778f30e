//! `ruleop trace` on the real control plane: a WebSite whose Deployment the API server
//! refuses is traced with that child first, with the API server's whole message; once
//! fixed, the tree says Synced and Ready, and `-o json` says the same as data.

mod common;

use common::{Operator, eventually, get_json, install_crds, kubectl_ok, manifest_in};
use serde_json::Value;
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

fn trace(ns: &str, rules: &str, output: &str) -> (i32, String, String) {
    common::ruleop_cli(
        &[
            "trace",
            "website/my-blog",
            "-n",
            ns,
            "--rules",
            rules,
            "-o",
            output,
        ],
        true,
    )
}

#[tokio::test]
async fn trace_names_the_refused_child_first_with_its_message() {
    let client = common::client().await;
    install_crds(&["deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "trace").await;
    let dir = tempfile::tempdir().unwrap();
    let (good, broken) = common::website_rule_and_refused();
    let file = dir.path().join("website.yaml");
    std::fs::write(&file, &broken).unwrap();
    let rules = file.to_str().unwrap().to_string();
    let _op = Operator::start(&ns, &[&rules], &[]);
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&manifest_in("examples/website.yaml", &ns)),
    );
    eventually(T, "the WebSite not Synced", || async {
        let w = get_json("website", &ns, "my-blog")?;
        (common::condition(&w, "Synced")?["reason"] == "ApplyRefused").then_some(())
    })
    .await;
    let (code, out, err) = trace(&ns, &rules, "tree");
    assert_eq!(code, 0, "{err}");
    let first = out.lines().next().unwrap_or_default();
    assert!(
        first.starts_with("root cause: child `deployment` (Deployment/my-blog-web): ")
            && first.contains("ApplyRefused")
            && first.contains("restartPolicy"),
        "{out}"
    );
    assert!(out.contains("WebSite/my-blog"), "{out}");
    assert!(out.contains("Service/my-blog-web"), "{out}");

    // Fixed: Synced, and its children as they are.
    std::fs::write(&file, &good).unwrap();
    eventually(T, "the WebSite Synced", || async {
        let w = get_json("website", &ns, "my-blog")?;
        (common::condition(&w, "Synced")?["status"] == "True").then_some(())
    })
    .await;
    let (code, out, err) = trace(&ns, &rules, "json");
    assert_eq!(code, 0, "{err}");
    let t: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(t["resource"]["synced"], true, "{t}");
    let kinds: Vec<&str> = t["children"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["kind"].as_str())
        .collect();
    assert_eq!(kinds, ["Deployment", "Service"], "{t}");
    assert!(
        t["rootCause"].is_null() || t["rootCause"]["synced"] != false,
        "no child fails to sync: {t}"
    );
    common::delete_namespace(&ns);
}
