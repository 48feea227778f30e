//! The operator end to end on the real control plane: WebSite, MyApp and a third kind
//! defined only here, each driven by `ruleop run` with rules files and nothing else.

mod common;

use common::{
    Operator, condition, eventually, get_json, install_crds, kubectl, kubectl_ok, manifest_in,
    wait_json,
};
use serde_json::{Value, json};
use std::time::Duration;

const T: Duration = Duration::from_secs(60);

async fn wait_gone(kind: &str, ns: &str, name: &str) {
    eventually(T, &format!("{kind}/{name} gone"), || async {
        if get_json(kind, ns, name).is_none() {
            Some(())
        } else {
            None
        }
    })
    .await
}

/// What ruleop could have written of an object (its status only for the custom resource:
/// a Deployment's is the controller-manager's).
fn written(v: &Value, with_status: bool) -> Value {
    common::view::written_view(v, with_status)
}

#[tokio::test]
async fn a_website_gets_its_children_status_scale_and_cleanup() {
    let client = common::client().await;
    install_crds(&["deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "e2e-website").await;
    let op = Operator::start(&ns, &["rules/website.yaml"], &[]);
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&manifest_in("examples/website.yaml", &ns)),
    );

    // Children exactly as the original operator built them.
    let d = wait_json("deployment", &ns, "my-blog-web", "exists", |_| true).await;
    assert_eq!(d["metadata"]["labels"]["app.kubernetes.io/name"], "website");
    assert_eq!(
        d["metadata"]["labels"]["app.kubernetes.io/instance"],
        "my-blog"
    );
    assert_eq!(
        d["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "website-operator"
    );
    assert_eq!(d["spec"]["replicas"], 3);
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["name"], "web");
    assert_eq!(c["image"], "nginx:1.27");
    assert_eq!(c["ports"][0]["containerPort"], 80);
    assert_eq!(
        c["resources"]["requests"],
        json!({"cpu": "100m", "memory": "128Mi"})
    );
    assert_eq!(
        c["resources"]["limits"],
        json!({"cpu": "500m", "memory": "256Mi"})
    );
    assert_eq!(d["metadata"]["ownerReferences"][0]["kind"], "WebSite");
    let s = wait_json("service", &ns, "my-blog-web", "exists", |_| true).await;
    assert_eq!(s["spec"]["type"], "ClusterIP");
    assert_eq!(s["spec"]["ports"][0]["port"], 80);
    assert_eq!(s["spec"]["ports"][0]["targetPort"], 80);

    // Status once kwok has made the pods ready.
    let url = format!("http://my-blog-web.{ns}.svc.cluster.local:80");
    let w = wait_json("website", &ns, "my-blog", "ready 3", |w| {
        w["status"]["readyReplicas"] == 3
            && condition(w, "Ready").is_some_and(|c| c["status"] == "True")
    })
    .await;
    assert_eq!(w["status"]["url"], json!(url));
    assert_eq!(
        w["status"]["observedGeneration"],
        w["metadata"]["generation"]
    );
    let table = kubectl_ok(
        &["get", "website", "my-blog", "-n", &ns, "-o", "wide"],
        None,
    );
    let row = table.lines().nth(1).unwrap_or_default();
    // The origin's printer columns: Image, Replicas, Ready, Age.
    assert!(row.contains("nginx:1.27"), "{table}");
    assert_eq!(
        row.split_whitespace().nth(3),
        Some("3"),
        "Ready column: {table}"
    );

    // Spec changes reach the Deployment, by patch and through the scale subresource.
    kubectl_ok(
        &[
            "patch",
            "website",
            "my-blog",
            "-n",
            &ns,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"replicas":5}}"#,
        ],
        None,
    );
    wait_json("deployment", &ns, "my-blog-web", "5 replicas", |d| {
        d["spec"]["replicas"] == 5
    })
    .await;
    kubectl_ok(
        &["scale", "website", "my-blog", "-n", &ns, "--replicas=4"],
        None,
    );
    wait_json("deployment", &ns, "my-blog-web", "4 replicas", |d| {
        d["spec"]["replicas"] == 4
    })
    .await;
    wait_json("website", &ns, "my-blog", "ready 4", |w| {
        w["status"]["readyReplicas"] == 4
            && w["status"]["observedGeneration"] == w["metadata"]["generation"]
    })
    .await;

    // Steady state: a reconcile with nothing to change writes nothing.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (d0, s0) = (
        get_json("deployment", &ns, "my-blog-web").unwrap(),
        get_json("service", &ns, "my-blog-web").unwrap(),
    );
    kubectl_ok(
        &["annotate", "website", "my-blog", "-n", &ns, "poke=1"],
        None,
    );
    let w0 = get_json("website", &ns, "my-blog").unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        written(&get_json("deployment", &ns, "my-blog-web").unwrap(), false),
        written(&d0, false),
        "Deployment written in steady state"
    );
    assert_eq!(
        written(&get_json("service", &ns, "my-blog-web").unwrap(), false),
        written(&s0, false),
        "Service written in steady state"
    );
    assert_eq!(
        written(&get_json("website", &ns, "my-blog").unwrap(), true),
        written(&w0, true),
        "status written in steady state"
    );
    assert!(
        op.logs().contains("my-blog"),
        "the operator saw the resource"
    );

    // A child edited by hand is restored; one deleted by hand is recreated.
    kubectl_ok(
        &[
            "set",
            "image",
            "deployment/my-blog-web",
            "-n",
            &ns,
            "web=evil:latest",
        ],
        None,
    );
    wait_json("deployment", &ns, "my-blog-web", "image restored", |d| {
        d["spec"]["template"]["spec"]["containers"][0]["image"] == "nginx:1.27"
    })
    .await;
    kubectl_ok(&["delete", "service", "my-blog-web", "-n", &ns], None);
    wait_json("service", &ns, "my-blog-web", "recreated", |s| {
        s["metadata"]["uid"] != s0["metadata"]["uid"]
    })
    .await;

    // Deleting the WebSite deletes both children.
    kubectl_ok(&["delete", "website", "my-blog", "-n", &ns], None);
    wait_gone("deployment", &ns, "my-blog-web").await;
    wait_gone("service", &ns, "my-blog-web").await;
    common::delete_namespace(&ns);
}

