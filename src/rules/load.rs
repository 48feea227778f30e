//! Reads rules files (a file, or every `*.yaml`/`*.yml` in a directory, as a mounted
//! ConfigMap lays them out) and compiles each rule in them. A file yields the rules that
//! compiled and the errors of those that did not, so one bad rule never hides the others.

use super::compile::{CompiledRule, compile};
use super::error::{LoadError, Location};
use super::lines::{LineIndex, index_documents};
use super::spec::RuleSpec;
use serde::Deserialize;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The largest rules file accepted.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;

/// What one rules file gave.
#[derive(Debug, Default)]
pub struct FileLoad {
    pub path: PathBuf,
    pub rules: Vec<Arc<CompiledRule>>,
    pub errors: Vec<LoadError>,
}

/// Lists the rules files under `paths`: files as given, directories' `*.yaml`/`*.yml`
/// (recursively, skipping hidden entries such as a ConfigMap's `..data`, and folders
/// named `tests`), sorted.
pub fn collect_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, LoadError> {
    let mut out = Vec::new();
    collect(paths, &mut out, &mut Vec::new())?;
    Ok(out)
}

/// The files of a folder passed over as Kubernetes objects, not rules (samples, CRDs,
/// manifests: every document has a top-level `apiVersion` and `kind`, none a Rule).
pub fn manifests_skipped(paths: &[PathBuf]) -> Vec<PathBuf> {
    let mut skipped = Vec::new();
    let _ = collect(paths, &mut Vec::new(), &mut skipped);
    skipped
}

fn collect(
    paths: &[PathBuf],
    out: &mut Vec<PathBuf>,
    skipped: &mut Vec<PathBuf>,
) -> Result<(), LoadError> {
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|source| LoadError::Read {
            path: p.clone(),
            source,
        })?;
        if meta.is_dir() {
            let before = out.len();
            walk(p, out, skipped)?;
            if out.len() == before {
                return Err(LoadError::NoFiles { path: p.clone() });
            }
        } else {
            out.push(p.clone());
        }
    }
    Ok(())
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>, skipped: &mut Vec<PathBuf>) -> Result<(), LoadError> {
    let read = |e| LoadError::Read {
        path: dir.to_path_buf(),
        source: e,
    };
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(read)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            !p.file_name()
                .and_then(|n| n.to_str())
                .is_none_or(|n| n.starts_with('.'))
        })
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            // A `tests` folder holds the rules' tests, their snapshots and fixtures.
            if p.file_name().is_some_and(|n| n == "tests") {
                continue;
            }
            walk(&p, out, skipped)?;
        } else if p
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| e == "yaml" || e == "yml")
            && !is_test_or_snapshot(&p)
        {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            if is_manifest(&text) {
                skipped.push(p);
            } else {
                out.push(p);
            }
        }
    }
    Ok(())
}

/// Whether a file's every document is a Kubernetes object other than a Rule (a top-level
/// `apiVersion:` and `kind:`, which no rules document has): a sample resource or a manifest
/// beside the rules, not rules. (A file of Rule objects, as `ruleop rule` prints, is read
/// by the commands that take them.)
pub fn is_manifest(text: &str) -> bool {
    let mut docs = 0;
    let mut doc = (false, false, false);
    let mut end = |(api, kind, rule): (bool, bool, bool), empty: bool| {
        if empty {
            return true;
        }
        docs += 1;
        api && kind && !rule
    };
    let mut all = true;
    let mut empty = true;
    for line in text.lines() {
        if line.trim_end() == "---" {
            all &= end(doc, empty);
            (doc, empty) = ((false, false, false), true);
            continue;
        }
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        empty = false;
        if let Some(v) = line.strip_prefix("apiVersion:") {
            doc.0 = !v.trim().is_empty();
        } else if let Some(v) = line.strip_prefix("kind:") {
            doc.1 = true;
            doc.2 |= v.trim().trim_matches(['"', '\'']) == "Rule";
        }
    }
    all &= end(doc, empty);
    all && docs > 0
}

/// Whether a file in a rules folder is a test of the rules (`*_test.yaml`) or a test's
/// snapshot (`*.snap.yaml`), not rules (see `ruleop test`).
pub fn is_test_or_snapshot(p: &Path) -> bool {
    p.file_name().and_then(|n| n.to_str()).is_some_and(|n| {
        n.ends_with("_test.yaml")
            || n.ends_with("_test.yml")
            || n.ends_with(".snap.yaml")
            || n.ends_with(".snap.yml")
    })
}

