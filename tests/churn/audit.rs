//! What both churn tests share: the cluster's names and audit policy, ruleop's writes read
//! from the API server's audit log, the checks made of them, and convergence.

use crate::common::{self, kubectl_at};
use crate::shape::hashes;
use k8s_openapi::jiff::Timestamp;
use ruleop::rules::CompiledRule;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};

pub const NS: &str = "churn";
pub const OP_NS: &str = "churn-op";
pub const POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  # (The Rules' writes with their bodies: a late one says what it changed.)
  - level: Request
    verbs: [create, update, patch, delete]
    resources: [{group: ruleop.dev, resources: [rules, rules/status]}]
  - level: Metadata
    verbs: [create, update, patch, delete]
  - level: None
"#;

/// Copies the API server's audit log to target/test-logs when the test fails (its
/// temporary directory goes with it): the record of every write, for the seed's story.
pub struct KeepOnFailure(pub String, pub u64);

impl Drop for KeepOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let to = concat!(env!("CARGO_MANIFEST_DIR"), "/target/test-logs");
            let to = format!("{to}/churn-audit-{}-{}.log", self.1, std::process::id());
            if std::fs::copy(&self.0, &to).is_ok() {
                println!("churn: the API server's audit log is kept in {to}");
            }
        }
    }
}

pub fn holder(kc: &str) -> Option<String> {
    let (ok, out, _) = kubectl_at(
        kc,
        &[
            "get",
            "lease",
            "churn",
            "-n",
            OP_NS,
            "-o",
            "jsonpath={.spec.holderIdentity}",
        ],
        None,
    );
    (ok && !out.is_empty()).then_some(out)
}

/// Applies `obj`, again for a while if it fails (a version other than the storage one
/// needs a replica up to convert it: one killed a moment ago may be restarting).
pub fn apply(kc: &str, obj: &Value) {
    let start = std::time::Instant::now();
    loop {
        let (ok, _, err) = kubectl_at(kc, &["apply", "-f", "-"], Some(&obj.to_string()));
        if ok {
            return;
        }
        assert!(
            start.elapsed() < std::time::Duration::from_secs(60),
            "{err}"
        );
        std::thread::sleep(std::time::Duration::from_millis(500));
    }
}

pub fn a_box(name: &str, spec: &Value) -> Value {
    json!({"apiVersion": "trust.ruleop.dev/v1", "kind": "Box",
        "metadata": {"name": name, "namespace": NS}, "spec": spec})
}

/// A step: when it started, what every version rendered before and after it, and what it did.
pub type Mark = (
    Timestamp,
    BTreeSet<(String, String)>,
    BTreeSet<(String, String)>,
    String,
);

/// One write ruleop made, from the audit log.
pub struct Write {
    pub at: Timestamp,
    pub verb: String,
    pub resource: String,
    /// `status`, or "" for the object itself (the churn test counts the migration's).
    pub subresource: String,
    pub namespace: String,
    pub name: String,
    pub code: i64,
    /// The request's body, where the audit policy keeps it (the Rules' writes).
    pub body: Value,
}

pub fn ruleops_writes(audit: &str) -> Vec<Write> {
    std::fs::read_to_string(audit)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            e["stage"] == "ResponseComplete"
                && e["userAgent"]
                    .as_str()
                    .is_some_and(|a| a.starts_with("ruleop/"))
        })
        .filter_map(|e| {
            Some(Write {
                at: e["requestReceivedTimestamp"].as_str()?.parse().ok()?,
                verb: e["verb"].as_str()?.to_string(),
                resource: e["objectRef"]["resource"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                subresource: e["objectRef"]["subresource"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                namespace: e["objectRef"]["namespace"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                name: e["objectRef"]["name"].as_str().unwrap_or("").to_string(),
                code: e["responseStatus"]["code"].as_i64().unwrap_or(0),
                body: e["requestObject"].clone(),
            })
        })
        .collect()
}

pub fn kind_of(resource: &str) -> &str {
    match resource {
        "configmaps" => "ConfigMap",
        "deployments" => "Deployment",
        "services" => "Service",
        "secrets" => "Secret",
        other => other,
    }
}

/// Objects that are not ruleop's, made before it starts: two read by its `existing`
/// selector (`s1`, `s2`: given back), and one carrying its label (`user-notes`).
pub fn others_objects(kc: &str) -> Vec<Value> {
    let shared: Vec<Value> = ["s1", "s2"]
        .iter()
        .map(|n| json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": n, "namespace": NS, "labels": {"churn-shared": "yes"}}, "data": {"x": "1"}}))
        .collect();
    let decoy = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "user-notes", "namespace": NS, "labels": {"ruleop.dev/rule": "churn"}}, "data": {"mine": "yes"}});
    for o in shared.iter().chain([&decoy]) {
        apply(kc, o);
    }
    shared
}