#[tokio::test]
async fn a_myapp_gets_its_deployment_and_replicas_status() {
    let client = common::client().await;
    install_crds(&["deploy/crds/myapps.myscheme.example.com.yaml"]);
    let ns = common::namespace(&client, "e2e-myapp").await;
    let _op = Operator::start(&ns, &["rules/myapp.yaml"], &[]);
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&manifest_in("examples/myapp.yaml", &ns)),
    );
    let d = wait_json("deployment", &ns, "my-app", "exists", |_| true).await;
    assert_eq!(d["metadata"]["labels"]["app"], "my-app");
    assert_eq!(
        d["spec"]["selector"]["matchLabels"],
        json!({"app": "my-app"})
    );
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["name"],
        "app"
    );
    assert_eq!(d["spec"]["replicas"], 2);
    wait_json("myapp", &ns, "my-app", "replicas 2", |m| {
        m["status"]["replicas"] == 2 && condition(m, "Ready").is_some_and(|c| c["status"] == "True")
    })
    .await;
    kubectl_ok(&["delete", "myapp", "my-app", "-n", &ns], None);
    wait_gone("deployment", &ns, "my-app").await;
    common::delete_namespace(&ns);
}

#[tokio::test]
async fn a_third_kind_from_a_test_fixture_works_with_the_same_binary() {
    let client = common::client().await;
    install_crds(&["tests/fixtures/cache/crd.yaml"]);
    let ns = common::namespace(&client, "e2e-cache").await;
    let _op = Operator::start(&ns, &["tests/fixtures/cache/rules.yaml"], &[]);
    let cr = format!(
        "apiVersion: test.ruleop.dev/v1alpha1\nkind: Cache\nmetadata: {{name: sessions, namespace: {ns}}}\nspec: {{size: 2, maxMemory: 128mb}}\n"
    );
    kubectl_ok(&["apply", "-f", "-"], Some(&cr));
    let cm = wait_json("configmap", &ns, "sessions-config", "exists", |_| true).await;
    assert_eq!(cm["data"]["redis.conf"], "maxmemory 128mb");
    assert_eq!(
        cm["data"]["size"], "2",
        "text around an expression makes a string"
    );
    let sts = wait_json("statefulset", &ns, "sessions", "exists", |_| true).await;
    assert_eq!(sts["spec"]["replicas"], 2);
    let c = wait_json("cache", &ns, "sessions", "ready", |c| {
        c["status"]["readyReplicas"] == 2
            && condition(c, "Ready").is_some_and(|r| r["status"] == "True")
    })
    .await;
    assert_eq!(c["status"]["config"], "sessions-config");

    // The StatefulSet's condition turns false: it is pruned, the ConfigMap stays.
    kubectl_ok(
        &[
            "patch",
            "cache",
            "sessions",
            "-n",
            &ns,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"persistent":false}}"#,
        ],
        None,
    );
    wait_gone("statefulset", &ns, "sessions").await;
    assert!(get_json("configmap", &ns, "sessions-config").is_some());
    common::delete_namespace(&ns);
}

