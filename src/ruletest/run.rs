//! Running test files: each test's resource through its steps, what each step gave
//! checked against what it expected (and against its snapshot, when one is kept), or,
//! with `--update`, written as the new snapshot.

use super::expect::{self, Failure};
use super::simulate::{Outcome, rule_for, simulate};
use super::spec::{Step, Test, TestFile};
use crate::rules::{self, CompiledRule};
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

/// A failing step: its number (from 1), its name, and what failed.
pub type StepFailures = (usize, String, Vec<Failure>);

/// What became of one test.
#[derive(Debug, Clone)]
pub struct TestResult {
    pub name: String,
    pub failures: Vec<StepFailures>,
    pub seconds: f64,
}

impl TestResult {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// What became of one test file: its tests, or why it could not run.
#[derive(Debug, Clone)]
pub struct FileResult {
    pub file: PathBuf,
    pub tests: Vec<TestResult>,
    pub error: Option<String>,
}

/// Whether `p` is a test file: `*_test.yaml` or `*_test.yml`.
pub fn is_test_file(p: &Path) -> bool {
    p.file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.ends_with("_test.yaml") || n.ends_with("_test.yml"))
}

/// The test files of `paths` (files, or folders searched through), in path order.
pub fn test_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            walk(p, &mut out).map_err(|e| format!("{}: {e}", p.display()))?;
        } else if p.exists() {
            out.push(p.clone());
        } else {
            return Err(format!("{}: no such file or folder", p.display()));
        }
    }
    out.sort();
    out.dedup();
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for e in std::fs::read_dir(dir)? {
        let p = e?.path();
        let hidden = p
            .file_name()
            .and_then(|n| n.to_str())
            .is_none_or(|n| n.starts_with('.') || n == "target");
        if hidden {
            continue;
        }
        if p.is_dir() {
            walk(&p, out)?;
        } else if is_test_file(&p) {
            out.push(p);
        }
    }
    Ok(())
}

/// The snapshot file of a test file: `website_test.yaml` → `website_test.snap.yaml`.
pub fn snapshot_path(file: &Path) -> PathBuf {
    let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("test");
    file.with_file_name(format!("{stem}.snap.yaml"))
}

/// The rules a test file runs against: its `rules`, or those of its folder (of the parent
/// folder for a folder named `tests`).
fn rules_of(file: &Path, spec: &TestFile) -> Vec<PathBuf> {
    let dir = file.parent().unwrap_or(Path::new("."));
    if !spec.rules.is_empty() {
        return spec.rules.iter().map(|r| dir.join(r)).collect();
    }
    let folder = if dir.file_name().is_some_and(|n| n == "tests") {
        dir.parent().unwrap_or(dir)
    } else {
        dir
    };
    vec![folder.to_path_buf()]
}

/// What judges each step's children beyond the test's own expectations: the API server
/// (`ruleop test --server`), given from above, so tests run with no cluster by default.
pub trait Judge {
    /// One message per child (or field of one) the judge refuses.
    fn refusals(&self, rule: &CompiledRule, children: &[crate::render::Rendered]) -> Vec<String>;
}

/// Runs one test file; with `update`, writes its snapshot instead of comparing with it;
/// with a `judge`, each step's children are also judged by it.
pub fn run_file(file: &Path, update: bool, judge: Option<&dyn Judge>) -> FileResult {
    let failed = |error: String| FileResult {
        file: file.to_path_buf(),
        tests: Vec::new(),
        error: Some(error),
    };
    let text = match std::fs::read_to_string(file) {
        Ok(t) => t,
        Err(e) => return failed(format!("{}: {e}", file.display())),
    };
    let spec: TestFile = match serde_yaml::from_str(&text) {
        Ok(s) => s,
        Err(e) => return failed(format!("{}: {e}", file.display())),
    };
    let (loaded, errors) = rules::load_paths(&rules_of(file, &spec));
    if !errors.is_empty() {
        let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
        return failed(all.join("\n"));
    }
    let snap_file = snapshot_path(file);
    let snapshots: Map<String, Value> = std::fs::read_to_string(&snap_file)
        .ok()
        .and_then(|t| serde_yaml::from_str(&t).ok())
        .unwrap_or_default();
    let mut written = Map::new();
    let mut tests = Vec::new();
    for t in &spec.tests {
        let start = Instant::now();
        let (failures, steps) = run_test(
            &loaded,
            t,
            snapshots.get(&t.name).filter(|_| !update),
            judge,
        );
        written.insert(t.name.clone(), Value::Array(steps));
        tests.push(TestResult {
            name: t.name.clone(),
            failures,
            seconds: start.elapsed().as_secs_f64(),
        });
    }
    if update {
        let doc = format!(
            "# What each step of {} gave, written by `ruleop test --update`: review it and\n# commit it; `ruleop test` then compares every step with it.\n{}",
            file.file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("the tests"),
            serde_yaml::to_string(&Value::Object(written)).unwrap_or_default()
        );
        if let Err(e) = std::fs::write(&snap_file, doc) {
            return failed(format!("{}: {e}", snap_file.display()));
        }
    }
    FileResult {
        file: file.to_path_buf(),
        tests,
        error: None,
    }
}

