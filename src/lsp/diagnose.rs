//! Diagnostics: what `ruleop check` reports offline (every load and compile error, the
//! duplicate names and kinds, the installation's default policy), each at its line, its
//! range the name or path the message is about, and a "did you mean" fix as an edit.

use super::document::Document;
use crate::rules::policy::{self, Policy};
use crate::rules::{self, LoadError};
use lsp_types::{Diagnostic, DiagnosticSeverity, Position, Range};
use serde_json::json;
use std::path::Path;

/// The diagnostics of the rules file `path` whose text is `doc`'s: of its Rule objects
/// when it holds them (as `ruleop rule` prints them), else of its rules.
pub fn diagnostics(path: &Path, doc: &Document) -> Vec<Diagnostic> {
    if crate::ruletest::run::is_test_file(path) {
        return test_diagnostics(path, doc);
    }
    if doc.parts.iter().any(|p| p.object.is_some()) {
        return doc
            .parts
            .iter()
            .flat_map(|p| object_diagnostics(p, doc))
            .collect();
    }
    let (loaded, mut errors) = rules::load_str(&doc.text, path);
    let (loaded, dups) = rules::load::dedupe(loaded);
    errors.extend(dups);
    for r in &loaded {
        errors.extend(
            policy::problems(r, &Policy::default())
                .into_iter()
                .map(|(_, e)| e),
        );
    }
    errors.iter().map(|e| diagnostic(e, doc)).collect()
}

/// A test file's loading report, as `ruleop test` gives it before it runs a test: its
/// shape (at the line serde names), two tests of one name, and the rules it runs against
/// failing to load (at its `rules:` line, or the first).
fn test_diagnostics(path: &Path, doc: &Document) -> Vec<Diagnostic> {
    let spec: crate::ruletest::spec::TestFile = match serde_yaml::from_str(&doc.text) {
        Ok(s) => s,
        Err(e) => {
            let line = e.location().map_or(1, |l| l.line());
            let fix = "the test format is in docs/testing.md (`ruleop schema --tests` gives its JSON Schema)";
            return vec![located(line, e.to_string(), fix.into(), doc)];
        }
    };
    let mut out = Vec::new();
    let index = doc.parts.first().map(|p| &p.index);
    let line_of = |p: &str| index.map_or(1, |i| i.line(p));
    let mut names = std::collections::BTreeSet::new();
    for (i, t) in spec.tests.iter().enumerate() {
        if !names.insert(t.name.as_str()) {
            let message = format!("two tests are named `{}`", t.name);
            let fix = "give each test its own name (snapshots and reports go by it)";
            out.push(located(
                line_of(&format!("tests[{i}].name")),
                message,
                fix.into(),
                doc,
            ));
        }
    }
    let (_, errors) = rules::load_paths(&crate::ruletest::run::rules_of(path, &spec));
    for e in &errors {
        let message = format!("the rules this file tests do not load: {e}");
        let fix = "fix the rules file (open it: its problems are shown there)";
        out.push(located(line_of("rules"), message, fix.into(), doc));
    }
    out
}

/// A Rule object's problems, each at the line of the path it names.
fn object_diagnostics(part: &super::document::Part, doc: &Document) -> Vec<Diagnostic> {
    let Some(obj) = &part.object else {
        return Vec::new();
    };
    crate::rules::object::load_object(obj)
        .problems
        .iter()
        .map(|p| {
            let (message, fix) = p
                .message
                .split_once("\n  fix: ")
                .unwrap_or((&p.message, ""));
            let line = part.index.line(&p.path);
            located(line, message.to_string(), fix.to_string(), doc)
        })
        .collect()
}

/// What the error says (without the file and line it starts with), and its fix.
fn said(e: &LoadError) -> (usize, String, String) {
    let text = e.to_string();
    let (head, fix) = text.split_once("\n  fix: ").unwrap_or((&text, ""));
    let line = match e {
        LoadError::Syntax { line, .. } => *line,
        LoadError::Rule(p) => p.at.line,
        LoadError::Duplicate { second, .. } => second.line,
        LoadError::SameWatch(w) => w.second.line,
        _ => 1,
    };
    // "file:line[:column]: message" → "message".
    let file = e.file().display().to_string();
    let message = head
        .strip_prefix(&file)
        .and_then(|r| r.strip_prefix(':'))
        .map(|r| {
            r.trim_start_matches(|c: char| c.is_ascii_digit() || c == ':')
                .trim_start()
        })
        .unwrap_or(head);
    (line.max(1), message.to_string(), fix.to_string())
}

/// The `quoted` words of a message.
fn quoted(s: &str) -> impl Iterator<Item = &str> {
    s.split('`').skip(1).step_by(2).filter(|w| !w.is_empty())
}

fn diagnostic(e: &LoadError, doc: &Document) -> Diagnostic {
    let (line, message, fix) = said(e);
    located(line, message, fix, doc)
}

fn located(line: usize, message: String, fix: String, doc: &Document) -> Diagnostic {
    let line = line.max(1);
    let row = (line - 1) as u32;
    let text = doc.line(row);
    // The range: the first quoted word of the message found on the line, else the line.
    let found = quoted(&message).find_map(|w| {
        let at = text.find(w)?;
        Some((w, at))
    });
    let (start, end) = match found {
        Some((w, at)) => (char_col(text, at), char_col(text, at + w.len())),
        None => {
            let lead = text.len() - text.trim_start().len();
            (char_col(text, lead), char_col(text, text.trim_end().len()))
        }
    };
    let replace = found.and_then(|(w, _)| fixed(w, &fix));
    Diagnostic {
        range: Range::new(Position::new(row, start), Position::new(row, end)),
        severity: Some(DiagnosticSeverity::ERROR),
        source: Some("ruleop".into()),
        message: if fix.is_empty() {
            message
        } else {
            format!("{message}\nfix: {fix}")
        },
        data: replace.map(|r| json!({"replace": r})),
        ..Default::default()
    }
}

/// The character column of byte `at` of `line`.
fn char_col(line: &str, at: usize) -> u32 {
    line[..at.min(line.len())].chars().count() as u32
}

/// The word `wrong` corrected by a fix of the form "did you mean `right`?": the whole
/// word when `right` is a path, else its last segment.
fn fixed(wrong: &str, fix: &str) -> Option<String> {
    let right = fix.split("did you mean `").nth(1)?.split('`').next()?;
    if right.contains('.') || !wrong.contains('.') {
        return Some(right.to_string());
    }
    let (head, _) = wrong.rsplit_once('.')?;
    Some(format!("{head}.{right}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_did_you_mean_is_an_edit_of_the_word_it_is_about() {
        assert_eq!(
            fixed("$.status.readyReplica", "did you mean `readyReplicas`?").as_deref(),
            Some("$.status.readyReplicas")
        );
        assert_eq!(
            fixed(
                "status.readyReplica",
                "did you mean `status.readyReplicas`?"
            )
            .as_deref(),
            Some("status.readyReplicas")
        );
        assert_eq!(fixed("x", "remove it"), None);
    }
}
