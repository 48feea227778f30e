//! The guard for the API server, on a control plane of its own with the API server's audit
//! log: ruleop run with a low `--qps` sends, over every window of time, no more requests
//! than its token bucket allows (as the API server itself recorded them), and says how
//! long its requests waited. And on the shared control plane: a child write the API server
//! is slow to answer does not hold up the resource's status, and is sent once.

mod common;

use common::{Operator, condition, eventually, get_json, kubectl, kubectl_ok};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const QPS: f64 = 4.0;
const BURST: usize = 4;

/// When the API server received each request from the replica `identity`, in seconds.
fn requests_by(audit: &str, identity: &str) -> Vec<f64> {
    let agent = format!("({identity})");
    let mut by_id = BTreeMap::new();
    for e in std::fs::read_to_string(audit)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["userAgent"].as_str().is_some_and(|a| a.contains(&agent)))
    {
        let at: Option<k8s_openapi::jiff::Timestamp> = e["requestReceivedTimestamp"]
            .as_str()
            .and_then(|t| t.parse().ok());
        if let (Some(id), Some(at)) = (e["auditID"].as_str(), at) {
            by_id.insert(id.to_string(), at.as_microsecond() as f64 / 1e6);
        }
    }
    let mut at: Vec<f64> = by_id.into_values().collect();
    at.sort_by(f64::total_cmp);
    at
}

fn websites(ns: &str, n: usize) -> String {
    (0..n)
        .map(|i| {
            format!(
                "apiVersion: sre.example.com/v1alpha1\nkind: WebSite\nmetadata: {{name: s{i}, namespace: {ns}}}\nspec: {{image: \"nginx:1.27\", replicas: 1}}\n"
            )
        })
        .collect::<Vec<_>>()
        .join("---\n")
}

#[tokio::test]
async fn a_low_qps_is_honoured_over_every_window() {
    let dir = tempfile::tempdir().unwrap();
    let ns = "guarded";
    let (c, audit) = common::cluster_with_audit(
        ns,
        common::AUDIT_METADATA,
        dir.path(),
        &[("RULEOP_MINIMAL", "1")],
    );
    let op = Operator::start_with_env(
        ns,
        &["rules/website.yaml"],
        &[
            "--qps",
            &QPS.to_string(),
            "--burst",
            &BURST.to_string(),
            "--identity",
            "limited",
        ],
        &[("KUBECONFIG", c.kubeconfig.as_str())],
    );
    // 15 WebSites at once: two applies and a status write each, and the Events.
    let n = 15;
    c.kubectl(&["apply", "-f", "-"], Some(&websites(ns, n)));
    let kc = c.kubeconfig.clone();
    eventually(Duration::from_secs(180), "every status written", || async {
        let (ok, out, _) = common::kubectl_at(
            &kc,
            &[
                "get",
                "websites",
                "-n",
                ns,
                "-o",
                "jsonpath={.items[*].status.observedGeneration}",
            ],
            None,
        );
        (ok && out.split_whitespace().count() == n).then_some(())
    })
    .await;
    let at = requests_by(&audit, "limited");
    assert!(
        at.len() >= 3 * n,
        "ruleop's requests were recorded: {}",
        at.len()
    );
    // Over every window [a, b]: at most BURST + QPS × (b - a) requests, with three requests
    // of slack for the time between the client's token and the server's clock (requests
    // delayed on the way may arrive together). Unlimited, ruleop sends them all within a
    // second or two.
    let mut worst = (0.0f64, 0usize, 0.0f64);
    for i in 0..at.len() {
        for j in i..at.len() {
            let (count, span) = (j - i + 1, at[j] - at[i]);
            let allowed = BURST as f64 + QPS * span + 3.0;
            if count as f64 - allowed > worst.0 {
                worst = (count as f64 - allowed, count, span);
            }
        }
    }
    assert!(
        worst.0 <= 0.0,
        "{} requests within {:.2} s: more than the bucket allows",
        worst.1,
        worst.2
    );
    // The limit was binding: all of them took about as long as the rate says.
    let span = at[at.len() - 1] - at[0];
    let least = (at.len() - BURST) as f64 / QPS - 1.0;
    assert!(
        span >= least,
        "{} requests in {span:.1} s: the limiter paced them (at least {least:.1} s)",
        at.len()
    );
    let addr = op.admin_addr().await;
    let (_, metrics) = common::http_get(&addr, "/metrics");
    let waited: f64 = metrics
        .lines()
        .find(|l| l.starts_with("ruleop_client_rate_limiter_wait_seconds_total "))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0);
    assert!(
        waited > 1.0,
        "time waiting for the limiter is reported: {waited}"
    );
}

/// How long the API server waits for the webhook that never answers (then goes on; at
/// most 10 s, its TLS handshake timeout).
const WEBHOOK_WAIT: u64 = 9;

