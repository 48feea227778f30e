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
    // From the cluster alone (ruleop runs from files: no Rule says what the kind's children
    // are), the kind by any name discovery gives it, and as a kubectl plugin.
    for kind in ["website", "websites", "WebSite.sre.example.com"] {
        let (code, out, err) =
            common::ruleop_cli(&["trace", &format!("{kind}/my-blog"), "-n", &ns], true);
        assert_eq!(code, 0, "{kind}: {err}");
        let first = out.lines().next().unwrap_or_default();
        assert!(
            first.starts_with("root cause: Deployment/my-blog-web: not made: ApplyRefused")
                && first.contains("restartPolicy"),
            "{kind}: {out}"
        );
        assert!(out.contains("└─ Service/my-blog-web"), "{kind}: {out}");
    }
    let plugins = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_ruleop"),
        plugins.path().join("kubectl-ruleop"),
    )
    .unwrap();
    let path = format!(
        "{}:{}",
        plugins.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = std::process::Command::new("kubectl")
        .args([
            "ruleop",
            "trace",
            "website/my-blog",
            "-n",
            &ns,
            "-o",
            "json",
        ])
        .env("PATH", path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let t: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(t["rootCause"]["kind"], "Deployment", "{t}");
    assert_eq!(t["rule"], "website", "{t}");

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

/// A kind's short name, as its CRD declares it (`schema.shortNames`), names it to `trace`.
#[tokio::test]
async fn trace_takes_the_kinds_short_name_from_discovery() {
    let client = common::client().await;
    let ns = common::namespace(&client, "trace-short").await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("note.yaml");
    std::fs::write(
        &file,
        "name: tracenote\nwatch: {group: trace.ruleop.dev, version: v1, resource: tracenotes}\nschema:\n  kind: TraceNote\n  shortNames: [tnote]\n  spec:\n    text: string | default=hi\nchildren:\n  - id: text\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: \"{{ name }}-text\"}\n      data: {text: \"{{ spec.text }}\"}\n",
    )
    .unwrap();
    let rules = file.to_str().unwrap();
    let (code, crd, err) = common::ruleop_cli(&["crd", "--rules", rules], false);
    assert_eq!(code, 0, "{err}");
    kubectl_ok(&["apply", "--server-side", "-f", "-"], Some(&crd));
    kubectl_ok(
        &[
            "wait",
            "--for=condition=Established",
            "crd/tracenotes.trace.ruleop.dev",
            "--timeout=60s",
        ],
        None,
    );
    let _op = Operator::start(&ns, &[rules], &[]);
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: trace.ruleop.dev/v1\nkind: TraceNote\nmetadata: {{name: note1, namespace: {ns}}}\nspec: {{}}\n"
        )),
    );
    eventually(T, "the note's ConfigMap", || async {
        get_json("configmap", &ns, "note1-text").map(|_| ())
    })
    .await;
    let out = eventually(T, "the note traced", || async {
        let (code, out, _) =
            common::ruleop_cli(&["trace", "tnote/note1", "-n", &ns, "-o", "json"], true);
        let t: Value = serde_json::from_str(&out).ok()?;
        (code == 0 && t["resource"]["synced"] == true).then_some(t)
    })
    .await;
    assert_eq!(out["resource"]["kind"], "TraceNote", "{out}");
    assert_eq!(out["children"][0]["name"], "note1-text", "{out}");
    common::delete_namespace(&ns);
}
