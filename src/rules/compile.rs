//! Turns a [`RuleSpec`] into a [`CompiledRule`]: every template, expression and JSONPath
//! compiled once, every reference checked, every problem reported with its line.
//! Pure: no cluster is needed, so `ruleop check` runs anywhere.

use super::error::{LoadError, Location, RuleProblem};
use super::helpers;
use super::lines::LineIndex;
use super::program::{self, ExprRef, Program, TextRef};
use super::spec::{FieldType, RuleSpec, WatchSpec};
use jsonpath_rust::parser::model::JpQuery;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::sync::Arc;

/// A rule ready to run: what `render` and `status` evaluate for every custom resource.
#[derive(Debug)]
pub struct CompiledRule {
    pub name: String,
    pub at: Location,
    pub watch: WatchSpec,
    pub defaults: Map<String, Value>,
    pub children: Vec<CompiledChild>,
    pub fields: Vec<CompiledField>,
    pub ready: Option<ExprRef>,
    pub program: Program,
    /// The variables the status expressions read (`children` and `self` are made into
    /// template values only when some expression reads them).
    pub status_reads: std::collections::BTreeSet<String>,
    /// Changes whenever anything in the rule changes; tells edited rules on reload.
    pub fingerprint: String,
}

/// One child template.
#[derive(Debug)]
pub struct CompiledChild {
    pub id: String,
    pub api_version: String,
    pub kind: String,
    pub when: Option<ExprRef>,
    pub template: Node,
    /// Which existing objects of its name the child may take over.
    pub adopt: super::spec::AdoptPolicy,
    /// When the live child is ready (it sees `child`); None: its kind's built-in readiness.
    pub ready_when: Option<ExprRef>,
    pub at: Location,
}

impl CompiledChild {
    /// The API group of the child's kind (empty for the core group).
    pub fn group(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map(|(g, _)| g)
            .unwrap_or("")
    }
    pub fn version(&self) -> &str {
        self.api_version
            .rsplit_once('/')
            .map(|(_, v)| v)
            .unwrap_or(&self.api_version)
    }
}

/// A node of a structured template. Only string scalars are templated, each on its own,
/// so nothing a custom resource holds can change the shape of a child.
#[derive(Debug)]
pub enum Node {
    /// A value written as is.
    Literal(Value),
    /// A lone `{{ expr }}`: the expression's value, with its own type.
    Expr(ExprRef),
    /// Text with templates in it: always a string.
    Text(TextRef),
    Map(Vec<(Key, Node)>),
    Seq(Vec<Node>),
}

/// A mapping key: literal or templated text.
#[derive(Debug)]
pub enum Key {
    Literal(String),
    Text(TextRef),
}

/// One status field.
#[derive(Debug)]
pub struct CompiledField {
    pub name: String,
    pub source: FieldSource,
    pub ty: FieldType,
    pub default: Option<Value>,
    pub export: bool,
    pub at: Location,
}

/// Where a status field's value comes from.
#[derive(Debug)]
pub enum FieldSource {
    /// A JSONPath over the custom resource itself (`from: self`) or a child.
    Path {
        from: Source,
        query: Box<JpQuery>,
        text: String,
    },
    /// An expression.
    Value(ExprRef),
}

/// The object a JSONPath reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Parent,
    /// Index into [`CompiledRule::children`].
    Child(usize),
}

/// Variables templates see (see README, "Template context").
pub const TEMPLATE_VARIABLES: &[&str] = &[
    "name",
    "namespace",
    "metadata",
    "spec",
    "labels",
    "selectorLabels",
    "rule",
];
/// Variables status expressions see in addition.
pub const STATUS_VARIABLES: &[&str] = &["children", "status", "self"];
/// What a child's `readyWhen` sees besides the template variables: the live child.
pub const READY_VARIABLES: &[&str] = &["child"];
/// Templates and `when` see the template variables only.
const NO_EXTRA: &[&str] = &[];
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

/// Built-in kinds that are cluster-scoped, by (group, kind): refused as children at load.
/// Kinds from CRDs are checked against discovery when the rule starts.
const CLUSTER_SCOPED: &[(&str, &str)] = &[
    ("", "Namespace"),
    ("", "Node"),
    ("", "PersistentVolume"),
    ("", "ComponentStatus"),
    ("rbac.authorization.k8s.io", "ClusterRole"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"),
    ("apiextensions.k8s.io", "CustomResourceDefinition"),
    ("apiregistration.k8s.io", "APIService"),
    ("storage.k8s.io", "StorageClass"),
    ("storage.k8s.io", "CSIDriver"),
    ("storage.k8s.io", "CSINode"),
    ("storage.k8s.io", "VolumeAttachment"),
    ("scheduling.k8s.io", "PriorityClass"),
    ("node.k8s.io", "RuntimeClass"),
    ("networking.k8s.io", "IngressClass"),
    ("certificates.k8s.io", "CertificateSigningRequest"),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
    ),
    ("admissionregistration.k8s.io", "ValidatingAdmissionPolicy"),
    (
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
    ),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema"),
    ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"),
];