/// A TCP listener that accepts and never answers (a TLS handshake to it hangs), counting
/// the connections; (its port, the count).
fn silent_listener() -> (u16, Arc<AtomicUsize>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicUsize::new(0));
    let seen = count.clone();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            seen.fetch_add(1, Ordering::SeqCst);
            held.push(conn);
        }
    });
    (port, count)
}

#[tokio::test]
async fn a_slow_child_write_does_not_hold_up_the_status_and_is_sent_once() {
    let client = common::client().await;
    common::install_crds(&["tests/fixtures/cache/crd.yaml"]);
    let ns = common::namespace(&client, "slow-write").await;
    // For the ConfigMaps labelled for this test, a webhook that never answers: the API
    // server waits for it, then (failurePolicy Ignore) writes the ConfigMap.
    let (port, calls) = silent_listener();
    let hook_name = format!("ruleop-{ns}");
    let hook = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": hook_name},
        "webhooks": [{
            "name": "silent.ruleop.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Ignore", "timeoutSeconds": WEBHOOK_WAIT,
            "clientConfig": {"url": format!("https://127.0.0.1:{port}/")},
            "objectSelector": {"matchLabels": {"ruleop-test/slow": ns}},
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]
        }]
    });
    kubectl_ok(&["apply", "-f", "-"], Some(&hook.to_string()));
    let _cleanup = Defer(move || {
        kubectl(
            &["delete", "validatingwebhookconfiguration", &hook_name],
            None,
        );
    });
    tokio::time::sleep(Duration::from_secs(2)).await;
    let op = Operator::start(&ns, &["tests/fixtures/cache/slow.yaml"], &[]);
    let addr = op.admin_addr().await;
    let cache = format!(
        "apiVersion: test.ruleop.dev/v1alpha1\nkind: Cache\nmetadata: {{name: c1, namespace: {ns}}}\nspec: {{fail: {ns}, v: '1'}}\n"
    );
    let created = Instant::now();
    kubectl_ok(&["apply", "-f", "-"], Some(&cache));

    // The status, while the slow write is on its way: the fast child's field, and Synced
    // says which child is being written.
    let applying = eventually(
        Duration::from_secs(WEBHOOK_WAIT + 5),
        "a status naming the write on its way",
        || async {
            let c = get_json("cache", &ns, "c1")?;
            let synced = condition(&c, "Synced")?.clone();
            (synced["reason"] == "Applying").then_some((c, synced))
        },
    )
    .await;
    let status_after = created.elapsed();
    let slow_there = get_json("configmap", &ns, "c1-slow").is_some();
    println!(
        "status written {:.1} s after the create, the slow write on its way: {}",
        status_after.as_secs_f64(),
        applying.1["message"]
    );
    assert!(!slow_there, "the slow ConfigMap was not there yet");
    assert_eq!(applying.0["status"]["config"], "c1-fast");
    assert!(
        applying.1["message"]
            .as_str()
            .is_some_and(|m| m.contains("c1-slow") && m.contains("child `slow`")),
        "{}",
        applying.1
    );

    // An edit while the write is on its way: no second write until it is answered, then
    // the new render (also slow to answer).
    kubectl_ok(
        &[
            "patch",
            "cache",
            "c1",
            "-n",
            &ns,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"v":"2"}}"#,
        ],
        None,
    );
    eventually(
        Duration::from_secs(45),
        "Synced=True with the edit",
        || async {
            let c = get_json("cache", &ns, "c1")?;
            let m = get_json("configmap", &ns, "c1-slow")?;
            (condition(&c, "Synced")?["status"] == "True" && m["data"]["v"] == "2").then_some(())
        },
    )
    .await;
    let done_after = created.elapsed();
    let sent = calls.load(Ordering::SeqCst);
    let series = |action: &str| {
        let name = format!("ruleop_writes_total{{rule=\"slow\",action=\"{action}\"}}");
        common::admin_metric(&addr, &name)
    };
    println!(
        "Synced=True with the edit {:.1} s after the create; writes of the slow child sent: {sent}",
        done_after.as_secs_f64()
    );
    assert!(
        done_after >= Duration::from_secs(2 * WEBHOOK_WAIT - 2),
        "both writes waited for the webhook: {done_after:?}"
    );
    assert_eq!(sent, 2, "one write per render of the slow child");
    assert_eq!((series("create"), series("update")), (2.0, 1.0));
    assert_eq!(common::admin_metric(&addr, "ruleop_slow_writes_total"), 2.0);
    assert_eq!(
        common::admin_metric(&addr, "ruleop_reconcile_errors_total"),
        0.0
    );
    common::delete_namespace(&ns);
}

/// Runs its closure when dropped (a test's cleanup, also when an assertion fails).
struct Defer<F: FnMut()>(F);

impl<F: FnMut()> Drop for Defer<F> {
    fn drop(&mut self) {
        (self.0)()
    }
}
