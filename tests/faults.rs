//! Faults on the real control plane: the API server and etcd stopped under a running
//! operator, the operator killed at random points, a silent watch. Each test prints what
//! it saw. (Other writers, failing resources and the steady state: `tests/steady.rs`.)

mod common;

use common::fleet::{wait_converged, websites};

use common::{Cluster, Operator, eventually, get_json, install_crds, kubectl_ok, list_at};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Tests that start a control plane of their own run one at a time (2 cores).
static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

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
