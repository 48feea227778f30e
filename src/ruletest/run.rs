//! Running test files: each test's resource through its steps, what each step gave
//! checked against what it expected (and against its snapshot, when one is kept), or,
//! with `--update`, written as the new snapshot.

use super::cluster::Cluster;
use super::expect::{self, Failure};
use super::simulate::{Outcome, rule_for, simulate};
use super::spec::{Test, TestFile};
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
pub fn rules_of(file: &Path, spec: &TestFile) -> Vec<PathBuf> {
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
    let mut names = std::collections::BTreeSet::new();
    if let Some(t) = spec.tests.iter().find(|t| !names.insert(t.name.as_str())) {
        return failed(format!(
            "{}: two tests are named {:?}: give each test its own name (snapshots and reports go by it)",
            file.display(),
            t.name
        ));
    }
    let snap_file = snapshot_path(file);
    let snapshots: Option<Map<String, Value>> = match std::fs::read_to_string(&snap_file) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return failed(format!("{}: {e}", snap_file.display())),
        Ok(t) => match serde_yaml::from_str(&t) {
            Ok(m) => Some(m),
            Err(e) => {
                return failed(format!(
                    "{}: {e} (`ruleop test --update` writes it again)",
                    snap_file.display()
                ));
            }
        },
    };
    let no_steps = Value::Array(Vec::new());
    let mut written = Map::new();
    let mut tests = Vec::new();
    for t in &spec.tests {
        let start = Instant::now();
        let (failures, steps) = run_test(
            &loaded,
            t,
            snapshots
                .as_ref()
                .filter(|_| !update)
                .map(|m| m.get(&t.name).unwrap_or(&no_steps)),
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
    let setup = |e: String| (vec![(0, "the test".into(), vec![failure(e)])], Vec::new());
    let mut cluster = match Cluster::new(&t.resource, &t.observed) {
        Ok(c) => c,
        Err(e) => return setup(e),
    };
    let rule = match rule_for(loaded, t.rule.as_deref(), &cluster.resource) {
        Ok(r) => r,
        Err(e) => return setup(e),
    };
    let mut last: Option<Outcome> = None;
    let mut seen = std::collections::HashMap::new();
    let mut failures = Vec::new();
    let mut steps = Vec::new();
    for (i, step) in t.steps.iter().enumerate() {
        let name = step
            .name
            .clone()
            .unwrap_or_else(|| format!("step {}", i + 1));
        let mut step_failures = Vec::new();
        let last_plan = last.as_ref().and_then(|o| o.plan.as_ref().ok());
        let kept = cluster.resource.clone();
        if let Err(e) = cluster.change(step, last_plan) {
            step_failures.push(failure(e));
        }
        // The defaults of the rule's `schema`, as the API server applies them on every
        // write; then the resource as the API server would check it.
        let mut cr = cluster.resource.clone();
        let written = super::versions::written_in(rule, &cr)
            .unwrap_or(&rule.watch.version)
            .to_string();
        let schema = match written == rule.watch.version {
            true => rules::crd::schema_of(rule, &[]),
            false => super::versions::schema_of(rule, &written),
        };
        if let Some(schema) = schema {
            rules::crd::apply_defaults(&mut cr, schema);
            let problems = resource_problems(&cr, schema);
            match &step.expect.refused {
                None => step_failures.extend(problems.into_iter().map(failure)),
                Some(want) => {
                    step_failures.extend(refusal(want, &problems));
                    // Refused, the API server keeps what it had (taken, the change stays).
                    if !problems.is_empty() {
                        cluster.resource = kept;
                        cr = cluster.resource.clone();
                        rules::crd::apply_defaults(&mut cr, schema);
                    }
                }
            }
        } else if step.expect.refused.is_some() {
            step_failures.push(failure(
                "`refused`: the rule has no `schema`, so nothing is refused (a kind's schema is what the API server checks a resource against)".into(),
            ));
        }
        // Written in another version: converted to the watched one, as the API server
        // would through ruleop's webhook (then its defaults apply); each version's round
        // trip loses nothing.
        if written != rule.watch.version {
            match super::versions::to_watched(rule, &cr) {
                Ok(watched) => cr = watched,
                Err(e) => step_failures.push(failure(e)),
            }
            if let Some(schema) = rules::crd::schema_of(rule, &[]) {
                rules::crd::apply_defaults(&mut cr, schema);
            }
        }
        step_failures.extend(
            super::versions::round_trips(rule, &cr)
                .into_iter()
                .map(failure),
        );
        let out = simulate(rule, &cr, &cluster.live);
        step_failures.extend(expect::check(
            &step.expect,
            &out,
            &cluster.live,
            last.as_ref(),
        ));
        if let Ok(plan) = &out.plan {
            step_failures.extend(
                children_problems(rule, &plan.children)
                    .into_iter()
                    .map(failure),
            );
        }
        if let (Some(judge), Ok(plan)) = (judge, &out.plan) {
            step_failures.extend(
                judge
                    .refusals(rule, &plan.children)
                    .into_iter()
                    .map(failure),
            );
        }
        let got = out.snapshot();
        step_failures.extend(against_snapshot(snapshot, i, &got));
        steps.push(json!({"step": name, "gave": got}));
        let step_failures = fold(step_failures, &mut seen, i + 1);
        if !step_failures.is_empty() {
            failures.push((i + 1, name, step_failures));
        }
        last = Some(out);
    }
    (failures, steps)
}

/// A failure already reported in an earlier step of the test (the same message and diff:
/// one root cause, such as an undefined variable, fails every step) is said again in one
/// line.
fn fold(
    step_failures: Vec<Failure>,
    seen: &mut std::collections::HashMap<(String, Option<String>), usize>,
    step: usize,
) -> Vec<Failure> {
    step_failures
        .into_iter()
        .map(|f| match seen.get(&(f.message.clone(), f.diff.clone())) {
            Some(first) => {
                let head = f.message.lines().next().unwrap_or_default();
                let mut cut: String = head.chars().take(80).collect();
                if cut.len() < head.len() || f.message.contains('\n') {
                    cut.push_str("...");
                }
                failure(format!("as in step {first}: {cut}"))
            }
            None => {
                seen.insert((f.message.clone(), f.diff.clone()), step);
                f
            }
        })
        .collect()
}

/// `refused`: the resource's problems must hold one with `want` in it.
fn refusal(want: &str, problems: &[String]) -> Option<Failure> {
    if problems.is_empty() {
        return Some(failure(format!(
            "the resource was expected to be refused{}, and its kind's schema takes it",
            if want.is_empty() {
                String::new()
            } else {
                format!(" with {want:?}")
            }
        )));
    }
    (!problems.iter().any(|p| p.contains(want))).then(|| {
        failure(format!(
            "the resource is refused, but not with {want:?}: {}",
            problems.join("; ")
        ))
    })
}

/// One thing the API server would refuse of a rendered child: the field (empty for the
/// object), why, the fix, and which check found it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildProblem {
    pub check: ChildCheck,
    pub field: String,
    pub problem: String,
    pub fix: String,
}

