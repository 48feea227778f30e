//! The release (`make release`, release/build.sh) and its image run under a container engine
//! against a control plane of its own.
//!
//! - The artifacts: the binary's tarball, the image as an OCI archive, the packaged chart, the
//!   CycloneDX SBOM (the crates Cargo.lock pins), the CHANGELOG's section and SHA256SUMS of
//!   them all (`sha256sum -c`). The release packages the binary cargo built for the tests.
//! - The image: no base image can be pulled here, so release/image.sh assembles it from local
//!   files (the binary, the libraries it links, a `nonroot` user 65532, the Dockerfile's own
//!   `USER`, `ENTRYPOINT` and `CMD`). The archive is loaded into the engine and runs as the
//!   packaged chart, installed with Helm, runs it: read-only root, user 65532, no capability,
//!   no privilege escalation, the chart's arguments and rules, the in-cluster config from a
//!   token of the chart's ServiceAccount and RBAC. Then: the probes answer, it leads, a
//!   WebSite gets Ready, the API server reaches its webhook through the Service
//!   `ruleop-webhook` by name and is refused a broken Rule, and a second container takes over
//!   when the first is killed.
//!
//! `make test` starts the engine (tests/tools/engine.sh: Debian's docker.io when the machine
//! has none); where none can run, the image's test says so and checks nothing.

mod common;

use common::chart::helm;
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

/// The release artifacts (`make release`'s release/build.sh, packaging the binary cargo
/// built for these tests), made once per run of this file.
fn artifacts() -> &'static Path {
    static DIST: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    DIST.get_or_init(|| {
        let dist = tempfile::tempdir().unwrap();
        let out = Command::new(format!("{ROOT}/release/build.sh"))
            .env("RULEOP_RELEASE_BINARY", env!("CARGO_BIN_EXE_ruleop"))
            .env("RULEOP_DIST", dist.path())
            .output()
            .expect("release/build.sh");
        assert!(
            out.status.success(),
            "release/build.sh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        dist
    })
    .path()
}

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// The version Cargo.lock pins `krate` at (its `[[package]]` of that name).
fn locked(krate: &str) -> String {
    let lock = std::fs::read_to_string(format!("{ROOT}/Cargo.lock")).unwrap();
    let name = format!("name = \"{krate}\"\n");
    lock.split("[[package]]\n")
        .find(|p| p.starts_with(&name))
        .and_then(|p| p.lines().find_map(|l| l.strip_prefix("version = \"")))
        .map(|v| v.trim_end_matches('"').to_string())
        .unwrap_or_else(|| panic!("{krate} in Cargo.lock"))
}

/// `tar` with `args` in `dir`: its stdout.
fn tar(dir: &Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new("tar")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "tar {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out.stdout
}

