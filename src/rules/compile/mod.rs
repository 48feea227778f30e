//! Turns a [`RuleSpec`] into a [`CompiledRule`]: every template, expression and JSONPath
//! compiled once, every reference checked, every problem reported with its line.
//! Pure: no cluster is needed, so `ruleop check` runs anywhere.

use super::error::{LoadError, Location, RuleProblem};
use super::helpers;
use super::lines::LineIndex;
use super::program::{self, ExprRef, Program, TextRef};
use super::spec::{RuleSpec, WatchSpec};
mod child;
mod fields;
mod link;
mod model;

pub use model::*;

use child::{check_same_names, compile_child, compile_existing, repetition};
use fields::compile_fields;
use link::link;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::sync::Arc;

/// Variables templates see (see README, "Template context").
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
const NO_EXTRA: &[&str] = &[];
/// The variable of an item's position in a repetition.
pub const INDEX_VARIABLE: &str = "index";
/// Globals minijinja itself provides.
const GLOBALS: &[&str] = &[
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
type TextUse = (TextRef, Option<String>, Arc<str>, Vec<String>);

/// Collects problems while compiling one rule.
struct Compiler<'a> {
    file: &'a Path,
    lines: &'a LineIndex,
    rule: String,
    errors: Vec<LoadError>,
    env: minijinja::Environment<'static>,
    exprs: Vec<Arc<str>>,
    expr_at: Vec<(Arc<str>, Option<String>)>,
    texts: usize,
    /// Each expression, its child, and the variables it sees besides the template ones.
    expr_refs: Vec<(ExprRef, Option<String>, Vec<String>)>,
    /// Each text template, its child, its source, and the variables it sees besides.
    text_refs: Vec<TextUse>,
    /// Variables every expression compiled now sees besides: the child's (`rendered`,
    /// `observed`) and those of the repetitions it is inside.
    scope_vars: Vec<String>,
}

