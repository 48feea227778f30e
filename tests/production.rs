//! Running ruleop in production, on the real control plane: hot reload with last-good
//! fallback, admin endpoints, Events, least-privilege RBAC, deploy/. (Leader election
//! and shutdown on the shared control plane: `tests/lifecycle.rs`.)

mod common;

use common::{
    Operator, condition, eventually, get_json, http_get, http_get_as, install_crds, kubectl,
    kubectl_ok, manifest_in, wait_json,
};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(60);

fn website(ns: &str, name: &str) -> String {
    json!({"apiVersion": "sre.example.com/v1alpha1", "kind": "WebSite", "metadata": {"name": name, "namespace": ns}, "spec": {"image": "nginx:1.27", "replicas": 1}}).to_string()
}

/// The shipped WebSite rule with one more label on the Deployment (its own metadata
/// only: the selector and the pod template keep the origin's three labels).
fn website_rule_with_label(value: &str) -> String {
    let rule = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/rules/website.yaml"))
        .unwrap();
    let anchor = "labels: &labels\n          app.kubernetes.io/name: website\n          app.kubernetes.io/instance: \"{{ name }}\"\n          app.kubernetes.io/managed-by: website-operator\n";
    let inline = "{app.kubernetes.io/name: website, app.kubernetes.io/instance: \"{{ name }}\", app.kubernetes.io/managed-by: website-operator}";
    let labelled = format!(
        "labels:\n          app.kubernetes.io/name: website\n          app.kubernetes.io/instance: \"{{{{ name }}}}\"\n          app.kubernetes.io/managed-by: website-operator\n          tier: {value}\n"
    );
    assert!(rule.contains(anchor), "the shipped rule's labels changed");
    rule.replacen(anchor, &labelled, 1)
        .replace("*labels", inline)
}

fn metric(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn rule_edits_apply_without_a_restart_and_a_broken_edit_keeps_the_last_good_rule() {
    let client = common::client().await;
    install_crds(&["deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "prod-reload").await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("website.yaml");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/rules/website.yaml"),
        &file,
    )
    .unwrap();
    let mut op = Operator::start(
        &ns,
        &[dir.path().to_str().unwrap()],
        &["--rules-poll-seconds", "60"],
    );
    let pid = op.pid();
    for name in ["a", "b"] {
        kubectl_ok(&["apply", "-f", "-"], Some(&website(&ns, name)));
    }
    for name in ["a-web", "b-web"] {
        wait_json("deployment", &ns, name, "exists", |_| true).await;
    }

    // Edit: a new label on the Deployment template reaches every WebSite's Deployment.
    let edited = Instant::now();
    std::fs::write(&file, website_rule_with_label("web")).unwrap();
    for name in ["a-web", "b-web"] {
        eventually(
            Duration::from_secs(15),
            &format!("label tier=web on {name} within 15s"),
            || async {
                get_json("deployment", &ns, name)
                    .filter(|d| d["metadata"]["labels"]["tier"] == "web")
                    .map(|_| ())
            },
        )
        .await;
    }
    println!(
        "hot reload: label on both Deployments {:.1}s after the edit",
        edited.elapsed().as_secs_f64()
    );
    assert!(op.running() && op.pid() == pid, "no restart");

    // A broken edit: the last good rule keeps working, the error is logged and counted.
    let good = std::fs::read_to_string(&file).unwrap();
    std::fs::write(
        &file,
        good.replace("\"{{ name }}-web\"", "\"{{ name -web\""),
    )
    .unwrap();
    let addr = op.admin_addr().await;
    // The edit breaks two templates (the Deployment's and the Service's names).
    let metrics = eventually(Duration::from_secs(15), "rule_load_errors 2", || async {
        let (_, m) = http_get(&addr, "/metrics");
        (metric(&m, "ruleop_rule_load_errors") == Some(2.0)).then_some(m)
    })
    .await;
    assert!(
        metric(&metrics, "ruleop_rule_load_failures_total").unwrap_or(0.0) >= 1.0,
        "{metrics}"
    );
    let logged = op.records().into_iter().find(|r| {
        r["level"] == "ERROR"
            && r["file"]
                .as_str()
                .is_some_and(|f| f.ends_with("website.yaml"))
    });
    let logged = logged.expect("the load error is logged");
    let line = good
        .lines()
        .position(|l| l.contains("\"{{ name }}-web\""))
        .unwrap()
        + 1;
    assert!(
        logged["error"].as_str().unwrap().contains(&format!(
            "website.yaml:{line}: rule `website`, child `deployment`"
        )),
        "file and line in the log: {logged}"
    );
    let (_, status) = http_get(&addr, "/status");
    let status: Value = serde_json::from_str(&status).unwrap();
    assert_eq!(status["errors"].as_array().unwrap().len(), 2, "{status}");
    kubectl_ok(&["apply", "-f", "-"], Some(&website(&ns, "c")));
    let c = wait_json(
        "deployment",
        &ns,
        "c-web",
        "made by the last good rule",
        |_| true,
    )
    .await;
    assert_eq!(c["metadata"]["labels"]["tier"], "web");

    // The fix recovers.
    std::fs::write(&file, website_rule_with_label("web2")).unwrap();
    for name in ["a-web", "b-web", "c-web"] {
        wait_json("deployment", &ns, name, "tier=web2", |d| {
            d["metadata"]["labels"]["tier"] == "web2"
        })
        .await;
    }
    eventually(Duration::from_secs(15), "rule_load_errors 0", || async {
        let (_, m) = http_get(&addr, "/metrics");
        (metric(&m, "ruleop_rule_load_errors") == Some(0.0)).then_some(())
    })
    .await;
    assert!(op.running() && op.pid() == pid, "still no restart");

    // A new rules file starts a new rule; deleting it stops the rule and leaves its children.
    install_crds(&["deploy/crds/myapps.myscheme.example.com.yaml"]);
    let myapp = dir.path().join("myapp.yaml");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/rules/myapp.yaml"),
        &myapp,
    )
    .unwrap();
    let app = |name: &str| {
        json!({"apiVersion": "myscheme.example.com/v1", "kind": "MyApp", "metadata": {"name": name, "namespace": ns}, "spec": {"image": "nginx"}}).to_string()
    };
    kubectl_ok(&["apply", "-f", "-"], Some(&app("kept")));
    wait_json("deployment", &ns, "kept", "made by the new rule", |_| true).await;
    std::fs::remove_file(&myapp).unwrap();
    eventually(
        Duration::from_secs(15),
        "the myapp rule stopped",
        || async {
            op.records()
                .iter()
                .any(|r| {
                    r["message"]
                        .as_str()
                        .is_some_and(|m| m.starts_with("rule removed"))
                })
                .then_some(())
        },
    )
    .await;
    kubectl_ok(&["apply", "-f", "-"], Some(&app("orphan")));
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        get_json("deployment", &ns, "orphan").is_none(),
        "a deleted rule makes nothing"
    );
    assert!(
        get_json("deployment", &ns, "kept").is_some(),
        "a deleted rule's children stay"
    );
    assert!(op.running() && op.pid() == pid, "still no restart");
    common::delete_namespace(&ns);
}