/// Four boxes of random specs, `r0` to `r3`: their specs by name.
pub fn first_boxes(kc: &str, rng: &mut fastrand::Rng) -> BTreeMap<String, Value> {
    (0..4)
        .map(|i| {
            let spec = crate::shape::random_spec(rng);
            apply(kc, &a_box(&format!("r{i}"), &spec));
            (format!("r{i}"), spec)
        })
        .collect()
}

/// Every child `rule` renders for the boxes of `specs`, by (kind, name).
pub fn expected_all(
    rule: &CompiledRule,
    specs: &BTreeMap<String, Value>,
    shared: &[Value],
) -> BTreeSet<(String, String)> {
    specs
        .iter()
        .flat_map(|(name, spec)| {
            let cr = json!({"apiVersion": "trust.ruleop.dev/v1", "kind": "Box",
                "metadata": {"name": name, "namespace": NS, "uid": "u"}, "spec": spec});
            crate::shape::expected(rule, &cr, shared)
        })
        .collect()
}

/// Checks ruleop's writes: none after `quiet` (but the Lease's and Events), none of the
/// objects that are not its own, none outside the test's namespaces (but Events and the
/// cluster-scoped `also` resources, e.g. the Rules whose status it writes).
pub fn check_writes(writes: &[Write], quiet: Timestamp, seed: u64, also: &[&str]) {
    let late: Vec<String> = writes
        .iter()
        .filter(|w| w.at > quiet && w.resource != "leases" && w.resource != "events")
        .map(|w| {
            let sub = if w.subresource.is_empty() {
                String::new()
            } else {
                format!("/{}", w.subresource)
            };
            let body = if w.body.is_null() {
                String::new()
            } else {
                format!(" {}", w.body)
            };
            let after = w.at.duration_since(quiet).as_secs();
            format!(
                "{} {}{sub} {} ({after} s into the quiet){body}",
                w.verb, w.resource, w.name
            )
        })
        .collect();
    assert!(
        late.is_empty(),
        "seed {seed}: writes after convergence: {late:?}"
    );
    let foreign: Vec<String> = writes
        .iter()
        .filter(|w| w.code < 400 && w.namespace == NS && w.resource == "configmaps")
        .filter(|w| w.name == "user-notes" || w.name == "s1" || w.name == "s2")
        .map(|w| format!("{} {}", w.verb, w.name))
        .collect();
    assert!(
        foreign.is_empty(),
        "seed {seed}: others' objects written: {foreign:?}"
    );
    let elsewhere: Vec<String> = writes
        .iter()
        .filter(|w| w.namespace != NS && w.namespace != OP_NS)
        .filter(|w| w.resource != "events" && !also.contains(&w.resource.as_str()))
        .map(|w| format!("{} {} {}/{}", w.verb, w.resource, w.namespace, w.name))
        .collect();
    assert!(
        elsewhere.is_empty(),
        "seed {seed}: writes outside: {elsewhere:?}"
    );
}

/// Checks that every orphaned child's object ever seen (`keeps`) is still there.
pub fn check_orphans_kept(kc: &str, keeps: &BTreeSet<String>, seed: u64) {
    let present: BTreeSet<String> = common::list_at(kc, "configmaps", NS, None)
        .iter()
        .filter_map(|o| o["metadata"]["name"].as_str().map(str::to_string))
        .collect();
    let lost: Vec<&String> = keeps.difference(&present).collect();
    assert!(
        lost.is_empty(),
        "seed {seed}: orphaned objects gone: {lost:?}"
    );
}

/// The deletes ruleop made of what every version in force rendered all along: from
/// `window_secs` before the delete (a prune decided on an older spec may land a little later) to
/// the end of the step after it; after the last step, of what the final render gives (the
/// last mark). And every delete of an orphaned child's object (`-keep`).
pub fn wrong_deletes(writes: &[Write], marks: &[Mark], window_secs: i64) -> Vec<String> {
    let window = k8s_openapi::jiff::SignedDuration::from_secs(window_secs);
    let mut wrong = Vec::new();
    for w in writes.iter().filter(|w| w.verb == "delete" && w.code < 400) {
        if w.name.ends_with("-keep") {
            wrong.push(format!("deleted {} (an orphaned child)", w.name));
        }
        let key = (kind_of(&w.resource).to_string(), w.name.clone());
        let Some(i) = marks.iter().rposition(|(at, ..)| *at <= w.at) else {
            continue;
        };
        let since = w.at.checked_sub(window).unwrap_or(w.at);
        let first = marks
            .iter()
            .position(|(at, ..)| *at >= since)
            .unwrap_or(i)
            .min(i);
        let all_along = marks[first..=i]
            .iter()
            .all(|(_, before, after, _)| before.contains(&key) && after.contains(&key))
            && marks.get(i + 1).is_none_or(|m| m.2.contains(&key));
        if all_along {
            wrong.push(format!(
                "deleted {} {} during step {i} ({}) while every version rendered it",
                key.0, key.1, marks[i].3
            ));
        }
    }
    wrong
}