#[tokio::test]
async fn a_newline_and_a_kind_in_the_image_stay_inside_the_image_string() {
    let client = common::client().await;
    install_crds(&["deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "e2e-inject").await;
    let roles_before = kubectl_ok(&["get", "clusterroles", "-o", "name"], None);
    let _op = Operator::start(&ns, &["rules/website.yaml"], &[]);
    let image = "nginx\nkind: ClusterRole\nmetadata:\n  name: pwned";
    let cr = json!({"apiVersion": "sre.example.com/v1alpha1", "kind": "WebSite", "metadata": {"name": "inj", "namespace": ns}, "spec": {"image": image}});
    kubectl_ok(&["apply", "-f", "-"], Some(&cr.to_string()));
    // The API server refuses an image with a newline: the refusal is on the WebSite.
    let w = wait_json("website", &ns, "inj", "Synced condition", |w| {
        condition(w, "Synced").is_some()
    })
    .await;
    let synced = condition(&w, "Synced").unwrap();
    match get_json("deployment", &ns, "inj-web") {
        Some(d) => assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["image"],
            json!(image)
        ),
        None => {
            assert_eq!(synced["status"], "False", "{w}");
            assert_eq!(synced["reason"], "ApplyRefused", "{w}");
            assert!(synced["message"].as_str().unwrap().contains("image"), "{w}");
        }
    }
    assert!(
        get_json("service", &ns, "inj-web").is_some(),
        "the other child is still made"
    );
    // A ClusterRole may appear from elsewhere in the meantime (an earlier suite's, a
    // controller's); none new may be ruleop's.
    let roles: Value = serde_json::from_str(&kubectl_ok(
        &["get", "clusterroles", "-o", "json", "--show-managed-fields"],
        None,
    ))
    .unwrap();
    let new_of_ruleop: Vec<&str> = roles["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            r["metadata"]["managedFields"]
                .as_array()
                .is_some_and(|m| m.iter().any(|e| e["manager"] == "ruleop"))
        })
        .filter_map(|r| r["metadata"]["name"].as_str())
        .filter(|n| !roles_before.contains(&format!("clusterrole.rbac.authorization.k8s.io/{n}\n")))
        .collect();
    assert!(
        new_of_ruleop.is_empty(),
        "ClusterRoles written by ruleop appeared: {new_of_ruleop:?}"
    );
    assert!(!kubectl_ok(&["get", "clusterroles", "-o", "name"], None).contains("pwned"));
    common::delete_namespace(&ns);
}

