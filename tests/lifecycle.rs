//! The process's life on the shared control plane: only the leader writes and a standby
//! takes over after a SIGKILL; SIGTERM releases the Lease; a shutdown without leader
//! election finishes cleanly. (Fenced leadership under a network cut, on a control plane
//! of its own: `tests/leadership.rs`.)

mod common;

use common::{Operator, eventually, get_json, http_get, install_crds, kubectl_ok, wait_json};
use serde_json::json;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(60);

fn website(ns: &str, name: &str) -> String {
    json!({"apiVersion": "sre.example.com/v1alpha1", "kind": "WebSite", "metadata": {"name": name, "namespace": ns}, "spec": {"image": "nginx:1.27", "replicas": 1}}).to_string()
}

fn lease_holder(ns: &str, name: &str) -> Option<String> {
    get_json("lease", ns, name)
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
        .filter(|h| !h.is_empty())
}

#[tokio::test]
async fn only_the_leader_writes_and_a_standby_takes_over_after_a_kill() {
    let client = common::client().await;
    install_crds(&["deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "prod-leader").await;
    let args = |id: &'static str| {
        vec![
            "--leader-elect",
            "--lease-namespace",
            "",
            "--lease-name",
            "ruleop-test",
            "--lease-duration",
            "6",
            "--identity",
            id,
        ]
    };
    let mut a_args = args("one");
    let mut b_args = args("two");
    a_args[2] = &ns;
    b_args[2] = &ns;
    let mut ops = [
        Operator::start(&ns, &["rules/website.yaml"], &a_args),
        Operator::start(&ns, &["rules/website.yaml"], &b_args),
    ];
    let holder = eventually(T, "a lease holder", || async {
        lease_holder(&ns, "ruleop-test")
    })
    .await;
    println!("leader: {holder}");
    let (leader, standby) = if holder == "one" { (0, 1) } else { (1, 0) };
    kubectl_ok(&["apply", "-f", "-"], Some(&website(&ns, "first")));
    wait_json("deployment", &ns, "first-web", "exists", |_| true).await;
    wait_json("website", &ns, "first", "status", |w| {
        w["status"]["observedGeneration"] == 1
    })
    .await;
    let wrote = |op: &Operator| op.records().iter().any(|r| r["message"] == "applied child");
    // The Lease never changed hands so far (a change would mean the machine was too slow
    // to renew within the renew deadline: then the fence, not this test, keeps the two
    // apart).
    let transitions =
        get_json("lease", &ns, "ruleop-test").unwrap()["spec"]["leaseTransitions"].clone();
    assert_eq!(transitions, 0, "leadership moved during the test");
    assert!(wrote(&ops[leader]), "the leader wrote");
    assert!(!wrote(&ops[standby]), "the standby wrote nothing");
    let standby_addr = ops[standby].admin_addr().await;
    assert_eq!(
        common::metric_sum(&http_get(&standby_addr, "/metrics").1, "ruleop_leader"),
        0.0
    );

    ops[leader].kill();
    let killed = Instant::now();
    kubectl_ok(&["apply", "-f", "-"], Some(&website(&ns, "second")));
    wait_json(
        "deployment",
        &ns,
        "second-web",
        "made by the new leader",
        |_| true,
    )
    .await;
    wait_json("website", &ns, "second", "status by the new leader", |w| {
        w["status"]["observedGeneration"] == 1
    })
    .await;
    let took = killed.elapsed();
    println!(
        "takeover after SIGKILL of the leader: {:.1}s (lease duration 6s)",
        took.as_secs_f64()
    );
    assert!(took < Duration::from_secs(20), "took {took:?}");
    assert_eq!(
        lease_holder(&ns, "ruleop-test").as_deref(),
        Some(if leader == 0 { "two" } else { "one" })
    );
    common::delete_namespace(&ns);
}

#[tokio::test]
async fn sigterm_releases_the_lease_and_the_standby_takes_over_within_its_duration() {
    let client = common::client().await;
    install_crds(&["deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "prod-term").await;
    let a = [
        "--leader-elect",
        "--lease-namespace",
        &ns,
        "--lease-name",
        "ruleop-term",
        "--lease-duration",
        "10",
        "--identity",
        "one",
    ];
    let mut one = Operator::start(&ns, &["rules/website.yaml"], &a);
    eventually(T, "one leads", || async {
        (lease_holder(&ns, "ruleop-term").as_deref() == Some("one")).then_some(())
    })
    .await;
    let b = [
        "--leader-elect",
        "--lease-namespace",
        &ns,
        "--lease-name",
        "ruleop-term",
        "--lease-duration",
        "10",
        "--identity",
        "two",
    ];
    let two = Operator::start(&ns, &["rules/website.yaml"], &b);
    two.admin_addr().await;
    let sent = Instant::now();
    assert!(
        one.terminate(Duration::from_secs(20)),
        "the leader exits on SIGTERM"
    );
    assert!(
        one.logs().contains("leader lease released"),
        "{}",
        one.logs()
    );
    let holder = lease_holder(&ns, "ruleop-term");
    assert!(
        holder.is_none() || holder.as_deref() == Some("two"),
        "the lease is released on exit, not left to expire: {holder:?}"
    );
    eventually(Duration::from_secs(20), "two leads", || async {
        (lease_holder(&ns, "ruleop-term").as_deref() == Some("two")).then_some(())
    })
    .await;
    let took = sent.elapsed();
    println!(
        "takeover after SIGTERM of the leader: {:.1}s (lease duration 10s)",
        took.as_secs_f64()
    );
    assert!(
        took <= Duration::from_secs(12),
        "within the lease duration: {took:?}"
    );
    kubectl_ok(&["apply", "-f", "-"], Some(&website(&ns, "after")));
    wait_json(
        "deployment",
        &ns,
        "after-web",
        "made by the new leader",
        |_| true,
    )
    .await;
    common::delete_namespace(&ns);
}

#[tokio::test]
async fn graceful_shutdown_without_leader_election() {
    let client = common::client().await;
    install_crds(&["deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "prod-shutdown").await;
    let mut op = Operator::start(&ns, &["rules/website.yaml"], &[]);
    // SIGTERM as soon as the process has logged anything, while it may still be starting
    // (before its main loop): the signal must be kept for the shutdown, not end the
    // process by the default action. Whether it lands before the main loop depends on how
    // long the start takes, so this catches a regression often, not always (CI did).
    eventually(Duration::from_secs(30), "a first log record", || async {
        (!op.records().is_empty()).then_some(())
    })
    .await;
    assert!(op.terminate(Duration::from_secs(20)), "exits on SIGTERM");
    let logs = op.logs();
    assert!(
        logs.contains("shutting down") && logs.contains("\"stopped\""),
        "{logs}"
    );
    common::delete_namespace(&ns);
}
