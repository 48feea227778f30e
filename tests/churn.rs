//! The churn test: a seeded random sequence on a control plane of its own, with the API
//! server's audit log. A rule with a collection, `when`, `after`, `observed`, an existing
//! selector and an orphaned child is edited (ids renamed, children and kinds added and
//! removed, `when` flipped, a collection renamed, a wait added); resources are edited,
//! made and deleted (in either version of the kind); the kind's storage version moves
//! (ruleop installs its CRD, serves its conversions from every replica and rewrites the
//! stored objects); ruleop is killed; two replicas fail over while one's files lag behind
//! the other's by a few versions; the API server restarts.
//!
//! Checked, from the audit log and the objects: ruleop writes nothing it does not own;
//! it never deletes an object that the rule in force renders both before and after the
//! step it deletes in; it never deletes an orphaned child's object; after the last step
//! every resource is `Synced` and `Ready` with exactly the children a fresh render gives;
//! then nothing is written for a while.
//!
//! `RULEOP_CHURN_SEED` replays a seed (each run prints its own); `RULEOP_CHURN_STEPS`
//! sets the length (`make test`: 30; `make test-long`: 2000) and
//! `RULEOP_CHURN_QUIET_SECONDS` the window checked for writes after (20; 60).

#[path = "churn/audit.rs"]
mod audit;
mod common;
#[path = "churn/shape.rs"]
mod shape;

use audit::{
    KeepOnFailure, Mark, NS, OP_NS, POLICY, a_box, apply, check_orphans_kept, check_writes,
    converged, expected_all, first_boxes, holder, others_objects, ruleops_writes, wrong_deletes,
};
use common::{Operator, eventually, kubectl_at};
use k8s_openapi::jiff::Timestamp;
use ruleop::rules::CompiledRule;
use serde_json::Value;
use shape::{Shape, load, random_spec};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// A replica: its rules file, its process, and the version its file holds.
struct Replica {
    name: &'static str,
    /// Where it serves its webhook (conversions).
    webhook: u16,
    file: PathBuf,
    /// The rule its file holds now.
    current: Arc<CompiledRule>,
    op: Option<Operator>,
    starts: usize,
    /// The rule edits not yet in its file (its kubelet is behind), with when they land.
    behind: Vec<(usize, String)>,
}

impl Replica {
    fn start(&mut self, kc: &str, front: u16) {
        self.starts += 1;
        let identity = format!("{}-{}", self.name, self.starts);
        let addr = format!("127.0.0.1:{}", self.webhook);
        let url = format!("https://127.0.0.1:{front}/validate-rules");
        let args = [
            "--leader-elect",
            "--lease-namespace",
            OP_NS,
            "--lease-name",
            "churn",
            "--lease-duration",
            "6",
            "--identity",
            &identity,
            "--rules-poll-seconds",
            "1",
            // A version the cluster has not run, on a replica that never loaded the
            // newest, prunes only after this wait (the files lag a few steps at most).
            "--rules-settle-seconds",
            "60",
            // The kind's CRD installed, its conversions served, its storage migrated by
            // ruleop itself (the writes this test audits).
            "--install-crds",
            "--webhook-addr",
            &addr,
            "--webhook-url",
            &url,
            "--webhook-name",
            "churn",
            "--storage-migration",
            "ruleop",
        ];
        self.op = Some(Operator::start_with_env(
            NS,
            &[self.file.to_str().unwrap()],
            &args,
            &[("KUBECONFIG", kc)],
        ));
    }

    fn kill(&mut self) {
        if let Some(mut op) = self.op.take() {
            op.kill();
        }
    }

    /// Writes the edits whose time has come.
    fn catch_up(&mut self, step: usize) {
        while self.behind.first().is_some_and(|(at, _)| *at <= step) {
            let (_, text) = self.behind.remove(0);
            self.write(&text);
        }
    }

    fn write(&mut self, text: &str) {
        std::fs::write(&self.file, text).unwrap();
        self.current = load(text);
    }
}