/// Whether every resource of `specs` is Synced and Ready with exactly the children of
/// `want` (and the objects of `want` belong to them); what is missing otherwise.
pub fn converged(
    kc: &str,
    specs: &BTreeMap<String, Value>,
    want: &BTreeSet<(String, String)>,
    rule: &CompiledRule,
    shared: &[Value],
) -> Result<(), String> {
    let mut boxes = BTreeMap::new();
    for name in specs.keys() {
        // (In the version the rule watches: kubectl takes the highest, v2 in the churn.)
        let (ok, out, _) = kubectl_at(
            kc,
            &[
                "get",
                "boxes.v1.trust.ruleop.dev",
                name,
                "-n",
                NS,
                "-o",
                "json",
            ],
            None,
        );
        if !ok {
            return Err(format!("box {name} missing"));
        }
        let b: Value = serde_json::from_str(&out).map_err(|e| e.to_string())?;
        boxes.insert(name.clone(), b.clone());
        for (cond, reason) in [("Synced", "Applied"), ("Ready", "Ready")] {
            let ok = common::condition(&b, cond).is_some_and(|c| c["reason"] == reason);
            if !ok {
                return Err(format!(
                    "box {name}: {cond} is {:?}",
                    common::condition(&b, cond)
                ));
            }
        }
        if b["status"]["observedGeneration"] != b["metadata"]["generation"] {
            return Err(format!("box {name}: status behind its generation"));
        }
    }
    let mut have = BTreeSet::new();
    // What each object is, for the message: its controller and ruleop's marks.
    let mut about = BTreeMap::new();
    for kind in ["configmaps", "deployments", "services", "secrets"] {
        for o in common::list_at(kc, kind, NS, Some("ruleop.dev/rule=churn")) {
            let controller = o["metadata"]["ownerReferences"]
                .as_array()
                .and_then(|r| r.iter().find(|r| r["controller"] == true).cloned());
            if controller.is_some() && o["metadata"]["deletionTimestamp"].is_null() {
                let key = (
                    kind_of(kind).to_string(),
                    o["metadata"]["name"].as_str().unwrap_or("").to_string(),
                );
                let m = &o["metadata"];
                about.insert(
                    key.clone(),
                    json!({"controller": controller, "labels": m["labels"], "annotations": m["annotations"]}),
                );
                have.insert(key);
            }
        }
    }
    if &have != want {
        let missing: Vec<_> = want.difference(&have).collect();
        let extra: Vec<_> = have
            .difference(want)
            .map(|k| format!("{k:?}: {}", about[k]))
            .collect();
        return Err(format!("children: missing {missing:?}, extra {extra:?}"));
    }
    // Each object is what a fresh render of its resource gives now (its applied hash): not
    // an older version's template, not another resource's.
    let mut objects = BTreeMap::new();
    for kind in ["configmaps", "deployments", "services", "secrets"] {
        for o in common::list_at(kc, kind, NS, Some("ruleop.dev/rule=churn")) {
            let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
            objects.insert((kind_of(kind).to_string(), name), o);
        }
    }
    let live = |kind: &str, name: &str| objects.get(&(kind.to_string(), name.to_string())).cloned();
    for (name, b) in boxes {
        for (key, hash) in hashes(rule, &b, shared, &live)? {
            // (Listed again: an object may come or go between the two listings.)
            let (Some(o), Some(about)) = (objects.get(&key), about.get(&key)) else {
                return Err(format!("box {name}: {key:?} is missing"));
            };
            let applied = &o["metadata"]["annotations"]["ruleop.dev/applied-hash"];
            let owner = about["controller"]["uid"].clone();
            if applied != &json!(hash) || owner != b["metadata"]["uid"] {
                return Err(format!(
                    "box {name}: {key:?} is not what a fresh render gives (hash {applied} for {hash}, controller {owner})"
                ));
            }
        }
    }
    Ok(())
}
