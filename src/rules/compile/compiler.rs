//! The compiler's state while one rule compiles (every template and expression added to one
//! environment, every problem collected with its line), and the names templates see.

use super::super::error::{LoadError, Location, RuleProblem};
use super::super::lines::LineIndex;
use super::super::program::{ExprRef, TextRef};
use std::path::Path;
use std::sync::Arc;

/// Variables templates see (see docs/reference/rules.md, "Templates").
pub const TEMPLATE_VARIABLES: &[&str] = &[
    "name",
    "namespace",
    "metadata",
    "spec",
    "labels",
    "selectorLabels",
    "rule",
    "existing",
];
/// What a child's template, `when` and `forEach` see besides: the other children, as
/// rendered and as they are in the cluster.
pub const CHILD_VARIABLES: &[&str] = &["rendered", "observed"];
/// Variables status expressions see in addition.
pub const STATUS_VARIABLES: &[&str] = &["children", "status", "self"];
/// What a child's `readyWhen` sees besides the template variables: the live child.
pub const READY_VARIABLES: &[&str] = &["child"];
/// The names of an existing object's expressions see the template variables only.
pub(super) const NO_EXTRA: &[&str] = &[];
/// The variable of an item's position in a repetition.
pub const INDEX_VARIABLE: &str = "index";
/// Globals minijinja itself provides.
pub(super) const GLOBALS: &[&str] = &[
    "range",
    "dict",
    "debug",
    "namespace",
    "loop",
    "self",
    "true",
    "false",
    "none",
];

/// A text template as compiled: its reference, its child, its source, and the variables
/// it sees besides the template ones.
pub(super) type TextUse = (TextRef, Option<String>, Arc<str>, Vec<String>);

/// Collects problems while compiling one rule.
pub(super) struct Compiler<'a> {
    pub(super) file: &'a Path,
    pub(super) lines: &'a LineIndex,
    pub(super) rule: String,
    pub(super) errors: Vec<LoadError>,
    pub(super) env: minijinja::Environment<'static>,
    pub(super) exprs: Vec<Arc<str>>,
    pub(super) expr_at: Vec<(Arc<str>, Option<String>)>,
    pub(super) texts: usize,
    /// Each expression, its child, and the variables it sees besides the template ones.
    pub(super) expr_refs: Vec<(ExprRef, Option<String>, Vec<String>)>,
    /// Each text template, its child, its source, and the variables it sees besides.
    pub(super) text_refs: Vec<TextUse>,
    /// Variables every expression compiled now sees besides: the child's (`rendered`,
    /// `observed`) and those of the repetitions it is inside.
    pub(super) scope_vars: Vec<String>,
}

impl Compiler<'_> {
    pub(super) fn at(&self, path: &str) -> Location {
        Location {
            file: self.file.to_path_buf(),
            line: self.lines.line(path),
        }
    }

    pub(super) fn error(
        &mut self,
        path: &str,
        child: Option<&str>,
        problem: impl Into<String>,
        fix: impl Into<String>,
    ) {
        self.errors.push(LoadError::Rule(Box::new(RuleProblem {
            at: self.at(path),
            rule: self.rule.clone(),
            child: child.map(str::to_string),
            problem: problem.into(),
            fix: fix.into(),
        })));
    }

    pub(super) fn expr(
        &mut self,
        path: &str,
        child: Option<&str>,
        source: &str,
        extra: &[&str],
    ) -> ExprRef {
        let r = ExprRef {
            index: self.exprs.len(),
            at: path.into(),
            line: self.lines.line(path),
            source: source.into(),
        };
        self.exprs.push(source.into());
        self.expr_at.push((path.into(), child.map(str::to_string)));
        let mut vars: Vec<String> = extra.iter().map(|v| v.to_string()).collect();
        vars.extend(self.scope_vars.iter().cloned());
        self.expr_refs
            .push((r.clone(), child.map(str::to_string), vars));
        r
    }

    pub(super) fn text(
        &mut self,
        path: &str,
        child: Option<&str>,
        source: &str,
    ) -> Option<TextRef> {
        let name: Arc<str> = format!("t{}", self.texts).into();
        self.texts += 1;
        match self
            .env
            .add_template_owned(name.to_string(), source.to_string())
        {
            Ok(()) => {
                let r = TextRef {
                    name,
                    at: path.into(),
                    line: self.lines.line(path),
                };
                self.text_refs.push((
                    r.clone(),
                    child.map(str::to_string),
                    source.into(),
                    self.scope_vars.clone(),
                ));
                Some(r)
            }
            Err(e) => {
                self.error(
                    path,
                    child,
                    format!("template error in {source:?}: {}", jinja_reason(&e)),
                    "fix the template syntax ({{ expr }}, {% if %}...{% endif %})",
                );
                None
            }
        }
    }
}

/// How a string scalar of a template is treated.
pub(super) enum Scalar<'a> {
    Literal,
    /// A lone `{{ expr }}`; the expression text.
    Expr(&'a str),
    Text,
}

pub(super) fn classify(s: &str) -> Scalar<'_> {
    let has_syntax =
        |t: &str| t.contains("{{") || t.contains("}}") || t.contains("{%") || t.contains("{#");
    let t = s.trim();
    if let Some(inner) = t.strip_prefix("{{").and_then(|r| r.strip_suffix("}}")) {
        let inner = inner.trim_start_matches('-').trim_end_matches('-');
        // Parsed, not scanned: `{{ {'x': {'y': 1}} }}` and `{{ "}}" }}` are one
        // expression; `{{ a }}-{{ b }}` is not (its inside is no expression).
        if !has_syntax(inner) || is_one_expression(inner) {
            return Scalar::Expr(inner.trim());
        }
    }
    if has_syntax(s) {
        Scalar::Text
    } else {
        Scalar::Literal
    }
}

/// Whether `inner` parses as a single expression.
pub(super) fn is_one_expression(inner: &str) -> bool {
    thread_local! {
        static PARSER: minijinja::Environment<'static> = minijinja::Environment::new();
    }
    PARSER.with(|env| env.compile_expression(inner).is_ok())
}

/// The first line of a minijinja error, without its debug dump.
pub fn jinja_reason(e: &minijinja::Error) -> String {
    let mut s = e.kind().to_string();
    if let Some(d) = e.detail() {
        s.push_str(": ");
        s.push_str(d);
    }
    s
}

pub(super) fn is_label_value(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

pub(super) fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
