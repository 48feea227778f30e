//! What ruleop keeps when it cannot see or write everything, run as a ServiceAccount
//! bound to the RBAC `ruleop rbac` generates: a watch that has not listed prunes nothing,
//! and a rule that drops ordered deletion can still release its finalizers.

mod common;

use common::access::{edit_rules, generated_rbac, service_account_kubeconfig};
use common::{
    Operator, apply_box, condition, eventually, get_json, install_crds, kubectl, kubectl_ok,
    wait_json,
};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(60);
const CRD: &str = "tests/fixtures/trust/crd.yaml";
const WATCH: &str = "watch: {group: trust.ruleop.dev, version: v1, resource: boxes}";

/// Applies Box `f` and waits until ruleop holds it with its ordered-deletion finalizer and
/// has made its ConfigMap `f-cm`.
async fn box_held_by_its_finalizer(ns: &str) {
    apply_box(ns, "f", json!({}));
    wait_json("box", ns, "f", "held by the finalizer", |b| {
        b["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == "ruleop.dev/ordered-deletion"))
    })
    .await;
    wait_json("configmap", ns, "f-cm", "made", |_| true).await;
}

fn uid(v: &Value) -> String {
    v["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Objects read through a label selector are not taken for gone while their watch has not
/// listed: the objects made per item stay, untouched, until it lists.
#[tokio::test]
async fn a_selector_whose_watch_has_not_listed_prunes_nothing() {
    let client = common::client().await;
    install_crds(&[CRD]);
    let ns = common::namespace(&client, "trust-unlisted").await;
    let op_ns = common::namespace(&client, "trust-unlisted-op").await;
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.yaml");
    std::fs::write(
        &rules,
        format!(
            "name: peers\n{WATCH}\nexisting:\n  - {{id: peers, apiVersion: v1, kind: Secret, selector: {{team: x}}}}\nchildren:\n  - id: allow\n    forEach: existing.peers\n    as: peer\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: \"{{{{ name }}}}-{{{{ peer.metadata.name }}}}\"}}, data: {{peer: \"{{{{ peer.metadata.name }}}}\"}}}}\n"
        ),
    )
    .unwrap();
    let rules = rules.to_str().unwrap().to_string();
    for s in ["s1", "s2"] {
        let secret = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": s, "namespace": ns, "labels": {"team": "x"}}});
        kubectl_ok(&["apply", "-f", "-"], Some(&secret.to_string()));
    }
    let mut full = Operator::start(&ns, &[&rules], &["--lease-namespace", &op_ns]);
    apply_box(&ns, "b", json!({}));
    let uids: Vec<String> = {
        let mut v = Vec::new();
        for s in ["s1", "s2"] {
            v.push(uid(&wait_json(
                "configmap",
                &ns,
                &format!("b-{s}"),
                "made",
                |_| true,
            )
            .await));
        }
        v
    };
    full.kill();

    // Now as an account that may not list Secrets: the Secrets' watch cannot list.
    let name = format!("ruleop-{op_ns}");
    let rbac = generated_rbac(&[&rules], &ns, &op_ns, &name, |r| r.contains(&"secrets"));
    kubectl_ok(&["apply", "-f", "-"], Some(&rbac));
    // The generated RBAC binds the ServiceAccount `ruleop` of the operator's namespace.
    let sa = "ruleop";
    let (_kc_dir, kc) = service_account_kubeconfig(&op_ns, sa);
    let _limited = Operator::start_with_env(
        &ns,
        &[&rules],
        &["--lease-namespace", &op_ns],
        &[("KUBECONFIG", &kc)],
    );
    // It runs, and says its children wait for the Secrets to be listed.
    eventually(T, "the box waiting for the Secrets' watch", || async {
        get_json("box", &ns, "b")
            .filter(|b| {
                condition(b, "Synced").is_some_and(|c| {
                    c["reason"] == "Waiting"
                        && c["message"]
                            .as_str()
                            .is_some_and(|m| m.contains("has not listed"))
                })
            })
            .map(|_| ())
    })
    .await;
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(15) {
        for (s, u) in ["s1", "s2"].iter().zip(&uids) {
            let cm = get_json("configmap", &ns, &format!("b-{s}"))
                .unwrap_or_else(|| panic!("b-{s} was pruned while the Secrets were not listed"));
            assert_eq!(&uid(&cm), u);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Once the Secrets can be listed, the rule goes on with the same objects.
    let grant = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "read-secrets", "namespace": ns},
        "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]}]});
    let bind = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "read-secrets", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-secrets"},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": op_ns}]});
    kubectl_ok(&["apply", "-f", "-"], Some(&grant.to_string()));
    kubectl_ok(&["apply", "-f", "-"], Some(&bind.to_string()));
    eventually(T, "the box synced again", || async {
        get_json("box", &ns, "b")
            .filter(|b| condition(b, "Synced").is_some_and(|c| c["reason"] == "Applied"))
            .map(|_| ())
    })
    .await;
    for (s, u) in ["s1", "s2"].iter().zip(&uids) {
        assert_eq!(
            &uid(&get_json("configmap", &ns, &format!("b-{s}")).unwrap()),
            u
        );
    }
    common::delete_namespace(&ns);
    common::delete_namespace(&op_ns);
}

