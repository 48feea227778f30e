//! Shared helpers for the integration tests. They run against the real local control
//! plane that `make test` starts (tests/cluster/up.sh); KUBECONFIG points at it.
#![allow(dead_code)]

pub mod access;
pub mod chart;
pub mod fleet;
pub mod proxy;
pub mod view;

use kube::Client;
use std::future::Future;
use std::time::{Duration, Instant};

/// Applies a Box (the trust tests' kind, tests/fixtures/trust/crd.yaml) `name` with `spec`.
pub fn apply_box(ns: &str, name: &str, spec: serde_json::Value) {
    let b = serde_json::json!({"apiVersion": "trust.ruleop.dev/v1", "kind": "Box",
        "metadata": {"name": name, "namespace": ns}, "spec": spec});
    kubectl_ok(&["apply", "-f", "-"], Some(&b.to_string()));
}

/// The shipped WebSite rule as a Rule object named `name`, labelled
/// `ruleop.dev/test: <label>` (the `--rule-selector` of the test's ruleop).
pub fn website_rule(name: &str, label: &str) -> serde_json::Value {
    let (code, out, err) = ruleop_cli(&["rule", "--rules", "rules/website.yaml"], false);
    assert_eq!(code, 0, "{err}");
    let doc = out.split("\n---\n").nth(1).expect("one Rule");
    let mut rule: serde_json::Value = serde_yaml::from_str(doc).unwrap();
    rule["metadata"] = serde_json::json!({"name": name, "labels": {"ruleop.dev/test": label}});
    rule
}

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
/// target/test-logs/<namespace>-<pid>-<n>.log.
pub struct Operator {
    child: std::process::Child,
    pub log: std::path::PathBuf,
}

impl Operator {
    pub fn start(namespace: &str, rules: &[&str], extra: &[&str]) -> Operator {
        Operator::start_inner(namespace, rules, extra, &[])
    }