#[tokio::test]
async fn admin_endpoints_answer_and_events_show_in_describe() {
    let client = common::client().await;
    install_crds(&["deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "prod-admin").await;
    let op = Operator::start(&ns, &["rules/website.yaml"], &[]);
    let addr = op.admin_addr().await;
    assert_eq!(http_get(&addr, "/livez").0, 200);
    eventually(T, "/readyz 200", || async {
        (http_get(&addr, "/readyz").0 == 200).then_some(())
    })
    .await;
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&manifest_in("examples/website.yaml", &ns)),
    );
    wait_json("website", &ns, "my-blog", "ready", |w| {
        condition(w, "Ready").is_some_and(|c| c["status"] == "True")
    })
    .await;
    let (code, m) = http_get(&addr, "/metrics");
    assert_eq!(code, 200);
    assert!(
        metric(&m, "ruleop_reconciles_total{rule=\"website\"}").unwrap_or(0.0) >= 1.0,
        "{m}"
    );
    assert!(
        m.contains("ruleop_reconcile_duration_seconds_bucket{le="),
        "{m}"
    );
    assert_eq!(
        metric(
            &m,
            "ruleop_writes_total{rule=\"website\",action=\"create\"}"
        ),
        Some(2.0),
        "{m}"
    );
    assert_eq!(metric(&m, "ruleop_leader"), Some(1.0));
    let described = eventually(T, "Created events", || async {
        let d = kubectl_ok(&["describe", "website", "my-blog", "-n", &ns], None);
        (d.contains("Created")
            && d.contains("Deployment my-blog-web")
            && d.contains("Service my-blog-web"))
        .then_some(d)
    })
    .await;
    println!(
        "{}",
        described
            .lines()
            .skip_while(|l| !l.starts_with("Events:"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    common::delete_namespace(&ns);
}

/// `/readyz` answers whoever reaches the admin port: it says ready or not and why in
/// categories (rules synced, rules files with errors), never a rule's file, name or text;
/// `/status`, on its own listener here (`--status-addr`), says which.
#[tokio::test]
async fn readyz_says_why_in_categories_and_status_names_them() {
    let client = common::client().await;
    install_crds(&["deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "prod-readyz").await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/rules/website.yaml"),
        dir.path().join("website.yaml"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("private-team-rule.yaml"),
        "name: private-team-rule\nwatch: {group: x.io, version: '', resource: things}\n",
    )
    .unwrap();
    let op = Operator::start(
        &ns,
        &[dir.path().to_str().unwrap()],
        &["--status-addr", "127.0.0.1:0"],
    );
    let addr = op.admin_addr().await;
    let status_addr = eventually(T, "the status server's address", || async {
        op.records()
            .iter()
            .find(|r| r["message"] == "status server listening")
            .and_then(|r| r["addr"].as_str().map(str::to_string))
    })
    .await;
    let body = eventually(T, "/readyz 200", || async {
        let (code, body) = http_get(&addr, "/readyz");
        (code == 200).then_some(body)
    })
    .await;
    assert!(body.starts_with("ok\n"), "{body}");
    assert!(body.contains("rules: 1 synced"), "{body}");
    assert!(
        body.contains("rules load: 1 error(s)"),
        "the broken file is counted: {body}"
    );
    let dir_text = dir.path().display().to_string();
    for hidden in [
        "private-team-rule",
        "website",
        dir_text.as_str(),
        "watch.version",
    ] {
        assert!(!body.contains(hidden), "/readyz tells {hidden:?}: {body}");
    }
    assert_eq!(
        http_get(&addr, "/status").0,
        404,
        "/status is on its own listener"
    );
    let (code, status) = http_get(&status_addr, "/status");
    assert_eq!(code, 200);
    assert!(
        status.contains("private-team-rule.yaml") && status.contains("\"website\""),
        "{status}"
    );
    common::delete_namespace(&ns);
}

/// `--metrics-auth kubernetes`: /metrics answers a token the API server knows, of a user
/// allowed `get` on it, and nobody else; the probes stay open.
#[tokio::test]
async fn metrics_answer_only_a_token_allowed_to_read_them() {
    let client = common::client().await;
    install_crds(&["deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "metricsauth").await;
    let role = common::metrics_reader(&ns, &["nobody"]);
    let op = Operator::start(
        &ns,
        &["rules/website.yaml"],
        &["--metrics-auth", "kubernetes"],
    );
    let addr = op.admin_addr().await;
    let token = |sa: &str| {
        kubectl_ok(&["create", "token", sa, "-n", &ns], None)
            .trim()
            .to_string()
    };
    let (reader, nobody) = (token("reader"), token("nobody"));

    assert_eq!(http_get(&addr, "/metrics").0, 401, "no token");
    assert_eq!(http_get_as(&addr, "/metrics", Some("not-a-token")).0, 401);
    let (code, body) = http_get_as(&addr, "/metrics", Some(&nobody));
    assert_eq!(code, 403, "{body}");
    assert!(body.contains("may not get /metrics"), "{body}");
    // (The binding may take a moment to reach the API server's authorizer.)
    let body = eventually(T, "the reader's scrape answered", || async {
        let (code, body) = http_get_as(&addr, "/metrics", Some(&reader));
        (code == 200).then_some(body)
    })
    .await;
    assert!(body.contains("ruleop_build_info"), "{body}");
    assert_eq!(http_get(&addr, "/livez").0, 200, "the probes need no token");
    kubectl(&["delete", "clusterrolebinding,clusterrole", &role], None);
}

#[tokio::test]
async fn the_generated_rbac_is_enough_and_a_kind_outside_it_is_refused_on_the_resource() {
    let client = common::client().await;
    install_crds(&[
        "deploy/crds/websites.sre.example.com.yaml",
        "deploy/crds/myapps.myscheme.example.com.yaml",
    ]);
    let ns = common::namespace(&client, "prod-rbac").await;
    let op_ns = common::namespace(&client, "prod-rbac-op").await;
    let name = format!("ruleop-{op_ns}");
    let rbac = std::process::Command::new(env!("CARGO_BIN_EXE_ruleop"))
        .args([
            "rbac",
            "--rules",
            "rules/",
            "--namespace",
            &ns,
            "--operator-namespace",
            &op_ns,
            "--name",
            &name,
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(rbac.status.success());
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&String::from_utf8(rbac.stdout).unwrap()),
    );
    kubectl_ok(&["create", "serviceaccount", "ruleop", "-n", &op_ns], None);
    let token = kubectl_ok(
        &[
            "create",
            "token",
            "ruleop",
            "-n",
            &op_ns,
            "--duration",
            "1h",
        ],
        None,
    );
    let admin: Value = serde_yaml::from_str(&kubectl_ok(
        &["config", "view", "--raw", "-o", "yaml"],
        None,
    ))
    .unwrap();
    let cluster = &admin["clusters"][0]["cluster"];
    let kubeconfig = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": cluster["server"], "certificate-authority-data": cluster["certificate-authority-data"]}}],
        "users": [{"name": "sa", "user": {"token": token.trim()}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}],
        "current-context": "sa",
    });
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    std::fs::write(&kc, serde_yaml::to_string(&kubeconfig).unwrap()).unwrap();
    let kc = kc.to_str().unwrap().to_string();

    // The shipped rules converge under exactly their generated RBAC.
    let _op = Operator::start_with_env(
        &ns,
        &["rules/"],
        &["--lease-namespace", &op_ns],
        &[("KUBECONFIG", &kc)],
    );
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&manifest_in("examples/website.yaml", &ns)),
    );
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&manifest_in("examples/myapp.yaml", &ns)),
    );
    wait_json("website", &ns, "my-blog", "ready", |w| {
        condition(w, "Ready").is_some_and(|c| c["status"] == "True")
    })
    .await;
    wait_json("myapp", &ns, "my-app", "ready", |m| {
        condition(m, "Ready").is_some_and(|c| c["status"] == "True")
    })
    .await;
    drop(_op);

    // A rule asking for a kind the RBAC does not cover: refused on the resource, no crash;
    // granted later, it converges with nobody touching the resource.
    let extra = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/rules/website.yaml"))
        .unwrap()
        + "\n---\n"
        + &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/cache/config-only.yaml"
        ))
        .unwrap()
        + "    when: spec.replicas | default(1) > 0\n";
    let rules = dir.path().join("rules.yaml");
    std::fs::write(&rules, extra).unwrap();
    let lease_ns = ["--lease-namespace", op_ns.as_str()];
    let mut op = Operator::start_with_env(
        &ns,
        &[rules.to_str().unwrap()],
        &lease_ns,
        &[("KUBECONFIG", &kc)],
    );
    let cr = json!({"apiVersion": "myscheme.example.com/v1", "kind": "MyApp", "metadata": {"name": "needs-cm", "namespace": ns}, "spec": {"image": "nginx"}});
    kubectl_ok(&["apply", "-f", "-"], Some(&cr.to_string()));
    let m = wait_json("myapp", &ns, "needs-cm", "Synced False", |m| {
        condition(m, "Synced").is_some_and(|c| c["status"] == "False")
    })
    .await;
    let synced = condition(&m, "Synced").unwrap();
    assert_eq!(synced["reason"], "Forbidden", "{m}");
    assert!(
        synced["message"].as_str().unwrap().contains("forbidden"),
        "{m}"
    );
    assert!(op.running(), "no crash");
    let (_, out, _) = kubectl(&["get", "configmap", "needs-cm-config", "-n", &ns], None);
    assert!(out.is_empty(), "nothing created");

    let grant = |verbs: &str| {
        format!(
            "apiVersion: rbac.authorization.k8s.io/v1\nkind: Role\nmetadata: {{name: cm, namespace: {ns}}}\nrules: [{{apiGroups: [\"\"], resources: [configmaps], verbs: [{verbs}]}}]\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata: {{name: cm, namespace: {ns}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: cm}}\nsubjects: [{{kind: ServiceAccount, name: ruleop, namespace: {op_ns}}}]\n"
        )
    };
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&grant("get, list, watch, create, update, patch")),
    );
    wait_json(
        "myapp",
        &ns,
        "needs-cm",
        "Synced once RBAC allows it",
        |m| condition(m, "Synced").is_some_and(|c| c["reason"] == "Applied"),
    )
    .await;
    assert!(get_json("configmap", &ns, "needs-cm-config").is_some());

    // A prune the RBAC refuses: the status is still written (observedGeneration moves).
    kubectl_ok(
        &[
            "patch",
            "myapp",
            "needs-cm",
            "-n",
            &ns,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"replicas":0}}"#,
        ],
        None,
    );
    let generation = get_json("myapp", &ns, "needs-cm").unwrap()["metadata"]["generation"].clone();
    let m = wait_json(
        "myapp",
        &ns,
        "needs-cm",
        "prune refused, status written",
        |m| {
            m["status"]["observedGeneration"] == generation
                && condition(m, "Synced").is_some_and(|c| c["reason"] == "Forbidden")
        },
    )
    .await;
    assert!(
        condition(&m, "Synced").unwrap()["message"]
            .as_str()
            .unwrap()
            .contains("delete"),
        "{m}"
    );
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&grant("get, list, watch, create, update, patch, delete")),
    );
    wait_json(
        "myapp",
        &ns,
        "needs-cm",
        "pruned once RBAC allows it",
        |m| condition(m, "Synced").is_some_and(|c| c["reason"] == "Applied"),
    )
    .await;
    assert!(get_json("configmap", &ns, "needs-cm-config").is_none());
    assert!(op.running());
    common::delete_namespace(&ns);
    common::delete_namespace(&op_ns);
}

