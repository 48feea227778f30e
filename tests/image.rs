//! ruleop's image, run under a container engine against a control plane of its own. No base
//! image can be pulled here, so the image is assembled from local files: the binary cargo
//! built and the libraries it links, a `nonroot` user 65532, and the Dockerfile's own
//! `USER`, `ENTRYPOINT` and `CMD` (read from it: the two cannot drift). It runs as deploy/'s
//! Deployment runs it: read-only root, user 65532, no capability, no privilege escalation,
//! deploy/'s arguments, the in-cluster config from a token of deploy/'s ServiceAccount and
//! RBAC, the rules mounted read-only. Then: the probes answer, it leads, a WebSite gets
//! Ready, the API server reaches its webhook through the Service `ruleop-webhook` by name and
//! is refused a broken Rule, and a second container takes over when the first is killed.
//!
//! `make test` starts the engine (tests/tools/engine.sh: Debian's docker.io when the machine
//! has none); where none can run, the test says so and checks nothing.

mod common;

use common::{Cluster, eventually, kubectl_at};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const NS: &str = "ruleop-system";
const T: Duration = Duration::from_secs(120);
/// An address of the host's own (not loopback, which an endpoint may not be): the API server
/// reaches the webhook of a container on the host's network there.
fn host_address() -> String {
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show", "scope", "global"])
        .output()
        .expect("ip");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| {
            let mut w = l.split_whitespace();
            w.find(|x| *x == "inet")?;
            Some(w.next()?.split('/').next()?.to_string())
        })
        .expect("a global IPv4 address on this host")
}

fn docker(args: &[&str]) -> (bool, String) {
    let out = Command::new("docker").args(args).output().expect("docker");
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

/// Why no engine can run the image, if none can.
fn no_engine() -> Option<String> {
    if let Ok(why) = std::env::var("RULEOP_NO_ENGINE") {
        return Some(why);
    }
    match Command::new("docker").arg("info").output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "no container engine answers ({}); `make test` starts one",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Some(format!("no docker client: {e}")),
    }
}

/// The Dockerfile's final stage: its `USER`, `ENTRYPOINT` and `CMD` lines, as `docker
/// import --change` takes them.
fn runtime_stage() -> Vec<String> {
    let dockerfile = std::fs::read_to_string(format!("{ROOT}/Dockerfile")).unwrap();
    let last = dockerfile.rsplit("\nFROM ").next().unwrap();
    let changes: Vec<String> = last
        .lines()
        .map(str::trim)
        .filter(|l| {
            ["USER ", "ENTRYPOINT ", "CMD "]
                .iter()
                .any(|p| l.starts_with(p))
        })
        .map(str::to_string)
        .collect();
    assert_eq!(changes.len(), 3, "USER, ENTRYPOINT and CMD in {last}");
    changes
}

/// The libraries `bin` links (by `ldd`), with the dynamic loader.
fn libraries(bin: &str) -> Vec<String> {
    let out = Command::new("ldd").arg(bin).output().expect("ldd");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            l.split_whitespace()
                .find(|w| w.starts_with('/'))
                .map(str::to_string)
        })
        .collect()
}

/// Imports the image `tag`: the binary at the Dockerfile's path, its libraries, /etc/passwd
/// and /etc/group with `nonroot` (65532) as distroless has it, /tmp; nothing else.
fn assemble(tag: &str) {
    let bin = env!("CARGO_BIN_EXE_ruleop");
    let root = tempfile::tempdir().unwrap();
    let r = root.path();
    let put = |path: &str, from: &str| {
        let to = r.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, &to).unwrap_or_else(|e| panic!("{from}: {e}"));
    };
    put("/usr/local/bin/ruleop", bin);
    for lib in libraries(bin) {
        put(&lib, &lib);
    }
    std::fs::create_dir_all(r.join("etc")).unwrap();
    std::fs::create_dir_all(r.join("tmp")).unwrap();
    std::fs::create_dir_all(r.join("home/nonroot")).unwrap();
    std::fs::write(
        r.join("etc/passwd"),
        "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n",
    )
    .unwrap();
    std::fs::write(r.join("etc/group"), "root:x:0:\nnonroot:x:65532:\n").unwrap();
    let mut import = vec!["import".to_string()];
    for c in runtime_stage() {
        import.push("--change".into());
        import.push(c);
    }
    import.extend(["-".to_string(), tag.to_string()]);
    let mut tar = Command::new("tar")
        .args(["-C", r.to_str().unwrap(), "-c", "."])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = Command::new("docker")
        .args(&import)
        .stdin(tar.stdout.take().unwrap())
        .output()
        .unwrap();
    assert!(tar.wait().unwrap().success(), "tar of the image's files");
    assert!(
        out.status.success(),
        "docker import: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// deploy/'s Deployment: its container's arguments and securityContext.
fn deployment() -> Value {
    let text = std::fs::read_to_string(format!("{ROOT}/deploy/operator.yaml")).unwrap();
    let doc = text.split("\n---\n").next().unwrap();
    let d: Value = serde_yaml::from_str(doc).unwrap();
    assert_eq!(d["kind"], "Deployment");
    d
}

/// The ServiceAccount's files as a pod mounts them: a token of deploy/'s account, the
/// cluster's CA, the namespace.
fn service_account_files(c: &Cluster, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let token = c.kubectl(
        &["create", "token", "ruleop", "-n", NS, "--duration", "1h"],
        None,
    );
    std::fs::write(dir.join("token"), token.trim()).unwrap();
    let kc: Value =
        serde_yaml::from_str(&c.kubectl(&["config", "view", "--raw", "-o", "yaml"], None)).unwrap();
    let ca = kc["clusters"][0]["cluster"]["certificate-authority-data"]
        .as_str()
        .unwrap();
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD
        .decode(ca)
        .unwrap();
    std::fs::write(dir.join("ca.crt"), ca).unwrap();
    std::fs::write(dir.join("namespace"), NS).unwrap();
    // Readable by user 65532, as a projected volume is.
    for f in ["token", "ca.crt", "namespace"] {
        let p = dir.join(f);
        let mut perm = std::fs::metadata(&p).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o644);
        std::fs::set_permissions(&p, perm).unwrap();
    }
}