    fn start_inner(
        namespace: &str,
        rules: &[&str],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Operator {
        let root = env!("CARGO_MANIFEST_DIR");
        let dir = std::path::Path::new(root).join("target/test-logs");
        std::fs::create_dir_all(&dir).unwrap();
        static SEQ: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        // The process id keeps two test binaries that run side by side (tests/run.sh's
        // lanes) with the same namespace name off each other's logs.
        let log = dir.join(format!(
            "{namespace}-{}-{}.log",
            std::process::id(),
            SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        ));
        let file = std::fs::File::create(&log).unwrap();
        // RULEOP_TEST_BIN: another build of ruleop (a release build, for figures).
        let bin = std::env::var("RULEOP_TEST_BIN").unwrap_or(env!("CARGO_BIN_EXE_ruleop").into());
        let mut cmd = std::process::Command::new(bin);
        cmd.arg("run").arg("--namespace").arg(namespace);
        cmd.args(["--log-format", "json", "--admin-addr", "127.0.0.1:0"]);
        for r in rules {
            cmd.arg("--rules").arg(std::path::Path::new(root).join(r));
        }
        cmd.args(extra);
        // Rule objects are cluster-wide: only the tests of them serve them.
        if !extra.iter().any(|a| a.starts_with("--rule-objects")) {
            cmd.arg("--rule-objects=false");
        }
        if std::env::var_os("KUBECONFIG").is_none() {
            cmd.env("KUBECONFIG", format!("{root}/target/cluster/kubeconfig"));
        }
        cmd.env("RUST_LOG", "info,ruleop=debug");
        for (k, v) in env {
            cmd.env(k, v);
        }
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

    /// The log as JSON records.
    pub fn records(&self) -> Vec<serde_json::Value> {
        self.logs()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The admin server's address, once it listens.
    pub async fn admin_addr(&self) -> String {
        eventually(
            Duration::from_secs(30),
            "admin server address in the log",
            || async {
                self.records()
                    .iter()
                    .find(|r| r["message"] == "admin server listening")
                    .and_then(|r| r["addr"].as_str().map(str::to_string))
            },
        )
        .await
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then waits up to `timeout` for the exit; returns whether it exited.
    pub fn terminate(&mut self, timeout: Duration) -> bool {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let start = Instant::now();
        while start.elapsed() < timeout {
            if !self.running() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        false
    }

    /// Starts with a custom environment (e.g. another KUBECONFIG).
    pub fn start_with_env(
        namespace: &str,
        rules: &[&str],
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> Operator {
        Operator::start_inner(namespace, rules, extra, env)
    }
}

/// The sum of every series of `name` in a /metrics text (0 when there is none).
pub fn metric_sum(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// [`metric_sum`] of `name` as ruleop's admin server at `addr` reports it now.
pub fn admin_metric(addr: &str, name: &str) -> f64 {
    metric_sum(&http_get(addr, "/metrics").1, name)
}

/// GET over plain HTTP/1.0 on loopback: (status code, body).
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    http_get_as(addr, path, None)
}

/// [`http_get`] with a bearer token.
pub fn http_get_as(addr: &str, path: &str, token: Option<&str>) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("admin server reachable");
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}\r\n").unwrap();
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    let code = buf
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (code, body)
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
    // (The examples name no namespace: `kubectl apply -n NS -f` puts them anywhere.)
    if text.contains("namespace: default") {
        text.replace("namespace: default", &format!("namespace: {ns}"))
    } else {
        text.replace("metadata:\n", &format!("metadata:\n  namespace: {ns}\n"))
    }
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

/// `kubectl` against the cluster of `kubeconfig`.
pub fn kubectl_at(kubeconfig: &str, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let mut all = vec!["--kubeconfig", kubeconfig];
    all.extend_from_slice(args);
    kubectl(&all, stdin)
}

/// A list of objects as JSON items (empty when the list fails).
pub fn list_at(
    kubeconfig: &str,
    kind: &str,
    ns: &str,
    selector: Option<&str>,
) -> Vec<serde_json::Value> {
    let mut args = vec!["get", kind, "-n", ns, "-o", "json"];
    if let Some(s) = selector {
        args.extend_from_slice(&["-l", s]);
    }
    let (ok, out, _) = kubectl_at(kubeconfig, &args, None);
    if !ok {
        return Vec::new();
    }
    serde_json::from_str::<serde_json::Value>(&out)
        .ok()
        .and_then(|v| v["items"].as_array().cloned())
        .unwrap_or_default()
}

/// A control plane of its own for one fault test (its API server and etcd can be
/// stopped without disturbing other tests). Stopped and removed when dropped.
pub struct Cluster {
    pub dir: std::path::PathBuf,
    pub kubeconfig: String,
    _tmp: tempfile::TempDir,
}

impl Cluster {
    pub fn start() -> Cluster {
        Cluster::start_with_env(&[])
    }

    /// A cluster of its own, `up.sh` run with extra environment (e.g.
    /// `RULEOP_APISERVER_EXTRA_ARGS`).
    pub fn start_with_env(env: &[(&str, &str)]) -> Cluster {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("cluster");
        let up =
            std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/cluster/up.sh"))
                .env("RULEOP_CLUSTER_DIR", &dir)
                .envs(env.iter().copied())
                .output()
                .expect("running up.sh");
        assert!(
            up.status.success(),
            "up.sh failed: {}",
            String::from_utf8_lossy(&up.stderr)
        );
        let kubeconfig = dir.join("kubeconfig").to_str().unwrap().to_string();
        Cluster {
            dir,
            kubeconfig,
            _tmp: tmp,
        }
    }

    /// `ctl.sh ACTION COMPONENT` on this cluster.
    pub fn ctl(&self, action: &str, component: &str) {
        let st = std::process::Command::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/cluster/ctl.sh"
        ))
        .args([action, component])
        .env("RULEOP_CLUSTER_DIR", &self.dir)
        .status()
        .unwrap();
        assert!(st.success(), "ctl.sh {action} {component}");
    }

    /// Waits for the API server to answer /readyz.
    pub async fn wait_ready(&self) {
        let kc = self.kubeconfig.clone();
        eventually(Duration::from_secs(90), "API server ready", || async {
            kubectl_at(&kc, &["get", "--raw", "/readyz"], None)
                .0
                .then_some(())
        })
        .await;
    }

    /// A cluster of its own with the WebSite CRD and a namespace `ns`.
    pub fn with_websites(ns: &str) -> Cluster {
        Cluster::with_websites_env(ns, &[])
    }

    /// As [`Cluster::with_websites`], `up.sh` run with extra environment.
    pub fn with_websites_env(ns: &str, env: &[(&str, &str)]) -> Cluster {
        let c = Cluster::start_with_env(env);
        c.kubectl(
            &[
                "apply",
                "-f",
                concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/deploy/crds/websites.sre.example.com.yaml"
                ),
            ],
            None,
        );
        c.wait_established(&["websites.sre.example.com"]);
        c.kubectl(&["create", "namespace", ns], None);
        c
    }

    /// Waits until each CRD of `crds` (by name) is Established.
    pub fn wait_established(&self, crds: &[&str]) {
        for crd in crds {
            self.kubectl(
                &[
                    "wait",
                    "--for=condition=Established",
                    &format!("crd/{crd}"),
                    "--timeout=60s",
                ],
                None,
            );
        }
    }

    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> String {
        let (ok, out, err) = kubectl_at(&self.kubeconfig, args, stdin);
        assert!(ok, "kubectl {args:?}: {err}");
        out
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = std::process::Command::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/cluster/down.sh"
        ))
        .env("RULEOP_CLUSTER_DIR", &self.dir)
        .output();
    }
}

