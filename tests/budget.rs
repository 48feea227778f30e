//! Every endpoint ruleop serves within a budget, flooded from loopback on the real control
//! plane (bounded in count and time): ruleop's RSS stays under the chart's limit
//! (256 Mi), the Lease keeps its one holder, what is over budget is refused fast, and the
//! API server's own requests (conversions of a LIST, reviews of Rules) go on meanwhile.
//! The flood comes from 127.0.0.2, as a pod would from its own address; the API server
//! and the legitimate reviews from 127.0.0.1. Each test prints its figures (the ones in
//! BENCHMARKS.md).

mod common;

use common::{Operator, eventually, get_json, kubectl, kubectl_ok};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(90);
/// The chart's memory limit.
const LIMIT_MIB: u64 = 256;

/// A ConversionReview of `n` Gateways of about 1 KiB each, to `desired`.
fn review(group: &str, ns: &str, n: usize, desired: &str) -> String {
    let pad = "x".repeat(800);
    let objects: Vec<Value> = (0..n)
        .map(|i| {
            json!({"apiVersion": format!("{group}/v1"), "kind": "Gateway",
                "metadata": {"name": format!("g{i}"), "namespace": ns, "annotations": {"pad": pad}},
                "spec": {"listener": {"host": format!("g{i}.example.com"), "port": 8080},
                    "routes": {"a": {"target": "x"}}, "timeout": "30s"}})
        })
        .collect();
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "flood", "desiredAPIVersion": format!("{group}/{desired}"), "objects": objects}})
    .to_string()
}

/// `curl` POSTs the file `body` to `url` from the address `from`: the HTTP code (`000`:
/// the connection was closed or refused) and the seconds it took.
fn post(from: &str, url: &str, body: &std::path::Path) -> (String, f64) {
    let out = std::process::Command::new("curl")
        .args([
            "-sk",
            "--interface",
            from,
            "--max-time",
            "20",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{time_total}",
            "-H",
            "Content-Type: application/json",
            "--data-binary",
        ])
        .arg(format!("@{}", body.display()))
        .arg(url)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let (code, secs) = text.split_once(' ').unwrap_or(("000", "0"));
    (code.to_string(), secs.parse().unwrap_or(0.0))
}

/// The resident set of process `pid`, sampled every 50 ms until `stop`: the largest, in
/// MiB (and the kernel's high-water mark at the end).
fn sample_rss(pid: u32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<(u64, u64)> {
    let field = move |name: &str| -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .unwrap_or_default()
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            .unwrap_or(0)
            / 1024
    };
    std::thread::spawn(move || {
        let mut peak = 0;
        while !stop.load(Ordering::SeqCst) {
            peak = peak.max(field("VmRSS:"));
            std::thread::sleep(Duration::from_millis(50));
        }
        (peak, field("VmHWM:"))
    })
}

fn lease_holder(ns: &str) -> (String, i64) {
    let l = get_json("lease", ns, "ruleop-leader").unwrap_or_default();
    (
        l["spec"]["holderIdentity"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        l["spec"]["leaseTransitions"].as_i64().unwrap_or_default(),
    )
}

fn percentile(mut v: Vec<f64>, p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 * p).ceil() as usize).clamp(1, v.len().max(1)) - 1;
    v.get(i).copied().unwrap_or(0.0)
}