/// The API server's port (its URL in the kubeconfig).
fn api_port(c: &Cluster) -> String {
    let kc: Value =
        serde_yaml::from_str(&c.kubectl(&["config", "view", "--raw", "-o", "yaml"], None)).unwrap();
    let server = kc["clusters"][0]["cluster"]["server"].as_str().unwrap();
    server
        .rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .to_string()
}

/// One container of the image, as deploy/ runs it, on ports of its own (host network).
struct Container {
    name: String,
    admin: u16,
    webhook: u16,
}

impl Container {
    fn start(c: &Cluster, image: &str, pod: &str, sa: &Path) -> Container {
        let d = deployment();
        let spec = &d["spec"]["template"]["spec"];
        let container = &spec["containers"][0];
        let (admin, webhook) = (common::free_port(), common::free_port());
        let args: Vec<String> = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                let a = a.as_str().unwrap();
                match a.split_once('=') {
                    Some(("--admin-addr", _)) => format!("--admin-addr=0.0.0.0:{admin}"),
                    Some(("--webhook-addr", _)) => format!("--webhook-addr=0.0.0.0:{webhook}"),
                    Some(("--status-addr", _)) => "--status-addr=127.0.0.1:0".to_string(),
                    _ => a.to_string(),
                }
            })
            .collect();
        let sc = &container["securityContext"];
        assert_eq!(sc["readOnlyRootFilesystem"], true);
        assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
        assert_eq!(spec["securityContext"]["runAsUser"], 65532);
        let name = format!("ruleop-image-test-{pod}");
        let _ = docker(&["rm", "-f", &name]);
        let mut run: Vec<String> = [
            "run",
            "-d",
            "--name",
            &name,
            "--network",
            "host",
            "--read-only",
            "--user",
            "65532:65532",
            "--cap-drop",
            "ALL",
            "--security-opt",
            "no-new-privileges",
            "-v",
            &format!(
                "{}:/var/run/secrets/kubernetes.io/serviceaccount:ro",
                sa.display()
            ),
            "-v",
            &format!("{ROOT}/rules:/etc/ruleop/rules:ro"),
            "-e",
            "KUBERNETES_SERVICE_HOST=127.0.0.1",
            "-e",
            &format!("KUBERNETES_SERVICE_PORT={}", api_port(c)),
            "-e",
            &format!("POD_NAME={pod}"),
            "-e",
            &format!("POD_NAMESPACE={NS}"),
            "-e",
            "RUST_LOG=info,kube=warn",
            image,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        run.extend(args);
        let run: Vec<&str> = run.iter().map(String::as_str).collect();
        let (ok, out) = docker(&run);
        assert!(ok, "docker run: {out}");
        Container {
            name,
            admin,
            webhook,
        }
    }

    fn logs(&self) -> String {
        docker(&["logs", &self.name]).1
    }

    /// The probe's answer on the admin port (0 when none).
    fn probe(&self, path: &str) -> u16 {
        std::net::TcpStream::connect(("127.0.0.1", self.admin))
            .map(|_| common::http_get(&format!("127.0.0.1:{}", self.admin), path).0)
            .unwrap_or(0)
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = docker(&["rm", "-f", &self.name]);
    }
}

/// The Service `ruleop-webhook` of deploy/, its endpoint this container's webhook port on
/// the host's address (no kube-proxy here: the API server routes to endpoints).
fn route_webhook_to(c: &Cluster, to: &Container) {
    let endpoints = json!({
        "apiVersion": "v1", "kind": "Endpoints",
        "metadata": {"name": "ruleop-webhook", "namespace": NS},
        "subsets": [{"addresses": [{"ip": host_address()}], "ports": [{"name": "webhook", "port": to.webhook, "protocol": "TCP"}]}],
    });
    c.kubectl(&["apply", "-f", "-"], Some(&endpoints.to_string()));
}