/// Waits up to a minute for an object that satisfies `pred`.
pub async fn wait_json(
    kind: &str,
    ns: &str,
    name: &str,
    what: &str,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    eventually(
        Duration::from_secs(60),
        &format!("{kind}/{name}: {what}"),
        || async { get_json(kind, ns, name).filter(|v| pred(v)) },
    )
    .await
}

/// The children the origin's typed WebSite operator made for `name` (controller-runtime:
/// `POST`, field manager `manager`, controller ownerReference to the resource `owner_uid`):
/// its three labels on the objects, the selector and the pod template, its unnamed
/// container port. `extra_annotations` is added to the Deployment (a field the rule does
/// not render).
pub fn typed_website_children(
    ns: &str,
    name: &str,
    owner_uid: &str,
    image: &str,
    replicas: u32,
    extra_annotations: &str,
) -> String {
    let labels = format!(
        "{{app.kubernetes.io/name: website, app.kubernetes.io/instance: {name}, app.kubernetes.io/managed-by: website-operator}}"
    );
    let owner = format!(
        "[{{apiVersion: sre.example.com/v1alpha1, kind: WebSite, name: {name}, uid: {owner_uid}, controller: true, blockOwnerDeletion: true}}]"
    );
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}-web, namespace: {ns}, labels: {labels}, annotations: {{{extra_annotations}}}, ownerReferences: {owner}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {labels}}}
  template:
    metadata: {{labels: {labels}}}
    spec:
      containers:
        - name: web
          image: "{image}"
          ports: [{{containerPort: 80, protocol: TCP}}]
          resources: {{requests: {{cpu: 100m, memory: 128Mi}}, limits: {{cpu: 500m, memory: 256Mi}}}}
---
apiVersion: v1
kind: Service
metadata: {{name: {name}-web, namespace: {ns}, labels: {labels}, ownerReferences: {owner}}}
spec:
  type: ClusterIP
  selector: {labels}
  ports: [{{name: http, port: 80, targetPort: 80, protocol: TCP}}]
"#
    )
}

/// Creates a WebSite `name` and, as the typed operator did, its children; returns the
/// resource.
pub fn website_with_typed_children(
    ns: &str,
    name: &str,
    extra_annotations: &str,
) -> serde_json::Value {
    let cr = format!(
        "apiVersion: sre.example.com/v1alpha1\nkind: WebSite\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{image: \"nginx:1.27\", replicas: 1}}\n"
    );
    kubectl_ok(&["apply", "-f", "-"], Some(&cr));
    let site = get_json("website", ns, name).unwrap();
    let uid = site["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    kubectl_ok(
        &["create", "--field-manager=manager", "-f", "-"],
        Some(&typed_website_children(
            ns,
            name,
            &uid,
            "nginx:1.27",
            1,
            extra_annotations,
        )),
    );
    site
}