/// A rule that drops `deletion: Ordered`, with its RBAC generated again, still releases the
/// finalizers it put on its resources: deleting one completes, and its children follow.
#[tokio::test]
async fn dropping_ordered_deletion_with_the_rbac_regenerated_still_releases_finalizers() {
    let client = common::client().await;
    install_crds(&[CRD]);
    let ns = common::namespace(&client, "trust-final").await;
    let op_ns = common::namespace(&client, "trust-final-op").await;
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.yaml");
    let rule = |ordered: bool| {
        format!(
            "name: final\n{WATCH}\n{}children:\n  - id: cm\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: \"{{{{ name }}}}-cm\"}}, data: {{v: \"{{{{ spec.v | default('1') }}}}\"}}}}\n",
            if ordered { "deletion: Ordered\n" } else { "" }
        )
    };
    std::fs::write(&rules, rule(true)).unwrap();
    let rules = rules.to_str().unwrap().to_string();
    let name = format!("ruleop-{op_ns}");
    let apply_rbac = || {
        let rbac = generated_rbac(&[&rules], &ns, &op_ns, &name, |_| false);
        kubectl_ok(&["apply", "-f", "-"], Some(&rbac));
    };
    apply_rbac();
    let (_kc_dir, kc) = service_account_kubeconfig(&op_ns, "ruleop");
    let _op = Operator::start_with_env(
        &ns,
        &[&rules],
        &["--lease-namespace", &op_ns, "--rules-poll-seconds", "1"],
        &[("KUBECONFIG", &kc)],
    );
    box_held_by_its_finalizer(&ns).await;

    // The rule no longer asks for order; its RBAC is generated again from it.
    std::fs::write(dir.path().join("rules.yaml"), rule(false)).unwrap();
    apply_rbac();
    // The rule goes on: an edit of the resource reaches its child.
    apply_box(&ns, "f", json!({"v": "2"}));
    wait_json("configmap", &ns, "f-cm", "v 2", |c| c["data"]["v"] == "2").await;
    kubectl_ok(&["delete", "box", "f", "-n", &ns, "--wait=false"], None);
    eventually(T, "the box gone", || async {
        get_json("box", &ns, "f").is_none().then_some(())
    })
    .await;
    eventually(T, "its child collected", || async {
        get_json("configmap", &ns, "f-cm").is_none().then_some(())
    })
    .await;
    let (_, out, _) = kubectl(&["get", "box", "-n", &ns], None);
    assert!(!out.contains(" f "), "{out}");
    common::delete_namespace(&ns);
    common::delete_namespace(&op_ns);
}

