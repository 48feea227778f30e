//! A Rule edit rolled out step by step on the real control plane: 200 WebSites (or
//! RULEOP_ROLLOUT_N), steps of 1, 10 %, 50 % and 100 %, each only once the one before is
//! Ready on the new revision, with the leader killed half way (the standby goes on from
//! the same step); then an edit whose canary never becomes Ready stops at the first step
//! with the others untouched (same pod template, no new ReplicaSet), and an `abort`
//! annotation takes its canary back; with `onFailure: Rollback` the canary returns to the
//! previous revision's objects; and the first edit's spec applied again is the newest
//! revision again, rolled out with no pod template change.

mod common;

use common::{Operator, eventually, get_json, install_crds, kubectl, kubectl_ok};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

const RULE_CRD: &str = "deploy/crds/rules.ruleop.dev.yaml";

fn fleet_size() -> usize {
    std::env::var("RULEOP_ROLLOUT_N")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(200)
}

/// The shipped WebSite rule as a Rule object, with a rollout and a pod-template edition.
fn rule(name: &str, label: &str, edition: &str, rollout: Value) -> Value {
    let (code, out, err) = common::ruleop_cli(&["rule", "--rules", "rules/website.yaml"], false);
    assert_eq!(code, 0, "{err}");
    let doc = out.split("\n---\n").nth(1).expect("one Rule");
    let mut r: Value = serde_yaml::from_str(doc).unwrap();
    r["metadata"] = json!({"name": name, "labels": {"ruleop.dev/test": label}});
    r["spec"]["children"][0]["template"]["spec"]["template"]["metadata"]["annotations"] =
        json!({"edition": edition});
    r["spec"]["rollout"] = rollout;
    r
}

/// `ruleop diff` of Rule `r` against namespace `ns`: its exit code and output.
fn diff(r: &Value, ns: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("rule.yaml");
    std::fs::write(&f, serde_json::to_string(r).unwrap()).unwrap();
    let (code, out, err) = common::ruleop_cli(
        &[
            "diff",
            "--rules",
            f.to_str().unwrap(),
            "--namespace",
            ns,
            "--brief",
        ],
        true,
    );
    (code, format!("{out}{err}"))
}

fn apply(v: &Value) {
    kubectl_ok(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        Some(&serde_json::to_string(v).unwrap()),
    );
}

