//! Faults on the real control plane: the API server and etcd stopped under a running
//! operator, the operator killed at random points, other writers, failing resources, a
//! silent watch. Each test prints what it saw.

mod common;

use common::{
    Cluster, Operator, condition, eventually, get_json, install_crds, kubectl, kubectl_ok, list_at,
};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Tests that start a control plane of their own run one at a time (2 cores).
static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn websites(ns: &str, names: impl Iterator<Item = String>, image: &str) -> String {
    names
        .map(|n| {
            let doc = json!({"apiVersion": "sre.example.com/v1alpha1", "kind": "WebSite", "metadata": {"name": n, "namespace": ns}, "spec": {"image": image, "replicas": 1}});
            format!("---\n{}", serde_yaml::to_string(&doc).unwrap())
        })
        .collect::<String>()
}

/// Every WebSite in `ns` has its status current and exactly its two children with `image`;
/// no child without a WebSite. Returns a description of what is missing.
fn converged(kc: &str, ns: &str, n: usize, image: &str) -> Result<(), String> {
    let sites = list_at(kc, "websites", ns, None);
    if sites.len() != n {
        return Err(format!("{} websites of {n}", sites.len()));
    }
    let stale = sites
        .iter()
        .filter(|w| w["status"]["observedGeneration"] != w["metadata"]["generation"])
        .count();
    if stale > 0 {
        return Err(format!("{stale} statuses not current"));
    }
    let names: BTreeSet<String> = sites
        .iter()
        .map(|w| format!("{}-web", w["metadata"]["name"].as_str().unwrap()))
        .collect();
    let deps = list_at(kc, "deployments", ns, Some("ruleop.dev/rule=website"));
    let svcs = list_at(kc, "services", ns, Some("ruleop.dev/rule=website"));
    let dep_names: BTreeSet<String> = deps
        .iter()
        .map(|d| d["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    let svc_names: BTreeSet<String> = svcs
        .iter()
        .map(|d| d["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    if dep_names != names || svc_names != names || deps.len() != n || svcs.len() != n {
        return Err(format!(
            "{} deployments, {} services for {n} websites",
            deps.len(),
            svcs.len()
        ));
    }
    let wrong = deps
        .iter()
        .filter(|d| d["spec"]["template"]["spec"]["containers"][0]["image"] != image)
        .count();
    if wrong > 0 {
        return Err(format!("{wrong} deployments without image {image}"));
    }
    Ok(())
}

async fn wait_converged(kc: &str, ns: &str, n: usize, image: &str, timeout: Duration) -> Duration {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < timeout {
        match converged(kc, ns, n, image) {
            Ok(()) => return start.elapsed(),
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("not converged after {timeout:?}: {last}");
}

#[tokio::test]
async fn the_api_server_stopped_for_30s_mid_wave_then_every_resource_converges() {
    let _heavy = HEAVY.lock().await;
    let n: usize = std::env::var("RULEOP_FAULT_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let cluster = Cluster::with_websites("fault");
    let kc = cluster.kubeconfig.clone();
    let mut op = Operator::start_with_env(
        "fault",
        &["rules/website.yaml"],
        &[],
        &[("KUBECONFIG", &kc)],
    );
    let addr = op.admin_addr().await;
    // A client creates the wave one object at a time; the API server stops in the middle.
    let manifest = websites("fault", (0..n).map(|i| format!("s{i}")), "nginx:1");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("wave.yaml");
    std::fs::write(&file, &manifest).unwrap();
    let mut creator = std::process::Command::new("kubectl")
        .args(["--kubeconfig", &kc, "create", "-f", file.to_str().unwrap()])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    eventually(
        Duration::from_secs(60),
        "a quarter of the wave created",
        || async { (list_at(&kc, "websites", "fault", None).len() >= n / 4).then_some(()) },
    )
    .await;
    cluster.ctl("stop", "kube-apiserver");
    let _ = creator.wait();
    let before = common::admin_metric(&addr, "ruleop_reconcile_errors_total");
    let logs_before = op.records().len();
    let down = Instant::now();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let during = common::admin_metric(&addr, "ruleop_reconcile_errors_total") - before;
    let complaints = op.records()[logs_before..]
        .iter()
        .filter(|r| r["level"] == "WARN" || r["level"] == "ERROR")
        .count();
    assert!(
        op.running(),
        "ruleop must not exit while the API server is down"
    );
    cluster.ctl("start", "kube-apiserver");
    cluster.wait_ready().await;
    let back = down.elapsed();
    let created_before = list_at(&kc, "websites", "fault", None).len();
    // The client finishes its wave (objects it had created already exist).
    let _ = common::kubectl_at(&kc, &["apply", "-f", file.to_str().unwrap()], None);
    let took = wait_converged(&kc, "fault", n, "nginx:1", Duration::from_secs(240)).await;
    let rate = during / back.as_secs_f64();
    println!(
        "apiserver down {:.0}s after {created_before} of {n} were created: {during} failed reconciles ({rate:.1}/s), {complaints} warnings logged; all {n} converged {:.1}s after it came back",
        back.as_secs_f64(),
        took.as_secs_f64()
    );
    // Per-resource exponential backoff: at most one try per resource per doubling step.
    assert!(
        during <= (n * 8) as f64,
        "retry storm: {during} failures in {back:?}"
    );
    assert!(op.running());
}

#[tokio::test]
async fn etcd_and_the_api_server_restarted_with_compaction_then_relist_and_no_leftovers() {
    let _heavy = HEAVY.lock().await;
    let cluster = Cluster::with_websites("fault");
    let kc = cluster.kubeconfig.clone();
    let op = Operator::start_with_env(
        "fault",
        &["rules/website.yaml"],
        &[],
        &[("KUBECONFIG", &kc)],
    );
    op.admin_addr().await;
    cluster.kubectl(
        &["apply", "-f", "-"],
        Some(&websites(
            "fault",
            (0..20).map(|i| format!("s{i}")),
            "nginx:1",
        )),
    );
    wait_converged(&kc, "fault", 20, "nginx:1", Duration::from_secs(120)).await;

    // Freeze ruleop (its connections stay open, it reads nothing), change the world, and
    // compact etcd so that its watch resourceVersions are too old (410 Gone).
    let pid = op.pid().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success()
    );
    for i in 0..5 {
        cluster.kubectl(
            &[
                "delete",
                "website",
                &format!("s{i}"),
                "-n",
                "fault",
                "--wait=false",
            ],
            None,
        );
    }
    cluster.kubectl(
        &["apply", "-f", "-"],
        Some(&websites(
            "fault",
            (20..30).map(|i| format!("s{i}")),
            "nginx:1",
        )),
    );
    for _ in 0..3 {
        cluster.kubectl(
            &[
                "annotate",
                "namespace",
                "fault",
                "--overwrite",
                &format!("churn={}", Instant::now().elapsed().as_nanos()),
            ],
            None,
        );
    }
    cluster.ctl("stop", "kube-apiserver");
    cluster.ctl("stop", "etcd");
    let etcd_port = std::fs::read_to_string(cluster.dir.join("ports.env"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("ETCD_PORT=").map(str::to_string))
        .unwrap();
    cluster.ctl("start", "etcd");
    let endpoint = format!("http://127.0.0.1:{etcd_port}");
    eventually(Duration::from_secs(30), "etcd back", || async {
        std::process::Command::new("curl")
            .args(["-sf", &format!("{endpoint}/health")])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|_| ())
    })
    .await;
    // Compact at the newest revision: every older resourceVersion is now gone.
    let status = std::process::Command::new("curl")
        .args([
            "-sf",
            "-X",
            "POST",
            &format!("{endpoint}/v3/kv/range"),
            "-d",
            r#"{"key":"AA=="}"#,
        ])
        .output()
        .unwrap();
    let rev: Value = serde_json::from_slice(&status.stdout).unwrap_or(json!({}));
    let revision = rev["header"]["revision"]
        .as_str()
        .unwrap_or("0")
        .to_string();
    let compact = std::process::Command::new("curl")
        .args([
            "-sf",
            "-X",
            "POST",
            &format!("{endpoint}/v3/kv/compaction"),
            "-d",
            &format!(r#"{{"revision":"{revision}","physical":true}}"#),
        ])
        .output()
        .unwrap();
    println!(
        "etcd compacted at revision {revision}: {}",
        String::from_utf8_lossy(&compact.stdout)
    );
    cluster.ctl("start", "kube-apiserver");
    cluster.wait_ready().await;
    assert!(
        std::process::Command::new("kill")
            .args(["-CONT", &pid])
            .status()
            .unwrap()
            .success()
    );

    let took = wait_converged(&kc, "fault", 25, "nginx:1", Duration::from_secs(180)).await;
    println!(
        "after etcd+apiserver restart and compaction: 25 websites converged in {:.1}s, deleted ones left no children",
        took.as_secs_f64()
    );
    let relisted = op.logs().contains("410")
        || op.logs().to_lowercase().contains("gone")
        || op.logs().contains("too old");
    println!("operator saw the expired resourceVersions: {relisted}");
}

#[tokio::test]
async fn sigkill_at_random_points_twenty_times_then_everything_converges_exactly() {
    let client = common::client().await;
    install_crds(&["deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "fault-kill").await;
    let kc = std::env::var("KUBECONFIG").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/target/cluster/kubeconfig").to_string()
    });
    let n = 100;
    let mut op = Operator::start(&ns, &["rules/website.yaml"], &[]);
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&websites(&ns, (0..n).map(|i| format!("k{i}")), "nginx:1")),
    );
    let mut seed: u64 = 0x9e3779b97f4a7c15 ^ u64::from(std::process::id());
    let mut rand_ms = move |lo: u64, hi: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        lo + seed % (hi - lo)
    };
    for round in 0..20 {
        if round == 8 {
            // The update wave starts while the kills go on.
            kubectl_ok(
                &["apply", "-f", "-"],
                Some(&websites(&ns, (0..n).map(|i| format!("k{i}")), "nginx:2")),
            );
        }
        tokio::time::sleep(Duration::from_millis(rand_ms(100, 1200))).await;
        op.kill();
        op = Operator::start(&ns, &["rules/website.yaml"], &[]);
    }
    let took = wait_converged(&kc, &ns, n, "nginx:2", Duration::from_secs(180)).await;
    println!(
        "20 SIGKILLs during a create and update wave of {n}: converged {:.1}s after the last restart, no orphans, no duplicates",
        took.as_secs_f64()
    );
    common::delete_namespace(&ns);
}

#[tokio::test]
async fn another_field_manager_is_left_alone_and_nothing_flaps() {
    let client = common::client().await;
    install_crds(&["deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "fault-manager").await;
    let op = Operator::start(&ns, &["rules/website.yaml"], &[]);
    let addr = op.admin_addr().await;
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&websites(&ns, std::iter::once("m".to_string()), "nginx:1")),
    );
    eventually(Duration::from_secs(60), "ready", || async {
        get_json("website", &ns, "m")
            .filter(|w| condition(w, "Ready").is_some_and(|c| c["status"] == "True"))
            .map(|_| ())
    })
    .await;
    // Another manager adds fields ruleop does not render.
    kubectl_ok(
        &[
            "annotate",
            "deployment",
            "m-web",
            "-n",
            &ns,
            "team=payments",
        ],
        None,
    );
    kubectl_ok(
        &["label", "service", "m-web", "-n", &ns, "cost-center=42"],
        None,
    );
    kubectl_ok(
        &[
            "patch",
            "deployment",
            "m-web",
            "-n",
            &ns,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"revisionHistoryLimit":3}}"#,
        ],
        None,
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let writes = common::admin_metric(&addr, "ruleop_writes_total");
    let with_fields = || -> Value {
        let out = kubectl_ok(
            &[
                "get",
                "deployment",
                "m-web",
                "-n",
                &ns,
                "-o",
                "json",
                "--show-managed-fields",
            ],
            None,
        );
        serde_json::from_str(&out).unwrap()
    };
    let d0 = with_fields();
    tokio::time::sleep(Duration::from_secs(10)).await;
    let d1 = with_fields();
    let s1 = get_json("service", &ns, "m-web").unwrap();
    assert_eq!(
        common::admin_metric(&addr, "ruleop_writes_total"),
        writes,
        "ruleop wrote after another manager's edit"
    );
    // The Deployment controller may still write its status; the spec must not move, nor
    // ruleop's own `Apply` entry in the managed fields.
    let ruleop_entry = |d: &Value| {
        d["metadata"]["managedFields"].as_array().and_then(|m| {
            m.iter()
                .find(|e| e["manager"] == "ruleop" && e.get("subresource").is_none())
                .cloned()
        })
    };
    assert_eq!(
        d1["metadata"]["generation"], d0["metadata"]["generation"],
        "no flapping of the spec"
    );
    assert_eq!(
        ruleop_entry(&d0).map(|e| e["operation"].clone()),
        Some(json!("Apply")),
        "a child ruleop created is its Apply entry's from the start"
    );
    assert_eq!(ruleop_entry(&d1), ruleop_entry(&d0), "no ruleop write");
    assert_eq!(d1["metadata"]["annotations"]["team"], "payments");
    assert_eq!(d1["spec"]["revisionHistoryLimit"], 3);
    assert_eq!(s1["metadata"]["labels"]["cost-center"], "42");
    println!("another manager's annotation, label and field kept; ruleop writes over 10 s: 0");
    common::delete_namespace(&ns);
}

#[tokio::test]
async fn a_resource_that_keeps_failing_backs_off_and_does_not_delay_the_others() {
    let client = common::client().await;
    install_crds(&["tests/fixtures/cache/crd.yaml"]);
    let ns = common::namespace(&client, "fault-backoff").await;
    // A webhook that cannot be reached, for ConfigMaps labelled for this test: the API
    // server answers 500 (a passing fault, from ruleop's side) for that one child.
    let hook = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": format!("ruleop-{ns}")},
        "webhooks": [{
            "name": "fail.ruleop.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None", "failurePolicy": "Fail",
            "timeoutSeconds": 1,
            "clientConfig": {"service": {"name": "nowhere", "namespace": ns, "port": 443}},
            "objectSelector": {"matchLabels": {"ruleop-test/fail": ns}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]
        }]
    });
    kubectl_ok(&["apply", "-f", "-"], Some(&hook.to_string()));
    let op = Operator::start(&ns, &["tests/fixtures/cache/failing.yaml"], &[]);
    let bad = format!(
        "apiVersion: test.ruleop.dev/v1alpha1\nkind: Cache\nmetadata: {{name: bad, namespace: {ns}}}\nspec: {{fail: {ns}}}\n"
    );
    kubectl_ok(&["apply", "-f", "-"], Some(&bad));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let start = Instant::now();
    let good: String = (0..20).map(|i| format!("apiVersion: test.ruleop.dev/v1alpha1\nkind: Cache\nmetadata: {{name: good{i}, namespace: {ns}}}\nspec: {{fail: none}}\n---\n")).collect();
    kubectl_ok(&["apply", "-f", "-"], Some(&good));
    for i in 0..20 {
        eventually(Duration::from_secs(30), "good caches converge", || async {
            get_json("configmap", &ns, &format!("good{i}-config")).map(|_| ())
        })
        .await;
    }
    let others = start.elapsed();
    tokio::time::sleep(Duration::from_secs(14)).await;
    let retries: Vec<u64> = op
        .records()
        .iter()
        .filter(|r| {
            r["message"] == "reconcile failed"
                && r["object"].as_str().is_some_and(|o| o.ends_with("/bad"))
        })
        .filter_map(|r| r["retry_in_ms"].as_u64())
        .collect();
    println!(
        "20 good resources converged in {:.1}s beside the failing one; its retries were scheduled after {retries:?} ms",
        others.as_secs_f64()
    );
    kubectl(
        &[
            "delete",
            "validatingwebhookconfiguration",
            &format!("ruleop-{ns}"),
        ],
        None,
    );
    assert!(
        others < Duration::from_secs(20),
        "the failing resource delayed the others: {others:?}"
    );
    assert!(
        retries.len() >= 4,
        "the failing resource was retried: {retries:?}"
    );
    assert!(
        retries.windows(2).all(|w| w[1] == (w[0] * 2).min(300_000)),
        "exponential backoff: {retries:?}"
    );
    assert!(retries.len() <= 8, "bounded: {retries:?}");
    common::delete_namespace(&ns);
}

