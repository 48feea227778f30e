//! The manual cannot drift from what ruleop takes: every YAML example in README.md and
//! docs/ goes through ruleop (rules through `ruleop check`, test files through `ruleop
//! test`, resources through `ruleop render` with the rules of the project and of their
//! page, a part of a rule completed into a rule and checked, anything else at least parsed),
//! and every relative link names a file that exists, and a heading of it for an anchor.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The keys of a rules document.
const RULE_KEYS: &[&str] = &[
    "name",
    "watch",
    "schema",
    "defaults",
    "children",
    "existing",
    "status",
    "deletion",
    "rollout",
    "pins",
    "revisionHistoryLimit",
    "serviceAccount",
];

fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "md") {
                out.push(p);
            }
        }
    }
    let mut out = vec![Path::new(ROOT).join("README.md")];
    walk(&Path::new(ROOT).join("docs"), &mut out);
    out
}

/// A fenced block: its language, its first line's number, its text (de-indented).
struct Block {
    lang: String,
    line: usize,
    text: String,
}

fn blocks(text: &str) -> Vec<Block> {
    let mut out = Vec::new();
    let mut open: Option<(usize, String, usize, Vec<String>)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match (&mut open, trimmed.strip_prefix("```")) {
            (None, Some(lang)) => open = Some((indent, lang.trim().to_string(), i + 2, vec![])),
            (Some(_), Some(rest)) if rest.trim().is_empty() => {
                let (_, lang, line, lines) = open.take().unwrap();
                out.push(Block {
                    lang,
                    line,
                    text: lines.join("\n") + "\n",
                });
            }
            (Some((indent, _, _, lines)), _) => {
                let cut = line
                    .char_indices()
                    .take_while(|(j, c)| *j < *indent && *c == ' ')
                    .count();
                lines.push(line[cut..].to_string());
            }
            (None, None) => {}
        }
    }
    out
}

/// Headings' anchors as mdBook and GitHub make them.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            c if c.is_whitespace() => Some('-'),
            _ => None,
        })
        .collect()
}

/// The text outside fenced blocks.
fn prose(text: &str) -> Vec<(usize, &str)> {
    let mut fenced = false;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if !fenced {
            out.push((i + 1, line));
        }
    }
    out
}

fn anchors(text: &str) -> Vec<String> {
    prose(text)
        .into_iter()
        .filter_map(|(_, l)| {
            let h = l.trim_start_matches('#');
            (l.starts_with('#') && h.starts_with(' ')).then(|| slug(h))
        })
        .collect()
}