/// `rbac` with `patch` and `update` on the watched kind taken away (`boxes` and its
/// subresources): ruleop can no longer release its finalizers.
fn without_writes_on_boxes(rbac: &str) -> String {
    edit_rules(rbac, |rules| {
        for r in rules.iter_mut() {
            let on_boxes = r["resources"].as_array().is_some_and(|rs| {
                rs.iter()
                    .any(|x| x.as_str().is_some_and(|x| x.starts_with("boxes")))
            });
            if on_boxes && let Some(verbs) = r["verbs"].as_array_mut() {
                verbs.retain(|v| v != "patch" && v != "update");
            }
        }
        rules.retain(|r| r["verbs"].as_array().is_some_and(|v| !v.is_empty()));
    })
}

/// A resource whose deletion cannot go on (the RBAC no longer lets ruleop release its
/// finalizer) says so in a `DeletionBlocked` Warning Event, and goes once it may.
#[tokio::test]
async fn a_deletion_that_cannot_release_its_finalizer_says_so_and_goes_once_allowed() {
    let client = common::client().await;
    install_crds(&[CRD]);
    let ns = common::namespace(&client, "trust-blocked").await;
    let op_ns = common::namespace(&client, "trust-blocked-op").await;
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.yaml");
    let rule = format!(
        "name: blocked\n{WATCH}\ndeletion: Ordered\nchildren:\n  - id: cm\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: \"{{{{ name }}}}-cm\"}}, data: {{v: \"1\"}}}}\n"
    );
    std::fs::write(&rules, rule).unwrap();
    let rules = rules.to_str().unwrap().to_string();
    let name = format!("ruleop-{op_ns}");
    let rbac = generated_rbac(&[&rules], &ns, &op_ns, &name, |_| false);
    kubectl_ok(&["apply", "-f", "-"], Some(&rbac));
    let (_kc_dir, kc) = service_account_kubeconfig(&op_ns, "ruleop");
    let _op = Operator::start_with_env(
        &ns,
        &[&rules],
        &["--lease-namespace", &op_ns],
        &[("KUBECONFIG", &kc)],
    );
    box_held_by_its_finalizer(&ns).await;

    kubectl_ok(&["apply", "-f", "-"], Some(&without_writes_on_boxes(&rbac)));
    let account = format!("system:serviceaccount:{op_ns}:ruleop");
    eventually(T, "the authorizer refusing the patch", || async {
        let (_, out, _) = kubectl(
            &[
                "auth",
                "can-i",
                "patch",
                "boxes.trust.ruleop.dev",
                "-n",
                &ns,
                "--as",
                &account,
            ],
            None,
        );
        (out.trim() == "no").then_some(())
    })
    .await;
    kubectl_ok(&["delete", "box", "f", "-n", &ns, "--wait=false"], None);
    let note = eventually(T, "a DeletionBlocked Event on the box", || async {
        let (_, out, _) = kubectl(
            &[
                "get",
                "events",
                "-n",
                &ns,
                "--field-selector",
                "reason=DeletionBlocked,involvedObject.name=f",
                "-o",
                "json",
            ],
            None,
        );
        let list: Value = serde_json::from_str(&out).ok()?;
        let e = list["items"].as_array()?.first()?.clone();
        (e["type"] == "Warning").then(|| e["message"].as_str().unwrap_or("").to_string())
    })
    .await;
    assert!(
        note.contains("forbidden"),
        "the API server's answer: {note}"
    );
    assert!(
        get_json("box", &ns, "f").is_some(),
        "held while it may not release"
    );

    kubectl_ok(&["apply", "-f", "-"], Some(&rbac));
    eventually(
        Duration::from_secs(120),
        "the box gone once allowed",
        || async { get_json("box", &ns, "f").is_none().then_some(()) },
    )
    .await;
    common::delete_namespace(&ns);
    common::delete_namespace(&op_ns);
}