impl Compiler<'_> {
    fn at(&self, path: &str) -> Location {
        Location {
            file: self.file.to_path_buf(),
            line: self.lines.line(path),
        }
    }

    fn error(
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

    fn expr(&mut self, path: &str, child: Option<&str>, source: &str, extra: &[&str]) -> ExprRef {
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

    fn text(&mut self, path: &str, child: Option<&str>, source: &str) -> Option<TextRef> {
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

    /// Compiles a template node: each string scalar on its own.
    fn node(&mut self, v: &Value, path: &str, child: &str) -> Node {
        match v {
            Value::String(s) => match classify(s) {
                Scalar::Literal => Node::Literal(v.clone()),
                Scalar::Expr(e) => Node::Expr(self.expr(path, Some(child), e, NO_EXTRA)),
                Scalar::Text => match self.text(path, Some(child), s) {
                    Some(t) => Node::Text(t),
                    None => Node::Literal(Value::Null),
                },
            },
            Value::Object(m) => Node::Map(
                m.iter()
                    .map(|(k, v)| {
                        let p = if path.is_empty() {
                            k.clone()
                        } else {
                            format!("{path}.{k}")
                        };
                        let key = match classify(k) {
                            Scalar::Literal => Key::Literal(k.clone()),
                            _ => match self.text(&p, Some(child), k) {
                                Some(t) => Key::Text(t),
                                None => Key::Literal(k.clone()),
                            },
                        };
                        (key, self.node(v, &p, child))
                    })
                    .collect(),
            ),
            Value::Array(a) => Node::Seq(
                a.iter()
                    .enumerate()
                    .map(|(i, v)| {
                        let p = format!("{path}[{i}]");
                        match repetition(v) {
                            Some(rep) => self.each(rep, &p, child),
                            None => self.node(v, &p, child),
                        }
                    })
                    .collect(),
            ),
            other => Node::Literal(other.clone()),
        }
    }
}

/// How a string scalar of a template is treated.
enum Scalar<'a> {
    Literal,
    /// A lone `{{ expr }}`; the expression text.
    Expr(&'a str),
    Text,
}

fn classify(s: &str) -> Scalar<'_> {
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
fn is_one_expression(inner: &str) -> bool {
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

/// Levenshtein distance, for "did you mean" hints.
pub(crate) fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

fn is_label_value(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Compiles one rule. `lines` is the line index of the document it came from.
pub fn compile(
    spec: &RuleSpec,
    file: &Path,
    lines: &LineIndex,
) -> Result<CompiledRule, Vec<LoadError>> {
    let mut c = Compiler {
        file,
        lines,
        rule: spec.name.clone(),
        errors: Vec::new(),
        env: program::environment(),
        exprs: Vec::new(),
        expr_at: Vec::new(),
        texts: 0,
        expr_refs: Vec::new(),
        text_refs: Vec::new(),
        scope_vars: Vec::new(),
    };
    if !is_label_value(&spec.name) {
        c.error(
            "name",
            None,
            format!("rule name {:?} is not a valid label value", spec.name),
            "use lowercase letters, digits and '-', at most 63 characters",
        );
    }
    check_watch(&mut c, &spec.watch);
    let (crd, defaults) = kind_schema(&mut c, spec);

    let mut children = Vec::new();
    for (i, ch) in spec.children.iter().enumerate() {
        if let Some(child) = compile_child(&mut c, i, ch) {
            children.push(child);
        }
    }
    check_same_names(&mut c, spec);
    child::check_types(&mut c, spec, crd.as_ref());
    let existing = compile_existing(&mut c, spec);
    let ids: Vec<&str> = spec.children.iter().map(|c| c.id.as_str()).collect();
    let fields = compile_fields(&mut c, spec, &ids);
    let ready = spec
        .status
        .ready
        .as_deref()
        .map(|r| c.expr("status.ready", None, r, STATUS_VARIABLES));

    let env = std::mem::replace(&mut c.env, program::environment());
    let program = match Program::new(env, &c.exprs) {
        Ok(p) => Some(p),
        Err((i, e)) => {
            let (path, child) = c.expr_at[i].clone();
            let src = c.exprs[i].clone();
            c.error(
                &path,
                child.as_deref(),
                format!("expression error in {src:?}: {}", jinja_reason(&e)),
                "fix the expression syntax (minijinja, like Jinja2)",
            );
            None
        }
    };
    let mut graph = (Vec::new(), Vec::new());
    if let Some(p) = &program {
        check_variables(&mut c, p);
        if children.len() == spec.children.len() {
            graph = link(&mut c, spec, p, &mut children, &existing);
        }
    }
    check_filters_and_tests(&mut c);
    match program {
        Some(program) if c.errors.is_empty() => Ok(CompiledRule {
            status_reads: fields
                .iter()
                .filter_map(|f| match &f.source {
                    FieldSource::Value(e) => Some(e),
                    FieldSource::Path { .. } => None,
                })
                .chain(ready.iter())
                .flat_map(|e| program.expression_variables(e))
                .collect(),
            name: spec.name.clone(),
            at: c.at(""),
            watch: spec.watch.clone(),
            defaults,
            children,
            fields,
            ready,
            program,
            fingerprint: fingerprint(spec),
            existing,
            order: graph.0,
            deps: graph.1,
            deletion: spec.deletion,
            crd,
        }),
        _ => Err(c.errors),
    }
}

/// The CRD made from the rule's `schema`, and the rule's defaults: the schema's when it
/// has one (then `defaults:` is refused: one place), else `defaults:`.
fn kind_schema(c: &mut Compiler<'_>, spec: &RuleSpec) -> (Option<Value>, Map<String, Value>) {
    let Some(s) = &spec.schema else {
        return (None, spec.defaults.clone());
    };
    if !spec.defaults.is_empty() {
        c.error(
            "defaults",
            None,
            "the rule has both `schema` and `defaults`",
            "give each default in the schema (`replicas: integer | default=2`) and remove `defaults:`",
        );
    }
    match super::schema::crd(spec, s) {
        Ok(crd) => {
            let defaults = super::schema::defaults(
                &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"],
            );
            (Some(crd), defaults)
        }
        Err(problems) => {
            for p in problems {
                c.error(&p.path, None, p.problem, p.fix);
            }
            (None, Map::new())
        }
    }
}

fn fingerprint(spec: &RuleSpec) -> String {
    let bytes = serde_json::to_vec(spec).unwrap_or_default();
    let digest = Sha256::digest(bytes);
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

fn check_watch(c: &mut Compiler<'_>, w: &WatchSpec) {
    if w.version.is_empty() {
        c.error(
            "watch.version",
            None,
            "watch.version is empty",
            "set the API version of the watched kind, e.g. v1",
        );
    }
    if w.resource.is_empty() || w.resource.bytes().any(|b| b.is_ascii_uppercase()) {
        c.error(
            "watch.resource",
            None,
            format!("watch.resource {:?} is not a resource name", w.resource),
            "use the lowercase plural, e.g. websites (as in `kubectl api-resources`)",
        );
    }
}

/// Refuses variables no context provides: a typo (`spce.port`) fails at load, not at 3 a.m.
fn check_variables(c: &mut Compiler<'_>, p: &Program) {
    let mut problems = Vec::new();
    let reads = c
        .expr_refs
        .iter()
        .map(|(r, child, extra)| (r.at.clone(), child, extra, p.expression_variables(r)))
        .chain(
            c.text_refs
                .iter()
                .map(|(r, child, _, extra)| (r.at.clone(), child, extra, p.template_variables(r))),
        );
    for (at, child, extra, vars) in reads {
        for v in vars {
            let known = TEMPLATE_VARIABLES.contains(&v.as_str())
                || GLOBALS.contains(&v.as_str())
                || extra.contains(&v);
            if !known {
                problems.push((at.clone(), child.clone(), v, extra.clone()));
            }
        }
    }
    for (at, child, v, extra) in problems {
        let mut vars: Vec<&str> = TEMPLATE_VARIABLES.to_vec();
        vars.extend(extra.iter().map(String::as_str));
        let fix = if v == "children" && extra.iter().any(|e| e == "rendered") {
            "a template reads another child as `rendered.<id>` (the object as rendered) or `observed.<id>` (as it is in the cluster)".to_string()
        } else {
            match vars.iter().find(|k| edit_distance(k, &v) <= 2) {
                Some(k) => format!("did you mean `{k}`?"),
                None => format!("use one of: {}", vars.join(", ")),
            }
        };
        c.error(
            &at,
            child.as_deref(),
            format!("unknown variable `{v}`"),
            fix,
        );
    }
}

/// Every filter and test a template or expression names must exist: minijinja looks them
/// up only when it runs them, so `| upperr` would pass here and fail a render.
fn check_filters_and_tests(c: &mut Compiler<'_>) {
    let env = program::environment();
    let mut uses: Vec<(Arc<str>, Option<String>, String)> = c
        .expr_refs
        .iter()
        .map(|(r, child, _)| (r.at.clone(), child.clone(), r.source.to_string()))
        .collect();
    uses.extend(
        c.text_refs
            .iter()
            .map(|(r, child, src, _)| (r.at.clone(), child.clone(), helpers::template_code(src))),
    );
    let mut problems = Vec::new();
    for (at, child, code) in uses {
        let (filters, tests) = helpers::names_used(&code);
        let unknown = filters
            .into_iter()
            .map(|f| (f, false))
            .chain(tests.into_iter().map(|t| (t, true)))
            .filter(|(name, test)| !helpers::known(&env, name, *test));
        for (name, test) in unknown {
            problems.push((at.clone(), child.clone(), name, test));
        }
    }
    for (at, child, name, test) in problems {
        let what = if test { "test" } else { "filter" };
        let fix = match helpers::closest(&name, test) {
            Some(k) => format!("did you mean `{k}`?"),
            None => format!("see the {what}s in the README's template reference"),
        };
        c.error(
            &at,
            child.as_deref(),
            format!("unknown {what} `{name}`"),
            fix,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lone_expression_keeps_its_type_and_mixed_text_is_a_template() {
        assert!(matches!(
            classify("{{ spec.replicas }}"),
            Scalar::Expr("spec.replicas")
        ));
        assert!(matches!(
            classify("  {{- spec.replicas -}} "),
            Scalar::Expr("spec.replicas")
        ));
        assert!(matches!(classify("{{ name }}-web"), Scalar::Text));
        assert!(matches!(classify("{{ a }}{{ b }}"), Scalar::Text));
        assert!(matches!(classify("nginx"), Scalar::Literal));
        assert!(matches!(classify("{% if x %}y{% endif %}"), Scalar::Text));
        assert!(matches!(classify("{{ a }}-{{ b }}"), Scalar::Text));
    }

    #[test]
    fn an_expression_with_braces_inside_is_still_one_expression() {
        // Parsed, not scanned for `}}`: these were rendered as text before.
        assert!(matches!(
            classify("{{ {'x': {'y': 1}} }}"),
            Scalar::Expr("{'x': {'y': 1}}")
        ));
        assert!(matches!(classify("{{ \"}}\" }}"), Scalar::Expr("\"}}\"")));
        assert!(matches!(
            classify("{{ {'a': {'b': 1}} if spec.x else none }}"),
            Scalar::Expr(_)
        ));
    }

    #[test]
    fn label_values_and_identifiers_are_checked() {
        assert!(is_label_value("website"));
        assert!(!is_label_value("WebSite"));
        assert!(!is_label_value("-a"));
        assert!(is_identifier("readyReplicas"));
        assert!(!is_identifier("ready-replicas"));
    }
}