/// Runs one test: its failures by step, and what each step gave.
fn run_test(
    loaded: &[Arc<CompiledRule>],
    t: &Test,
    snapshot: Option<&Value>,
    judge: Option<&dyn Judge>,
) -> (Vec<StepFailures>, Vec<Value>) {
    let mut cr = with_identity(t.resource.clone());
    let rule = match rule_for(loaded, t.rule.as_deref(), &cr) {
        Ok(r) => r,
        Err(e) => return (vec![(0, "the rule".into(), vec![failure(e)])], Vec::new()),
    };
    // The defaults of the rule's `schema`, as the API server applies them.
    if let Some(schema) = rules::crd::schema_of(rule, &[]) {
        rules::crd::apply_defaults(&mut cr, schema);
    }
    let mut live: Vec<Value> = t.observed.clone();
    let mut last: Option<Outcome> = None;
    let mut failures = Vec::new();
    let mut steps = Vec::new();
    for (i, step) in t.steps.iter().enumerate() {
        let name = step
            .name
            .clone()
            .unwrap_or_else(|| format!("step {}", i + 1));
        let mut step_failures = Vec::new();
        if let Err(e) = change(&mut cr, &mut live, step, last.as_ref()) {
            step_failures.push(failure(e));
        }
        let out = simulate(rule, &cr, &live);
        step_failures.extend(expect::check(&step.expect, &out));
        if let (Some(judge), Ok(plan)) = (judge, &out.plan) {
            step_failures.extend(judge.refusals(rule, &plan.children).into_iter().map(|m| {
                Failure {
                    message: m,
                    diff: None,
                }
            }));
        }
        let got = out.snapshot();
        if let Some(want) = snapshot.and_then(|s| s.get(i))
            && want.get("gave") != Some(&got)
        {
            step_failures.push(Failure {
                message: "what the step gave differs from its snapshot (run `ruleop test --update` and review the change)".into(),
                diff: Some(expect::diff(want.get("gave").unwrap_or(&Value::Null), &got)),
            });
        }
        steps.push(json!({"step": name, "gave": got}));
        if !step_failures.is_empty() {
            failures.push((i + 1, name, step_failures));
        }
        last = Some(out);
    }
    (failures, steps)
}

fn failure(message: String) -> Failure {
    Failure {
        message,
        diff: None,
    }
}

/// The resource with the namespace `default` and a uid when it has none (children carry
/// an owner reference to it).
fn with_identity(mut cr: Value) -> Value {
    if cr["metadata"]["namespace"].is_null() {
        cr["metadata"]["namespace"] = json!("default");
    }
    if cr["metadata"]["uid"].is_null() {
        cr["metadata"]["uid"] = json!("00000000-0000-0000-0000-000000000001");
    }
    if cr["metadata"]["generation"].is_null() {
        cr["metadata"]["generation"] = json!(1);
    }
    cr
}

/// What a step changes: the resource, then the objects in the cluster.
fn change(
    cr: &mut Value,
    live: &mut Vec<Value>,
    step: &Step,
    last: Option<&Outcome>,
) -> Result<(), String> {
    if let Some(patch) = &step.resource {
        json_patch::merge(cr, patch);
        let g = cr["metadata"]["generation"].as_i64().unwrap_or(1);
        cr["metadata"]["generation"] = json!(g + 1);
    }
    if step.apply_children {
        let Some(Ok(plan)) = last.map(|o| &o.plan) else {
            return Err("`applyChildren`: the step before rendered no children".into());
        };
        for c in &plan.children {
            // As server-side apply: the rendered fields over the object there, if any
            // (what others set, its status, a Service's cluster IP, stays).
            let mut o = c.object.clone();
            let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
            o["metadata"]["uid"] = json!(format!("uid-{}-{name}", c.kind.to_lowercase()));
            if let Some(there) = live.iter().find(|x| same(x, &o)) {
                let mut merged = there.clone();
                json_patch::merge(&mut merged, &o);
                o = merged;
            } else {
                o["metadata"]["generation"] = json!(1);
            }
            put(live, o);
        }
    }
    for o in &step.apply {
        put(live, o.clone());
    }
    for p in &step.patch {
        let object = p.object();
        let Some(o) = live.iter_mut().find(|o| object.is(o)) else {
            return Err(format!("`patch`: no {} {} in the cluster", p.kind, p.name));
        };
        json_patch::merge(o, &p.merge);
    }
    for d in &step.delete {
        let before = live.len();
        live.retain(|o| !d.is(o));
        if live.len() == before {
            return Err(format!("`delete`: no {} {} in the cluster", d.kind, d.name));
        }
    }
    Ok(())
}

/// Whether two objects are one: the same apiVersion, kind and name.
fn same(x: &Value, o: &Value) -> bool {
    x["apiVersion"] == o["apiVersion"]
        && x["kind"] == o["kind"]
        && x["metadata"]["name"] == o["metadata"]["name"]
}

/// Adds `o` to the cluster, replacing the object of the same apiVersion, kind and name.
fn put(live: &mut Vec<Value>, o: Value) {
    match live.iter_mut().find(|x| same(x, &o)) {
        Some(x) => *x = o,
        None => live.push(o),
    }
}