/// Reads and compiles one file.
pub fn load_file(path: &Path) -> FileLoad {
    let mut load = FileLoad {
        path: path.to_path_buf(),
        ..Default::default()
    };
    let text = match read_bounded(path) {
        Ok(t) => t,
        Err(e) => {
            load.errors.push(e);
            return load;
        }
    };
    let (rules, errors) = load_str(&text, path);
    load.rules = rules;
    load.errors = errors;
    load
}

fn read_bounded(path: &Path) -> Result<String, LoadError> {
    let read = |source| LoadError::Read {
        path: path.to_path_buf(),
        source,
    };
    let size = std::fs::metadata(path).map_err(read)?.len();
    if size > MAX_FILE_BYTES {
        return Err(LoadError::TooLarge {
            path: path.to_path_buf(),
            size,
            limit: MAX_FILE_BYTES,
        });
    }
    std::fs::read_to_string(path).map_err(read)
}

/// The most documents read from one rules file.
pub const MAX_DOCUMENTS: usize = 10_000;

/// The deepest nesting a rules document may have. (The YAML parser behind serde takes
/// time quadratic in the depth, so deeper documents are refused before it sees them.)
pub const MAX_NESTING: usize = 100;

/// Compiles every rule of a YAML stream; `path` names it in errors.
pub fn load_str(text: &str, path: &Path) -> (Vec<Arc<CompiledRule>>, Vec<LoadError>) {
    let mut rules = Vec::new();
    let mut errors = Vec::new();
    let indexed = index_documents(text);
    let deep = indexed
        .docs
        .iter()
        .find(|d| d.max_depth > MAX_NESTING)
        .map(|d| (d.deepest_line, d.rule_name()));
    let deep = deep.or(indexed
        .too_deep
        .map(|l| (l, indexed.docs.last().and_then(|d| d.rule_name()))));
    if let Some((line, rule)) = deep {
        errors.push(LoadError::Syntax {
            path: path.to_path_buf(),
            line,
            column: 1,
            rule: rule.map(str::to_string),
            child: None,
            message: format!("nested more than {MAX_NESTING} levels deep (recursion limit)"),
        });
        return (rules, errors);
    }
    let indexes = indexed.docs;
    for (i, doc) in serde_yaml::Deserializer::from_str(text)
        .enumerate()
        .take(MAX_DOCUMENTS)
    {
        let fallback = LineIndex::default();
        let lines = indexes.get(i).unwrap_or(&fallback);
        // serde_yaml 0.9 can panic on malformed streams ("unexpected end of mapping",
        // found by fuzzing): contain it as an error on this file, never a crash.
        let parsed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Option::<RuleSpec>::deserialize(doc)
        }));
        let Ok(parsed) = parsed else {
            errors.push(LoadError::Syntax {
                path: path.to_path_buf(),
                line: lines.start,
                column: 1,
                rule: lines.rule_name().map(str::to_string),
                child: None,
                message: "the YAML parser gave up on this document (malformed YAML)".into(),
            });
            break;
        };
        match parsed {
            Ok(None) => {}
            Ok(Some(spec)) => match compile(&spec, path, lines) {
                Ok(rule) => rules.push(Arc::new(rule)),
                Err(mut e) => errors.append(&mut e),
            },
            Err(e) => {
                let (line, column) = e
                    .location()
                    .map(|l| (l.line(), l.column()))
                    .unwrap_or((lines.start, 1));
                let message = e.to_string();
                // After some malformed input the document iterator repeats its last error
                // forever (found by fuzzing): one report is enough.
                if errors
                    .iter()
                    .any(|x| matches!(x, LoadError::Syntax { message: m, .. } if *m == message))
                {
                    break;
                }
                let child = message
                    .split(':')
                    .next()
                    .and_then(|p| lines.child_id(p))
                    .map(str::to_string);
                // `name: {{ name }}` unquoted is a YAML map, not a template: say so.
                let unquoted = text
                    .lines()
                    .nth(line.saturating_sub(1))
                    .is_some_and(|l| l.contains("{{") && !l.contains("\"{{") && !l.contains("'{{"));
                let message = if unquoted && message.contains("invalid type: map") {
                    format!("{message} (an unquoted `{{{{ ... }}}}` is a YAML map, not a template)")
                } else {
                    message
                };
                errors.push(LoadError::Syntax {
                    path: path.to_path_buf(),
                    line,
                    column,
                    rule: lines.rule_name().map(str::to_string),
                    child,
                    message,
                });
                // serde_yaml's document iterator is not safe to continue after an
                // error (it repeats it, or panics on the next document: both found by
                // fuzzing). The rest of this file keeps its last good rules.
                break;
            }
        }
    }
    (rules, errors)
}