#[tokio::test]
async fn a_flood_of_conversions_is_refused_fast_and_the_api_servers_go_on() {
    const GROUP: &str = "flood.ruleop.dev";
    const CRD: &str = "gateways.flood.ruleop.dev";
    let client = common::client().await;
    let _ = kubectl(
        &["delete", "crd", CRD, "--ignore-not-found", "--timeout=60s"],
        None,
    );
    let ns = common::namespace(&client, "budget-flood").await;
    let dir = tempfile::tempdir().unwrap();
    let fixture =
        include_str!("fixtures/versions/gateway.yaml").replace("versions.ruleop.dev", GROUP);
    let rule = &fixture[..fixture.find("children:").unwrap()];
    std::fs::write(
        dir.path().join("gateway.yaml"),
        format!("{rule}children: []\n"),
    )
    .unwrap();
    let port = common::free_port();
    let flags = common::webhook_args(&ns, port);
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.extend(["--install-crds", "--leader-elect"]);
    let op = Operator::start(&ns, &[dir.path().to_str().unwrap()], &args);
    let admin = op.admin_addr().await;
    eventually(T, "the CRD with its webhook", || async {
        let crd = get_json("crd", "", CRD)?;
        crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"]
            .is_string()
            .then_some(())
    })
    .await;
    let items: Vec<Value> = (0..5)
        .map(|i| {
            json!({"apiVersion": format!("{GROUP}/v1"), "kind": "Gateway",
                "metadata": {"name": format!("real{i}"), "namespace": ns},
                "spec": {"listener": {"host": format!("real{i}.example.com")}}})
        })
        .collect();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
    eventually(T, "the Gateways created", || async {
        kubectl(&["apply", "--server-side", "-f", "-"], Some(&list))
            .0
            .then_some(())
    })
    .await;
    let list_converted = || {
        kubectl(
            &[
                "get",
                &format!("gateways.v1alpha1.{GROUP}"),
                "-n",
                &ns,
                "-o",
                "name",
            ],
            None,
        )
    };
    eventually(T, "a LIST converted by the webhook", || async {
        let (ok, out, _) = list_converted();
        (ok && out.lines().count() == 5).then_some(())
    })
    .await;
    let holder = lease_holder(&ns);
    assert!(!holder.0.is_empty(), "ruleop holds the Lease");

    let big = dir.path().join("big.json");
    std::fs::write(&big, review(GROUP, &ns, 55_000, "v1alpha1")).unwrap();
    let medium = dir.path().join("medium.json");
    std::fs::write(&medium, review(GROUP, &ns, 8_000, "v1alpha1")).unwrap();
    let big_mib = std::fs::metadata(&big).unwrap().len() / (1024 * 1024);
    let medium_mib = std::fs::metadata(&medium).unwrap().len() / (1024 * 1024);
    let url = format!("https://127.0.0.1:{port}/convert");

    let stop = Arc::new(AtomicBool::new(false));
    let rss = sample_rss(op.pid(), stop.clone());
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    // The flood: 3 reviews of ~60 MiB, then 120 of ~8 MiB, 40 at once, from 127.0.0.2.
    let big_answers: Vec<(String, f64)> = (0..3).map(|_| post("127.0.0.2", &url, &big)).collect();
    let flood = {
        let (url, medium) = (url.clone(), medium.clone());
        std::thread::spawn(move || {
            let threads: Vec<_> = (0..40)
                .map(|_| {
                    let (url, medium) = (url.clone(), medium.clone());
                    std::thread::spawn(move || {
                        (0..3)
                            .map(|_| post("127.0.0.2", &url, &medium))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            threads
                .into_iter()
                .flat_map(|t| t.join().unwrap())
                .collect::<Vec<_>>()
        })
    };
    // Meanwhile the API server's own conversions (a LIST as v1alpha1) from 127.0.0.1.
    let mut legit = Vec::new();
    while !flood.is_finished() && legit.len() < 200 {
        let t = Instant::now();
        let (ok, out, err) = list_converted();
        assert!(
            ok && out.lines().count() == 5,
            "a LIST failed during the flood: {err}"
        );
        legit.push(t.elapsed().as_secs_f64());
    }
    let answers = flood.join().unwrap();
    let flood_secs = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    let (peak, hwm) = rss.join().unwrap();

    for (code, secs) in &big_answers {
        assert_eq!(code, "413", "a {big_mib} MiB review is refused unread");
        assert!(*secs < 5.0, "refused in {secs} s");
    }
    let count = |c: &str| answers.iter().filter(|(code, _)| code == c).count();
    let (converted, busy, closed) = (count("200"), count("429"), count("000"));
    assert_eq!(converted + busy + closed, answers.len(), "{answers:?}");
    assert!(
        busy + closed > 0,
        "a flood past the budget is refused: {answers:?}"
    );
    assert!(
        hwm < LIMIT_MIB,
        "ruleop's peak RSS {hwm} MiB is over the chart's limit"
    );
    assert_eq!(lease_holder(&ns), holder, "the Lease changed hands");
    assert_eq!(common::admin_metric(&admin, "ruleop_leader"), 1.0);
    let refused: Vec<f64> = answers
        .iter()
        .filter(|(c, _)| c == "429")
        .map(|(_, s)| *s)
        .collect();
    println!(
        "/convert flood from one address ({flood_secs:.1} s): 3 reviews of {big_mib} MiB (55,000 objects) all 413 in at most {:.2} s; {} reviews of {medium_mib} MiB (8,000 objects), 40 at once: {converted} converted, {busy} 429 (p50 {:.2} s), {closed} closed; the API server's LISTs converted meanwhile: {} (p50 {:.3} s, p99 {:.3} s); ruleop RSS peak {peak} MiB sampled, {hwm} MiB high-water (limit {LIMIT_MIB}); Lease kept",
        big_answers.iter().map(|(_, s)| *s).fold(0.0, f64::max),
        answers.len(),
        percentile(refused, 0.5),
        legit.len(),
        percentile(legit.clone(), 0.5),
        percentile(legit, 0.99),
    );
    drop(op);
    common::delete_namespace(&ns);
    let _ = kubectl(&["delete", "crd", CRD, "--ignore-not-found"], None);
    let _ = kubectl(
        &[
            "delete",
            "validatingwebhookconfiguration",
            &format!("ruleop-{ns}"),
            "--ignore-not-found",
        ],
        None,
    );
}

/// A scrape of `/metrics` with `token` from a fresh connection: the status code.
fn scrape(addr: &str, token: &str) -> u16 {
    common::http_get_as(addr, "/metrics", Some(token)).0
}

#[tokio::test]
async fn a_flood_of_made_up_tokens_costs_a_few_reviews_a_second_and_the_lease_is_kept() {
    let client = common::client().await;
    common::install_crds(&["deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "budget-metrics").await;
    let role = common::metrics_reader(&ns, &[]);
    let op = Operator::start(
        &ns,
        &["rules/website.yaml"],
        &[
            "--metrics-auth",
            "kubernetes",
            "--leader-elect",
            "--lease-namespace",
            &ns,
        ],
    );
    let addr = op.admin_addr().await;
    let reader = kubectl_ok(&["create", "token", "reader", "-n", &ns], None)
        .trim()
        .to_string();
    eventually(T, "the reader's scrape answered", || async {
        (scrape(&addr, &reader) == 200).then_some(())
    })
    .await;
    let holder = eventually(T, "ruleop holds the Lease", || async {
        let h = lease_holder(&ns);
        (!h.0.is_empty()).then_some(h)
    })
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let rss = sample_rss(op.pid(), stop.clone());
    // 2,000 scrapes with made-up tokens, 50 at once, each token new.
    let seq = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let flood: Vec<_> = (0..50)
        .map(|_| {
            let (addr, seq) = (addr.clone(), seq.clone());
            std::thread::spawn(move || {
                (0..40)
                    .map(|_| {
                        let n = seq.fetch_add(1, Ordering::SeqCst);
                        scrape(&addr, &format!("made-up-token-{n}"))
                    })
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    // Meanwhile Prometheus scrapes with its token (judged once, then kept).
    let mut legit = Vec::new();
    while flood.iter().any(|t| !t.is_finished()) && legit.len() < 500 {
        let t = Instant::now();
        assert_eq!(
            scrape(&addr, &reader),
            200,
            "the reader's scrape during the flood"
        );
        legit.push(t.elapsed().as_secs_f64());
        std::thread::sleep(Duration::from_millis(20));
    }
    let codes: Vec<u16> = flood.into_iter().flat_map(|t| t.join().unwrap()).collect();
    let secs = started.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    let (peak, hwm) = rss.join().unwrap();
    let count = |c: u16| codes.iter().filter(|&&x| x == c).count();
    let (reviewed, busy) = (count(401), count(429));
    assert_eq!(
        reviewed + busy,
        codes.len(),
        "every made-up token refused: {codes:?}"
    );
    // The budget: a burst of 10, then 5 a second.
    let allowed = 10.0 + 5.0 * secs;
    assert!(
        (reviewed as f64) <= allowed + 5.0,
        "{reviewed} tokens reviewed in {secs:.1} s: over the budget of {allowed:.0}"
    );
    assert_eq!(lease_holder(&ns), holder, "the Lease changed hands");
    assert!(hwm < LIMIT_MIB, "peak RSS {hwm} MiB");
    println!(
        "/metrics flood of {} made-up tokens, 50 at once, {secs:.1} s: {reviewed} reviewed by the API server (401), {busy} refused unreviewed (429); Prometheus' scrapes meanwhile: {} all 200 (p50 {:.3} s, p99 {:.3} s); ruleop RSS peak {peak} MiB sampled, {hwm} MiB high-water; Lease kept",
        codes.len(),
        legit.len(),
        percentile(legit.clone(), 0.5),
        percentile(legit, 0.99),
    );
    drop(op);
    kubectl(&["delete", "clusterrolebinding,clusterrole", &role], None);
    common::delete_namespace(&ns);
}