/// Namespaced kinds of built-in API versions, to catch a misspelled kind without a
/// cluster. Kinds of other API versions (CRDs) are checked by discovery when the rule runs.
const BUILTIN_KINDS: &[(&str, &[&str])] = &[
    (
        "v1",
        &[
            "ConfigMap",
            "Secret",
            "Service",
            "ServiceAccount",
            "Pod",
            "PersistentVolumeClaim",
            "Endpoints",
            "LimitRange",
            "ResourceQuota",
            "Event",
            "ReplicationController",
            "PodTemplate",
            "Namespace",
            "Node",
            "PersistentVolume",
        ],
    ),
    (
        "apps/v1",
        &[
            "Deployment",
            "StatefulSet",
            "DaemonSet",
            "ReplicaSet",
            "ControllerRevision",
        ],
    ),
    ("batch/v1", &["Job", "CronJob"]),
    (
        "networking.k8s.io/v1",
        &["Ingress", "NetworkPolicy", "IngressClass"],
    ),
    ("policy/v1", &["PodDisruptionBudget"]),
    ("autoscaling/v1", &["HorizontalPodAutoscaler"]),
    ("autoscaling/v2", &["HorizontalPodAutoscaler"]),
    (
        "rbac.authorization.k8s.io/v1",
        &["Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding"],
    ),
    ("coordination.k8s.io/v1", &["Lease"]),
    ("discovery.k8s.io/v1", &["EndpointSlice"]),
    ("events.k8s.io/v1", &["Event"]),
    (
        "storage.k8s.io/v1",
        &[
            "StorageClass",
            "CSIDriver",
            "CSINode",
            "VolumeAttachment",
            "CSIStorageCapacity",
        ],
    ),
];

/// For a built-in API version, whether `kind` exists in it; `Err` carries the kinds it has.
pub fn check_builtin_kind(api_version: &str, kind: &str) -> Result<(), &'static [&'static str]> {
    match BUILTIN_KINDS.iter().find(|(av, _)| *av == api_version) {
        Some((_, kinds)) if !kinds.contains(&kind) => Err(kinds),
        _ => Ok(()),
    }
}

/// Whether a built-in kind is known to be cluster-scoped.
pub fn known_cluster_scoped(group: &str, kind: &str) -> bool {
    CLUSTER_SCOPED
        .iter()
        .any(|(g, k)| *g == group && *k == kind)
}

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
    /// (reference, child id, extra variables allowed) for the unknown-variable check.
    /// Each expression, its child, and the variables it sees besides the template ones.
    expr_refs: Vec<(ExprRef, Option<String>, &'static [&'static str])>,
    /// Each text template, its child, and its source.
    text_refs: Vec<(TextRef, Option<String>, Arc<str>)>,
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

    fn expr(
        &mut self,
        path: &str,
        child: Option<&str>,
        source: &str,
        extra: &'static [&'static str],
    ) -> ExprRef {
        let r = ExprRef {
            index: self.exprs.len(),
            at: path.into(),
            line: self.lines.line(path),
            source: source.into(),
        };
        self.exprs.push(source.into());
        self.expr_at.push((path.into(), child.map(str::to_string)));
        self.expr_refs
            .push((r.clone(), child.map(str::to_string), extra));
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
                self.text_refs
                    .push((r.clone(), child.map(str::to_string), source.into()));
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
                    .map(|(i, v)| self.node(v, &format!("{path}[{i}]"), child))
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

    let mut children = Vec::new();
    for (i, ch) in spec.children.iter().enumerate() {
        if let Some(child) = compile_child(&mut c, i, ch) {
            children.push(child);
        }
    }
    check_same_names(&mut c, spec);
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
    if let Some(p) = &program {
        check_variables(&mut c, p);
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
            defaults: spec.defaults.clone(),
            children,
            fields,
            ready,
            program,
            fingerprint: fingerprint(spec),
        }),
        _ => Err(c.errors),
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