/// Loads every rules file under `paths`: all rules that compiled, and all errors (including
/// duplicate rule names across files; the first definition wins).
pub fn load_paths(paths: &[PathBuf]) -> (Vec<Arc<CompiledRule>>, Vec<LoadError>) {
    let files = match collect_files(paths) {
        Ok(f) => f,
        Err(e) => return (Vec::new(), vec![e]),
    };
    let mut rules = Vec::new();
    let mut errors = Vec::new();
    for f in files {
        let mut load = load_file(&f);
        rules.append(&mut load.rules);
        errors.append(&mut load.errors);
    }
    let (rules, mut dups) = dedupe(rules);
    errors.append(&mut dups);
    (rules, errors)
}

/// Keeps the first rule of each name, and the first rule of each kind (by every name the
/// kind goes by: [`super::claims`]); later ones become errors.
pub fn dedupe(rules: Vec<Arc<CompiledRule>>) -> (Vec<Arc<CompiledRule>>, Vec<LoadError>) {
    use super::claims::{Claim, claims, describe, shared};
    let mut names: HashMap<String, Location> = HashMap::new();
    let mut served: Vec<(Vec<Claim>, Arc<CompiledRule>)> = Vec::new();
    let mut kept = Vec::new();
    let mut errors = Vec::new();
    for r in rules {
        let mine = claims(&r);
        if let Some(first) = names.get(&r.name) {
            errors.push(LoadError::Duplicate {
                rule: r.name.clone(),
                first: first.clone(),
                second: r.at.clone(),
            });
        } else if let Some((on, other)) = served
            .iter()
            .find_map(|(theirs, o)| shared(&mine, theirs).map(|c| (c, o)))
        {
            errors.push(LoadError::SameWatch(Box::new(super::error::SameWatch {
                serving: false,
                rule: r.name.clone(),
                other: other.name.clone(),
                watch: describe(&r, Some(on)),
                first: other.at.clone(),
                second: r.at.clone(),
            })));
        } else {
            names.insert(r.name.clone(), r.at.clone());
            served.push((mine, r.clone()));
            kept.push(r);
        }
    }
    (kept, errors)
}

#[cfg(test)]
mod hostile_tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn quickly<T>(what: &str, f: impl FnOnce() -> T) -> T {
        let start = Instant::now();
        let out = f();
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{what} took {:?}",
            start.elapsed()
        );
        out
    }

    #[test]
    fn an_alias_bomb_is_refused_quickly() {
        let mut text = String::from(
            "name: bomb\nwatch: {group: x.io, version: v1, resource: xs}\ndefaults:\n  a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n",
        );
        for i in 1..12 {
            let refs = (0..10)
                .map(|_| format!("*a{}", i - 1))
                .collect::<Vec<_>>()
                .join(", ");
            text.push_str(&format!("  a{i}: &a{i} [{refs}]\n"));
        }
        let (rules, errors) = quickly("alias bomb", || load_str(&text, Path::new("bomb.yaml")));
        assert!(rules.is_empty());
        assert!(
            errors[0].to_string().contains("repetition limit"),
            "{}",
            errors[0]
        );
    }

    #[test]
    fn deep_nesting_is_refused_without_exhausting_the_stack() {
        for depth in [150, 100_000] {
            nested(depth);
        }
    }

    fn nested(depth: usize) {
        let text = format!(
            "name: deep\nwatch: {{group: x.io, version: v1, resource: xs}}\ndefaults: {{x: {}{}}}\n",
            "[".repeat(depth),
            "]".repeat(depth)
        );
        let (rules, errors) = quickly("deep nesting", || load_str(&text, Path::new("deep.yaml")));
        assert!(rules.is_empty());
        assert!(
            errors[0].to_string().contains("recursion limit"),
            "{}",
            errors[0]
        );
    }

    #[test]
    fn a_file_over_the_size_limit_is_refused_before_it_is_parsed() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("huge.yaml");
        std::fs::write(&f, "# padding\n".repeat(200_000)).unwrap();
        let load = quickly("huge file", || load_file(&f));
        assert!(
            matches!(load.errors[0], LoadError::TooLarge { .. }),
            "{}",
            load.errors[0]
        );
        assert!(
            load.errors[0]
                .to_string()
                .contains("split it into several files")
        );
    }
}

#[cfg(test)]
mod fuzz_regressions {
    use super::*;

    /// cargo-fuzz found an input after which serde_yaml's document iterator yields the
    /// same error endlessly; loading it must end, with that error reported once.
    /// cargo-fuzz found an input on which serde_yaml panics; loading reports an error.
    #[test]
    fn a_parser_panic_becomes_an_error_on_the_file() {
        let input = include_bytes!("../../fuzz/regressions/parser-panic.yaml");
        let (_, errors) = load_str(&String::from_utf8_lossy(input), Path::new("fuzz.yaml"));
        assert!(!errors.is_empty());
    }

