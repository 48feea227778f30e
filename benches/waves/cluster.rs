//! The control planes the benchmark runs on: a fresh etcd and API server per system (the
//! controller-manager, the scheduler and kwok for the latency runs), kro's graph installed,
//! a client for it.

use super::*;

pub(crate) fn sh(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

pub(crate) fn cluster_dir() -> PathBuf {
    Path::new(ROOT).join("target/bench/cluster")
}

/// The controller-manager's flags beyond the cluster's own: its clients unthrottled and
/// 32 workers for Deployments and ReplicaSets, then `RULEOP_BENCH_KCM_ARGS` (say,
/// `--feature-gates=StaleControllerConsistencyReplicaSet=false`).
pub(crate) fn kcm_args() -> String {
    let extra = std::env::var("RULEOP_BENCH_KCM_ARGS").unwrap_or_default();
    format!(
        "--kube-api-qps=1000 --kube-api-burst=2000 --concurrent-deployment-syncs=32 --concurrent-replicaset-syncs=32 {extra}"
    )
}

/// The controller-manager's /metrics (its port from the cluster's ports.env, the admin
/// certificate); "" when it cannot be read.
pub(crate) fn kcm_metrics() -> String {
    let dir = cluster_dir();
    let ports = std::fs::read_to_string(dir.join("ports.env")).unwrap_or_default();
    let Some(port) = ports.lines().find_map(|l| l.strip_prefix("KCM_PORT=")) else {
        return String::new();
    };
    let pki = dir.join("pki");
    let path = |f: &str| pki.join(f).to_string_lossy().into_owned();
    sh(Command::new("curl").args([
        "-sfk",
        "--cert",
        &path("admin.crt"),
        "--key",
        &path("admin.key"),
        &format!("https://127.0.0.1:{port}/metrics"),
    ]))
    .unwrap_or_default()
}

/// A fresh etcd + API server. The WebSite CRD comes from deploy/crds, except for kro,
/// which generates its own from the ResourceGraphDefinition (installed once kro runs).
pub(crate) fn fresh_cluster(system: &str) -> Result<String, String> {
    fresh_cluster_with(system, true)
}

/// As [`fresh_cluster`]; `minimal: false` adds the controller-manager, the scheduler and
/// kwok (pods become ready).
pub(crate) fn fresh_cluster_with(system: &str, minimal: bool) -> Result<String, String> {
    let dir = cluster_dir();
    let _ =
        sh(Command::new(format!("{ROOT}/tests/cluster/down.sh")).env("RULEOP_CLUSTER_DIR", &dir));
    sh(Command::new(format!("{ROOT}/tests/cluster/up.sh"))
        .env("RULEOP_CLUSTER_DIR", &dir)
        .env("RULEOP_MINIMAL", if minimal { "1" } else { "0" })
        // The control plane's own clients unthrottled, so that the time from a WebSite to
        // a ready pod is not the controller-manager's rate limit (20/s by default).
        .env("RULEOP_KCM_EXTRA_ARGS", kcm_args())
        .env(
            "RULEOP_SCHEDULER_EXTRA_ARGS",
            "--kube-api-qps=1000 --kube-api-burst=2000",
        ))?;
    let kc = dir.join("kubeconfig").to_string_lossy().into_owned();
    if system == "kro" {
        let info = sh(Command::new("go").args([
            "mod",
            "download",
            "-json",
            "github.com/kubernetes-sigs/kro@v0.9.4",
        ]))?;
        let dir = serde_json::from_str::<Value>(&info)
            .ok()
            .and_then(|v| v["Dir"].as_str().map(str::to_string))
            .ok_or("kro module not in the module cache")?;
        sh(Command::new("kubectl").args([
            "--kubeconfig",
            &kc,
            "apply",
            "--server-side",
            "-f",
            &format!("{dir}/helm/crds/"),
        ]))?;
    } else {
        let crd = format!("{ROOT}/deploy/crds/websites.sre.example.com.yaml");
        sh(Command::new("kubectl").args(["--kubeconfig", &kc, "apply", "-f", &crd]))?;
        sh(Command::new("kubectl").args([
            "--kubeconfig",
            &kc,
            "wait",
            "--for=condition=Established",
            "crd/websites.sre.example.com",
            "--timeout=60s",
        ]))?;
    }
    if system == "ruleop-rule" {
        install_website_rule(&kc)?;
    }
    sh(Command::new("kubectl").args(["--kubeconfig", &kc, "create", "namespace", NS]))?;
    if system == "ruleop-sa" {
        install_website_identity(&kc)?;
    }
    Ok(kc)
}

/// The WebSite rule with a ServiceAccount of its own (`ruleop-sa`): the rule's file, at
/// [`identity_rule`], and the account with what `ruleop rbac --per-rule` grants it.
fn install_website_identity(kc: &str) -> Result<(), String> {
    let text =
        std::fs::read_to_string(format!("{ROOT}/rules/website.yaml")).map_err(|e| e.to_string())?;
    let f = identity_rule();
    std::fs::write(
        &f,
        format!("{text}serviceAccount: {{name: website-rule, namespace: {NS}}}\n"),
    )
    .map_err(|e| e.to_string())?;
    let rbac = sh(Command::new(format!("{ROOT}/target/release/ruleop"))
        .args([
            "rbac",
            "--per-rule",
            "--namespace",
            NS,
            "--operator-namespace",
            NS,
            "--rules",
        ])
        .arg(&f))?;
    let rbac_file = cluster_dir().join("website-identity-rbac.yaml");
    std::fs::write(&rbac_file, rbac).map_err(|e| e.to_string())?;
    sh(Command::new("kubectl")
        .args(["--kubeconfig", kc, "apply", "-f"])
        .arg(&rbac_file))?;
    Ok(())
}

/// The rules file `ruleop-sa` runs.
pub(crate) fn identity_rule() -> std::path::PathBuf {
    cluster_dir().join("website-identity.yaml")
}

/// `ruleop-rule`: the Rule kind, and the WebSite rule as a Rule object (what `make run`
/// does), before ruleop starts.
fn install_website_rule(kc: &str) -> Result<(), String> {
    let crd = format!("{ROOT}/deploy/crds/rules.ruleop.dev.yaml");
    sh(Command::new("kubectl").args(["--kubeconfig", kc, "apply", "-f", &crd]))?;
    sh(Command::new("kubectl").args([
        "--kubeconfig",
        kc,
        "wait",
        "--for=condition=Established",
        "crd/rules.ruleop.dev",
        "--timeout=60s",
    ]))?;
    let rule = sh(Command::new(format!("{ROOT}/target/release/ruleop")).args([
        "rule",
        "--rules",
        &format!("{ROOT}/rules/website.yaml"),
    ]))?;
    let f = cluster_dir().join("website-rule.yaml");
    std::fs::write(&f, rule).map_err(|e| e.to_string())?;
    sh(Command::new("kubectl")
        .args(["--kubeconfig", kc, "apply", "-f"])
        .arg(&f))?;
    Ok(())
}

/// kro: the ResourceGraphDefinition, then wait until kro serves the WebSite kind.
pub(crate) async fn install_kro_rgd(kc: &str) -> Result<(), String> {
    sh(Command::new("kubectl").args([
        "--kubeconfig",
        kc,
        "apply",
        "-f",
        &format!("{ROOT}/bench/kro/rgd.yaml"),
    ]))?;
    let start = Instant::now();
    loop {
        let est = [
            "--kubeconfig",
            kc,
            "wait",
            "--for=condition=Established",
            "crd/websites.sre.example.com",
            "--timeout=5s",
        ];
        if sh(Command::new("kubectl").args(est)).is_ok() {
            tokio::time::sleep(Duration::from_secs(3)).await;
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(90) {
            let rgd = sh(Command::new("kubectl").args([
                "--kubeconfig",
                kc,
                "get",
                "resourcegraphdefinition",
                "-o",
                "yaml",
            ]))
            .unwrap_or_default();
            let why: Vec<&str> = rgd.lines().filter(|l| l.contains("message")).collect();
            return Err(format!(
                "kro did not serve websites.sre.example.com within 90 s: {}",
                why.join(" ")
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

pub(crate) async fn client(kc: &str) -> Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(kc).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}