fn compile_child(
    c: &mut Compiler<'_>,
    i: usize,
    ch: &super::spec::ChildSpec,
) -> Option<CompiledChild> {
    let base = format!("children[{i}]");
    let id = ch.id.as_str();
    if !is_label_value(id) {
        c.error(
            &format!("{base}.id"),
            Some(id),
            format!("child id {id:?} is not a valid label value"),
            "use lowercase letters, digits and '-'",
        );
    }
    let tpath = format!("{base}.template");
    let Some(t) = ch.template.as_object() else {
        c.error(
            &tpath,
            Some(id),
            "template is not a mapping",
            "write the child object as YAML under `template:`",
        );
        return None;
    };
    let literal = |key: &str| {
        t.get(key)
            .and_then(Value::as_str)
            .filter(|s| matches!(classify(s), Scalar::Literal))
    };
    let (Some(api_version), Some(kind)) = (literal("apiVersion"), literal("kind")) else {
        c.error(
            &tpath,
            Some(id),
            "template needs literal `apiVersion` and `kind` (they cannot be templated)",
            "write e.g. `apiVersion: apps/v1` and `kind: Deployment`",
        );
        return None;
    };
    let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("");
    if let Err(kinds) = check_builtin_kind(api_version, kind) {
        let close = kinds
            .iter()
            .find(|k| k.eq_ignore_ascii_case(kind) || edit_distance(k, kind) <= 2);
        let fix = match close {
            Some(k) => format!("did you mean `{k}`?"),
            None => format!("{api_version} has: {}", kinds.join(", ")),
        };
        c.error(
            &format!("{tpath}.kind"),
            Some(id),
            format!("unknown kind {kind:?} in {api_version}"),
            fix,
        );
    } else if known_cluster_scoped(group, kind) {
        c.error(
            &format!("{tpath}.kind"),
            Some(id),
            format!(
                "{kind} is cluster-scoped; children always live in the custom resource's namespace"
            ),
            "use a namespaced kind (e.g. Role instead of ClusterRole)",
        );
    }
    let meta = t.get("metadata").and_then(Value::as_object);
    if meta
        .and_then(|m| m.get("name"))
        .is_none_or(|n| n.as_str().is_none_or(str::is_empty))
    {
        c.error(
            &format!("{tpath}.metadata"),
            Some(id),
            "template has no metadata.name",
            "name the child, e.g. `name: \"{{ name }}-web\"`",
        );
    }
    if let Some(ns) = meta.and_then(|m| m.get("namespace")) {
        let literal_ns = ns
            .as_str()
            .is_none_or(|s| matches!(classify(s), Scalar::Literal));
        if literal_ns {
            c.error(&format!("{tpath}.metadata.namespace"), Some(id), format!("template sets metadata.namespace to {ns}; children always live in the custom resource's namespace"), "remove metadata.namespace (ruleop sets it)");
        }
    }
    let template = c.node(&ch.template, &tpath, id);
    let when = ch
        .when
        .as_deref()
        .map(|w| c.expr(&format!("{base}.when"), Some(id), w, NO_EXTRA));
    let ready_when = ch
        .ready_when
        .as_deref()
        .map(|w| c.expr(&format!("{base}.readyWhen"), Some(id), w, READY_VARIABLES));
    Some(CompiledChild {
        id: id.to_string(),
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        when,
        template,
        adopt: ch.adopt,
        ready_when,
        at: c.at(&base),
    })
}

/// Two children of one kind (group and kind: a version is only a view of the same
/// objects) whose name templates are the same text would render one object twice, each
/// apply undoing the other's. (Names that only happen to render the same for one resource
/// are caught at render time.)
fn check_same_names(c: &mut Compiler<'_>, spec: &RuleSpec) {
    let key = |ch: &super::spec::ChildSpec| {
        let t = &ch.template;
        let group = t
            .get("apiVersion")
            .and_then(Value::as_str)
            .map(|v| v.rsplit_once('/').map(|(g, _)| g).unwrap_or(""))?;
        let kind = t.get("kind").and_then(Value::as_str)?;
        let name = t.pointer("/metadata/name").and_then(Value::as_str)?;
        Some((group.to_string(), kind.to_string(), name.trim().to_string()))
    };
    for (i, later) in spec.children.iter().enumerate() {
        let Some(k) = key(later) else { continue };
        if let Some(first) = spec.children[..i]
            .iter()
            .find(|e| key(e).as_ref() == Some(&k))
        {
            c.error(
                &format!("children[{i}].template.metadata.name"),
                Some(&later.id),
                format!(
                    "children `{}` and `{}` both make {} {:?}: each apply would undo the other's",
                    first.id, later.id, k.1, k.2
                ),
                "give one of them another name (e.g. add a suffix), or merge the two children",
            );
        }
    }
}