    #[test]
    fn a_repeating_parse_error_is_reported_once_and_loading_ends() {
        let input = include_bytes!("../../fuzz/regressions/repeating-error.yaml");
        let text = String::from_utf8_lossy(input);
        let (_, errors) = load_str(&text, Path::new("fuzz.yaml"));
        assert!(!errors.is_empty());
        assert!(errors.len() < 10, "{} errors", errors.len());
    }
}

/// The record of which kind a rule serves ([`super::claims`]), on rules as loaded.
#[cfg(test)]
mod claims_tests {
    use super::super::claims::*;
    use super::super::compile::CompiledRule;

    fn rule(text: &str) -> std::sync::Arc<CompiledRule> {
        let (mut rules, errors) = super::load_str(text, std::path::Path::new("test.yaml"));
        assert!(errors.is_empty(), "{errors:?}");
        rules.remove(0)
    }

    const SCHEMA: &str = "schema:\n  kind: WebSite\n  spec:\n    image: string\n";

    fn with_watch(name: &str, resource: &str, schema: bool) -> std::sync::Arc<CompiledRule> {
        let text = format!(
            "name: {name}\nwatch: {{group: sre.example.com, version: v1, resource: {resource}}}\n{}",
            if schema { SCHEMA } else { "" }
        );
        rule(&text)
    }

    #[test]
    fn two_rules_naming_one_kind_by_its_resource_or_its_kind_are_one_group() {
        let website = with_watch("website", "websites", true);
        let tenant = with_watch("zzz", "zzsites", true);
        let other = with_watch("other", "others", false);
        let again = with_watch("again", "websites", false);
        let on = shared(&claims(&tenant), &claims(&website)).cloned();
        assert_eq!(
            on,
            Some(Claim::Kind {
                group: "sre.example.com".into(),
                kind: "website".into()
            })
        );
        assert!(describe(&tenant, on.as_ref()).contains("the kind website of sre.example.com"));
        let groups = groups(&[website.clone(), other.clone(), tenant, again]);
        let names: Vec<Vec<&str>> = groups
            .iter()
            .map(|g| g.iter().map(|r| r.name.as_str()).collect())
            .collect();
        assert_eq!(names, vec![vec!["website", "zzz", "again"], vec!["other"]]);
        assert!(shared(&claims(&other), &claims(&website)).is_none());
    }

    #[test]
    fn check_refuses_a_second_rule_naming_a_kind_by_another_resource() {
        let (kept, errors) = super::dedupe(vec![
            with_watch("website", "websites", true),
            with_watch("zzz", "zzsites", true),
        ]);
        assert_eq!(kept.len(), 1);
        let m = errors[0].to_string();
        assert!(
            m.contains("rule `zzz` watches sre.example.com/v1 zzsites (the kind website of sre.example.com), which rule `website`"),
            "{m}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_passes_over_samples_and_manifests_but_not_rules_or_rule_objects() {
        let dir = tempfile::tempdir().unwrap();
        let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text).unwrap();
        write(
            "site.yaml",
            "name: site\nwatch: {group: a.dev, version: v1, resource: sites}\n",
        );
        write(
            "sample.yaml",
            "# a sample\napiVersion: a.dev/v1\nkind: Site\nmetadata: {name: x}\n---\n---\napiVersion: v1\nkind: ConfigMap\n",
        );
        write(
            "rules-as-objects.yaml",
            "apiVersion: ruleop.dev/v1alpha1\nkind: Rule\nmetadata: {name: site}\n",
        );
        // One document a rule: the file is rules (and its other document an error).
        write(
            "mixed.yaml",
            "apiVersion: v1\nkind: ConfigMap\n---\nname: other\n",
        );
        let files = collect_files(&[dir.path().to_path_buf()]).unwrap();
        let names: Vec<_> = files
            .iter()
            .map(|f| f.file_name().unwrap().to_str().unwrap())
            .collect();
        assert_eq!(names, ["mixed.yaml", "rules-as-objects.yaml", "site.yaml"]);
        let skipped = manifests_skipped(&[dir.path().to_path_buf()]);
        assert_eq!(skipped, [dir.path().join("sample.yaml")]);
        // Named by itself, a file is read whatever it holds.
        let one = collect_files(&[dir.path().join("sample.yaml")]).unwrap();
        assert_eq!(one.len(), 1);
        assert!(!is_manifest(""));
        assert!(!is_manifest("# only a comment\n"));
    }
}