#[test]
fn make_release_writes_the_binary_image_chart_sbom_notes_and_their_checksums() {
    let dist = artifacts();
    let files = [
        format!("ruleop-{VERSION}-linux-amd64.tar.gz"),
        format!("ruleop-{VERSION}.oci.tar"),
        format!("ruleop-{VERSION}.tgz"),
        format!("ruleop-{VERSION}.cdx.json"),
        "RELEASE_NOTES.md".to_string(),
    ];
    let sums = std::fs::read_to_string(dist.join("SHA256SUMS")).unwrap();
    let mut listed: Vec<&str> = sums
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    listed.sort();
    let mut want: Vec<&str> = files.iter().map(String::as_str).collect();
    want.sort();
    assert_eq!(listed, want, "SHA256SUMS names every artifact");
    let check = Command::new("sha256sum")
        .args(["-c", "SHA256SUMS"])
        .current_dir(dist)
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );

    let notes = std::fs::read_to_string(dist.join("RELEASE_NOTES.md")).unwrap();
    assert!(notes.starts_with(&format!("## {VERSION} ")), "{notes:.200}");
    assert!(
        !notes.contains("\n## "),
        "one version's section: {notes:.400}"
    );

    let sbom: Value = serde_json::from_str(
        &std::fs::read_to_string(dist.join(format!("ruleop-{VERSION}.cdx.json"))).unwrap(),
    )
    .unwrap();
    assert_eq!(sbom["bomFormat"], "CycloneDX");
    assert_eq!(sbom["metadata"]["component"]["name"], "ruleop");
    assert_eq!(sbom["metadata"]["component"]["version"], VERSION);
    for krate in ["kube", "tokio", "minijinja"] {
        let version = locked(krate);
        let found = sbom["components"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == krate && c["version"] == version.as_str());
        assert!(
            found,
            "the SBOM lists {krate} {version}, as Cargo.lock pins it"
        );
    }

    let listing = String::from_utf8(tar(dist, &["-tzf", &files[0]])).unwrap();
    let binary = format!("ruleop-{VERSION}/ruleop");
    assert!(listing.lines().any(|l| l == binary), "{listing}");

    let chart = helm(
        &["show", "chart", dist.join(&files[2]).to_str().unwrap()],
        None,
    );
    let chart: Value = serde_yaml::from_str(&chart).unwrap();
    assert_eq!(
        chart["appVersion"], VERSION,
        "the chart's image is this release's"
    );

    // The image archive is an OCI image layout naming ruleop:<version>.
    let layout: Value =
        serde_json::from_slice(&tar(dist, &["-xOf", &files[1], "oci-layout"])).unwrap();
    assert_eq!(layout["imageLayoutVersion"], "1.0.0");
    let index: Value =
        serde_json::from_slice(&tar(dist, &["-xOf", &files[1], "index.json"])).unwrap();
    let annotations = &index["manifests"][0]["annotations"];
    assert_eq!(annotations["org.opencontainers.image.ref.name"], VERSION);
    assert_eq!(
        annotations["io.containerd.image.name"],
        format!("docker.io/library/ruleop:{VERSION}")
    );
}

/// The Dockerfile's final stage: its `USER`, `ENTRYPOINT` and `CMD`, as an image's config
/// holds them.
fn runtime_stage() -> Value {
    let dockerfile = std::fs::read_to_string(format!("{ROOT}/Dockerfile")).unwrap();
    let last = dockerfile.rsplit("\nFROM ").next().unwrap();
    let line = |p: &str| {
        last.lines()
            .find_map(|l| l.trim().strip_prefix(p))
            .unwrap_or_else(|| panic!("{p} in {last}"))
            .trim()
            .to_string()
    };
    json!({
        "User": line("USER "),
        "Entrypoint": serde_json::from_str::<Value>(&line("ENTRYPOINT ")).unwrap(),
        "Cmd": serde_json::from_str::<Value>(&line("CMD ")).unwrap(),
    })
}

/// Loads the release's image archive into the engine; gives its name.
fn load_image() -> String {
    let archive = artifacts().join(format!("ruleop-{VERSION}.oci.tar"));
    let (ok, out) = docker(&["load", "-i", archive.to_str().unwrap()]);
    assert!(ok, "docker load: {out}");
    let image = format!("ruleop:{VERSION}");
    let (ok, config) = docker(&["image", "inspect", &image, "--format", "{{json .Config}}"]);
    assert!(ok, "{config}");
    let config: Value = serde_json::from_str(config.trim()).unwrap();
    let want = runtime_stage();
    for k in ["User", "Entrypoint", "Cmd"] {
        assert_eq!(config[k], want[k], "the image's {k} is the Dockerfile's");
    }
    assert_eq!(
        config["Labels"]["org.opencontainers.image.version"],
        VERSION
    );
    image
}

/// The chart's Deployment as installed.
fn deployment(c: &Cluster) -> Value {
    let text = c.kubectl(
        &["get", "deployment", "ruleop", "-n", NS, "-o", "json"],
        None,
    );
    serde_json::from_str(&text).unwrap()
}

