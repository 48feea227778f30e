//! Fenced leadership on a control plane of its own, with the API server's audit log: a
//! leader cut off from the API server stops writing at its renew deadline, the standby
//! takes over only after the lease duration, and the API server records no write from
//! the old leader after that deadline, even once the path heals.

mod common;

use common::{Cluster, Operator, eventually};
use serde_json::Value;
use std::time::{Duration, Instant, SystemTime};

const POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    verbs: [create, update, patch, delete]
  - level: None
"#;

/// Writes recorded by the API server from the replica `identity`: (received at, what).
fn writes_by(audit: &str, identity: &str) -> Vec<(SystemTime, String)> {
    let agent = format!("({identity})");
    std::fs::read_to_string(audit)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && e["userAgent"].as_str().is_some_and(|a| a.contains(&agent))
        })
        .filter_map(|e| {
            let at: k8s_openapi::jiff::Timestamp =
                e["requestReceivedTimestamp"].as_str()?.parse().ok()?;
            let what = format!(
                "{} {} {}",
                e["verb"].as_str().unwrap_or(""),
                e["objectRef"]["resource"].as_str().unwrap_or(""),
                e["objectRef"]["name"].as_str().unwrap_or("")
            );
            Some((SystemTime::from(at), what))
        })
        .collect()
}

fn holder(c: &Cluster, ns: &str) -> Option<String> {
    let (ok, out, _) = common::kubectl_at(
        &c.kubeconfig,
        &[
            "get",
            "lease",
            "fenced",
            "-n",
            ns,
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
        None,
    );
    (ok && !out.is_empty()).then_some(out)
}

fn website(ns: &str, name: &str, replicas: u32) -> String {
    format!(
        "apiVersion: sre.example.com/v1alpha1\nkind: WebSite\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{image: \"nginx:1.27\", replicas: {replicas}}}\n"
    )
}

#[tokio::test]
async fn a_leader_cut_off_stops_writing_at_its_renew_deadline_and_the_standby_takes_over() {
    let dir = tempfile::tempdir().unwrap();
    let ns = "fenced";
    let (c, audit) = common::cluster_with_audit(ns, POLICY, dir.path(), &[]);

    // `one` reaches the API server through a proxy that can cut it off; `two` directly.
    let (proxy, proxied) = common::proxy::proxied_kubeconfig(&c.kubeconfig, dir.path()).await;
    let lease = |id: &'static str| {
        vec![
            "--leader-elect",
            "--lease-namespace",
            ns,
            "--lease-name",
            "fenced",
            "--lease-duration",
            "6",
            "--identity",
            id,
        ]
    };
    let one = Operator::start_with_env(
        ns,
        &["rules/website.yaml"],
        &lease("one"),
        &[("KUBECONFIG", &proxied)],
    );
    eventually(Duration::from_secs(30), "one leads", || async {
        (holder(&c, ns).as_deref() == Some("one")).then_some(())
    })
    .await;
    let _two = Operator::start_with_env(
        ns,
        &["rules/website.yaml"],
        &lease("two"),
        &[("KUBECONFIG", c.kubeconfig.as_str())],
    );
    c.kubectl(&["apply", "-f", "-"], Some(&website(ns, "first", 1)));
    let exists = |name: &'static str| {
        let kc = c.kubeconfig.clone();
        move || {
            let kc = kc.clone();
            async move {
                common::kubectl_at(&kc, &["get", "deployment", name, "-n", ns], None)
                    .0
                    .then_some(())
            }
        }
    };
    eventually(
        Duration::from_secs(60),
        "first-web by one",
        exists("first-web"),
    )
    .await;
    assert!(!writes_by(&audit, "one").is_empty(), "the leader wrote");

    // Cut `one` off. Its fence ends at most its renew deadline (2/3 of 6 s) from now.
    proxy.freeze_all();
    let cut = Instant::now();
    let deadline = SystemTime::now() + Duration::from_secs(4);
    c.kubectl(&["apply", "-f", "-"], Some(&website(ns, "second", 1)));
    eventually(Duration::from_secs(60), "two takes over", || async {
        (holder(&c, ns).as_deref() == Some("two")).then_some(())
    })
    .await;
    let took = cut.elapsed();
    eventually(
        Duration::from_secs(60),
        "second-web by two",
        exists("second-web"),
    )
    .await;
    println!(
        "leader cut off; the standby took the Lease {:.1}s later and served a new resource (lease 6 s, renew deadline 4 s)",
        took.as_secs_f64()
    );
    assert!(
        took >= Duration::from_secs(4),
        "the standby took over before the old leader's renew deadline: {took:?}"
    );

    // The path heals; both replicas see a change that needs a write.
    proxy.heal();
    c.kubectl(&["apply", "-f", "-"], Some(&website(ns, "first", 2)));
    eventually(Duration::from_secs(60), "two scales first-web", || async {
        let (_, out, _) = common::kubectl_at(
            &c.kubeconfig,
            &[
                "get",
                "deployment",
                "first-web",
                "-n",
                ns,
                "-o",
                "jsonpath={.spec.replicas}",
            ],
            None,
        );
        (out == "2").then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(8)).await;
    let late: Vec<_> = writes_by(&audit, "one")
        .into_iter()
        .filter(|(at, _)| *at > deadline)
        .collect();
    assert!(
        late.is_empty(),
        "the old leader wrote after its renew deadline: {late:?}"
    );
    assert!(
        one.logs().contains("leadership lost"),
        "the old leader noticed: {}",
        one.logs()
    );
    assert_eq!(holder(&c, ns).as_deref(), Some("two"));
}
