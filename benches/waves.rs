//! `make bench`: ruleop against the peers and the machine's floor, side by side, in one
//! run, on a control plane with only etcd and the API server (so every write counted is
//! the system's, less the benchmark client's own, which are known exactly).
//!
//! Per system: a create wave of N WebSites (done when all 2N children exist and every
//! status has observedGeneration = generation), an update wave (every image changed; done
//! when every Deployment has it and every status is current), and a steady-state window.
//! Writes come from `apiserver_request_total`; peak RSS and CPU seconds from /proc. Every
//! system run is bracketed by two runs of the floor and reported as a ratio to their mean;
//! rounds repeat the sequence and the median is reported.
//!
//! With RULEOP_BENCH_SCALE=1000,3000,10000, the scale runs instead (see `waves/scale.rs`).
//!
//! Env: RULEOP_BENCH_N (default 1000), RULEOP_BENCH_STEADY_SECONDS (60),
//! RULEOP_BENCH_ROUNDS (3), RULEOP_BENCH_SYSTEMS (default:
//! ruleop,ruleop-warnings,controller-runtime,kopf,kro; the floor always runs; also
//! available: ruleop-c<N> (`--concurrency=<N>`), ruleop-1t, floor+conditions, floor-min (only the changed Deployment applied in the update wave, the status by merge patch), and ruleop-before / ruleop-alt from
//! target/bench/bin), RULEOP_BENCH_LOG (ruleop's RUST_LOG, default warn; the log goes to
//! target/bench/logs/), RULEOP_BENCH_DEBUG=1 (writes per
//! resource), RULEOP_BENCH_PROFILE=SECONDS (a pprof CPU profile of the API server and a
//! `perf` profile of ruleop over the create wave, in target/bench/profiles/; CPU seconds of
//! each process, the API server's time per verb and resource, ruleop's own counters),
//! RULEOP_BENCH_KCM_ARGS (more controller-manager flags, for the latency runs: the only
//! ones with a controller-manager).
//! Profiling costs CPU on the same cores: its timings are not comparable with a plain run.

use futures::{StreamExt, stream};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::discovery::ApiResource;
use kube::{Client, Config};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[path = "waves/scale.rs"]
mod scale;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const NS: &str = "bench";
const CONCURRENCY: usize = 64;
/// ruleop's admin server during the benchmark (its /metrics are read with RULEOP_BENCH_PROFILE).
const ADMIN_ADDR: &str = "127.0.0.1:18391";

#[derive(Debug, Default, Clone, serde::Serialize)]
struct Figures {
    system: String,
    create_seconds: f64,
    update_seconds: f64,
    create_ratio_to_floor: Option<f64>,
    update_ratio_to_floor: Option<f64>,
    writes_per_cr_create: f64,
    /// Events per WebSite over the whole run (both waves and the steady window): Events
    /// are published off the reconcile path, so some of the create wave's land later.
    events_per_cr: f64,
    writes_per_cr_update: f64,
    steady_writes_per_minute: f64,
    peak_rss_mib: Option<f64>,
    cpu_seconds: Option<f64>,
    /// RSS and CPU seconds after start-up, before the first request (the scale runs'
    /// growth is of what comes on top).
    idle_rss_mib: Option<f64>,
    idle_cpu_seconds: Option<f64>,
    /// RSS at the end of the run (after the steady window): what stays, against the peak.
    end_rss_mib: Option<f64>,
    note: String,
}

fn deployment_ar() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&())
}

fn website_ar() -> ApiResource {
    ApiResource {
        group: "sre.example.com".into(),
        version: "v1alpha1".into(),
        api_version: "sre.example.com/v1alpha1".into(),
        kind: "WebSite".into(),
        plural: "websites".into(),
    }
}

fn sh(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd:?}: {}", String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn cluster_dir() -> PathBuf {
    Path::new(ROOT).join("target/bench/cluster")
}

/// The controller-manager's flags beyond the cluster's own: its clients unthrottled and
/// 32 workers for Deployments and ReplicaSets, then `RULEOP_BENCH_KCM_ARGS` (say,
/// `--feature-gates=StaleControllerConsistencyReplicaSet=false`).
fn kcm_args() -> String {
    let extra = std::env::var("RULEOP_BENCH_KCM_ARGS").unwrap_or_default();
    format!(
        "--kube-api-qps=1000 --kube-api-burst=2000 --concurrent-deployment-syncs=32 --concurrent-replicaset-syncs=32 {extra}"
    )
}