fn compile_fields(c: &mut Compiler<'_>, spec: &RuleSpec, ids: &[&str]) -> Vec<CompiledField> {
    let mut seen_ids = std::collections::HashSet::new();
    for (i, id) in ids.iter().enumerate() {
        if !seen_ids.insert(*id) {
            c.error(
                &format!("children[{i}].id"),
                Some(id),
                format!("child id {id:?} is used twice"),
                "give every child of a rule its own id",
            );
        }
    }
    let mut out = Vec::new();
    let mut names = std::collections::HashSet::new();
    for (i, f) in spec.status.fields.iter().enumerate() {
        let base = format!("status.fields[{i}]");
        if !is_identifier(&f.name) {
            c.error(
                &format!("{base}.name"),
                None,
                format!("status field name {:?} is not an identifier", f.name),
                "use letters, digits and '_', starting with a letter",
            );
        }
        if !names.insert(f.name.clone()) {
            c.error(
                &format!("{base}.name"),
                None,
                format!("status field {:?} is defined twice", f.name),
                "give every status field its own name",
            );
        }
        if let Some(d) = &f.default
            && !f.ty.admits(d)
        {
            c.error(
                &format!("{base}.default"),
                None,
                format!("default {d} is not of type {}", f.ty.name()),
                "make the default match the declared type",
            );
        }
        let source = match (&f.from, &f.path, &f.value) {
            (Some(from), Some(path), None) => {
                let from_src = if from == "self" {
                    Some(Source::Parent)
                } else if let Some(ix) = ids.iter().position(|id| id == from) {
                    Some(Source::Child(ix))
                } else {
                    c.error(
                        &format!("{base}.from"),
                        None,
                        format!("`from: {from}` names no child of this rule"),
                        format!("use `self` or one of: {}", ids.join(", ")),
                    );
                    None
                };
                match jsonpath_rust::parser::parse_json_path(path) {
                    Ok(q) => from_src.map(|from| FieldSource::Path {
                        from,
                        query: Box::new(q),
                        text: path.clone(),
                    }),
                    Err(e) => {
                        let reason = e
                            .to_string()
                            .lines()
                            .map(str::trim)
                            .filter(|l| !l.is_empty() && *l != "|")
                            .collect::<Vec<_>>()
                            .join(" ");
                        c.error(&format!("{base}.path"), None, format!("bad JSONPath {path:?}: {reason}"), "write an RFC 9535 JSONPath starting with $, e.g. $.status.readyReplicas");
                        None
                    }
                }
            }
            (None, None, Some(v)) => Some(FieldSource::Value(c.expr(
                &format!("{base}.value"),
                None,
                v,
                STATUS_VARIABLES,
            ))),
            _ => {
                c.error(&base, None, format!("status field {:?} needs either `from` and `path`, or `value`", f.name), "e.g. `from: deployment` + `path: $.status.readyReplicas`, or `value: spec.port`");
                None
            }
        };
        if let Some(source) = source {
            out.push(CompiledField {
                name: f.name.clone(),
                source,
                ty: f.ty,
                default: f.default.clone(),
                export: f.export,
                at: c.at(&base),
            });
        }
    }
    out
}

/// Refuses variables no context provides: a typo (`spce.port`) fails at load, not at 3 a.m.
fn check_variables(c: &mut Compiler<'_>, p: &Program) {
    let known = |v: &str, extra: &[&str]| {
        TEMPLATE_VARIABLES.contains(&v) || GLOBALS.contains(&v) || extra.contains(&v)
    };
    let mut problems = Vec::new();
    for (r, child, extra) in &c.expr_refs {
        for v in p.expression_variables(r) {
            if !known(&v, extra) {
                problems.push((r.at.clone(), child.clone(), v, *extra));
            }
        }
    }
    for (r, child, _) in &c.text_refs {
        for v in p.template_variables(r) {
            if !known(&v, NO_EXTRA) {
                problems.push((r.at.clone(), child.clone(), v, NO_EXTRA));
            }
        }
    }
    for (at, child, v, extra) in problems {
        let mut vars: Vec<&str> = TEMPLATE_VARIABLES.to_vec();
        vars.extend(extra);
        c.error(
            &at,
            child.as_deref(),
            format!("unknown variable `{v}`"),
            match vars.iter().find(|k| edit_distance(k, &v) <= 2) {
                Some(k) => format!("did you mean `{k}`?"),
                None => format!("use one of: {}", vars.join(", ")),
            },
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
            .map(|(r, child, src)| (r.at.clone(), child.clone(), helpers::template_code(src))),
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
