//! Turns a [`RuleSpec`] into a [`CompiledRule`]: every template, expression and JSONPath
//! compiled once, every reference checked, every problem reported with its line.
//! Pure: no cluster is needed, so `ruleop check` runs anywhere.
//!
//! Owns: the compiler's state and the names templates see ([`compiler`]), templates node
//! by node ([`template`]), each child and existing object ([`child`]), the links between
//! them ([`link`]), the status fields ([`fields`]), the paths read inside children and
//! existing objects checked against their kinds ([`refs`]) and the compiled rule ([`model`]).

use super::error::LoadError;
use super::helpers;
use super::lines::LineIndex;
use super::program::{self, Program};
use super::spec::{RuleSpec, ServiceAccountSpec, WatchSpec};
use crate::schema::crd::{KindSpec, StatusLine};
use crate::suggest::edit_distance;
mod chains;
mod child;
mod compiler;
mod fields;
mod link;
#[cfg(test)]
mod load_tests;
mod model;
mod refs;
#[cfg(test)]
mod refs_tests;
mod rollout;
#[cfg(test)]
mod schema_tests;
mod template;
pub mod versions;

pub use compiler::{
    CHILD_VARIABLES, INDEX_VARIABLE, READY_VARIABLES, STATUS_VARIABLES, TEMPLATE_VARIABLES,
    jinja_reason,
};
pub use model::*;
pub use rollout::{DEFAULT_WAIT_READY, Rollout, Step, parse_duration};

use compiler::{Compiler, GLOBALS, is_label_value};

use child::{check_same_names, compile_child, compile_existing};
use fields::compile_fields;
use link::link;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::sync::Arc;

/// How many revisions of a Rule object are kept by default.
pub const DEFAULT_HISTORY: usize = 10;

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
    let conversion = match (&spec.schema, &crd) {
        (Some(s), Some(crd)) => {
            versions::compile(&mut c, s, &spec.watch.group, &spec.watch.version, crd)
        }
        _ => None,
    };

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

    let program = build_program(&mut c);
    let mut graph = (Vec::new(), Vec::new());
    if let Some(p) = &program {
        check_variables(&mut c, p);
        fields::check_status_reads(&mut c, p, &fields, ready.as_ref());
        let given = crate::schema::typed::crd_serving(
            &spec.watch.group,
            &spec.watch.version,
            &spec.watch.resource,
        );
        let kinds = refs::Kinds {
            spec,
            own: own_schema(given.as_ref(), crd.as_ref()),
        };
        refs::check_references(&mut c, &kinds, p, &fields);
        if children.len() == spec.children.len() {
            graph = link(&mut c, spec, p, &mut children, &existing);
        }
    }
    check_filters_and_tests(&mut c);
    let rollout = rollout_of(&mut c, spec);
    let identity = spec
        .service_account
        .as_ref()
        .and_then(|a| check_identity(&mut c, a));
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
            rollout,
            pins: spec.pins,
            history_limit: spec
                .revision_history_limit
                .map_or(DEFAULT_HISTORY, |n| n as usize),
            object: None,
            identity,
            conversion,
        }),
        _ => Err(c.errors),
    }
}

/// The rule's expressions compiled as one program; None (an error at the expression)
/// when one does not parse.
fn build_program(c: &mut Compiler<'_>) -> Option<Program> {
    let env = std::mem::replace(&mut c.env, program::environment());
    match Program::new(env, &c.exprs) {
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
    }
}