/// The controller-manager's /metrics (its port from the cluster's ports.env, the admin
/// certificate); "" when it cannot be read.
fn kcm_metrics() -> String {
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
fn fresh_cluster(system: &str) -> Result<String, String> {
    fresh_cluster_with(system, true)
}

/// As [`fresh_cluster`]; `minimal: false` adds the controller-manager, the scheduler and
/// kwok (pods become ready).
fn fresh_cluster_with(system: &str, minimal: bool) -> Result<String, String> {
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
    sh(Command::new("kubectl").args(["--kubeconfig", &kc, "create", "namespace", NS]))?;
    Ok(kc)
}

/// kro: the ResourceGraphDefinition, then wait until kro serves the WebSite kind.
async fn install_kro_rgd(kc: &str) -> Result<(), String> {
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

async fn client(kc: &str) -> Client {
    let kubeconfig = kube::config::Kubeconfig::read_from(kc).expect("kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("config");
    Client::try_from(config).expect("client")
}

/// Seconds since the Unix epoch (to line the waves up with `vmstat -t` and the like).
fn unix_now() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

/// The API server's /metrics, as text.
async fn api_metrics(c: &Client) -> String {
    let req = http::Request::get("/metrics").body(Vec::new()).unwrap();
    c.request_text(req).await.unwrap_or_default()
}

/// The value of label `k` in one line of Prometheus text ("" when absent).
fn label(line: &str, k: &str) -> String {
    line.split(&format!("{k}=\""))
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or("")
        .to_string()
}

/// Write requests by (resource, subresource, verb), from the API server's metrics.
fn writes(text: &str) -> BTreeMap<(String, String, String), f64> {
    let mut out = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| l.starts_with("apiserver_request_total{"))
    {
        let label = |k: &str| label(line, k);
        let verb = label("verb");
        if !matches!(
            verb.as_str(),
            "POST" | "PUT" | "PATCH" | "APPLY" | "DELETE" | "DELETECOLLECTION"
        ) {
            continue;
        }
        *out.entry((label("resource"), label("subresource"), verb))
            .or_default() += value(line);
    }
    out
}

/// The value of one line of Prometheus text (0 when it has none).
fn value(line: &str) -> f64 {
    line.rsplit_once(' ')
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0.0)
}

/// The sum of the values of the lines of Prometheus text that start with `prefix`.
fn total(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .map(value)
        .sum()
}

/// The API server's requests by (resource, subresource, verb): how many, and the seconds
/// they took in all (its request-duration histogram's `_count` and `_sum`).
fn request_time(text: &str) -> BTreeMap<(String, String, String), (f64, f64)> {
    let mut out: BTreeMap<_, (f64, f64)> = BTreeMap::new();
    for line in text.lines() {
        let count = line.starts_with("apiserver_request_duration_seconds_count{");
        if !count && !line.starts_with("apiserver_request_duration_seconds_sum{") {
            continue;
        }
        let key = (
            label(line, "resource"),
            label(line, "subresource"),
            label(line, "verb"),
        );
        let e = out.entry(key).or_default();
        if count {
            e.0 += value(line);
        } else {
            e.1 += value(line);
        }
    }
    out
}

/// (writes of the system, events) between two snapshots, less the client's own requests.
fn delta(
    a: &BTreeMap<(String, String, String), f64>,
    b: &BTreeMap<(String, String, String), f64>,
    client_own: &[(&str, &str, &str, f64)],
) -> (f64, f64) {
    let mut w = 0.0;
    let mut ev = 0.0;
    for (k, v) in b {
        let d = v - a.get(k).copied().unwrap_or(0.0);
        if d > 0.0 && std::env::var_os("RULEOP_BENCH_DEBUG").is_some() {
            eprintln!("  writes {k:?}: {d}");
        }
        match k.0.as_str() {
            // Leases: the API server's own heartbeat. IPAddresses: the API server allocating
            // a Service's ClusterIP. Namespaces: the benchmark's own.
            "leases" | "namespaces" | "ipaddresses" => {}
            "events" => ev += d,
            _ => w += d,
        }
    }
    for (r, s, verb, n) in client_own {
        if b.contains_key(&((*r).to_string(), (*s).to_string(), (*verb).to_string())) {
            w -= n;
        }
    }
    (w, ev)
}

/// API-server figures for diagnosis (RULEOP_BENCH_PROFILE): seconds the server spent on
/// requests, by verb and resource, and watch events it sent, by kind.
fn server_figures(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for ((resource, sub, verb), (_, seconds)) in request_time(text) {
        let sub = if sub.is_empty() {
            sub
        } else {
            format!("/{sub}")
        };
        *out.entry(format!("server seconds {verb} {resource}{sub}"))
            .or_default() += seconds;
    }
    for line in text.lines() {
        let key = if line.starts_with("apiserver_watch_events_total{") {
            format!("watch events {}", label(line, "kind"))
        } else if line.starts_with("apiserver_watch_events_sizes_sum{") {
            format!("watch bytes {}", label(line, "kind"))
        } else {
            continue;
        };
        *out.entry(key).or_default() += value(line);
    }
    out
}

/// ruleop's own /metrics (plain HTTP on its admin address).
fn admin_metrics() -> String {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(ADMIN_ADDR) else {
        return String::new();
    };
    let _ = s.write_all(b"GET /metrics HTTP/1.0\r\nHost: ruleop\r\n\r\n");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// RULEOP_BENCH_PROFILE: a CPU profile of the API server (its pprof endpoint) and, for
/// ruleop, of the operator (`perf record`), over the first `secs` of the create wave.
fn start_profiles(
    c: &Client,
    system: &str,
    pid: Option<u32>,
    secs: u64,
) -> Vec<tokio::task::JoinHandle<()>> {
    let dir = Path::new(ROOT).join("target/bench/profiles");
    let _ = std::fs::create_dir_all(&dir);
    let mut tasks = Vec::new();
    let (c2, out) = (c.clone(), dir.join(format!("{system}-apiserver.pprof")));
    tasks.push(tokio::spawn(async move {
        let req = http::Request::get(format!("/debug/pprof/profile?seconds={secs}"))
            .body(Vec::new())
            .unwrap();
        match c2.request_stream(req).await {
            Ok(body) => {
                use futures::AsyncReadExt;
                let mut bytes = Vec::new();
                let mut body = body;
                let _ = body.read_to_end(&mut bytes).await;
                let _ = std::fs::write(&out, bytes);
            }
            Err(e) => eprintln!("  profile of the API server: {e}"),
        }
    }));
    if let (Some(pid), true) = (pid, system.starts_with("ruleop")) {
        let out = dir.join(format!("{system}.perf.data"));
        tasks.push(tokio::task::spawn_blocking(move || {
            let r = Command::new("perf")
                .args(["record", "-F", "997", "--call-graph", "dwarf,16384", "-o"])
                .arg(&out)
                .args(["-p", &pid.to_string(), "--", "sleep", &secs.to_string()])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
            if let Err(e) = r {
                eprintln!("  perf record: {e}");
            }
        }));
    }
    tasks
}

fn website(i: usize, image: &str) -> Value {
    json!({"apiVersion": "sre.example.com/v1alpha1", "kind": "WebSite", "metadata": {"name": format!("s{i}"), "namespace": NS},
           "spec": {"image": image, "replicas": 1, "port": 80, "serviceType": "ClusterIP"}})
}

/// What the benchmark sees of the namespace, from its own watches (not polling: listing
/// 3N objects every few hundred milliseconds would load the API server more the longer a
/// system takes, and so penalize the slow ones twice).
#[derive(Default)]
struct Seen {
    /// WebSite → status.observedGeneration.
    sites: HashMap<String, Option<i64>>,
    /// Deployment → its first container's image.
    deps: HashMap<String, Option<String>>,
    services: HashMap<String, ()>,
}

impl Seen {
    /// Whether every WebSite is current and every child has `image`.
    fn converged(&self, n: usize, image: &str, generation: i64) -> bool {
        self.sites.len() == n
            && self.deps.len() == n
            && self.services.len() == n
            && self.sites.values().all(|g| *g == Some(generation))
            && self.deps.values().all(|i| i.as_deref() == Some(image))
    }
}

/// Follows one kind into one map of `Seen`: name → what `value` takes from the object.
fn follow<K, V>(
    api: Api<K>,
    seen: Arc<Mutex<Seen>>,
    map: fn(&mut Seen) -> &mut HashMap<String, V>,
    value: fn(&K) -> V,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    V: Send + 'static,
{
    use kube::runtime::WatchStreamExt;
    use kube::runtime::watcher::{self, Event};
    tokio::spawn(async move {
        let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            let mut s = seen.lock().unwrap();
            match ev {
                Ok(Event::Apply(o) | Event::InitApply(o)) => {
                    map(&mut s).insert(o.meta().name.clone().unwrap_or_default(), value(&o));
                }
                Ok(Event::Delete(o)) => {
                    map(&mut s).remove(o.meta().name.as_deref().unwrap_or_default());
                }
                _ => {}
            }
        }
    })
}

/// Starts the watches that fill `Seen`; they stop with the returned handles.
fn watch_namespace(c: &Client) -> (Arc<Mutex<Seen>>, Vec<tokio::task::JoinHandle<()>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let tasks = vec![
        follow(
            Api::<DynamicObject>::namespaced_with(c.clone(), NS, &website_ar()),
            seen.clone(),
            |s| &mut s.sites,
            |o| o.data["status"]["observedGeneration"].as_i64(),
        ),
        follow(
            Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(c.clone(), NS),
            seen.clone(),
            |s| &mut s.deps,
            |o| {
                o.spec
                    .as_ref()
                    .and_then(|s| s.template.spec.as_ref())
                    .and_then(|p| p.containers.first())
                    .and_then(|c| c.image.clone())
            },
        ),
        follow(
            Api::<k8s_openapi::api::core::v1::Service>::namespaced(c.clone(), NS),
            seen.clone(),
            |s| &mut s.services,
            |_| (),
        ),
    ];
    (seen, tasks)
}

async fn wait_converged(
    seen: &Mutex<Seen>,
    n: usize,
    image: &str,
    generation: i64,
    start: Instant,
) -> Result<f64, String> {
    loop {
        if seen.lock().unwrap().converged(n, image, generation) {
            return Ok(start.elapsed().as_secs_f64());
        }
        if start.elapsed() > Duration::from_secs(900) {
            return Err("did not converge within 15 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Which floor: `floor` itself, or one of its diagnostic variants.
#[derive(Clone, Copy)]
struct FloorKind {
    /// `floor+conditions`: the status carries ruleop's two conditions.
    conditions: bool,
    /// `floor-min`: the least an operator that applies its children can send. In the
    /// update wave only the Deployment (the one child the new image changes) is applied,
    /// not the unchanged Service; the status is a JSON merge patch (no server-side apply,
    /// which costs the API server more), in both waves.
    changed_only: bool,
}

impl FloorKind {
    fn of(system: &str) -> FloorKind {
        FloorKind {
            conditions: system == "floor+conditions",
            changed_only: system == "floor-min",
        }
    }
}

/// The floor: exactly the writes an ideal operator makes for the WebSite behaviour (the
/// two children, with their owner reference, applied at once with the status patch:
/// readyReplicas, url, observedGeneration), from a plain concurrent client with no watch
/// and no logic. `update`: the write follows an image change (see [`FloorKind`]).
async fn floor_writes(
    c: &Client,
    rule: &ruleop::rules::CompiledRule,
    created: &DynamicObject,
    cr: &Value,
    kind: FloorKind,
    update: bool,
) {
    let mut cr = cr.clone();
    cr["metadata"]["uid"] = json!(created.metadata.uid.clone().unwrap_or_default());
    let generation = created.metadata.generation.unwrap_or(1);
    let Ok(children) = ruleop::render::render(rule, &cr) else {
        return;
    };
    let pp = PatchParams::apply("floor").force();
    let skip = kind.changed_only && update;
    let children = children
        .into_iter()
        .filter(|ch| !skip || ch.kind == "Deployment");
    let applies = children.map(|ch| {
        let ar = if ch.kind == "Deployment" {
            deployment_ar()
        } else {
            ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&())
        };
        let api: Api<DynamicObject> = Api::namespaced_with(c.clone(), NS, &ar);
        let (name, obj, pp) = (ch.name, ch.object, pp.clone());
        async move {
            let _ = api.patch(&name, &pp, &Patch::Apply(&obj)).await;
        }
    });
    let sites: Api<DynamicObject> = Api::namespaced_with(c.clone(), NS, &website_ar());
    let name = cr["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let url = format!(
        "http://{name}-web.{NS}.svc.cluster.local:{}",
        cr["spec"]["port"].as_i64().unwrap_or(80)
    );
    let mut status = json!({"readyReplicas": 0, "url": url, "observedGeneration": generation});
    if kind.conditions {
        let now = k8s_openapi::jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        status["conditions"] = json!([
            {"type": "Ready", "status": "False", "reason": "NotReady", "message": "ready expression `status.readyReplicas >= spec.replicas` is false", "observedGeneration": generation, "lastTransitionTime": now},
            {"type": "Synced", "status": "True", "reason": "Applied", "message": "every child matches the rule", "observedGeneration": generation, "lastTransitionTime": now},
        ]);
    }
    let body =
        json!({"apiVersion": "sre.example.com/v1alpha1", "kind": "WebSite", "status": status});
    let status_write = async {
        if kind.changed_only {
            let merge = json!({"status": body["status"]});
            let _ = sites
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&merge))
                .await;
        } else {
            let _ = sites.patch_status(&name, &pp, &Patch::Apply(&body)).await;
        }
    };
    futures::join!(futures::future::join_all(applies), status_write);
}

fn proc_figures(pid: u32) -> (Option<f64>, Option<f64>) {
    let rss = status_mib(pid, "VmHWM:");
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    let cpu = match (ticks(11), ticks(12)) {
        (Some(u), Some(s)) => Some((u + s) / 100.0),
        _ => None,
    };
    (rss, cpu)
}

/// The process's resident memory now (VmRSS), MiB.
fn current_rss(pid: u32) -> Option<f64> {
    status_mib(pid, "VmRSS:")
}

/// A memory figure of /proc/PID/status (`field` with its colon, given in kB), in MiB.
fn status_mib(pid: u32, field: &str) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with(field))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// Starts a system; None for the floor. Err explains why it cannot run here.
fn start(system: &str, kc: &str) -> Result<Option<Child>, String> {
    start_logged(system, kc, system)
}

/// Starts a system with its log in target/bench/logs/`log`.log.
fn start_logged(system: &str, kc: &str, log: &str) -> Result<Option<Child>, String> {
    let logs = Path::new(ROOT).join("target/bench/logs");
    std::fs::create_dir_all(&logs).map_err(|e| e.to_string())?;
    let log = std::fs::File::create(logs.join(format!("{log}.log"))).map_err(|e| e.to_string())?;
    // `ruleop-c<N>`: ruleop with `--concurrency=<N>`.
    let concurrency = system
        .strip_prefix("ruleop-c")
        .and_then(|n| n.parse::<u16>().ok());
    let mut cmd = match system {
        "floor" | "floor+conditions" | "floor-min" => return Ok(None),
        _ if concurrency.is_some()
            || matches!(
                system,
                "ruleop" | "ruleop-warnings" | "ruleop-1t" | "ruleop-before" | "ruleop-alt"
            ) =>
        {
            // `ruleop-before` (a binary of an earlier commit) and `ruleop-alt` (a variant
            // under trial), put in target/bench/bin by hand: side-by-side measures.
            let bin = match system {
                "ruleop-before" | "ruleop-alt" => format!("{ROOT}/target/bench/bin/{system}"),
                _ => format!("{ROOT}/target/release/ruleop"),
            };
            if !Path::new(&bin).exists() {
                return Err(format!("{bin} not there"));
            }
            let mut c = Command::new(bin);
            c.args([
                "run",
                "--rules",
                &format!("{ROOT}/rules/website.yaml"),
                "--namespace",
                NS,
                "--admin-addr",
                ADMIN_ADDR,
            ]);
            if system == "ruleop-warnings" {
                c.arg("--events=warnings");
            }
            if let Some(n) = concurrency {
                c.arg(format!("--concurrency={n}"));
            }
            if system == "ruleop-1t" {
                c.env("TOKIO_WORKER_THREADS", "1");
            }
            // RULEOP_BENCH_LOG=info: ruleop's log of every write, to trace a run.
            let level = std::env::var("RULEOP_BENCH_LOG").unwrap_or_else(|_| "warn".into());
            c.env("RUST_LOG", level);
            c
        }
        "controller-runtime" => {
            let bin = format!("{ROOT}/target/bench/bin/website-operator");
            if !Path::new(&bin).exists() {
                return Err(format!("{bin} not built (bench/build-peers.sh)"));
            }
            let mut c = Command::new(bin);
            c.args(["--namespace", NS]);
            c
        }
        "kopf" => {
            let py = format!("{ROOT}/target/bench/venv/bin/python");
            if !Path::new(&py).exists() {
                return Err("kopf venv not built (bench/build-peers.sh)".into());
            }
            let mut c = Command::new(py);
            c.args([
                "-m",
                "kopf",
                "run",
                "--standalone",
                "--namespace",
                NS,
                "-q",
                &format!("{ROOT}/bench/kopf/operator.py"),
            ]);
            c
        }
        "kro" => {
            let bin = format!("{ROOT}/target/bench/bin/kro-controller");
            if !Path::new(&bin).exists() {
                let reason = std::fs::read_to_string(format!("{ROOT}/target/bench/kro-absent.txt"))
                    .unwrap_or_else(|_| "kro not built (bench/build-peers.sh)".into());
                return Err(reason.trim().to_string());
            }
            // Not throttled: client QPS/burst and the instance work queue's rate limit
            // raised; 32 concurrent instance reconciles, as the other systems.
            let mut c = Command::new(bin);
            c.args([
                "--metrics-bind-address=0",
                "--health-probe-bind-address=0",
                "--client-qps=1000",
                "--client-burst=2000",
                "--dynamic-controller-concurrent-reconciles=32",
                "--dynamic-controller-rate-limiter-rate-limit=1000",
                "--dynamic-controller-rate-limiter-burst-limit=2000",
            ]);
            c
        }
        other => return Err(format!("unknown system {other}")),
    };
    cmd.env("KUBECONFIG", kc)
        .stdout(log.try_clone().map_err(|e| e.to_string())?)
        .stderr(log)
        .stdin(Stdio::null());
    cmd.spawn()
        .map(Some)
        .map_err(|e| format!("starting {system}: {e}"))
}

async fn run_system(system: &str, n: usize, steady: u64) -> Result<Figures, String> {
    let kc = fresh_cluster(system)?;
    let c = client(&kc).await;
    let mut proc_ = start(system, &kc)?;
    if system == "kro" {
        install_kro_rgd(&kc).await?;
    }
    // Every system, the floor included, starts its waves after the same settle time: a
    // freshly started API server is still busy with its own start-up for a few seconds.
    tokio::time::sleep(Duration::from_secs(8)).await;
    {
        if let Some(p) = proc_.as_mut()
            && let Ok(Some(st)) = p.try_wait()
        {
            return Err(format!(
                "{system} exited at start ({st}); see target/bench/logs/{system}.log"
            ));
        }
    }
    let (idle_rss_mib, idle_cpu_seconds) = proc_
        .as_ref()
        .map(|p| proc_figures(p.id()))
        .unwrap_or((None, None));
    let (rules, _) = ruleop::rules::load_str(
        include_str!("../rules/website.yaml"),
        Path::new("website.yaml"),
    );
    let rule = rules[0].clone();
    let sites: Api<DynamicObject> = Api::namespaced_with(c.clone(), NS, &website_ar());
    let is_floor = system.starts_with("floor");
    let floor_kind = FloorKind::of(system);
    let (seen, watches) = watch_namespace(&c);

    // Create wave.
    let profile = std::env::var("RULEOP_BENCH_PROFILE")
        .ok()
        .and_then(|v| v.parse::<u64>().ok());
    let m0 = api_metrics(&c).await;
    let s0 = server_figures(&m0);
    // CPU seconds of each process during the wave: the API server, etcd, this client, the
    // system under test.
    let pid_of = |f: &str| {
        std::fs::read_to_string(cluster_dir().join("pids").join(f))
            .ok()
            .and_then(|p| p.trim().parse::<u32>().ok())
    };
    let watched_pids: Vec<(&str, u32)> = [
        ("kube-apiserver", pid_of("kube-apiserver.pid")),
        ("etcd", pid_of("etcd.pid")),
        ("bench client", Some(std::process::id())),
        ("system", proc_.as_ref().map(Child::id)),
    ]
    .into_iter()
    .filter_map(|(what, pid)| Some((what, pid?)))
    .collect();
    let cpu0: Vec<Option<f64>> = watched_pids
        .iter()
        .map(|(_, p)| proc_figures(*p).1)
        .collect();
    let w0 = writes(&m0);
    let profiles = match profile {
        Some(secs) => start_profiles(&c, system, proc_.as_ref().map(Child::id), secs),
        None => Vec::new(),
    };
    let started_at = unix_now();
    let t0 = Instant::now();
    stream::iter(0..n)
        .map(|i| {
            let (sites, c, rule) = (sites.clone(), c.clone(), rule.clone());
            async move {
                let cr = website(i, "nginx:1");
                let obj: DynamicObject = serde_json::from_value(cr.clone()).unwrap();
                let created = sites.create(&PostParams::default(), &obj).await;
                if is_floor && let Ok(o) = created {
                    floor_writes(&c, &rule, &o, &cr, floor_kind, false).await;
                }
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    if std::env::var_os("RULEOP_BENCH_DEBUG").is_some() {
        eprintln!("  client done after {:?}", t0.elapsed());
    }
    let create_seconds = wait_converged(&seen, n, "nginx:1", 1, t0).await?;
    if profile.is_some() {
        eprintln!(
            "  {system} create wave: from {started_at:.1} to {:.1} (unix time)",
            unix_now()
        );
    }
    let m1 = api_metrics(&c).await;
    let w1 = writes(&m1);
    let (cw, _) = delta(&w0, &w1, &[("websites", "", "POST", n as f64)]);
    if profile.is_some() {
        for ((what, p), before) in watched_pids.iter().zip(&cpu0) {
            if let (Some(a), (_, Some(b))) = (before, proc_figures(*p)) {
                eprintln!(
                    "  {system} create wave: CPU seconds of {what}: {:.2}",
                    b - a
                );
            }
        }
        if system.starts_with("ruleop") {
            for line in admin_metrics().lines().filter(|l| {
                l.starts_with("ruleop_reconciles_total") || l.starts_with("ruleop_writes_total")
            }) {
                eprintln!("  {system} create wave: {line}");
            }
        }
        let s1 = server_figures(&m1);
        for (k, v) in &s1 {
            let d = v - s0.get(k).copied().unwrap_or(0.0);
            if d > 0.0 {
                eprintln!("  {system} create wave: {k}: {d:.2}");
            }
        }
        for t in profiles {
            let _ = t.await;
        }
    }

    // Update wave.
    let t0 = Instant::now();
    stream::iter(0..n)
        .map(|i| {
            let (sites, c, rule) = (sites.clone(), c.clone(), rule.clone());
            async move {
                let p = json!({"spec": {"image": "nginx:2"}});
                let patched = sites
                    .patch(&format!("s{i}"), &PatchParams::default(), &Patch::Merge(&p))
                    .await;
                if is_floor && let Ok(o) = patched {
                    floor_writes(&c, &rule, &o, &website(i, "nginx:2"), floor_kind, true).await;
                }
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect::<Vec<_>>()
        .await;
    let update_seconds = wait_converged(&seen, n, "nginx:2", 2, t0).await?;
    let w2 = writes(&api_metrics(&c).await);
    let (uw, _) = delta(&w1, &w2, &[("websites", "", "PATCH", n as f64)]);

    // Steady state.
    tokio::time::sleep(Duration::from_secs(steady)).await;
    let w3 = writes(&api_metrics(&c).await);
    let (sw, _) = delta(&w2, &w3, &[]);
    let (_, events) = delta(&w0, &w3, &[]);

    let (rss, cpu) = proc_
        .as_ref()
        .map(|p| proc_figures(p.id()))
        .unwrap_or((None, None));
    let end_rss_mib = proc_.as_ref().and_then(|p| current_rss(p.id()));
    for w in watches {
        w.abort();
    }
    if let Some(mut p) = proc_ {
        let _ = p.kill();
        let _ = p.wait();
    }
    let _ = sh(Command::new(format!("{ROOT}/tests/cluster/down.sh"))
        .env("RULEOP_CLUSTER_DIR", cluster_dir()));
    Ok(Figures {
        system: system.into(),
        create_seconds,
        update_seconds,
        writes_per_cr_create: cw / n as f64,
        events_per_cr: events / n as f64,
        writes_per_cr_update: uw / n as f64,
        steady_writes_per_minute: sw * 60.0 / steady as f64,
        peak_rss_mib: rss,
        cpu_seconds: cpu,
        idle_rss_mib,
        idle_cpu_seconds,
        end_rss_mib,
        ..Default::default()
    })
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map(|x| format!("{x:.digits$}"))
        .unwrap_or_else(|| "-".into())
}

#[tokio::main]
async fn main() {
    if let Ok(list) = std::env::var("RULEOP_BENCH_SCALE") {
        let sizes: Vec<usize> = list
            .split(',')
            .filter_map(|v| v.trim().parse().ok())
            .collect();
        let steady: u64 = std::env::var("RULEOP_BENCH_STEADY_SECONDS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(30);
        if sizes.is_empty() {
            eprintln!("bench: RULEOP_BENCH_SCALE={list:?} names no size; nothing to run");
        } else {
            scale::main(sizes, steady).await;
        }
        return;
    }
    let n: usize = std::env::var("RULEOP_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let steady: u64 = std::env::var("RULEOP_BENCH_STEADY_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let systems = std::env::var("RULEOP_BENCH_SYSTEMS")
        .unwrap_or_else(|_| "ruleop,ruleop-warnings,controller-runtime,kopf,kro".into());
    let rounds: usize = std::env::var("RULEOP_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    let names: Vec<&str> = systems
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    let mut runs: BTreeMap<String, Vec<Figures>> = BTreeMap::new();
    let mut absent: BTreeMap<String, String> = BTreeMap::new();
    // Every system run is bracketed by floor runs (floor, A, floor, B, floor, ...), and its
    // ratio is to the mean of the floor just before and just after it: on a shared
    // machine the speed drifts within minutes, so a ratio to a floor measured long before
    // is mostly noise. Rounds repeat this; the median of the ratios is the figure.
    let mut floor_prev: Option<Figures> = None;
    let systems_only: Vec<&str> = names.iter().copied().filter(|s| *s != "floor").collect();
    let total = rounds * systems_only.len();
    let mut done = 0;
    let run_floor = |label: String| async move {
        eprintln!("bench: {label}: floor with N={n} ...");
        run_system("floor", n, 0).await
    };
    match run_floor("start".into()).await {
        Ok(f) => floor_prev = Some(f),
        Err(e) => eprintln!("bench: floor failed: {e}"),
    }
    for round in 0..rounds {
        let last = round + 1 == rounds;
        for s in &systems_only {
            if absent.contains_key(*s) {
                continue;
            }
            done += 1;
            eprintln!(
                "bench: round {}/{rounds} ({done}/{total}): {s} with N={n} ...",
                round + 1
            );
            let mut f = match run_system(s, n, if last { steady } else { 0 }).await {
                Ok(f) => f,
                Err(e) => {
                    eprintln!("bench: {s} absent: {e}");
                    absent.insert((*s).to_string(), e);
                    continue;
                }
            };
            let after = run_floor(format!("after {s}")).await.ok();
            let (create, update) = match (&floor_prev, &after) {
                (Some(a), Some(b)) => (
                    (a.create_seconds + b.create_seconds) / 2.0,
                    (a.update_seconds + b.update_seconds) / 2.0,
                ),
                (Some(x), None) | (None, Some(x)) => (x.create_seconds, x.update_seconds),
                (None, None) => (f64::NAN, f64::NAN),
            };
            f.create_ratio_to_floor = Some(f.create_seconds / create);
            f.update_ratio_to_floor = Some(f.update_seconds / update);
            runs.entry(f.system.clone()).or_default().push(f);
            if let Some(mut b) = after {
                b.create_ratio_to_floor = Some(1.0);
                b.update_ratio_to_floor = Some(1.0);
                runs.entry("floor".into()).or_default().push(b.clone());
                floor_prev = Some(b);
            }
        }
    }
    if let Some(mut f) = floor_prev.filter(|_| !runs.contains_key("floor")) {
        f.create_ratio_to_floor = Some(1.0);
        runs.entry("floor".into()).or_default().push(f);
    }
    let median = |mut v: Vec<f64>| -> f64 {
        v.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        if v.is_empty() {
            f64::NAN
        } else {
            v[v.len() / 2]
        }
    };
    let mut results: Vec<Figures> = Vec::new();
    for s in std::iter::once(&"floor").chain(systems_only.iter()) {
        if let Some(e) = absent.get(*s) {
            results.push(Figures {
                system: (*s).into(),
                create_seconds: f64::NAN,
                update_seconds: f64::NAN,
                note: format!("absent: {e}"),
                ..Default::default()
            });
            continue;
        }
        let Some(rs) = runs.get(*s) else { continue };
        let mut f = rs.last().cloned().unwrap_or_default();
        f.create_seconds = median(rs.iter().map(|r| r.create_seconds).collect());
        f.update_seconds = median(rs.iter().map(|r| r.update_seconds).collect());
        let ratios: Vec<f64> = rs.iter().filter_map(|r| r.create_ratio_to_floor).collect();
        f.create_ratio_to_floor = (!ratios.is_empty()).then(|| median(ratios.clone()));
        let up: Vec<f64> = rs.iter().filter_map(|r| r.update_ratio_to_floor).collect();
        f.update_ratio_to_floor = (!up.is_empty()).then(|| median(up));
        if f.system == "floor" {
            f.steady_writes_per_minute = f64::NAN;
        }
        f.note = if rs.len() > 1 {
            format!(
                "ratios per round: {}",
                ratios
                    .iter()
                    .map(|r| format!("{r:.2}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        } else {
            String::new()
        };
        results.push(f);
    }
    println!(
        "\nN = {n} WebSites, {rounds} round(s); each system run between two floor runs, its ratio to their mean; figures are medians over the rounds; steady state over {steady} s in the last round; control plane: etcd + kube-apiserver only\n"
    );
    println!(
        "| system | create wave s | create ratio to floor | update wave s | update ratio to floor | writes/CR (create) | events/CR (whole run) | writes/CR (update) | steady writes/min | peak RSS MiB | CPU s |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for f in &results {
        if f.note.starts_with("absent") {
            println!("| {} | {} | | | | | | | | | |", f.system, f.note);
            continue;
        }
        println!(
            "| {} | {:.2} | {} | {:.2} | {} | {:.2} | {:.2} | {:.2} | {} | {} | {} |",
            f.system,
            f.create_seconds,
            opt(f.create_ratio_to_floor, 2),
            f.update_seconds,
            opt(f.update_ratio_to_floor, 2),
            f.writes_per_cr_create,
            f.events_per_cr,
            f.writes_per_cr_update,
            opt(
                Some(f.steady_writes_per_minute).filter(|v| v.is_finite()),
                1
            ),
            opt(f.peak_rss_mib, 1),
            opt(f.cpu_seconds, 2)
        );
    }
    for f in results.iter().filter(|f| f.note.starts_with("ratios")) {
        println!("{}: create-wave {}", f.system, f.note);
    }
    let dir = Path::new(ROOT).join("target/bench");
    let _ = std::fs::create_dir_all(&dir);
    let summary = json!({"n": n, "steady_seconds": steady, "systems": results});
    let _ = std::fs::write(
        dir.join("summary.json"),
        serde_json::to_string_pretty(&summary).unwrap(),
    );
    println!("\nwritten: target/bench/summary.json");
}
