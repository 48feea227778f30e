//! What the commands read: rules files (their errors printed), CRDs, objects, and the
//! rule a custom resource belongs to.

use crate::rules::{self, CompiledRule, LoadError};
use anyhow::{Context, anyhow, bail};
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

/// Every rule of `paths`, or None (with the errors printed) if any has an error.
pub(super) fn load_all_or_report(paths: &[PathBuf]) -> Option<Vec<Arc<CompiledRule>>> {
    let (loaded, errors) = load_rules_or_objects(paths);
    print_errors(&errors);
    errors.is_empty().then_some(loaded)
}

pub(super) fn print_errors(errors: &[LoadError]) {
    for e in errors {
        eprintln!("error: {e}");
    }
}

/// A Rule's problem at the line of the path it names in the file.
fn object_problem(
    f: &std::path::Path,
    index: &rules::lines::LineIndex,
    name: &str,
    p: &rules::object::ObjectProblem,
) -> LoadError {
    let (problem, fix) = p
        .message
        .split_once("\n  fix: ")
        .unwrap_or((&p.message, ""));
    // (Its message names the rule already: once is enough.)
    let problem = match problem.strip_prefix(&format!("rule `{name}`")) {
        Some(rest) => rest.split_once(": ").map_or(rest, |(_, r)| r),
        None => problem,
    };
    let fix = match fix {
        "" => "fix the Rule's spec (`ruleop check` on its rules file says the same)",
        f => f,
    };
    LoadError::Rule(Box::new(rules::error::RuleProblem {
        at: rules::Location {
            file: f.to_path_buf(),
            line: index.line(&p.path),
        },
        rule: name.to_string(),
        child: None,
        problem: format!("{}: {problem}", p.path),
        fix: fix.to_string(),
    }))
}

/// The Rule objects of a file (`kind: Rule` of ruleop's group), each with the lines of its
/// document; `None` when it has none (a rules file).
fn rule_objects(f: &std::path::Path) -> Option<Vec<(Value, rules::lines::LineIndex)>> {
    let text = std::fs::read_to_string(f).ok()?;
    let index = rules::lines::index_documents(&text).docs;
    let docs = serde_yaml::Deserializer::from_str(&text)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap_or(Value::Null));
    let objects: Vec<(Value, rules::lines::LineIndex)> = docs
        .zip(index)
        .filter(|(o, _)| {
            o["kind"] == rules::object::KIND
                && o["apiVersion"]
                    .as_str()
                    .is_some_and(|a| a.starts_with(rules::object::GROUP))
        })
        .collect();
    (!objects.is_empty()).then_some(objects)
}

/// The rules of `paths`: rules files, or files of Rule objects (`kind: Rule`, as
/// `ruleop rule` prints them), each Rule's problems named by its path in it.
pub(super) fn load_rules_or_objects(paths: &[PathBuf]) -> (Vec<Arc<CompiledRule>>, Vec<LoadError>) {
    let files = match rules::load::collect_files(paths) {
        Ok(f) => f,
        Err(e) => return (Vec::new(), vec![e]),
    };
    let (mut rules_files, mut loaded, mut errors) = (Vec::new(), Vec::new(), Vec::new());
    for f in files {
        let Some(objects) = rule_objects(&f) else {
            rules_files.push(f);
            continue;
        };
        for (o, index) in &objects {
            let load = rules::object::load_object(o);
            loaded.extend(load.rule);
            errors.extend(
                load.problems
                    .iter()
                    .map(|p| object_problem(&f, index, &load.name, p)),
            );
        }
    }
    if !rules_files.is_empty() {
        let (more, errs) = rules::load_paths(&rules_files);
        loaded.extend(more);
        errors.extend(errs);
    }
    (loaded, errors)
}

/// Reads CRDs from files and directories (every `*.yaml`/`*.yml` in them).
pub(super) fn read_crds(paths: &[PathBuf]) -> anyhow::Result<Vec<Value>> {
    let mut out = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut files: Vec<PathBuf> = std::fs::read_dir(p)
                .with_context(|| format!("reading {}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|x| x == "yaml" || x == "yml"))
                .collect();
            files.sort();
            for f in files {
                out.extend(read_objects(&f)?);
            }
        } else {
            out.extend(read_objects(p)?);
        }
    }
    Ok(out)
}

/// Reads a YAML stream of objects.
/// Puts a resource that names no namespace in `namespace`, as `kubectl apply -n` does.
pub(super) fn in_namespace(cr: &mut Value, namespace: &str) {
    if cr["metadata"].is_object() && cr["metadata"]["namespace"].as_str().is_none() {
        cr["metadata"]["namespace"] = Value::from(namespace);
    }
}

pub(super) fn read_objects(path: &PathBuf) -> anyhow::Result<Vec<Value>> {
    use serde::Deserialize;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(&text) {
        // serde_yaml 0.9 can panic on malformed streams: an error, not a crash.
        let v = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Option::<Value>::deserialize(doc)
        }))
        .map_err(|_| anyhow!("{}: malformed YAML", path.display()))?
        .with_context(|| format!("parsing {}", path.display()))?;
        match v {
            Some(Value::Object(mut m)) if m.get("kind").and_then(Value::as_str) == Some("List") => {
                if let Some(Value::Array(items)) = m.remove("items") {
                    out.extend(items);
                }
            }
            Some(v @ Value::Object(_)) => out.push(v),
            Some(_) => bail!("{}: a document is not an object", path.display()),
            None => {}
        }
    }
    Ok(out)
}

/// The rule for `cr`: the one named, the only one, or the one whose group/version match
/// and whose resource is the kind's plural.
pub(super) fn pick_rule<'a>(
    loaded: &'a [Arc<CompiledRule>],
    name: Option<&str>,
    cr: &Value,
) -> anyhow::Result<&'a CompiledRule> {
    crate::ruletest::simulate::rule_for(loaded, name, cr)
        .map_err(|e| anyhow!(e.replace("`rule`", "--rule")))
}