fn list(kind: &str, ns: &str) -> Vec<Value> {
    let out = kubectl_ok(&["get", kind, "-n", ns, "-o", "json"], None);
    serde_json::from_str::<Value>(&out).unwrap()["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn ready(w: &Value) -> bool {
    w["status"]["conditions"].as_array().is_some_and(|c| {
        c.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

fn rule_rollout(name: &str) -> Value {
    get_json("rule", "", name)
        .map(|r| r["status"]["rollout"].clone())
        .unwrap_or(Value::Null)
}

/// When each WebSite was first seen on `revision`, and first seen Ready on it.
#[derive(Default)]
struct Seen {
    on: HashMap<String, Instant>,
    ready: HashMap<String, Instant>,
}

impl Seen {
    fn look(&mut self, sites: &[Value], revision: i64) {
        let now = Instant::now();
        for w in sites {
            if w["status"]["ruleRevision"] != revision {
                continue;
            }
            let name = w["metadata"]["name"].as_str().unwrap().to_string();
            self.on.entry(name.clone()).or_insert(now);
            if ready(w) {
                self.ready.entry(name).or_insert(now);
            }
        }
    }
}

#[tokio::test]
async fn a_rule_edit_rolls_out_step_by_step_and_a_failing_one_stops_at_the_canary() {
    let n = fleet_size();
    let client = common::client().await;
    install_crds(&[RULE_CRD, "deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "rollout").await;
    let name = format!("site-{ns}");
    let selector = format!("ruleop.dev/test={ns}");
    let lease = |id: &str| {
        vec![
            "--rule-objects=true".to_string(),
            "--rule-selector".into(),
            selector.clone(),
            "--leader-elect".into(),
            "--lease-namespace".into(),
            ns.clone(),
            "--lease-name".into(),
            "rollout".into(),
            "--lease-duration".into(),
            "6".into(),
            "--identity".into(),
            id.into(),
            "--events".into(),
            "warnings".into(),
        ]
    };
    let args = |id: &str| lease(id);
    let one_args = args("one");
    let one_args: Vec<&str> = one_args.iter().map(String::as_str).collect();
    let mut one = Operator::start(&ns, &[], &one_args);
    let steps =
        json!({"steps": [{"resources": 1}, {"percent": 10}, {"percent": 50}], "waitReady": "3m"});
    apply(&rule(&name, &ns, "1", steps.clone()));
    let sites: Vec<Value> = (0..n)
        .map(|i| {
            json!({"apiVersion": "sre.example.com/v1alpha1", "kind": "WebSite",
            "metadata": {"name": format!("site-{i}"), "namespace": ns},
            "spec": {"image": "nginx:1.27", "replicas": 1}})
        })
        .collect();
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&json!({"apiVersion": "v1", "kind": "List", "items": sites}).to_string()),
    );
    let long = Duration::from_secs(300);
    eventually(long, "every WebSite Ready on revision 1", || async {
        let all = list("websites", &ns);
        (all.len() == n
            && all
                .iter()
                .all(|w| ready(w) && w["status"]["ruleRevision"] == 1))
        .then_some(())
    })
    .await;
    let _two = {
        let a = args("two");
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        Operator::start(&ns, &[], &a)
    };

    // What edit 1 would do, before it lands: every pod template changes; a label on the
    // Service alone changes no pod template.
    let edit = rule(&name, &ns, "2", steps.clone());
    let (code, out) = diff(&edit, &ns);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains(&format!(
            "{n} resource(s), {n} touched; objects: 0 created, {n} changed, 0 deleted"
        )) && out.contains(&format!(
            "pod templates changed (pods that would restart): {n}"
        )),
        "{}",
        out.lines().last().unwrap_or_default()
    );
    let mut label = rule(&name, &ns, "1", steps.clone());
    label["spec"]["children"][1]["template"]["metadata"]["labels"]["exposed"] = json!("yes");
    let (code, out) = diff(&label, &ns);
    assert_eq!(code, 1);
    assert!(
        out.contains(&format!("{n} changed"))
            && out.contains("pod templates changed (pods that would restart): 0"),
        "{}",
        out.lines().last().unwrap_or_default()
    );

    // Edit 1: a new pod template, rolled out in four steps; the leader killed at step 2.
    apply(&edit);
    let mut seen = Seen::default();
    let mut steps_seen = Vec::new();
    let mut killed = false;
    let start = Instant::now();
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(600),
            "rollout did not end: {steps_seen:?}"
        );
        let all = list("websites", &ns);
        seen.look(&all, 2);
        let ro = rule_rollout(&name);
        if ro["revision"] == 2 {
            let step = ro["step"].as_u64().unwrap_or(0);
            if steps_seen.last() != Some(&(step, ro["phase"].clone())) {
                steps_seen.push((step, ro["phase"].clone()));
            }
            if !killed && step == 1 {
                one.kill();
                killed = true;
            }
            if ro["phase"] == "Complete" {
                break;
            }
            assert_ne!(ro["phase"], "Paused", "{ro}");
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert!(
        killed,
        "the leader was killed during the rollout: {steps_seen:?}"
    );
    let steps_only: Vec<u64> = steps_seen.iter().map(|(s, _)| *s).collect();
    assert!(
        steps_only.windows(2).all(|w| w[0] <= w[1]),
        "steps never go back, across the failover: {steps_seen:?}"
    );
    // (The last of them may have turned between the list and the Rule's read above.)
    seen.look(&list("websites", &ns), 2);
    assert_eq!(seen.on.len(), n, "every resource reached revision 2");
    // In rank order, each step's resources were all Ready before the next step's took
    // the new revision.
    let mut by_rank: Vec<(u64, String)> = list("websites", &ns)
        .iter()
        .map(|w| {
            (
                ruleop::rollout::rank(w["metadata"]["uid"].as_str().unwrap()),
                w["metadata"]["name"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    by_rank.sort();
    let bounds = [1, n.div_ceil(10), n.div_ceil(2), n];
    let mut lo = 0;
    for pair in bounds.windows(2) {
        let (this, next) = (&by_rank[lo..pair[0]], &by_rank[pair[0]..pair[1]]);
        let last_ready = this.iter().map(|(_, w)| seen.ready[w]).max().unwrap();
        let first_next = next.iter().map(|(_, w)| seen.on[w]).min().unwrap();
        assert!(
            last_ready <= first_next,
            "resources {}..{} took revision 2 before resources {lo}..{} were Ready",
            pair[0],
            pair[1],
            pair[0]
        );
        lo = pair[0];
    }
    // What the rollout did matches what the diff said: every pod template is edit 2's,
    // and nothing is left to change.
    let editions: Vec<String> = list("deployments", &ns)
        .iter()
        .map(|d| {
            d["spec"]["template"]["metadata"]["annotations"]["edition"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    assert_eq!(editions.iter().filter(|e| *e == "2").count(), n);
    let (code, out) = diff(&edit, &ns);
    assert_eq!(code, 0, "{out}");
    eventually(long, "the Rule says 200 updated", || async {
        let r = get_json("rule", "", &name)?;
        (r["status"]["rollout"]["updated"] == n && r["status"]["revision"] == 2).then_some(())
    })
    .await;

    // Edit 2: the canary can never be Ready (its `ready` never holds): the rollout pauses
    // at the first step; the
    // others keep their pod template and ReplicaSets.
    // The ReplicaSets of each Deployment, by the pod template's edition.
    let editions = |ns: &str| -> BTreeMap<String, Vec<String>> {
        let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for rs in list("replicasets", ns) {
            let owner = rs["metadata"]["ownerReferences"][0]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let edition = rs["spec"]["template"]["metadata"]["annotations"]["edition"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            out.entry(owner).or_default().push(edition);
        }
        out
    };
    let mut broken = rule(
        &name,
        &ns,
        "3",
        json!({"steps": [{"resources": 1}, {"percent": 50}], "waitReady": "20s"}),
    );
    broken["spec"]["status"]["ready"] = json!("false");
    apply(&broken);
    let paused = eventually(Duration::from_secs(120), "the rollout paused", || async {
        let ro = rule_rollout(&name);
        (ro["revision"] == 3 && ro["phase"] == "Paused").then_some(ro)
    })
    .await;
    assert_eq!(
        paused["failed"].as_array().map(Vec::len),
        Some(1),
        "{paused}"
    );
    let all = list("websites", &ns);
    let canary: Vec<&Value> = all
        .iter()
        .filter(|w| w["status"]["ruleRevision"] == 3)
        .collect();
    assert_eq!(canary.len(), 1, "only the canary took revision 3");
    let canary_name = canary[0]["metadata"]["name"].as_str().unwrap().to_string();
    let after = editions(&ns);
    let template_edition = |site: &str| {
        get_json("deployment", &ns, &format!("{site}-web")).map(|d| {
            d["spec"]["template"]["metadata"]["annotations"]["edition"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
    };
    for w in &all {
        let site = w["metadata"]["name"].as_str().unwrap();
        if site == canary_name {
            continue;
        }
        assert_eq!(template_edition(site).as_deref(), Some("2"), "{site}");
        let d = format!("{site}-web");
        assert!(
            !after.get(&d).is_some_and(|e| e.iter().any(|e| e == "3")),
            "{site}: no ReplicaSet of revision 3's pod template: {:?}",
            after.get(&d)
        );
    }
    assert_eq!(template_edition(&canary_name).as_deref(), Some("3"));
    // Aborted by annotation: the canary goes back to revision 2, and the annotation goes.
    kubectl_ok(
        &["annotate", "rule", &name, "ruleop.dev/rollout=abort"],
        None,
    );
    eventually(Duration::from_secs(60), "the rollout aborted", || async {
        let ro = rule_rollout(&name);
        (ro["revision"] == 3 && ro["phase"] == "RolledBack").then_some(())
    })
    .await;
    eventually(
        Duration::from_secs(60),
        "the canary back on revision 2, the annotation gone",
        || async {
            let (_, out, _) = kubectl(&["get", "rule", &name, "-o", "json"], None);
            let rule: Value = serde_json::from_str(&out).ok()?;
            let gone = rule["metadata"]["annotations"]["ruleop.dev/rollout"].is_null();
            (gone && template_edition(&canary_name).as_deref() == Some("2")).then_some(())
        },
    )
    .await;

    // Edit 3, the same with `onFailure: Rollback`: the canary returns to revision 2.
    let mut rolling_back = rule(
        &name,
        &ns,
        "4",
        json!({"steps": [{"resources": 1}], "waitReady": "20s", "onFailure": "Rollback"}),
    );
    rolling_back["spec"]["status"]["ready"] = json!("false");
    apply(&rolling_back);
    eventually(Duration::from_secs(120), "rolled back", || async {
        let ro = rule_rollout(&name);
        (ro["revision"] == 4 && ro["phase"] == "RolledBack").then_some(())
    })
    .await;
    eventually(
        Duration::from_secs(60),
        "every resource on revision 2",
        || async {
            let all = list("websites", &ns);
            all.iter()
                .all(|w| w["status"]["ruleRevision"] == 2)
                .then_some(())
        },
    )
    .await;
    eventually(
        Duration::from_secs(60),
        "the canary's pod template back",
        || async { (template_edition(&canary_name).as_deref() == Some("2")).then_some(()) },
    )
    .await;

    // Roll back for good: edit 1's spec applied again is the newest revision again (5,
    // renumbered), rolled out from the one the resources are on; its pods stay as they are.
    apply(&edit);
    eventually(long, "every WebSite on revision 5", || async {
        let ro = rule_rollout(&name);
        let all = list("websites", &ns);
        (ro["revision"] == 5
            && ro["from"] == 2
            && ro["phase"] == "Complete"
            && all.iter().all(|w| w["status"]["ruleRevision"] == 5))
        .then_some(())
    })
    .await;
    assert_eq!(template_edition(&canary_name).as_deref(), Some("2"));
    let _ = kubectl(&["delete", "rule", &name], None);
    common::delete_namespace(&ns);
}
