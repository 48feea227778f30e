//! The churn test of Rule objects: the churn test's rule served from a Rule with a
//! progressive rollout (a canary, then half, then all; pausing when a step is not Ready in
//! time), on a control plane of its own with the API server's audit log. The Rule is edited
//! (the same edits as the files' churn: kinds added and dropped mid-rollout), an earlier
//! spec is applied again, rollouts are resumed and aborted by annotation, a second Rule on
//! the same kind comes and goes, so does a Rule named as the replicas' file rule, the
//! serving Rule is deleted and another takes its kind over (and back), resources pin
//! revisions whose kinds the newest dropped, an abort, an earlier spec and a leader's
//! kill come in one sequence, a
//! resource nested too deep to decode is made, resources are edited, made and deleted,
//! the leader is killed and fails over, the API server restarts.
//!
//! Checked, from the audit log and the objects: ruleop writes nothing it does not own;
//! it never deletes an object that every revision in force renders (the newest, the one a
//! rollout comes from, the one in the Rule's status) both before and after the step it
//! deletes in; it never deletes an orphaned child's object; the second Rule is refused
//! and never serves, and so is the one named as a file's rule; after the last step (a
//! paused rollout resumed) every resource is `Synced` and `Ready` with exactly the
//! children the revision in force renders; then nothing is written for a while.
//!
//! `RULEOP_CHURN_SEED`, `RULEOP_CHURN_STEPS` and `RULEOP_CHURN_QUIET_SECONDS` as for the
//! files' churn test (`RULEOP_CHURN_RULES_SEED` replays this one's seed alone).

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
use ruleop::rollout::{Progress, Resource, choose, rank};
use ruleop::rules::CompiledRule;
use serde_json::{Value, json};
use shape::{Shape, expected, load, random_spec};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

const RULE: &str = "churn";
const OTHER: &str = "churn-second";
/// The Rule that takes the kind over from `churn` when it is deleted (and gives it back).
const HEIR: &str = "churn-heir";
/// The rule every replica also loads from a file (the shipped WebSite rule), and so the
/// name a Rule may not take.
const FILE_RULE: &str = "website";

/// A replica serving Rule objects.
struct Replica {
    name: &'static str,
    op: Option<Operator>,
    starts: usize,
}

impl Replica {
    fn start(&mut self, kc: &str) {
        self.starts += 1;
        let identity = format!("{}-{}", self.name, self.starts);
        let file_rule = format!("{}/rules/website.yaml", env!("CARGO_MANIFEST_DIR"));
        let args = [
            "--rules",
            &file_rule,
            "--rule-objects=true",
            "--leader-elect",
            "--lease-namespace",
            OP_NS,
            "--lease-name",
            "churn",
            "--lease-duration",
            "6",
            "--identity",
            &identity,
        ];
        self.op = Some(Operator::start_with_env(
            NS,
            &[],
            &args,
            &[("KUBECONFIG", kc)],
        ));
    }

    fn restart(&mut self, kc: &str) {
        if let Some(mut op) = self.op.take() {
            op.kill();
        }
        self.start(kc);
    }
}

/// The rollout every spec declares.
fn rollout() -> Value {
    json!({"steps": [{"resources": 1}, {"percent": 50}], "waitReady": "40s", "onFailure": "Pause"})
}

/// Rule `name` holding the rules text `text`, with the rollout.
/// The heir's selectors are written out as `churn`'s: `selectorLabels` holds the rule's
/// name, and a Deployment's selector is immutable (a rule of another name could not take
/// its Deployments over).
fn rule_object(name: &str, text: &str) -> Value {
    let same_selector =
        "{app.kubernetes.io/name: churn, app.kubernetes.io/instance: \"{{ name }}\"}";
    let text = match name {
        HEIR => text.replace("\"{{ selectorLabels }}\"", same_selector),
        _ => text.to_string(),
    };
    let mut spec: Value = serde_yaml::from_str(&text).unwrap();
    spec["name"] = json!(name);
    spec["rollout"] = rollout();
    json!({"apiVersion": "ruleop.dev/v1alpha1", "kind": "Rule", "metadata": {"name": name}, "spec": spec})
}

fn get(kc: &str, args: &[&str]) -> Option<Value> {
    let (ok, out, _) = kubectl_at(kc, args, None);
    ok.then(|| serde_json::from_str(&out).ok()).flatten()
}

