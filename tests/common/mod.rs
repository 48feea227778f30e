//! Shared helpers for the integration tests. They run against the real local control
//! plane that `make test` starts (tests/cluster/up.sh); KUBECONFIG points at it.
#![allow(dead_code)]

use kube::Client;
use std::future::Future;
use std::time::{Duration, Instant};

/// A client for the local control plane. Fails loudly when there is none.
pub async fn client() -> Client {
    if std::env::var_os("KUBECONFIG").is_none() {
        let local = concat!(env!("CARGO_MANIFEST_DIR"), "/target/cluster/kubeconfig");
        // SAFETY of intent: tests set this once, before any client reads it.
        unsafe { std::env::set_var("KUBECONFIG", local) };
    }
    Client::try_default()
        .await
        .expect("no cluster: run `make test` (or `make cluster` first)")
}

/// A fresh namespace for one test, named after it.
pub async fn namespace(client: &Client, prefix: &str) -> String {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{Api, PostParams};
    let name = format!("{prefix}-{}", std::process::id() % 100000);
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    let _ = api.create(&PostParams::default(), &ns).await;
    // The controller-manager creates the default ServiceAccount pods need.
    eventually(
        Duration::from_secs(30),
        "default ServiceAccount",
        || async {
            let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> =
                Api::namespaced(client.clone(), &name);
            sa.get_opt("default").await.ok().flatten().map(|_| ())
        },
    )
    .await;
    name
}

/// Polls `f` until it gives Some, or panics after `timeout` naming `what`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Runs `kubectl` against the local cluster; returns (success, stdout, stderr).
pub fn kubectl(args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    let mut cmd = Command::new("kubectl");
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    if std::env::var_os("KUBECONFIG").is_none() {
        cmd.env(
            "KUBECONFIG",
            concat!(env!("CARGO_MANIFEST_DIR"), "/target/cluster/kubeconfig"),
        );
    }
    cmd.stdin(if stdin.is_some() {
        Stdio::piped()
    } else {
        Stdio::null()
    });
    let mut child = cmd.spawn().expect("kubectl is required");
    if let Some(input) = stdin {
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `kubectl` that must succeed.
pub fn kubectl_ok(args: &[&str], stdin: Option<&str>) -> String {
    let (ok, out, err) = kubectl(args, stdin);
    assert!(ok, "kubectl {args:?} failed: {err}");
    out
}

/// An object as JSON, or None if it does not exist.
pub fn get_json(kind: &str, ns: &str, name: &str) -> Option<serde_json::Value> {
    let (ok, out, _) = kubectl(&["get", kind, name, "-n", ns, "-o", "json"], None);
    if ok {
        serde_json::from_str(&out).ok()
    } else {
        None
    }
}

/// Installs CRDs (idempotent) and waits until they are served.
pub fn install_crds(files: &[&str]) {
    for f in files {
        let path = format!("{}/{f}", env!("CARGO_MANIFEST_DIR"));
        kubectl_ok(
            &["apply", "--server-side", "--force-conflicts", "-f", &path],
            None,
        );
        kubectl_ok(
            &[
                "wait",
                "--for=condition=Established",
                "-f",
                &path,
                "--timeout=60s",
            ],
            None,
        );
    }
}

/// A `ruleop run` process for one namespace, killed when dropped. Its log goes to
/// target/test-logs/<namespace>.log.
pub struct Operator {
    child: std::process::Child,
    pub log: std::path::PathBuf,
}

impl Operator {
    pub fn start(namespace: &str, rules: &[&str], extra: &[&str]) -> Operator {
        let root = env!("CARGO_MANIFEST_DIR");
        let dir = std::path::Path::new(root).join("target/test-logs");
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join(format!("{namespace}.log"));
        let file = std::fs::File::create(&log).unwrap();
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ruleop"));
        cmd.arg("run").arg("--namespace").arg(namespace);
        for r in rules {
            cmd.arg("--rules").arg(std::path::Path::new(root).join(r));
        }
        cmd.args(extra);
        if std::env::var_os("KUBECONFIG").is_none() {
            cmd.env("KUBECONFIG", format!("{root}/target/cluster/kubeconfig"));
        }
        cmd.env("RUST_LOG", "info,ruleop=debug");
        let child = cmd
            .stdout(file.try_clone().unwrap())
            .stderr(file)
            .spawn()
            .expect("starting ruleop");
        Operator { child, log }
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A YAML manifest from the repo with its namespace replaced.
pub fn manifest_in(file: &str, ns: &str) -> String {
    let text = std::fs::read_to_string(format!("{}/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    text.replace("namespace: default", &format!("namespace: {ns}"))
}

/// The `status` of condition `type_` on an object.
pub fn condition<'a>(obj: &'a serde_json::Value, type_: &str) -> Option<&'a serde_json::Value> {
    obj.pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Deletes a test's namespace without waiting.
pub fn delete_namespace(ns: &str) {
    let _ = kubectl(&["delete", "namespace", ns, "--wait=false"], None);
}