fn ruleop(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ruleop"))
        .args(args)
        .current_dir(ROOT)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap();
    (
        out.status.success(),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[derive(Default, Debug)]
struct Counts {
    rules: usize,
    tests: usize,
    resources: usize,
    fragments: usize,
    parsed: usize,
}

fn documents(text: &str) -> Result<Vec<Value>, String> {
    use serde::Deserialize;
    let mut out = Vec::new();
    for d in serde_yaml::Deserializer::from_str(text) {
        match Option::<Value>::deserialize(d) {
            Ok(Some(v)) => out.push(v),
            Ok(None) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(out)
}

fn is_rule(v: &Value) -> bool {
    v.get("name").is_some() && v.get("watch").is_some()
}

fn is_object(v: &Value) -> bool {
    v.get("apiVersion").is_some() && v.get("kind").is_some()
}

fn rule_part(v: &Value) -> bool {
    v.as_object()
        .is_some_and(|o| !o.is_empty() && o.keys().all(|k| RULE_KEYS.contains(&k.as_str())))
}

/// Checks one YAML block; `rules`: the page's rules files written so far.
fn check_block(
    at: &str,
    b: &Block,
    dir: &Path,
    rules: &mut Vec<PathBuf>,
    counts: &mut Counts,
) -> Result<(), String> {
    let docs = documents(&b.text).map_err(|e| format!("{at}: not YAML: {e}"))?;
    let n = rules.len() + counts.tests + counts.resources + counts.fragments;
    let file = dir.join(format!("block-{n}.yaml"));
    if docs.iter().any(|d| d.get("tests").is_some()) {
        let tests = dir.join("rules/tests");
        std::fs::create_dir_all(&tests).unwrap();
        for r in ["website.yaml", "myapp.yaml"] {
            std::fs::copy(
                Path::new(ROOT).join("rules").join(r),
                dir.join("rules").join(r),
            )
            .unwrap();
        }
        let t = tests.join(format!("block{n}_test.yaml"));
        std::fs::write(&t, &b.text).unwrap();
        counts.tests += 1;
        let (ok, out) = ruleop(&["test", t.to_str().unwrap()]);
        std::fs::remove_file(&t).unwrap();
        return ok.then_some(()).ok_or(format!("{at}: ruleop test:\n{out}"));
    }
    if !docs.is_empty() && docs.iter().all(is_rule) {
        std::fs::write(&file, &b.text).unwrap();
        counts.rules += 1;
        let (ok, out) = ruleop(&["check", "--rules", file.to_str().unwrap()]);
        rules.push(file);
        return ok
            .then_some(())
            .ok_or(format!("{at}: ruleop check:\n{out}"));
    }
    if !docs.is_empty() && docs.iter().all(is_object) {
        let mut args = vec!["render".to_string(), "--rules".into(), "rules/".into()];
        for r in rules.iter() {
            args.extend(["--rules".into(), r.display().to_string()]);
        }
        std::fs::write(&file, &b.text).unwrap();
        args.push(file.display().to_string());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (ok, out) = ruleop(&args);
        // A resource of a kind no rule at hand serves (a CRD, a Rule, a Deployment shown
        // as it is) is only parsed.
        if !ok && out.contains("no rule") {
            counts.parsed += 1;
            return Ok(());
        }
        counts.resources += 1;
        return ok
            .then_some(())
            .ok_or(format!("{at}: ruleop render:\n{out}"));
    }
    // Children given alone: the children of a rule.
    let children = docs.len() == 1
        && docs[0]
            .as_array()
            .is_some_and(|a| !a.is_empty() && a.iter().all(|c| c.get("id").is_some()));
    if docs.len() == 1 && (rule_part(&docs[0]) || children) {
        let mut rule = match children {
            true => serde_json::json!({"children": docs[0]}),
            false => docs[0].clone(),
        };
        let o = rule.as_object_mut().unwrap();
        o.entry("name").or_insert("docs-part".into());
        o.entry("watch").or_insert(serde_json::json!(
            {"group": "docs.example.com", "version": "v1", "resource": "parts"}
        ));
        std::fs::write(&file, serde_yaml::to_string(&rule).unwrap()).unwrap();
        counts.fragments += 1;
        let (ok, out) = ruleop(&["check", "--rules", file.to_str().unwrap()]);
        return ok.then_some(()).ok_or(format!(
            "{at}: a part of a rule, completed, fails ruleop check:\n{out}"
        ));
    }
    counts.parsed += 1;
    Ok(())
}

#[test]
fn every_yaml_example_in_the_manual_is_taken_by_ruleop() {
    let mut counts = Counts::default();
    let mut failures = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let name = page.strip_prefix(ROOT).unwrap().display().to_string();
        let dir = tempfile::tempdir().unwrap();
        let mut rules = Vec::new();
        for b in blocks(&text).iter().filter(|b| b.lang == "yaml") {
            let at = format!("{name}:{}", b.line);
            if let Err(e) = check_block(&at, b, dir.path(), &mut rules, &mut counts) {
                failures.push(e);
            }
        }
    }
    println!("docs: YAML blocks: {counts:?}");
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert!(counts.rules >= 3 && counts.tests >= 1, "{counts:?}");
}

#[test]
fn every_relative_link_in_the_manual_leads_somewhere() {
    let link = regex::Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let mut headings: BTreeMap<PathBuf, Vec<String>> = BTreeMap::new();
    let mut bad = Vec::new();
    let mut count = 0;
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let name = page.strip_prefix(ROOT).unwrap().display().to_string();
        for (line, l) in prose(&text) {
            for m in link.captures_iter(l) {
                let target = &m[1];
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                count += 1;
                let (path, anchor) = target.split_once('#').unwrap_or((target, ""));
                let file = match path {
                    "" => page.clone(),
                    p => page.parent().unwrap().join(p),
                };
                if !file.exists() {
                    bad.push(format!("{name}:{line}: {target}: no such file"));
                    continue;
                }
                let docs = Path::new(ROOT).join("docs").canonicalize().unwrap();
                let inside = |p: &Path| p.canonicalize().unwrap().starts_with(&docs);
                if inside(&page) && !inside(&file) {
                    bad.push(format!(
                        "{name}:{line}: {target}: leaves docs/, so the built site has no such page: name the file as code (`{}`) instead",
                        path.trim_start_matches("../")
                    ));
                    continue;
                }
                if anchor.is_empty() || file.extension().is_none_or(|e| e != "md") {
                    continue;
                }
                let file = file.canonicalize().unwrap();
                let known = headings
                    .entry(file.clone())
                    .or_insert_with(|| anchors(&std::fs::read_to_string(&file).unwrap()));
                if !known.iter().any(|a| a == anchor) {
                    bad.push(format!("{name}:{line}: {target}: no heading #{anchor}"));
                }
            }
        }
    }
    println!("docs: {count} relative links");
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(count > 50, "{count}");
}

#[test]
fn every_page_is_in_the_book_and_the_front_page_is_short() {
    let summary = std::fs::read_to_string(Path::new(ROOT).join("docs/SUMMARY.md")).unwrap();
    for page in pages().iter().skip(1) {
        let rel = page
            .strip_prefix(Path::new(ROOT).join("docs"))
            .unwrap()
            .display()
            .to_string();
        if rel == "SUMMARY.md" {
            continue;
        }
        assert!(
            summary.contains(&format!("]({rel})")),
            "{rel} is not in docs/SUMMARY.md"
        );
    }
    let readme = std::fs::read_to_string(Path::new(ROOT).join("README.md")).unwrap();
    assert!(
        readme.lines().count() < 300,
        "the README is a front page: under 300 lines"
    );
}