/// The status of Rule `rule` (the one serving the kind).
fn rule_status(kc: &str, rule: &str) -> Value {
    get(kc, &["get", "rule", rule, "-o", "json"])
        .map(|r| r["status"].clone())
        .unwrap_or(Value::Null)
}

/// Whether ruleop has answered everything asked of Rule `r` (as read): no
/// `ruleop.dev/rollout` left on it (the test's last resume may land after the rollout moved
/// on: ruleop takes it off on its next look) and its status says its generation serves.
fn rule_answered(r: &Value) -> Result<(), String> {
    let rule = r["metadata"]["name"].as_str().unwrap_or(RULE);
    let asked = &r["metadata"]["annotations"]["ruleop.dev/rollout"];
    if !asked.is_null() {
        return Err(format!(
            "Rule {rule}: ruleop.dev/rollout={asked} not taken off yet"
        ));
    }
    let ready = common::condition(r, "Ready").is_some_and(|c| c["status"] == "True");
    if !ready || r["status"]["observedGeneration"] != r["metadata"]["generation"] {
        return Err(format!(
            "Rule {rule}: not serving its generation yet: {}",
            r["status"]["conditions"]
        ));
    }
    Ok(())
}

/// The specs of Rule `rule`'s revisions, by number.
fn revisions(kc: &str, rule: &str) -> BTreeMap<i64, Value> {
    let list = get(
        kc,
        &[
            "get",
            "controllerrevisions",
            "-n",
            OP_NS,
            "-l",
            &format!("ruleop.dev/rule={rule}"),
            "-o",
            "json",
        ],
    )
    .unwrap_or(Value::Null);
    // (Only the Rule's own: a Rule of that name deleted leaves its revisions to the
    // garbage collector, numbered as the new one's.)
    let uid = get(kc, &["get", "rule", rule, "-o", "json"])
        .and_then(|r| r["metadata"]["uid"].as_str().map(str::to_string))
        .unwrap_or_default();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["metadata"]["ownerReferences"][0]["uid"] == uid.as_str())
        .filter_map(|c| Some((c["revision"].as_i64()?, c["data"]["spec"].clone())))
        .collect()
}

/// A revision's spec of Rule `rule` compiled as ruleop compiles it.
fn compile(rule: &str, spec: &Value) -> Option<Arc<CompiledRule>> {
    let obj = json!({"metadata": {"name": rule, "uid": "u", "generation": 1}, "spec": spec});
    ruleop::rules::object::load_object(&obj).rule
}

/// One resource as the invariant reads it: its name, uid, when made, and the revision that
/// last reconciled it (read by columns: the deep resource is past the test's decoder too).
struct Seen {
    name: String,
    uid: String,
    created: String,
    revision: Option<i64>,
    /// The revision it pins (`ruleop.dev/revision`).
    pinned: Option<i64>,
}

fn boxes(kc: &str) -> Vec<Seen> {
    let columns = "custom-columns=N:.metadata.name,U:.metadata.uid,C:.metadata.creationTimestamp,R:.status.ruleRevision,P:.metadata.annotations.ruleop\\.dev/revision";
    let (_, out, _) = kubectl_at(
        kc,
        &["get", "boxes", "-n", NS, "--no-headers", "-o", columns],
        None,
    );
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            Some(Seen {
                name: f.first()?.to_string(),
                uid: f.get(1)?.to_string(),
                created: f.get(2)?.to_string(),
                revision: f.get(3).and_then(|r| r.parse().ok()),
                pinned: f.get(4).and_then(|r| r.parse().ok()),
            })
        })
        .collect()
}