/// A Box as its `v2` says it (`greeting` is `hello`), or as it is.
fn in_version(mut b: Value, v2: bool) -> Value {
    if v2 {
        b["apiVersion"] = "trust.ruleop.dev/v2".into();
        if let Some(spec) = b["spec"].as_object_mut()
            && let Some(g) = spec.remove("greeting")
        {
            spec.insert("hello".into(), g);
        }
    }
    b
}

/// One address for the replicas' webhooks, as a Service gives: each connection goes to
/// the first replica that takes it. (Threads: the test blocks on kubectl, and the API
/// server converts while it does.)
fn webhook_front(replicas: [u16; 2]) -> u16 {
    use std::net::{TcpListener, TcpStream};
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for inbound in listener.incoming().flatten() {
            let Some(outbound) = replicas
                .iter()
                .find_map(|p| TcpStream::connect(("127.0.0.1", *p)).ok())
            else {
                continue;
            };
            let pipe = |mut from: TcpStream, mut to: TcpStream| {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut from, &mut to);
                    let _ = to.shutdown(std::net::Shutdown::Write);
                });
            };
            if let (Ok(i), Ok(o)) = (inbound.try_clone(), outbound.try_clone()) {
                pipe(i, outbound);
                pipe(o, inbound);
            }
        }
    });
    port
}