/// Runs the ruleop command line in the project's folder: (exit code, stdout, stderr).
/// `cluster: false` hides the kubeconfig (the offline commands must not need one).
pub fn ruleop_cli(args: &[&str], cluster: bool) -> (i32, String, String) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_ruleop"));
    cmd.args(args).current_dir(env!("CARGO_MANIFEST_DIR"));
    if !cluster {
        cmd.env_remove("KUBECONFIG");
    }
    let out = cmd.output().expect("running ruleop");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The flags of a ruleop that serves its webhook on loopback `port` (the API server
/// reaches it by URL), its Lease in `ns` and its Rules those labelled
/// `ruleop.dev/test=<ns>`; the webhook configuration is `ruleop-<ns>`.
pub fn webhook_args(ns: &str, port: u16) -> Vec<String> {
    [
        "--lease-namespace",
        ns,
        "--webhook-addr",
        &format!("127.0.0.1:{port}"),
        "--webhook-url",
        &format!("https://127.0.0.1:{port}/validate-rules"),
        "--webhook-name",
        &format!("ruleop-{ns}"),
        "--rule-selector",
        &format!("ruleop.dev/test={ns}"),
    ]
    .map(str::to_string)
    .to_vec()
}

/// A port free on loopback now (for a webhook the API server reaches by URL).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// An audit policy that records every request's metadata (who, what, as whom), once.
pub const AUDIT_METADATA: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
"#;

/// A cluster of its own with the WebSite CRD and namespace `ns`, its API server writing an
/// audit log by `policy` into `dir`; gives the cluster and the log's path.
pub fn cluster_with_audit(
    ns: &str,
    policy: &str,
    dir: &std::path::Path,
    env: &[(&str, &str)],
) -> (Cluster, String) {
    let policy_file = dir.join("audit-policy.yaml");
    std::fs::write(&policy_file, policy).unwrap();
    let audit = dir.join("audit.log");
    let extra = format!(
        "--audit-policy-file {} --audit-log-path {}",
        policy_file.display(),
        audit.display()
    );
    let mut all = vec![("RULEOP_APISERVER_EXTRA_ARGS", extra.as_str())];
    all.extend_from_slice(env);
    let c = Cluster::with_websites_env(ns, &all);
    (c, audit.to_str().unwrap().to_string())
}

/// The path of a Go tool of tests/tools/ (`kstatus`, `helm`, `promtool`), built once from
/// its pinned modules by tests/tools/build.sh.
pub fn go_tool(name: &str) -> String {
    let out =
        std::process::Command::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/tools/build.sh"))
            .arg(name)
            .output()
            .expect("tests/tools/build.sh");
    assert!(
        out.status.success(),
        "building {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The shipped WebSite rule, and the same with a Deployment the API server refuses (its
/// pods must restart Always: this one says Never).
pub fn website_rule_and_refused() -> (String, String) {
    let root = env!("CARGO_MANIFEST_DIR");
    let good = std::fs::read_to_string(format!("{root}/rules/website.yaml")).unwrap();
    let broken = good.replacen(
        "            containers:\n",
        "            restartPolicy: Never\n            containers:\n",
        1,
    );
    assert_ne!(broken, good);
    (good, broken)
}

/// The uids of the pods of WebSite `name` in `ns`, sorted, as `kubectl` (the shared
/// cluster's, or another's) lists them.
pub fn website_pods(kubectl: impl Fn(&[&str]) -> String, ns: &str, name: &str) -> Vec<String> {
    let selector = format!("app.kubernetes.io/instance={name}");
    let out = kubectl(&["get", "pods", "-n", ns, "-l", &selector, "-o", "json"]);
    let pods: serde_json::Value = serde_json::from_str(&out).unwrap();
    let mut uids: Vec<String> = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["metadata"]["uid"].as_str().unwrap().to_string())
        .collect();
    uids.sort();
    uids
}

/// A ServiceAccount `reader` in `ns` allowed `get` on `/metrics` (a ClusterRole and its
/// binding, both named `<ns>-metrics-reader`), and the accounts `others` allowed nothing;
/// gives the role's name (delete `clusterrolebinding,clusterrole` of it after).
pub fn metrics_reader(ns: &str, others: &[&str]) -> String {
    let role = format!("{ns}-metrics-reader");
    let mut items: Vec<serde_json::Value> = ["reader"]
        .iter()
        .chain(others)
        .map(|sa| serde_json::json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa, "namespace": ns}}))
        .collect();
    items.push(serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": role},
        "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}));
    items.push(serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": role},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}]}));
    let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
    kubectl_ok(&["apply", "-f", "-"], Some(&list.to_string()));
    role
}

/// Runs `openssl` with `args` in `dir`; panics with its stderr when it fails.
pub fn openssl(dir: &std::path::Path, args: &[&str]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("running openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