#[tokio::test]
async fn a_template_naming_another_namespace_gets_an_error_and_creates_nothing() {
    let client = common::client().await;
    install_crds(&["tests/fixtures/cache/crd.yaml"]);
    let ns = common::namespace(&client, "e2e-escape").await;
    let other = common::namespace(&client, "e2e-escape-target").await;
    let _op = Operator::start(&ns, &["tests/fixtures/cache/escape.yaml"], &[]);
    let cr = format!(
        "apiVersion: test.ruleop.dev/v1alpha1\nkind: Cache\nmetadata: {{name: out, namespace: {ns}}}\nspec: {{target: {other}}}\n"
    );
    kubectl_ok(&["apply", "-f", "-"], Some(&cr));
    let c = wait_json("cache", &ns, "out", "Synced False", |c| {
        condition(c, "Synced").is_some_and(|s| s["status"] == "False")
    })
    .await;
    let synced = condition(&c, "Synced").unwrap();
    assert_eq!(synced["reason"], "RenderFailed");
    assert!(synced["message"].as_str().unwrap().contains(&other), "{c}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let uid = c["metadata"]["uid"].as_str().unwrap().to_string();
    let (_, out, _) = kubectl(
        &[
            "get",
            "configmaps",
            "-A",
            "-l",
            "ruleop.dev/rule=escape",
            "-o",
            "json",
        ],
        None,
    );
    let all: Value = serde_json::from_str(&out).unwrap();
    let made: Vec<&Value> = all["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["metadata"]["ownerReferences"][0]["uid"] == uid.as_str())
        .collect();
    assert!(made.is_empty(), "nothing created anywhere: {made:?}");

    // Pointing it at its own namespace is fine.
    kubectl_ok(
        &[
            "patch",
            "cache",
            "out",
            "-n",
            &ns,
            "--type",
            "merge",
            "-p",
            &format!(r#"{{"spec":{{"target":"{ns}"}}}}"#),
        ],
        None,
    );
    wait_json("configmap", &ns, "out-escaped", "exists", |_| true).await;
    common::delete_namespace(&ns);
    common::delete_namespace(&other);
}

#[tokio::test]
async fn a_rule_whose_crd_is_not_installed_waits_and_starts_when_it_appears() {
    let client = common::client().await;
    let ns = common::namespace(&client, "e2e-late").await;
    let _ = kubectl(
        &["delete", "crd", "lates.late.ruleop.dev", "--wait=true"],
        None,
    );
    let op = Operator::start(&ns, &["tests/fixtures/late/rules.yaml"], &[]);
    eventually(T, "the rule says it waits for its kind", || async {
        op.records()
            .iter()
            .any(|r| {
                r["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("waiting for it"))
            })
            .then_some(())
    })
    .await;
    install_crds(&["tests/fixtures/late/crd.yaml"]);
    let cr = format!(
        "apiVersion: late.ruleop.dev/v1\nkind: Late\nmetadata: {{name: l, namespace: {ns}}}\n"
    );
    kubectl_ok(&["apply", "-f", "-"], Some(&cr));
    let cm = wait_json(
        "configmap",
        &ns,
        "l-late",
        "made once the CRD appeared",
        |_| true,
    )
    .await;
    assert_eq!(cm["data"]["hello"], "world");
    common::delete_namespace(&ns);
}

#[tokio::test]
async fn a_cluster_scoped_child_kind_is_refused_on_the_resource_and_nothing_is_created() {
    let client = common::client().await;
    install_crds(&[
        "tests/fixtures/cache/crd.yaml",
        "tests/fixtures/late/cluster-crd.yaml",
    ]);
    let ns = common::namespace(&client, "e2e-global").await;
    let _op = Operator::start(&ns, &["tests/fixtures/late/cluster-child.yaml"], &[]);
    let cr = format!(
        "apiVersion: test.ruleop.dev/v1alpha1\nkind: Cache\nmetadata: {{name: g, namespace: {ns}}}\n"
    );
    kubectl_ok(&["apply", "-f", "-"], Some(&cr));
    let c = wait_json("cache", &ns, "g", "Synced False", |c| {
        condition(c, "Synced").is_some_and(|s| s["status"] == "False")
    })
    .await;
    let synced = condition(&c, "Synced").unwrap();
    assert_eq!(synced["reason"], "ClusterScopedChild", "{c}");
    assert!(
        synced["message"]
            .as_str()
            .unwrap()
            .contains("cluster-scoped"),
        "{c}"
    );
    let (_, out, _) = kubectl(
        &["get", "globals.late.ruleop.dev", &format!("{ns}-g")],
        None,
    );
    assert!(out.is_empty(), "nothing created: {out}");
    common::delete_namespace(&ns);
}

#[tokio::test]
async fn a_restart_sends_nothing_for_the_resources_already_in_place() {
    const N: usize = 30;
    let client = common::client().await;
    install_crds(&["deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "e2e-restart").await;
    let mut first = Operator::start(&ns, &["rules/website.yaml"], &[]);
    let sites: String = (0..N)
        .map(|i| {
            format!(
                "apiVersion: sre.example.com/v1alpha1\nkind: WebSite\nmetadata: {{name: r{i}, namespace: {ns}}}\nspec: {{image: 'nginx:1', replicas: 0}}\n---\n"
            )
        })
        .collect();
    kubectl_ok(&["apply", "-f", "-"], Some(&sites));
    // Settled: each status says what the children say now (Ready waits for each
    // Deployment's controller to report on it).
    for i in 0..N {
        wait_json("website", &ns, &format!("r{i}"), "status", |w| {
            w["status"]["observedGeneration"] == w["metadata"]["generation"]
                && condition(w, "Ready").is_some_and(|c| c["status"] == "True")
        })
        .await;
    }
    assert!(first.terminate(Duration::from_secs(20)), "ruleop stopped");

    // Started again: every resource is checked once, from caches filled by a list (whose
    // items carry no apiVersion or kind), and nothing differs, so nothing is sent.
    let second = Operator::start(&ns, &["rules/website.yaml"], &[]);
    let addr = second.admin_addr().await;
    eventually(T, "every resource reconciled after the restart", || async {
        let (_, m) = common::http_get(&addr, "/metrics");
        (common::metric_sum(&m, "ruleop_reconciles_total") >= N as f64).then_some(())
    })
    .await;
    // The last reconciles to start have ended.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, metrics_later) = common::http_get(&addr, "/metrics");
    let requests = common::metric_sum(&metrics_later, "ruleop_client_requests_total");
    assert_eq!(
        common::metric_sum(&metrics_later, "ruleop_writes_total"),
        0.0,
        "no write"
    );
    // Discovery, the inventory, a list and a watch per kind: about a dozen, whatever N.
    // Applying each child again would add 2 per resource. (Every request is counted, at the
    // client's last layer.)
    assert!(
        requests < N as f64,
        "{requests} requests after a restart with {N} resources in place: {metrics_later}"
    );
    common::delete_namespace(&ns);
}

/// `--admin-tls-cert`/`--admin-tls-key`: metrics and probes over HTTPS with the given
/// certificate, read again when its file changes; plain HTTP is not answered.
#[tokio::test]
async fn the_admin_server_serves_https_with_the_given_certificate_and_takes_a_new_one() {
    let client = common::client().await;
    let ns = common::namespace(&client, "admin-tls").await;
    let dir = tempfile::tempdir().unwrap();
    let make = |cn: &str| {
        let subject = format!("/CN={cn}");
        common::openssl(
            dir.path(),
            &[
                "req",
                "-x509",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:prime256v1",
                "-nodes",
                "-days",
                "2",
                "-subj",
                &subject,
                "-addext",
                "subjectAltName=IP:127.0.0.1",
                "-keyout",
                "tls.key.new",
                "-out",
                "tls.crt.new",
            ],
        );
        for f in ["tls.key", "tls.crt"] {
            std::fs::rename(dir.path().join(format!("{f}.new")), dir.path().join(f)).unwrap();
        }
    };
    make("first");
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let args = [
        "--admin-tls-cert",
        cert.to_str().unwrap(),
        "--admin-tls-key",
        key.to_str().unwrap(),
    ];
    let op = Operator::start(&ns, &["rules/website.yaml"], &args);
    let addr = op.admin_addr().await;
    let curl = |url: &str| {
        let out = std::process::Command::new("curl")
            .args([
                "-sS",
                "-v",
                "--max-time",
                "5",
                "--cacert",
                cert.to_str().unwrap(),
                url,
            ])
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (ok, body, err) = curl(&format!("https://{addr}/metrics"));
    assert!(ok && body.contains("ruleop_build_info"), "{err}");
    assert!(err.contains("CN=first"), "{err}");
    let (ok, _, _) = curl(&format!("https://{addr}/readyz"));
    assert!(ok, "the probes are on HTTPS too");
    let (ok, _, _) = curl(&format!("http://{addr}/metrics"));
    assert!(!ok, "plain HTTP is not answered");
    // A renewed certificate (the Secret's files swapped) is served without a restart.
    make("second");
    eventually(
        Duration::from_secs(90),
        "the new certificate served",
        || async {
            let (ok, _, err) = curl(&format!("https://{addr}/metrics"));
            (ok && err.contains("CN=second")).then_some(())
        },
    )
    .await;
    common::delete_namespace(&ns);
}