#[tokio::test]
async fn a_seeded_churn_of_rule_edits_resources_kills_and_failovers_loses_nothing() {
    let seed: u64 = std::env::var("RULEOP_CHURN_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    let steps: usize = std::env::var("RULEOP_CHURN_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    println!("churn: seed {seed} ({steps} steps; replay with RULEOP_CHURN_SEED={seed})");
    let mut rng = fastrand::Rng::with_seed(seed);
    let dir = tempfile::tempdir().unwrap();
    let (cluster, audit) = common::cluster_with_audit(NS, POLICY, dir.path(), &[]);
    let _keep_audit = KeepOnFailure(audit.clone(), seed);
    let kc = cluster.kubeconfig.clone();
    cluster.kubectl(&["create", "namespace", OP_NS], None);
    let shared = others_objects(&kc);
    let mut shape = Shape::first();
    let webhooks = [common::free_port(), common::free_port()];
    let front = webhook_front(webhooks);
    let mut replicas: Vec<Replica> = ["a", "b"]
        .into_iter()
        .zip(webhooks)
        .map(|(name, webhook)| Replica {
            name,
            webhook,
            file: dir.path().join(format!("{name}.yaml")),
            current: load(&shape.text()),
            op: None,
            starts: 0,
            behind: Vec::new(),
        })
        .collect();
    for r in &mut replicas {
        std::fs::write(&r.file, shape.text()).unwrap();
        r.start(&kc, front);
    }
    // The leader installs the kind's CRD.
    eventually(Duration::from_secs(120), "the Box CRD", || async {
        kubectl_at(
            &kc,
            &[
                "wait",
                "--for=condition=Established",
                "crd/boxes.trust.ruleop.dev",
                "--timeout=5s",
            ],
            None,
        )
        .0
        .then_some(())
    })
    .await;
    let mut specs = first_boxes(&kc, &mut rng);
    let mut next = 4;
    // The objects the `existing` selector finds now (one is relabelled back and forth).
    let mut shared_in_ns: Vec<Value> = shared.clone();
    let expect_all = expected_all;
    // What every version in a replica's files renders: no replica may delete it.
    let expect_every = |replicas: &[Replica], specs: &BTreeMap<String, Value>, shared: &[Value]| {
        let a = expect_all(&replicas[0].current, specs, shared);
        let b = expect_all(&replicas[1].current, specs, shared);
        a.intersection(&b).cloned().collect::<BTreeSet<_>>()
    };
    // Each step's start and what was expected before and after it.
    let mut marks: Vec<Mark> = Vec::new();
    let (mut edits, mut kills, mut failovers, mut restarts) = (0, 0, 0, 0);
    let mut releases = 0;
    let mut moves = 0;
    // Every orphaned child's object ever seen: none may ever go.
    let mut keeps: BTreeSet<String> = BTreeSet::new();
    for step in 0..steps {
        let before = expect_every(&replicas, &specs, &shared_in_ns);
        let started = Timestamp::now();
        let what: String = match rng.usize(0..22) {
            0..=5 => {
                let what = shape.mutate(&mut rng);
                let text = shape.text();
                // One replica's files get it now, the other's after a few steps.
                let lag = rng.usize(0..4);
                let first = rng.usize(0..2);
                // A file never goes back: what the first one still waited for is older.
                replicas[first].behind.clear();
                replicas[first].write(&text);
                replicas[1 - first].behind.push((step + lag, text));
                edits += 1;
                moves += usize::from(what.starts_with("move the kind's storage"));
                format!("rule edit: {what} (the other replica's files {lag} steps behind)")
            }
            6..=12 if !specs.is_empty() => {
                // (A deleted resource's name is never used again: it may still be going.)
                let name = specs
                    .keys()
                    .nth(rng.usize(0..specs.len()))
                    .cloned()
                    .unwrap();
                let spec = random_spec(&mut rng);
                // Written in either version (v2 calls `greeting` `hello`).
                let v2 = rng.bool();
                apply(&kc, &in_version(a_box(&name, &spec), v2));
                specs.insert(name.clone(), spec);
                format!("edit {name}{}", if v2 { " (as v2)" } else { "" })
            }
            6..=13 => {
                let name = format!("r{next}");
                next += 1;
                let spec = random_spec(&mut rng);
                apply(&kc, &a_box(&name, &spec));
                specs.insert(name.clone(), spec);
                format!("make {name}")
            }
            14 | 15 => {
                let Some(name) = specs.keys().nth(rng.usize(0..specs.len().max(1))).cloned() else {
                    continue;
                };
                kubectl_at(
                    &kc,
                    &["delete", "box", &name, "-n", NS, "--wait=false"],
                    None,
                );
                specs.remove(&name);
                format!("delete {name}")
            }
            16 | 17 => {
                // SIGKILL the leader; it comes back as a standby, and the other leads.
                let leader = holder(&kc).unwrap_or_default();
                let i = if leader.starts_with('b') { 1 } else { 0 };
                replicas[i].kill();
                replicas[i].start(&kc, front);
                if leader.is_empty() {
                    kills += 1;
                } else {
                    failovers += 1;
                }
                format!("kill the leader {leader}")
            }
            18 => {
                let i = rng.usize(0..2);
                replicas[i].kill();
                replicas[i].start(&kc, front);
                kills += 1;
                format!("kill replica {}", replicas[i].name)
            }
            19 => {
                // The selector's objects change: s2 leaves it, or comes back.
                let s2 = shared[1].clone();
                if shared_in_ns.len() == 2 {
                    kubectl_at(
                        &kc,
                        &["label", "configmap", "s2", "-n", NS, "churn-shared-"],
                        None,
                    );
                    shared_in_ns.truncate(1);
                    "s2 leaves the existing selector".into()
                } else {
                    apply(&kc, &s2);
                    shared_in_ns.push(s2);
                    "s2 comes back to the existing selector".into()
                }
            }
            20 => {
                // An uninstall and a reinstall: ruleop stopped, every resource released (by
                // a replica's file; the Helm test releases from the cluster alone), then
                // ruleop back: it takes its children back.
                for r in &mut replicas {
                    r.kill();
                }
                let (code, out, err) = common::ruleop_cli(
                    &[
                        "--kubeconfig",
                        &kc,
                        "release",
                        "--rule",
                        "churn",
                        "--rules",
                        replicas[0].file.to_str().unwrap(),
                        "--operator-namespace",
                        OP_NS,
                    ],
                    false,
                );
                // With ruleop down no one converts the kind's versions: a resource stored in
                // another version cannot be written, and the release stops there (what it let
                // go before is taken back all the same).
                let unconverted = err.contains("conversion webhook");
                assert!(code == 0 || unconverted, "ruleop release: {out}{err}");
                for r in &mut replicas {
                    r.start(&kc, front);
                }
                releases += 1;
                match code {
                    0 => format!("release every resource and start again ({})", out.trim()),
                    _ => "release stopped by a conversion no one serves; start again".into(),
                }
            }
            _ => {
                cluster.ctl("stop", "kube-apiserver");
                tokio::time::sleep(Duration::from_secs(1)).await;
                cluster.ctl("start", "kube-apiserver");
                cluster.wait_ready().await;
                restarts += 1;
                "restart the API server".into()
            }
        };
        for r in &mut replicas {
            r.catch_up(step);
        }
        let after = expect_every(&replicas, &specs, &shared_in_ns);
        println!("churn: step {step}: {what}");
        marks.push((started, before, after, what));
        keeps.extend(
            common::list_at(&kc, "configmaps", NS, None)
                .iter()
                .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string))
                .filter(|n| n.ends_with("-keep")),
        );
        tokio::time::sleep(Duration::from_millis(rng.u64(200..2500))).await;
    }
    for r in &mut replicas {
        r.catch_up(usize::MAX);
    }
    let end = Timestamp::now();
    println!(
        "churn: {steps} steps: {edits} rule edits ({moves} storage moves), {kills} kills, {failovers} failovers, {restarts} API server restarts, {releases} releases"
    );

    // Every resource converges to a fresh render, Synced and Ready.
    let rule = load(&shape.text());
    let want = expect_all(&rule, &specs, &shared_in_ns);
    let took = std::time::Instant::now();
    let last = std::sync::Mutex::new(String::new());
    // RULEOP_CHURN_HOLD=<seconds>: a failing run leaves everything up that long first,
    // for a look at the cluster and the replicas (their admin addresses are in their logs).
    if let Some(hold) = std::env::var("RULEOP_CHURN_HOLD")
        .ok()
        .and_then(|s| s.parse().ok())
        && tokio::time::timeout(Duration::from_secs(240), async {
            while converged(&kc, &specs, &want, &rule, &shared_in_ns).is_err() {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
        .await
        .is_err()
    {
        println!(
            "churn: not converged; holding {hold} s (KUBECONFIG={kc}, files in {})",
            dir.path().display()
        );
        tokio::time::sleep(Duration::from_secs(hold)).await;
    }
    eventually(
        Duration::from_secs(240),
        "every resource converged",
        || async {
            converged(&kc, &specs, &want, &rule, &shared_in_ns)
                .err()
                .map_or(Some(()), |why| {
                    let mut last = last.lock().unwrap();
                    if *last != why {
                        println!("churn: not yet: {why}");
                        *last = why;
                    }
                    None
                })
        },
    )
    .await;
    println!(
        "churn: converged {:.0} s after the last step",
        took.elapsed().as_secs_f64()
    );

    // The kind is stored in the storage version alone: every move's objects migrated.
    let stored = eventually(
        Duration::from_secs(60),
        "storedVersions trimmed",
        || async {
            let (_, out, _) = kubectl_at(
                &kc,
                &["get", "crd", "boxes.trust.ruleop.dev", "-o", "json"],
                None,
            );
            let crd: Value = serde_json::from_str(&out).ok()?;
            let stored = crd["status"]["storedVersions"].clone();
            (stored == serde_json::json!([shape.storage])).then_some(stored)
        },
    )
    .await;
    println!("churn: stored in {stored} alone");

    // Nothing written in the window after.
    let quiet_seconds: u64 = std::env::var("RULEOP_CHURN_QUIET_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let quiet = Timestamp::now();
    tokio::time::sleep(Duration::from_secs(quiet_seconds)).await;
    let writes = ruleops_writes(&audit);
    let rewritten = writes
        .iter()
        .filter(|w| w.verb == "update" && w.resource == "boxes" && w.subresource.is_empty())
        .filter(|w| w.code < 400)
        .count();
    println!("churn: {rewritten} boxes written again by storage migrations ({moves} moves)");
    // (Cluster-scoped: the kind's CRD and its status, the webhook's configuration.)
    check_writes(
        &writes,
        quiet,
        seed,
        &[
            "customresourcedefinitions",
            "validatingwebhookconfigurations",
        ],
    );

    // No delete of what every version in the replicas' files rendered all along (see
    // `wrong_deletes`); never one of an orphaned child's object.
    marks.push((end, want.clone(), want.clone(), "converging".into()));
    let wrong = wrong_deletes(&writes, &marks, 5);
    assert!(wrong.is_empty(), "seed {seed}: {wrong:#?}");
    check_orphans_kept(&kc, &keeps, seed);
    for r in &mut replicas {
        r.kill();
    }
    drop(cluster);
}