/// For each resource, the revisions it may be on now: the one that last reconciled it,
/// the one the rollout in Rule `serving`'s status gives it (by its rank), and the spec last
/// applied while no rollout to it is recorded yet (any resource may be its canary). A
/// resource whose pin was set before the rule last started (`certain`: the pins it read
/// then) is on that revision alone, or the one that last reconciled it: a pin holds what it
/// pins, the kinds the newest dropped included.
fn on(
    kc: &str,
    serving: &str,
    applied: &str,
    certain: &BTreeMap<String, i64>,
) -> BTreeMap<String, Vec<Arc<CompiledRule>>> {
    let status = rule_status(kc, serving);
    let compiled: BTreeMap<i64, Arc<CompiledRule>> = revisions(kc, serving)
        .iter()
        .filter_map(|(n, spec)| Some((*n, compile(serving, spec)?)))
        .collect();
    let newest =
        compile(serving, &rule_object(serving, applied)["spec"]).unwrap_or_else(|| load(applied));
    let progress = Progress::from_status(Some(&status["rollout"]));
    let current = status["revision"].as_i64();
    let recorded = progress.as_ref().map(|p| p.revision).or(current);
    let pending = recorded
        .and_then(|n| compiled.get(&n))
        .is_none_or(|r| r.fingerprint != newest.fingerprint);
    boxes(kc)
        .into_iter()
        .map(|b| {
            let mut revs: Vec<Arc<CompiledRule>> = Vec::new();
            if let Some(r) = b.revision.and_then(|n| compiled.get(&n)) {
                revs.push(r.clone());
            }
            let held = certain
                .get(&b.name)
                .filter(|n| b.pinned == Some(**n))
                .and_then(|n| compiled.get(n));
            if let Some(r) = held {
                revs.push(r.clone());
                return (b.name, revs);
            }
            if let Some(newest_number) = current {
                let r = Resource {
                    key: String::new(),
                    rank: rank(&b.uid),
                    created: Some(b.created.clone()),
                    revision: None,
                    pinned: b.pinned,
                    ready: false,
                    failed: None,
                };
                let n = choose(progress.as_ref(), newest_number, &r);
                if let Some(r) = compiled.get(&n) {
                    revs.push(r.clone());
                }
                // A pin the rule has not read yet, or to a revision that is not loaded,
                // gets the newest.
                if b.pinned.is_some() {
                    revs.push(newest.clone());
                }
            }
            if pending || revs.is_empty() {
                revs.push(newest.clone());
            }
            (b.name, revs)
        })
        .collect()
}

/// The (apiVersion, kind) of a rule's children.
fn kinds(rule: &CompiledRule) -> BTreeSet<(String, String)> {
    rule.children
        .iter()
        .map(|c| (c.api_version.clone(), c.kind.clone()))
        .collect()
}

/// A revision to pin: half the time one that makes a kind the newest does not (when Rule
/// `serving` keeps one), else any it keeps, or one it never had.
fn a_pin(kc: &str, serving: &str, newest: &str, rng: &mut fastrand::Rng) -> String {
    let kept = revisions(kc, serving);
    let numbers: Vec<i64> = kept.keys().copied().collect();
    let now = kinds(&load(newest));
    let dropped: Vec<i64> = kept
        .iter()
        .filter_map(|(n, spec)| Some((*n, compile(serving, spec)?)))
        .filter(|(_, r)| !kinds(r).is_subset(&now))
        .map(|(n, _)| n)
        .collect();
    match rng.usize(0..4) {
        0 => format!("{}", numbers.iter().max().unwrap_or(&0) + 5),
        1 => "-".into(),
        2 if !dropped.is_empty() => format!("{}", dropped[rng.usize(0..dropped.len())]),
        _ => format!(
            "{}",
            numbers
                .get(rng.usize(0..numbers.len().max(1)))
                .unwrap_or(&1)
        ),
    }
}

/// An earlier spec of `applied` (not the newest) applied again to Rule `serving`, and
/// recorded as the newest: which one, and whether it differs from the newest before (a
/// new revision: the rule starts again).
fn apply_again(
    kc: &str,
    serving: &str,
    applied: &mut Vec<String>,
    rng: &mut fastrand::Rng,
) -> (usize, bool) {
    let i = rng.usize(0..applied.len() - 1);
    let text = applied[i].clone();
    let changed = applied.last() != Some(&text);
    applied.push(text.clone());
    apply(kc, &rule_object(serving, &text));
    (i, changed)
}

/// Rule `from` deleted, then Rule `to` applied with `text`: `to` takes the kind over.
fn take_over(kc: &str, from: &str, to: &str, text: &str) -> String {
    kubectl_at(kc, &["delete", "rule", from], None);
    apply(kc, &rule_object(to, text));
    format!("Rule {from} deleted, {to} takes the kind over")
}