#[tokio::test]
async fn deploy_applies_cleanly_and_the_operators_pods_are_scheduled() {
    let _ = common::client().await;
    let root = env!("CARGO_MANIFEST_DIR");
    let deploy = format!("{root}/deploy/");
    // Checked strictly by the server first, then applied for real.
    kubectl_ok(
        &["apply", "-f", &format!("{root}/deploy/namespace.yaml")],
        None,
    );
    let out = kubectl_ok(
        &[
            "apply",
            "-k",
            &deploy,
            "--dry-run=server",
            "--validate=strict",
        ],
        None,
    );
    for kind in [
        "customresourcedefinition",
        "serviceaccount",
        "clusterrole",
        "configmap",
        "deployment",
        "poddisruptionbudget",
        "validatingwebhookconfiguration",
        "validatingadmissionpolicy",
    ] {
        assert!(out.contains(kind), "{kind} missing from:\n{out}");
    }
    kubectl_ok(
        &["apply", "-k", &deploy, "--server-side", "--force-conflicts"],
        None,
    );
    // The pods are scheduled (and, on this control plane, kwok runs them).
    eventually(
        Duration::from_secs(90),
        "the operator's pods scheduled",
        || async {
            let out = kubectl_ok(
                &[
                    "get",
                    "pods",
                    "-n",
                    "ruleop-system",
                    "-o",
                    "jsonpath={range .items[*]}{.spec.nodeName} {end}",
                ],
                None,
            );
            (out.split_whitespace().filter(|n| !n.is_empty()).count() == 2).then_some(())
        },
    )
    .await;
    kubectl_ok(
        &[
            "delete",
            "deployment",
            "ruleop",
            "-n",
            "ruleop-system",
            "--wait=false",
        ],
        None,
    );
    // The shared control plane's other tests write Rules and pins as its admin: the
    // shipped webhook (no ruleop serves it here) and policies go.
    kubectl_ok(
        &[
            "delete",
            "-f",
            &format!("{root}/deploy/webhook.yaml"),
            "-f",
            &format!("{root}/deploy/admission-policy.yaml"),
            "--wait=false",
        ],
        None,
    );
}