async fn website_replicas(c: &Cluster, name: &str, replicas: i64) {
    let kc = c.kubeconfig.clone();
    eventually(T, "the WebSite Ready", || async {
        let (ok, out, _) = kubectl_at(
            &kc,
            &["get", "website", name, "-n", "web", "-o", "json"],
            None,
        );
        let site: Value = serde_json::from_str(&out).ok().filter(|_| ok)?;
        let ready = common::condition(&site, "Ready")?;
        (ready["status"] == "True" && site["status"]["readyReplicas"] == replicas).then_some(())
    })
    .await;
}

async fn holder(c: &Cluster, pod: &str) {
    let kc = c.kubeconfig.clone();
    eventually(T, &format!("{pod} holds the Lease"), || async {
        let (ok, out, _) = kubectl_at(
            &kc,
            &[
                "get",
                "lease",
                "ruleop-leader",
                "-n",
                NS,
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ],
            None,
        );
        (ok && out.trim() == pod).then_some(())
    })
    .await;
}

#[tokio::test]
async fn the_image_runs_as_deploy_runs_it_leads_serves_the_webhook_and_fails_over() {
    if let Some(why) = no_engine() {
        eprintln!("image test skipped: {why}");
        return;
    }
    let image = "ruleop:image-test";
    assemble(image);
    let c = Cluster::start_with_env(&[(
        "RULEOP_APISERVER_EXTRA_ARGS",
        "--enable-aggregator-routing=true",
    )]);
    for f in [
        "crds/rules.ruleop.dev.yaml",
        "crds/websites.sre.example.com.yaml",
        "crds/myapps.myscheme.example.com.yaml",
        "namespace.yaml",
        "serviceaccount.yaml",
        "rbac.yaml",
        "webhook.yaml",
    ] {
        c.kubectl(&["apply", "-f", &format!("{ROOT}/deploy/{f}")], None);
    }
    c.wait_established(&["rules.ruleop.dev", "websites.sre.example.com"]);
    // deploy/'s webhook Service, with no selector: its endpoint is set by hand below.
    c.kubectl(
        &["apply", "-f", "-"],
        Some(&json!({"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "ruleop-webhook", "namespace": NS},
            "spec": {"ports": [{"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}]}}).to_string()),
    );
    let sa_dir = tempfile::tempdir().unwrap();
    let sa = sa_dir.path().join("serviceaccount");
    service_account_files(&c, &sa);

    let a = Container::start(&c, image, "ruleop-a", &sa);
    eventually(T, "the probes answer", || async {
        (a.probe("/livez") == 200 && a.probe("/readyz") == 200).then_some(())
    })
    .await;
    assert_eq!(a.probe("/status"), 404, "/status is not on the admin port");
    holder(&c, "ruleop-a").await;
    c.kubectl(&["create", "namespace", "web"], None);
    c.kubectl(
        &["apply", "-n", "web", "-f", "-"],
        Some("apiVersion: sre.example.com/v1alpha1\nkind: WebSite\nmetadata: {name: front}\nspec: {image: nginx:1.27}\n"),
    );
    website_replicas(&c, "front", 2).await;

    // The webhook, through the Service's name (its certificate is for that name).
    route_webhook_to(&c, &a);
    let rules = std::fs::read_to_string(format!("{ROOT}/examples/rules.yaml")).unwrap();
    let website = rules
        .split("\n---\n")
        .find(|d| d.contains("name: \"website\""))
        .unwrap();
    let mut broken: Value = serde_yaml::from_str(website).unwrap();
    broken["metadata"]["name"] = json!("broken");
    broken["spec"]["children"][0]["template"]["spec"]["replicas"] = json!("three");
    let text = broken.to_string();
    let refusal = eventually(T, "the webhook refuses a broken Rule", || async {
        let (ok, _, err) = kubectl_at(
            &c.kubeconfig,
            &["apply", "--dry-run=server", "-f", "-"],
            Some(&text),
        );
        (!ok).then_some(err)
    })
    .await;
    assert!(
        refusal.contains("rules.ruleop.dev") && refusal.contains("denied the request"),
        "{refusal}\n{}",
        a.logs()
    );

    // A standby, then the leader killed: the standby leads and serves.
    let b = Container::start(&c, image, "ruleop-b", &sa);
    eventually(T, "the standby's probes answer", || async {
        (b.probe("/livez") == 200).then_some(())
    })
    .await;
    let (ok, out) = docker(&["kill", &a.name]);
    assert!(ok, "{out}");
    holder(&c, "ruleop-b").await;
    c.kubectl(
        &[
            "patch",
            "website",
            "front",
            "-n",
            "web",
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":3}}"#,
        ],
        None,
    );
    website_replicas(&c, "front", 3).await;
    route_webhook_to(&c, &b);
    let (ok, _, err) = kubectl_at(
        &c.kubeconfig,
        &["apply", "--dry-run=server", "-f", "-"],
        Some(&text),
    );
    assert!(
        !ok && err.contains("denied the request"),
        "the standby's webhook: {err}\n{}",
        b.logs()
    );
    let logs = b.logs();
    assert!(!logs.contains("panicked"), "{logs}");
}
