//! The request budget: what ruleop asks of the API server, counted by verb and resource from
//! the API server's own audit log (the requests whose user agent is ruleop's), on a control
//! plane of its own, serving the shipped WebSite rule in one namespace. The budget is the
//! manual's (docs/guarantees.md, "The request budget"):
//!
//! - a create: one apply per child, status writes only as the status changes (no two in a
//!   row alike; as many as the Deployment's steps, made, observed, Ready), no read;
//! - an update of one field: one apply of the child it changes, none of the other;
//! - a no-op resync (an annotation changed, so every resource is reconciled again): nothing;
//! - a steady minute of 30 resources: nothing but the leader's Lease.
//!
//! Reads come from ruleop's caches, so no phase may GET or LIST anything, and no watch may
//! start but a watch's renewal. Each phase's counts are printed.

mod common;

use common::{Cluster, Operator, condition, eventually, kubectl_at};
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;
use std::collections::BTreeMap;
use std::time::Duration;

const NS: &str = "budget";
const T: Duration = Duration::from_secs(120);
const POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Request
    resources: [{group: sre.example.com, resources: [websites/status]}]
  - level: Metadata
";

/// ruleop's requests received in `[from, to)`, by `verb group/resource[/subresource]` (a
/// watch counted when it starts, the rest when they complete), and the bodies of its status
/// writes, in order.
fn requests(audit: &str, from: Timestamp, to: Timestamp) -> (BTreeMap<String, usize>, Vec<Value>) {
    let mut out = BTreeMap::new();
    let mut statuses = Vec::new();
    for e in std::fs::read_to_string(audit)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
    {
        let ours = e["userAgent"]
            .as_str()
            .is_some_and(|a| a.starts_with("ruleop/"));
        let verb = e["verb"].as_str().unwrap_or_default();
        let stage = if verb == "watch" {
            "ResponseStarted"
        } else {
            "ResponseComplete"
        };
        let at: Option<Timestamp> = e["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| t.parse().ok());
        if !ours || e["stage"] != stage || !at.is_some_and(|at| at >= from && at < to) {
            continue;
        }
        let o = &e["objectRef"];
        let mut what = format!(
            "{verb} {}/{}",
            o["apiGroup"].as_str().unwrap_or("core"),
            o["resource"].as_str().unwrap_or_default()
        );
        if let Some(sub) = o["subresource"].as_str() {
            what = format!("{what}/{sub}");
        }
        if what == "patch sre.example.com/websites/status" {
            statuses.push(e["requestObject"].clone());
        }
        *out.entry(what).or_default() += 1;
    }
    (out, statuses)
}

/// A phase's requests, less the leader's Lease (counted apart), printed.
struct Phase {
    name: &'static str,
    counts: BTreeMap<String, usize>,
    leases: usize,
}

/// Each status write changed the status: no two in a row the same (of one resource).
fn each_write_a_change(phase: &str, statuses: &[Value]) {
    for pair in statuses.windows(2) {
        assert_ne!(
            pair[0], pair[1],
            "{phase}: a status written twice in a row as it was"
        );
    }
}

impl Phase {
    fn read(name: &'static str, audit: &str, from: Timestamp) -> Phase {
        std::thread::sleep(Duration::from_secs(1));
        let (mut counts, statuses) = requests(audit, from, Timestamp::now());
        each_write_a_change(name, &statuses);
        let leases = counts
            .iter()
            .filter(|(k, _)| k.contains(" coordination.k8s.io/leases"))
            .map(|(_, n)| n)
            .sum();
        counts.retain(|k, _| !k.contains(" coordination.k8s.io/leases"));
        println!("requests: {name}: {counts:?}, and {leases} of the Lease");
        Phase {
            name,
            counts,
            leases,
        }
    }

    fn count(&self, what: &str) -> usize {
        self.counts.get(what).copied().unwrap_or(0)
    }

    /// Nothing but `allowed` (each at most its number), and no read.
    fn within(&self, allowed: &[(&str, usize)]) {
        for (what, n) in &self.counts {
            let budget = allowed
                .iter()
                .find(|(a, _)| a == what)
                .map_or(0, |(_, b)| *b);
            assert!(
                *n <= budget,
                "{}: {n} × `{what}`, over the budget of {budget} (all: {:?})",
                self.name,
                self.counts
            );
        }
    }
}

fn website(name: &str, image: &str) -> String {
    format!(
        "apiVersion: sre.example.com/v1alpha1\nkind: WebSite\nmetadata: {{name: {name}, namespace: {NS}}}\nspec: {{image: \"{image}\", replicas: 1}}\n---\n"
    )
}

/// Every WebSite of `names` Ready with `image`, its Deployment's generation observed (so
/// no status change is still on its way).
async fn settled(c: &Cluster, names: &[String], image: &str) {
    let kc = c.kubeconfig.clone();
    eventually(T, "every WebSite Ready and settled", || async {
        for name in names {
            let get = |kind: &str, n: &str| -> Option<Value> {
                let (ok, out, _) = kubectl_at(&kc, &["get", kind, n, "-n", NS, "-o", "json"], None);
                serde_json::from_str(&out).ok().filter(|_| ok)
            };
            let site = get("website", name)?;
            let d = get("deployment", &format!("{name}-web"))?;
            let ready = condition(&site, "Ready")?["status"] == "True";
            let observed = site["status"]["observedGeneration"] == site["metadata"]["generation"]
                && d["status"]["observedGeneration"] == d["metadata"]["generation"]
                && d["status"]["readyReplicas"] == 1
                && d["spec"]["template"]["spec"]["containers"][0]["image"] == image;
            (ready && observed).then_some(())?;
        }
        Some(())
    })
    .await;
    // The last status write lands after the WebSite reads Ready.
    tokio::time::sleep(Duration::from_secs(2)).await;
}

fn reconciles(addr: &str) -> f64 {
    common::admin_metric(addr, "ruleop_reconciles_total")
}

#[tokio::test]
async fn ruleop_asks_the_api_server_for_what_the_budget_allows_and_nothing_in_steady_state() {
    let dir = tempfile::tempdir().unwrap();
    let (c, audit) = common::cluster_with_audit(NS, POLICY, dir.path(), &[]);
    let op = Operator::start_with_env(
        NS,
        &["rules/website.yaml"],
        &["--leader-elect", "--lease-namespace", NS],
        &[("KUBECONFIG", &c.kubeconfig)],
    );
    let addr = op.admin_addr().await;
    let kc = c.kubeconfig.clone();
    eventually(T, "ruleop leads", || async {
        let (ok, out, _) = kubectl_at(&kc, &["get", "lease", "-n", NS, "-o", "name"], None);
        (ok && !out.trim().is_empty()).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let started = Phase::read("start", &audit, Timestamp::UNIX_EPOCH);
    assert!(
        started.count("watch sre.example.com/websites") >= 1,
        "the audit log holds ruleop's requests: {:?}",
        started.counts
    );

    // A create: one apply per child, the status as it changes (made, then Ready).
    let from = Timestamp::now();
    c.kubectl(&["apply", "-f", "-"], Some(&website("one", "nginx:1.27")));
    let one = ["one".to_string()];
    settled(&c, &one, "nginx:1.27").await;
    let create = Phase::read("create", &audit, from);
    assert_eq!(
        create.count("patch apps/deployments"),
        1,
        "{:?}",
        create.counts
    );
    assert_eq!(
        create.count("patch core/services"),
        1,
        "{:?}",
        create.counts
    );
    // The status as the Deployment moves (made, observed, its pods Ready): each write a
    // change (checked above), as many as the Deployment controller's steps.
    create.within(&[
        ("patch apps/deployments", 1),
        ("patch core/services", 1),
        ("patch sre.example.com/websites/status", 6),
        ("create events.k8s.io/events", 2),
    ]);

    // An update of one field: the Deployment's apply, not the Service's.
    let from = Timestamp::now();
    c.kubectl(&["apply", "-f", "-"], Some(&website("one", "nginx:1.28")));
    settled(&c, &one, "nginx:1.28").await;
    let update = Phase::read("update", &audit, from);
    assert_eq!(
        update.count("patch apps/deployments"),
        1,
        "{:?}",
        update.counts
    );
    update.within(&[
        ("patch apps/deployments", 1),
        ("patch sre.example.com/websites/status", 6),
        ("create events.k8s.io/events", 2),
        ("patch events.k8s.io/events", 2),
    ]);

    // A no-op resync: the WebSite reconciled again, nothing to do.
    let before = reconciles(&addr);
    let from = Timestamp::now();
    c.kubectl(
        &[
            "annotate",
            "website",
            "one",
            "-n",
            NS,
            "example.com/touched=yes",
        ],
        None,
    );
    eventually(T, "the WebSite reconciled again", || async {
        (reconciles(&addr) > before).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    Phase::read("no-op resync", &audit, from).within(&[]);

    // A steady minute of 30 resources: nothing but the Lease (renewed every 2 s).
    let names: Vec<String> = (0..30).map(|i| format!("s{i:02}")).collect();
    let all: String = names.iter().map(|n| website(n, "nginx:1.27")).collect();
    c.kubectl(&["apply", "-f", "-"], Some(&all));
    settled(&c, &names, "nginx:1.27").await;
    let seconds: u64 = std::env::var("RULEOP_STEADY_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(60);
    let before = reconciles(&addr);
    let from = Timestamp::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let steady = Phase::read("steady", &audit, from);
    // A watch ends every few minutes and is started again from where it was.
    let watches = started
        .counts
        .keys()
        .filter(|k| k.starts_with("watch "))
        .map(|k| (k.as_str(), 1))
        .collect::<Vec<_>>();
    steady.within(&watches);
    assert!(
        steady.leases as u64 <= seconds / 2 + 2,
        "{} Lease requests in {seconds} s",
        steady.leases
    );
    assert_eq!(reconciles(&addr), before, "no reconcile in steady state");
}