/// The rule's rollout, and a history limit that keeps what it needs.
fn rollout_of(c: &mut Compiler<'_>, spec: &RuleSpec) -> Option<Rollout> {
    let rollout = spec
        .rollout
        .as_ref()
        .and_then(|r| rollout::compile_rollout(c, r));
    if let (Some(_), Some(n)) = (&spec.rollout, spec.revision_history_limit)
        && n < 2
    {
        // The previous revision is what the resources not reached yet keep.
        c.error(
            "revisionHistoryLimit",
            None,
            format!("`revisionHistoryLimit: {n}` keeps too few revisions for a rollout: the resources a rollout has not reached keep the previous revision, which the limit would delete (and every resource would take each edit at once)"),
            "keep at least 2 (`revisionHistoryLimit: 2`; the default is 10), or remove `rollout`",
        );
    }
    rollout
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
    let kind = KindSpec {
        group: &spec.watch.group,
        version: &spec.watch.version,
        plural: &spec.watch.resource,
        schema: s,
        status: spec
            .status
            .fields
            .iter()
            .map(|f| StatusLine {
                name: &f.name,
                ty: f.ty,
                schema: f.schema.as_deref(),
                export: f.export,
            })
            .collect(),
    };
    match crate::schema::crd::crd(&kind) {
        Ok(crd) => {
            for (i, v) in crd["spec"]["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                let at = match i {
                    0 => "schema".to_string(),
                    i => format!("schema.versions[{}]", i - 1),
                };
                check_cel_cost(c, &v["schema"]["openAPIV3Schema"], &at);
            }
            let root = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
            let defaults = crate::schema::fields::defaults(&root["properties"]["spec"]);
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

/// Refuses a CEL rule of the schema that the API server would refuse for its estimated
/// cost, at the rule's line (a spec-wide one under `validations`, a field's on its line).
/// `at` is where the version's fields are in the rule: `schema` for the watched one,
/// `schema.versions[i]` for another.
fn check_cel_cost(c: &mut Compiler<'_>, root: &Value, at: &str) {
    for t in crate::schema::cost::check(root) {
        let path = match t.rule.field.as_str() {
            "spec" => format!("{at}.validations[{}]", t.rule.index),
            f if f.starts_with("spec.") => format!("{at}.{f}"),
            _ => "status.fields".to_string(),
        };
        c.error(&path, None, t.problem, t.fix);
    }
}

/// The kind and schema of the rule's own kind: a CRD given for it (`--crd`), or else the
/// one made from the rule's `schema`.
fn own_schema<'a>(
    given: Option<&'a (String, Value)>,
    made: Option<&'a Value>,
) -> Option<(String, &'a Value)> {
    if let Some((kind, schema)) = given {
        return Some((kind.clone(), schema));
    }
    let made = made?;
    let kind = made["spec"]["names"]["kind"].as_str()?.to_string();
    Some((
        kind,
        &made["spec"]["versions"][0]["schema"]["openAPIV3Schema"],
    ))
}

/// Checks `serviceAccount`: a name and a namespace the API server would take.
fn check_identity(c: &mut Compiler<'_>, a: &ServiceAccountSpec) -> Option<Identity> {
    let mut ok = true;
    for (field, value, what) in [
        ("serviceAccount.name", &a.name, "a ServiceAccount name"),
        ("serviceAccount.namespace", &a.namespace, "a namespace name"),
    ] {
        if !dns_label(value, field == "serviceAccount.name") {
            ok = false;
            c.error(
                field,
                None,
                format!("{value:?} is not {what}"),
                "use lowercase letters, digits and '-' (and '.' in a ServiceAccount name), starting and ending with a letter or digit, e.g. website-rule",
            );
        }
    }
    ok.then(|| Identity {
        name: a.name.clone(),
        namespace: a.namespace.clone(),
    })
}

/// A DNS-1123 label (with dots: a subdomain), as the API server checks names.
fn dns_label(s: &str, dots: bool) -> bool {
    let max = if dots { 253 } else { 63 };
    !s.is_empty()
        && s.len() <= max
        && s.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || (dots && b == b'.')
        })
        && s.starts_with(|ch: char| ch.is_ascii_alphanumeric())
        && s.ends_with(|ch: char| ch.is_ascii_alphanumeric())
}

fn fingerprint(spec: &RuleSpec) -> String {
    let bytes = serde_json::to_vec(spec).unwrap_or_default();
    let digest = Sha256::digest(bytes);
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

fn check_watch(c: &mut Compiler<'_>, w: &WatchSpec) {
    let spelt = if w.group.is_empty() {
        w.version.clone()
    } else {
        format!("{}/{}", w.group, w.version)
    };
    if !w.version.is_empty()
        && let Some(canonical) =
            crate::schema::kinds::canonical_api_version(&spelt).filter(|c| *c != spelt)
    {
        let (group, version) = crate::schema::kinds::group_version(&canonical);
        c.error(
            "watch.group",
            None,
            format!(
                "watch {:?} {:?} is not how the API server names the group and version",
                w.group, w.version
            ),
            format!("write `group: {group:?}` and `version: {version}` (the core group is \"\")"),
        );
    }
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
            None => format!("see the {what}s in the template reference (docs/reference/rules.md)"),
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
    use super::compiler::{Scalar, classify, is_identifier};
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