#[tokio::test]
async fn a_minute_of_steady_state_brings_no_writes_and_bounded_reconciles() {
    let client = common::client().await;
    install_crds(&["deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "fault-steady").await;
    let kc = std::env::var("KUBECONFIG").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/target/cluster/kubeconfig").to_string()
    });
    let op = Operator::start(&ns, &["rules/website.yaml"], &[]);
    let addr = op.admin_addr().await;
    let n = 20;
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&websites(&ns, (0..n).map(|i| format!("q{i}")), "nginx:1")),
    );
    wait_converged(&kc, &ns, n, "nginx:1", Duration::from_secs(120)).await;
    eventually(Duration::from_secs(60), "all ready", || async {
        list_at(&kc, "websites", &ns, None)
            .iter()
            .all(|w| condition(w, "Ready").is_some_and(|c| c["status"] == "True"))
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let secs: u64 = std::env::var("RULEOP_STEADY_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let (w0, r0) = (
        common::admin_metric(&addr, "ruleop_writes_total"),
        common::admin_metric(&addr, "ruleop_reconciles_total"),
    );
    let rv = |kind: &str| {
        list_at(&kc, kind, &ns, None)
            .iter()
            .map(|o| o["metadata"]["resourceVersion"].clone())
            .collect::<Vec<_>>()
    };
    let before = (rv("websites"), rv("deployments"), rv("services"));
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let (w1, r1) = (
        common::admin_metric(&addr, "ruleop_writes_total"),
        common::admin_metric(&addr, "ruleop_reconciles_total"),
    );
    println!(
        "steady state over {secs}s with {n} resources: {} writes, {} reconciles",
        w1 - w0,
        r1 - r0
    );
    assert_eq!(w1, w0, "writes in steady state");
    assert_eq!(
        (rv("websites"), rv("deployments"), rv("services")),
        before,
        "objects changed in steady state"
    );
    assert!(
        r1 - r0 <= n as f64,
        "reconciles in steady state: {}",
        r1 - r0
    );
    common::delete_namespace(&ns);
}

#[tokio::test]
async fn a_watch_that_goes_silent_is_noticed_and_re_established() {
    let client = common::client().await;
    install_crds(&["deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "fault-silent").await;
    let kc_path = std::env::var("KUBECONFIG").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/target/cluster/kubeconfig").to_string()
    });
    let mut kc: Value = serde_yaml::from_str(&std::fs::read_to_string(&kc_path).unwrap()).unwrap();
    let server = kc["clusters"][0]["cluster"]["server"]
        .as_str()
        .unwrap()
        .to_string();
    let upstream: std::net::SocketAddr = server.trim_start_matches("https://").parse().unwrap();
    let proxy = common::proxy::Proxy::start(upstream).await;
    kc["clusters"][0]["cluster"]["server"] = json!(format!("https://{}", proxy.addr));
    let dir = tempfile::tempdir().unwrap();
    let proxied = dir.path().join("kubeconfig");
    std::fs::write(&proxied, serde_yaml::to_string(&kc).unwrap()).unwrap();
    let op = Operator::start_with_env(
        &ns,
        &["rules/website.yaml"],
        &["--watch-timeout-seconds", "10"],
        &[("KUBECONFIG", proxied.to_str().unwrap())],
    );
    op.admin_addr().await;
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&websites(&ns, std::iter::once("before".into()), "nginx:1")),
    );
    eventually(Duration::from_secs(60), "before-web", || async {
        get_json("deployment", &ns, "before-web").map(|_| ())
    })
    .await;

    // Every connection the operator has now goes silent, its watches included.
    let frozen = proxy.freeze_existing();
    let frozen_at = Instant::now();
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&websites(&ns, std::iter::once("after".into()), "nginx:1")),
    );
    eventually(
        Duration::from_secs(90),
        "after-web through a new connection",
        || async { get_json("deployment", &ns, "after-web").map(|_| ()) },
    )
    .await;
    let took = frozen_at.elapsed();
    println!(
        "{frozen} connections went silent; the watches noticed, reconnected, and a new resource converged {:.1}s later (watch timeout 10 s)",
        took.as_secs_f64()
    );
    assert!(took < Duration::from_secs(60), "took {took:?}");
    common::delete_namespace(&ns);
}