#[tokio::test]
async fn a_repeated_event_becomes_a_series_on_the_first() {
    use k8s_openapi::api::core::v1::ObjectReference;
    use kube::runtime::events::{Event, EventType, Reporter};
    let client = common::client().await;
    let ns = common::namespace(&client, "prod-events").await;
    let publisher = ruleop::events::recorder::Publisher::new(
        client.clone(),
        Reporter {
            controller: "ruleop-test".into(),
            instance: None,
        },
    );
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        namespace: Some(ns.clone()),
        name: Some("x".into()),
        ..Default::default()
    };
    let event = |note: &str| Event {
        type_: EventType::Normal,
        reason: "Applied".into(),
        note: Some(note.into()),
        action: "Apply".into(),
        secondary: None,
    };
    for note in ["again", "again", "again", "other"] {
        publisher.publish(&event(note), &reference).await.unwrap();
    }
    let api: kube::Api<k8s_openapi::api::events::v1::Event> = kube::Api::namespaced(client, &ns);
    let events = api.list(&Default::default()).await.unwrap().items;
    let count = |note: &str| {
        events
            .iter()
            .find(|e| e.note.as_deref() == Some(note))
            .map(|e| e.series.as_ref().map_or(1, |s| s.count))
    };
    assert_eq!(events.len(), 2, "{events:?}");
    assert_eq!(count("again"), Some(3), "one Event, a series of three");
    assert_eq!(count("other"), Some(1));
    common::delete_namespace(&ns);
}