/// Which check found a [`ChildProblem`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChildCheck {
    /// Its kind's OpenAPI schema (a built-in kind's, or a CRD's given with `--crd`).
    Schema,
    /// The API server's own checks of built-in kinds beyond their schemas.
    Server,
    /// A CRD's CEL rules, where they can be evaluated offline.
    Cel,
}

/// Everything the API server would refuse of one rendered child, checked as it checks:
/// a CRD's defaults filled in first, then the kind's schema, its own checks of built-in
/// kinds, and a CRD's CEL rules. `ruleop test` and `render --strict` both ask this.
pub fn child_problems(c: &crate::render::Rendered) -> Vec<ChildProblem> {
    let from_crd = crate::schema::typed::from_crds(&c.api_version, &c.kind);
    let schema = crate::schema::typed::builtin(&c.api_version, &c.kind).or(from_crd.as_ref());
    let mut object = c.object.clone();
    if let Some(s) = &from_crd {
        rules::crd::apply_defaults(&mut object, s);
    }
    let typed = schema
        .map(|s| crate::schema::typed::check_object(&object, s))
        .unwrap_or_default()
        .into_iter()
        .map(|f| ChildProblem {
            check: ChildCheck::Schema,
            field: f.field,
            problem: f.problem,
            fix: f.fix,
        });
    let server = crate::schema::server::refusals(&c.object)
        .into_iter()
        .map(|r| ChildProblem {
            check: ChildCheck::Server,
            field: r.field,
            problem: r.problem,
            fix: "the API server refuses this even though the kind's schema allows it".into(),
        });
    let cel = from_crd
        .as_ref()
        .map(|s| crate::schema::cel::validate(s, &object, "").violations)
        .unwrap_or_default()
        .into_iter()
        .map(|v| ChildProblem {
            check: ChildCheck::Cel,
            field: v.path,
            problem: format!("{} (rule: {})", v.message, v.rule),
            fix: "make the object meet its kind's validation".into(),
        });
    typed.chain(server).chain(cel).collect()
}