/// Applies Rule `name` (the current shape, its children's names ending in `suffix`) when
/// `applied` is false, deletes it when true, and flips `applied`: a Rule that must be
/// refused comes or goes. What was done.
fn toggle_refused(kc: &str, name: &str, suffix: &str, shape: &Shape, applied: &mut bool) -> String {
    if *applied {
        kubectl_at(kc, &["delete", "rule", name], None);
    } else {
        let text = shape.text().replace("-config", suffix);
        apply(kc, &rule_object(name, &text));
    }
    *applied = !*applied;
    format!(
        "Rule {name} {}",
        if *applied { "applied" } else { "deleted" }
    )
}

#[tokio::test]
async fn a_seeded_churn_of_rule_objects_with_rollouts_loses_nothing() {
    let seed: u64 = std::env::var("RULEOP_CHURN_RULES_SEED")
        .or_else(|_| std::env::var("RULEOP_CHURN_SEED"))
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    let steps: usize = std::env::var("RULEOP_CHURN_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    println!(
        "churn (Rules): seed {seed} ({steps} steps; replay with RULEOP_CHURN_RULES_SEED={seed})"
    );
    let mut rng = fastrand::Rng::with_seed(seed);
    let dir = tempfile::tempdir().unwrap();
    let (cluster, audit) = common::cluster_with_audit(NS, POLICY, dir.path(), &[]);
    let _keep_audit = KeepOnFailure(audit.clone(), seed);
    let kc = cluster.kubeconfig.clone();
    let root = env!("CARGO_MANIFEST_DIR");
    for crd in [
        "tests/fixtures/trust/crd.yaml",
        "deploy/crds/rules.ruleop.dev.yaml",
        "deploy/crds/websites.sre.example.com.yaml",
    ] {
        cluster.kubectl(&["apply", "-f", &format!("{root}/{crd}")], None);
    }
    for crd in ["crd/boxes.trust.ruleop.dev", "crd/rules.ruleop.dev"] {
        cluster.kubectl(
            &["wait", "--for=condition=Established", crd, "--timeout=60s"],
            None,
        );
    }
    cluster.kubectl(&["create", "namespace", OP_NS], None);
    let shared = others_objects(&kc);
    let mut shape = Shape::first();
    // Every spec applied, in order: the last is the newest.
    let mut applied: Vec<String> = vec![shape.text()];
    apply(&kc, &rule_object(RULE, &shape.text()));
    let mut replicas: Vec<Replica> = ["a", "b"]
        .into_iter()
        .map(|name| Replica {
            name,
            op: None,
            starts: 0,
        })
        .collect();
    for r in &mut replicas {
        r.start(&kc);
    }
    let mut specs = first_boxes(&kc, &mut rng);
    let mut next = 4;
    let mut shared_in_ns: Vec<Value> = shared.clone();
    let expect_all = expected_all;
    // What each resource's every possible revision renders for it: no replica may delete it.
    let expect_every = |serving: &str,
                        certain: &BTreeMap<String, i64>,
                        newest: &str,
                        specs: &BTreeMap<String, Value>,
                        shared: &[Value]| {
        let mut out = BTreeSet::new();
        for (name, revs) in on(&kc, serving, newest, certain) {
            let Some(spec) = specs.get(&name) else {
                continue;
            };
            let cr = json!({"apiVersion": "trust.ruleop.dev/v1", "kind": "Box",
                "metadata": {"name": name, "namespace": NS, "uid": "u"}, "spec": spec});
            let mut sets = revs.iter().map(|r| expected(r, &cr, shared));
            let first = sets.next().unwrap_or_default();
            out.extend(sets.fold(first, |a, b| a.intersection(&b).cloned().collect()));
        }
        out
    };
    let mut marks: Vec<Mark> = Vec::new();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut keeps: BTreeSet<String> = BTreeSet::new();
    let mut second = false;
    let mut named = false;
    let mut named_ever = false;
    let mut deep = false;
    // The Rule serving the kind (`churn`, or its heir after a takeover).
    let mut serving = RULE.to_string();
    // Each pin set, and the step it was set at; the last step the rule started at (a new
    // revision): a pin set before it was read then, and holds.
    let mut pins: BTreeMap<String, (i64, usize)> = BTreeMap::new();
    let mut last_start = 0;
    let certain = |pins: &BTreeMap<String, (i64, usize)>, last_start: usize| {
        pins.iter()
            .filter(|(_, (_, at))| *at < last_start)
            .map(|(b, (n, _))| (b.clone(), *n))
            .collect::<BTreeMap<String, i64>>()
    };
    for step in 0..steps {
        let newest = applied.last().unwrap().clone();
        let held = certain(&pins, last_start);
        let before = expect_every(&serving, &held, &newest, &specs, &shared_in_ns);
        let started = Timestamp::now();
        // (Every run has a Rule named as the files' rule, a third of the way, a pin, half
        // way, and a hostile resource, two thirds of the way, at least once.)
        let pick = match rng.usize(0..28) {
            _ if step == steps / 3 && !named_ever => 22,
            _ if step == steps / 6 && !counts.contains_key("abort, apply, restart") => 27,
            _ if step == 5 * steps / 6 && !counts.contains_key("takeovers") => 25,
            _ if step == 2 * steps / 3 && !deep => 23,
            _ if step == steps / 2 && !counts.contains_key("pins") => 24,
            p => p,
        };
        let (kind, what): (&str, String) = match pick {
            0..=4 => {
                let what = shape.mutate(&mut rng);
                if shape.text() != newest {
                    last_start = step;
                }
                applied.push(shape.text());
                apply(&kc, &rule_object(&serving, &shape.text()));
                ("edits", format!("rule edit: {what}"))
            }
            5 if applied.len() > 1 => {
                // An earlier spec again: that revision again, rolled out as any other.
                let (i, changed) = apply_again(&kc, &serving, &mut applied, &mut rng);
                if changed {
                    last_start = step;
                }
                ("reapplies", format!("spec {i} applied again"))
            }
            6 => {
                let action = if rng.bool() { "resume" } else { "abort" };
                kubectl_at(
                    &kc,
                    &[
                        "annotate",
                        "rule",
                        &serving,
                        &format!("ruleop.dev/rollout={action}"),
                        "--overwrite",
                    ],
                    None,
                );
                (
                    if action == "resume" {
                        "resumes"
                    } else {
                        "aborts"
                    },
                    format!("rollout {action}"),
                )
            }
            7..=12 if !specs.is_empty() => {
                let name = specs
                    .keys()
                    .nth(rng.usize(0..specs.len()))
                    .cloned()
                    .unwrap();
                let spec = random_spec(&mut rng);
                apply(&kc, &a_box(&name, &spec));
                specs.insert(name.clone(), spec);
                ("resource edits", format!("edit {name}"))
            }
            5..=13 => {
                let name = format!("r{next}");
                next += 1;
                let spec = random_spec(&mut rng);
                apply(&kc, &a_box(&name, &spec));
                specs.insert(name.clone(), spec);
                ("resources made", format!("make {name}"))
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
                ("resources deleted", format!("delete {name}"))
            }
            16 | 17 => {
                let leader = holder(&kc).unwrap_or_default();
                let i = usize::from(leader.starts_with('b'));
                replicas[i].restart(&kc);
                let kind = if leader.is_empty() {
                    "kills"
                } else {
                    "failovers"
                };
                (kind, format!("kill the leader {leader}"))
            }
            18 => {
                let i = rng.usize(0..2);
                replicas[i].restart(&kc);
                ("kills", format!("kill replica {}", replicas[i].name))
            }
            19 => {
                let s2 = shared[1].clone();
                if shared_in_ns.len() == 2 {
                    kubectl_at(
                        &kc,
                        &["label", "configmap", "s2", "-n", NS, "churn-shared-"],
                        None,
                    );
                    shared_in_ns.truncate(1);
                    ("selector changes", "s2 leaves the existing selector".into())
                } else {
                    apply(&kc, &s2);
                    shared_in_ns.push(s2);
                    ("selector changes", "s2 comes back".into())
                }
            }
            20 => {
                cluster.ctl("stop", "kube-apiserver");
                tokio::time::sleep(Duration::from_secs(1)).await;
                cluster.ctl("start", "kube-apiserver");
                cluster.wait_ready().await;
                ("API server restarts", "restart the API server".into())
            }
            22 => {
                named_ever = true;
                // A Rule named as the files' rule (on the kind the Rule serves): refused,
                // it never writes, and the file's rule goes on.
                let what = toggle_refused(&kc, FILE_RULE, "-named", &shape, &mut named);
                ("Rules named as a file's rule", what)
            }
            21 => {
                // A second Rule on the kind the first serves: refused, it never writes.
                let what = toggle_refused(&kc, OTHER, "-second", &shape, &mut second);
                ("conflicting Rules", what)
            }
            24 if !specs.is_empty() => {
                // A resource pinned to a revision the Rule had (or one it never had), or
                // unpinned.
                let name = specs
                    .keys()
                    .nth(rng.usize(0..specs.len()))
                    .cloned()
                    .unwrap();
                let pin = a_pin(&kc, &serving, &newest, &mut rng);
                match pin.parse::<i64>() {
                    Ok(n) => pins.insert(name.clone(), (n, step)),
                    Err(_) => pins.remove(&name),
                };
                let annotation = match pin.as_str() {
                    "-" => "ruleop.dev/revision-".to_string(),
                    p => format!("ruleop.dev/revision={p}"),
                };
                kubectl_at(
                    &kc,
                    &[
                        "annotate",
                        "box",
                        &name,
                        "-n",
                        NS,
                        &annotation,
                        "--overwrite",
                    ],
                    None,
                );
                ("pins", format!("{name} pins {pin}"))
            }
            27 if applied.len() > 1 => {
                // In one sequence: the rollout aborted, an earlier spec applied again, the
                // leader killed (a new one must read back what the rollout decided).
                kubectl_at(
                    &kc,
                    &[
                        "annotate",
                        "rule",
                        &serving,
                        "ruleop.dev/rollout=abort",
                        "--overwrite",
                    ],
                    None,
                );
                let (i, changed) = apply_again(&kc, &serving, &mut applied, &mut rng);
                if changed {
                    last_start = step;
                }
                let leader = holder(&kc).unwrap_or_default();
                replicas[usize::from(leader.starts_with('b'))].restart(&kc);
                (
                    "abort, apply, restart",
                    format!("abort, spec {i} applied again, kill the leader {leader}"),
                )
            }
            25 | 26 if !second && !named => {
                // The serving Rule deleted, another takes the kind over (half the time
                // without the orphaned child: the old one's orphans must be let go).
                let heir = if serving == RULE { HEIR } else { RULE };
                if shape.keep && rng.bool() {
                    shape.keep = false;
                }
                let what = take_over(&kc, &serving, heir, &shape.text());
                applied.push(shape.text());
                serving = heir.to_string();
                // (Its revisions are numbered afresh: the pins set are not its own.)
                pins.clear();
                last_start = step;
                ("takeovers", what)
            }
            _ if !deep => {
                // One resource no decoder of 128 levels reads: it fails alone.
                let body = format!(
                    r#"{{"apiVersion": "trust.ruleop.dev/v1", "kind": "Box", "metadata": {{"name": "deep", "namespace": "{NS}"}}, "spec": {{"free": {}1{}}}}}"#,
                    "[".repeat(200),
                    "]".repeat(200)
                );
                kubectl_at(&kc, &["create", "-f", "-"], Some(&body));
                deep = true;
                (
                    "hostile resources",
                    "a resource nested 200 levels deep".into(),
                )
            }
            _ => continue,
        };
        *counts.entry(kind).or_default() += 1;
        let held = certain(&pins, last_start);
        let after = expect_every(
            &serving,
            &held,
            applied.last().unwrap(),
            &specs,
            &shared_in_ns,
        );
        println!("churn (Rules): step {step}: {what}");
        marks.push((started, before, after, what));
        keeps.extend(
            common::list_at(&kc, "configmaps", NS, None)
                .iter()
                .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string))
                .filter(|n| n.ends_with("-keep")),
        );
        tokio::time::sleep(Duration::from_millis(rng.u64(200..2500))).await;
    }
    if second {
        kubectl_at(&kc, &["delete", "rule", OTHER], None);
    }
    if named {
        let status = get(&kc, &["get", "rule", FILE_RULE, "-o", "json"])
            .map(|r| r["status"].clone())
            .unwrap_or(Value::Null);
        let accepted = status["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Accepted");
        assert!(
            accepted.is_none_or(|c| c["status"] != "True"),
            "seed {seed}: a Rule named as a file's rule was accepted: {status}"
        );
        kubectl_at(&kc, &["delete", "rule", FILE_RULE], None);
    }
    // The kind back with `churn` (the end is read from it).
    if serving != RULE {
        let what = take_over(&kc, &serving, RULE, applied.last().unwrap());
        println!("churn (Rules): {what}");
        *counts.entry("takeovers").or_default() += 1;
    }
    // Every pin taken off: the end is the revision in force's, everywhere.
    kubectl_at(
        &kc,
        &[
            "annotate",
            "boxes",
            "--all",
            "-n",
            NS,
            "ruleop.dev/revision-",
        ],
        None,
    );
    let end = Timestamp::now();
    println!("churn (Rules): {steps} steps: {counts:?}");

    // A paused rollout is resumed until it ends; then every resource converges to what
    // the revision in force renders (the previous one's, after an abort).
    let last = std::sync::Mutex::new(String::new());
    let mut rule = load(applied.last().unwrap());
    let took = std::time::Instant::now();
    eventually(Duration::from_secs(300), "every resource converged", || {
        let read = get(&kc, &["get", "rule", RULE, "-o", "json"]).unwrap_or(Value::Null);
        let status = read["status"].clone();
        let ro = status["rollout"].clone();
        if ro["phase"] == "Paused" {
            kubectl_at(
                &kc,
                &[
                    "annotate",
                    "rule",
                    RULE,
                    "ruleop.dev/rollout=resume",
                    "--overwrite",
                ],
                None,
            );
        }
        let in_force = if ro["phase"] == "RolledBack" {
            ro["from"]
                .as_i64()
                .and_then(|n| revisions(&kc, RULE).get(&n).and_then(|s| compile(RULE, s)))
        } else {
            Some(load(applied.last().unwrap()))
        };
        let result = match in_force {
            Some(r) => {
                let want = expect_all(&r, &specs, &shared_in_ns);
                let done = ro["phase"] != "Paused" && ro["phase"] != "Progressing";
                let c = converged(&kc, &specs, &want, &r, &shared_in_ns)
                    .and_then(|()| {
                        // (The pins were taken off: the rollout counts none once it saw it.)
                        let unpinned = ro["pinned"].as_u64().unwrap_or(0) == 0;
                        if (done || ro.is_null()) && unpinned {
                            Ok(())
                        } else {
                            Err(format!("rollout {ro}"))
                        }
                    })
                    .and_then(|()| rule_answered(&read));
                rule = r;
                c
            }
            None => Err(format!("the revision in force is not readable: {ro}")),
        };
        let out = result.err().map_or(Some(()), |why| {
            let mut last = last.lock().unwrap();
            if *last != why {
                println!("churn (Rules): not yet: {why}");
                *last = why;
            }
            None
        });
        async move { out }
    })
    .await;
    println!(
        "churn (Rules): converged {:.0} s after the last step",
        took.elapsed().as_secs_f64()
    );
    let want = expect_all(&rule, &specs, &shared_in_ns);

    let quiet_seconds: u64 = std::env::var("RULEOP_CHURN_QUIET_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    let quiet = Timestamp::now();
    tokio::time::sleep(Duration::from_secs(quiet_seconds)).await;
    let writes = ruleops_writes(&audit);
    check_writes(&writes, quiet, seed, &["rules"]);
    let seconds: Vec<String> = writes
        .iter()
        // (Its own status, saying it is refused, is ruleop's to write.)
        .filter(|w| w.code < 400 && (w.name.ends_with("-second") || w.name.ends_with("-named")))
        .filter(|w| w.resource != "events" && w.resource != "rules")
        .map(|w| format!("{} {} {}", w.verb, w.resource, w.name))
        .collect();
    assert!(
        seconds.is_empty(),
        "seed {seed}: the second Rule or the one named as a file's rule, refused, wrote: {seconds:?}"
    );
    marks.push((end, want.clone(), want.clone(), "converging".into()));
    let wrong = wrong_deletes(&writes, &marks, 15);
    assert!(wrong.is_empty(), "seed {seed}: {wrong:#?}");
    check_orphans_kept(&kc, &keeps, seed);
    for r in &mut replicas {
        if let Some(mut op) = r.op.take() {
            op.kill();
        }
    }
    drop(cluster);
}