/// The rules of the chart's ConfigMap, as files in `dir` (readable by user 65532).
fn rules_files(c: &Cluster, dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let text = c.kubectl(
        &["get", "configmap", "ruleop-rules", "-n", NS, "-o", "json"],
        None,
    );
    let cm: Value = serde_json::from_str(&text).unwrap();
    for (name, text) in cm["data"].as_object().unwrap() {
        std::fs::write(dir.join(name), text.as_str().unwrap()).unwrap();
    }
    readable(dir);
}

/// `dir` and its files readable by anyone, as a projected volume's are.
fn readable(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The ServiceAccount's files as a pod mounts them: a token of the chart's account, the
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

/// One container of the image, as the chart's Deployment runs it, on ports of its own (host
/// network).
struct Container {
    name: String,
    admin: u16,
    webhook: u16,
}

impl Container {
    fn start(c: &Cluster, image: &str, pod: &str, files: &Path) -> Container {
        let d = deployment(c);
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
                files.join("serviceaccount").display()
            ),
            "-v",
            &format!("{}:/etc/ruleop/rules:ro", files.join("rules").display()),
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

/// The chart's Service `ruleop-webhook`, its endpoint this container's webhook port on
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

/// The API server's refusal of the Rule `text` (a dry run), once it refuses it. (The webhook's
/// `Ignore` lets it through while the API server cannot reach the webhook yet.)
async fn refused(c: &Cluster, text: &str, what: &str) -> String {
    eventually(T, what, || async {
        let (ok, _, err) = kubectl_at(
            &c.kubeconfig,
            &["apply", "--dry-run=server", "-f", "-"],
            Some(text),
        );
        (!ok).then_some(err)
    })
    .await
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
async fn the_released_image_runs_as_the_packaged_chart_runs_it_leads_serves_the_webhook_and_fails_over()
 {
    if let Some(why) = no_engine() {
        eprintln!("image test skipped: {why}");
        return;
    }
    let image = load_image();
    let image = image.as_str();
    let c = Cluster::start_with_env(&[(
        "RULEOP_APISERVER_EXTRA_ARGS",
        "--enable-aggregator-routing=true",
    )]);
    let chart = artifacts().join(format!("ruleop-{VERSION}.tgz"));
    let kc = c.kubeconfig.clone();
    helm(
        &[
            "install",
            "ruleop",
            chart.to_str().unwrap(),
            "-n",
            NS,
            "--create-namespace",
        ],
        Some(&kc),
    );
    c.wait_established(&["rules.ruleop.dev", "websites.sre.example.com"]);
    let d = deployment(&c);
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"], image,
        "the packaged chart runs this release's image"
    );
    // The containers below are the chart's pods: its Deployment stands at 0, and its webhook
    // Service, with no selector, routes to the container set by hand below.
    c.kubectl(
        &["scale", "deployment", "ruleop", "-n", NS, "--replicas=0"],
        None,
    );
    c.kubectl(
        &[
            "patch",
            "service",
            "ruleop-webhook",
            "-n",
            NS,
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/spec/selector"}]"#,
        ],
        None,
    );
    let files = tempfile::tempdir().unwrap();
    service_account_files(&c, &files.path().join("serviceaccount"));
    rules_files(&c, &files.path().join("rules"));
    let sa = files.path();

    let a = Container::start(&c, image, "ruleop-a", sa);
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
    let refusal = refused(&c, &text, "the webhook refuses a broken Rule").await;
    assert!(
        refusal.contains("rules.ruleop.dev") && refusal.contains("denied the request"),
        "{refusal}\n{}",
        a.logs()
    );

    // A standby, then the leader killed: the standby leads and serves.
    let b = Container::start(&c, image, "ruleop-b", sa);
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
    let refusal = refused(&c, &text, "the standby's webhook refuses a broken Rule").await;
    assert!(
        refusal.contains("denied the request"),
        "the standby's webhook: {refusal}\n{}",
        b.logs()
    );
    let logs = b.logs();
    assert!(!logs.contains("panicked"), "{logs}");
}