/// Where the field `field` of the rendered child `c` is written in its rule's file: the
/// line of the field in the child's template (or of the nearest field above it).
pub fn template_line(
    rule: &CompiledRule,
    c: &crate::render::Rendered,
    field: &str,
) -> Option<(PathBuf, usize)> {
    let (i, t) = rule
        .children
        .iter()
        .enumerate()
        .find(|(_, t)| t.id == c.id)?;
    let path = crate::apply::dryrun::template_path(
        &format!("children[{i}].template"),
        &field.replace('"', ""),
    );
    let line = rules::lines::line_in_file(&t.at.file, t.at.line, &path);
    Some((t.at.file.clone(), line))
}

/// What the API server would refuse of the rendered children ([`child_problems`]), each
/// naming the child's template at the line of the field.
pub fn children_problems(rule: &CompiledRule, children: &[crate::render::Rendered]) -> Vec<String> {
    let mut out = Vec::new();
    for c in children {
        for p in child_problems(c) {
            let at = template_line(rule, c, &p.field)
                .map(|(file, line)| format!(", made by the template at {}:{line}", file.display()))
                .unwrap_or_default();
            let field = if p.field.is_empty() {
                "object"
            } else {
                &p.field
            };
            let problem = match p.check {
                ChildCheck::Schema => format!("{} (fix: {})", p.problem, p.fix),
                ChildCheck::Server | ChildCheck::Cel => p.problem,
            };
            out.push(format!(
                "child `{}` ({} {}{at}): the API server would refuse it: {field}: {problem}",
                c.instance(),
                c.kind,
                c.name
            ));
        }
    }
    out
}

/// What the API server would refuse of the resource: its kind's schema (types, enums,
/// bounds) and CEL validations.
fn resource_problems(cr: &Value, schema: &Value) -> Vec<String> {
    let typed = crate::schema::typed::check_object(cr, schema)
        .into_iter()
        .map(|f| format!("the resource: {}: {}", f.field, f.problem));
    let cel = crate::schema::cel::validate(schema, cr, "")
        .violations
        .into_iter()
        .map(|v| format!("the resource: {}: {} (rule: {})", v.path, v.message, v.rule));
    typed.chain(cel).collect()
}

/// The step against the snapshot kept of it, when the file has one: a step the snapshot
/// lacks is a failure too (the test grew since `--update`).
fn against_snapshot(snapshot: Option<&Value>, i: usize, got: &Value) -> Option<Failure> {
    let snapshot = snapshot?;
    let Some(want) = snapshot.get(i) else {
        return Some(failure(format!(
            "the snapshot has no step {} of this test (run `ruleop test --update` and review it)",
            i + 1
        )));
    };
    (want.get("gave") != Some(got)).then(|| Failure {
        message: "what the step gave differs from its snapshot (run `ruleop test --update` and review the change)".into(),
        diff: Some(expect::diff(want.get("gave").unwrap_or(&Value::Null), got)),
    })
}

fn failure(message: String) -> Failure {
    Failure {
        message,
        diff: None,
    }
}
