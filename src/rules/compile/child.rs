//! The children of a rule: each child's template, collection and conditions, and the
//! existing objects it reads (how they refer to each other: [`mod@super::link`]).

use super::compiler::{
    CHILD_VARIABLES, Compiler, INDEX_VARIABLE, NO_EXTRA, READY_VARIABLES, Scalar, classify,
    is_identifier, is_label_value,
};
use super::model::{CompiledChild, CompiledExisting, Each, Find};
use super::refs::{self, Kinds};
use super::template::bare;
use crate::rules::graph::Reads;
use crate::rules::spec::{ChildSpec, ExistingSpec, RuleSpec};
use crate::schema::kinds::{
    api_version_problem, check_builtin_kind, group_version, known_cluster_scoped,
};
use crate::schema::typed::{self, Shape};
use crate::suggest::edit_distance;
use serde_json::Value;
use std::collections::BTreeSet;

/// Refuses an unknown or cluster-scoped built-in kind.
fn check_kind(c: &mut Compiler<'_>, path: &str, id: &str, api_version: &str, kind: &str) {
    let group = group_version(api_version).0;
    if let Some((problem, fix)) = api_version_problem(api_version) {
        let at = path.strip_suffix(".kind").unwrap_or(path);
        c.error(&format!("{at}.apiVersion"), Some(id), problem, fix);
        return;
    }
    if kind.trim() != kind || kind.is_empty() {
        c.error(
            path,
            Some(id),
            format!("kind {kind:?} is not a kind's name"),
            format!("write `{}`", kind.trim()),
        );
        return;
    }
    if let Err(kinds) = check_builtin_kind(api_version, kind) {
        let close = kinds
            .iter()
            .find(|k| k.eq_ignore_ascii_case(kind) || edit_distance(k, kind) <= 2);
        let fix = match close {
            Some(k) => format!("did you mean `{k}`?"),
            None => format!("{api_version} has: {}", kinds.join(", ")),
        };
        c.error(
            path,
            Some(id),
            format!("unknown kind {kind:?} in {api_version}"),
            fix,
        );
    } else if known_cluster_scoped(group, kind) {
        c.error(
            path,
            Some(id),
            format!(
                "{kind} is cluster-scoped; children always live in the custom resource's namespace"
            ),
            "use a namespaced kind (e.g. Role instead of ClusterRole)",
        );
    }
}

pub(super) fn compile_child(
    c: &mut Compiler<'_>,
    i: usize,
    ch: &ChildSpec,
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
    check_kind(c, &format!("{tpath}.kind"), id, api_version, kind);
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
    if let Some(name) = meta.and_then(|m| m.get("name")).and_then(Value::as_str) {
        check_name(
            c,
            &format!("{tpath}.metadata.name"),
            id,
            api_version,
            kind,
            name,
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
    // The child's expressions see the other children; a collection's, its item too.
    c.scope_vars = CHILD_VARIABLES.iter().map(|v| v.to_string()).collect();
    let each = ch.for_each.as_deref().map(|src| {
        let var = c.item_variable(&format!("{base}.as"), id, ch.item_as.as_deref());
        let over = c.expr(&format!("{base}.forEach"), Some(id), bare(src), NO_EXTRA);
        Each { over, var }
    });
    if each.is_none() && ch.item_as.is_some() {
        c.error(
            &format!("{base}.as"),
            Some(id),
            "`as` names the item of a `forEach`, and this child has none",
            "add `forEach: <a list>`, or remove `as`",
        );
    }
    if let Some(e) = &each {
        c.scope_vars.push(e.var.to_string());
        c.scope_vars.push(INDEX_VARIABLE.into());
    }
    let template = c.node(&ch.template, &tpath, id);
    let when = ch
        .when
        .as_deref()
        .map(|w| c.expr(&format!("{base}.when"), Some(id), w, NO_EXTRA));
    // Readiness sees the live child, and the item of a collection.
    c.scope_vars
        .retain(|v| !CHILD_VARIABLES.contains(&v.as_str()));
    let ready_when = ch
        .ready_when
        .as_deref()
        .map(|w| c.expr(&format!("{base}.readyWhen"), Some(id), w, READY_VARIABLES));
    c.scope_vars.clear();
    Some(CompiledChild {
        id: id.to_string(),
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        when,
        template,
        adopt: ch.adopt,
        on_remove: ch.on_remove,
        ready_when,
        each,
        // Filled in by `link` once every child and existing object is known.
        after: Vec::new(),
        reads: Reads::default(),
        when_reads_graph: false,
        at: c.at(&base),
    })
}

/// Two children of one kind (group and kind: a version is only a view of the same
/// objects) whose name templates are the same text would render one object twice, each
/// apply undoing the other's. (Names that only happen to render the same for one resource
/// are caught at render time.)
pub(super) fn check_same_names(c: &mut Compiler<'_>, spec: &RuleSpec) {
    let key = |ch: &ChildSpec| {
        let t = &ch.template;
        let group = t
            .get("apiVersion")
            .and_then(Value::as_str)
            .map(|v| group_version(v).0)?;
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

/// Compiles the rule's `existing[]` references.
pub(super) fn compile_existing(c: &mut Compiler<'_>, spec: &RuleSpec) -> Vec<CompiledExisting> {
    let mut out = Vec::new();
    let mut seen: BTreeSet<&str> = spec.children.iter().map(|ch| ch.id.as_str()).collect();
    for (i, e) in spec.existing.iter().enumerate() {
        let base = format!("existing[{i}]");
        if let Some(x) = compile_one_existing(c, &base, e, &mut seen) {
            out.push(x);
        }
    }
    out
}

fn compile_one_existing<'s>(
    c: &mut Compiler<'_>,
    base: &str,
    e: &'s ExistingSpec,
    seen: &mut BTreeSet<&'s str>,
) -> Option<CompiledExisting> {
    let id = e.id.as_str();
    if !is_identifier(id) {
        c.error(
            &format!("{base}.id"),
            Some(id),
            format!("existing id {id:?} is not an identifier"),
            "use letters, digits and '_' (templates read it as `existing.<id>`)",
        );
    }
    if !seen.insert(id) {
        c.error(
            &format!("{base}.id"),
            Some(id),
            format!("id {id:?} is already used by a child or another existing object"),
            "give every child and existing object of a rule its own id",
        );
    }
    check_kind(c, &format!("{base}.kind"), id, &e.api_version, &e.kind);
    let find = match (&e.name, &e.selector) {
        (Some(name), None) => {
            Find::Name(c.node(&Value::String(name.clone()), &format!("{base}.name"), id))
        }
        (None, Some(labels)) => Find::Selector(
            labels
                .iter()
                .map(|(k, v)| (k.clone(), c.node(v, &format!("{base}.selector.{k}"), id)))
                .collect(),
        ),
        _ => {
            c.error(
                base,
                Some(id),
                "an existing object needs either `name` or `selector`",
                "e.g. `name: \"{{ spec.secretName }}\"`, or `selector: {app: db}`",
            );
            return None;
        }
    };
    Some(CompiledExisting {
        id: id.to_string(),
        api_version: e.api_version.clone(),
        kind: e.kind.clone(),
        find,
        at: c.at(base),
    })
}

/// What a string scalar of a template gives, as far as the load can tell: a literal, text,
/// or a lone expression whose type is known (the standard variables, `spec.…` fields the
/// rule's schema types, and a reference into another object whose kind's schema types it).
fn shape_of(text: &str, spec_schema: Option<&Value>, kinds: &Kinds<'_>) -> Shape {
    let src = match classify(text) {
        Scalar::Literal => return Shape::Literal,
        Scalar::Text => return Shape::Text,
        Scalar::Expr(src) => src.trim(),
    };
    match src {
        "labels" | "selectorLabels" | "metadata" | "metadata.labels" | "metadata.annotations" => {
            return Shape::Map;
        }
        "name" | "namespace" | "rule" => return Shape::Scalar("string"),
        INDEX_VARIABLE => return Shape::Scalar("integer"),
        _ => {}
    }
    let Some(path) = src.strip_prefix("spec.") else {
        return match refs::type_of(kinds, src) {
            Some("object") => Shape::Map,
            Some("array") => Shape::List,
            Some(t) => Shape::Scalar(t),
            None => Shape::Unknown,
        };
    };
    let mut s = match spec_schema {
        Some(s) => s,
        None => return Shape::Unknown,
    };
    for seg in path.split('.') {
        if !is_identifier(seg) {
            return Shape::Unknown;
        }
        match s["properties"].get(seg) {
            Some(next) => s = next,
            None => return Shape::Unknown,
        }
    }
    match s["type"].as_str() {
        Some("object") => Shape::Map,
        Some("array") => Shape::List,
        Some("string") => Shape::Scalar("string"),
        Some("integer") => Shape::Scalar("integer"),
        Some("number") => Shape::Scalar("number"),
        Some("boolean") => Shape::Scalar("boolean"),
        _ => Shape::Unknown,
    }
}

/// Every child of a built-in kind (or of a CRD given) is checked against its kind's schema.
pub(super) fn check_types(c: &mut Compiler<'_>, spec: &RuleSpec, crd: Option<&Value>) {
    let spec_schema =
        crd.map(|c| &c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]);
    let kinds = Kinds { spec, own: None };
    for (i, ch) in spec.children.iter().enumerate() {
        let t = &ch.template;
        let (Some(av), Some(kind)) = (t["apiVersion"].as_str(), t["kind"].as_str()) else {
            continue;
        };
        let from_crd = typed::from_crds(av, kind);
        let Some(schema) = typed::builtin(av, kind).or(from_crd.as_ref()) else {
            continue;
        };
        let shape = |s: &str| shape_of(s, spec_schema, &kinds);
        let mut check = typed::Check {
            shape: &shape,
            out: Vec::new(),
        };
        check.value(t, schema, &format!("children[{i}].template"), "");
        for f in check.out {
            c.error(
                &f.at,
                Some(&ch.id),
                format!(
                    "{kind} {}: {}",
                    if f.field.is_empty() {
                        "object"
                    } else {
                        &f.field
                    },
                    f.problem
                ),
                f.fix,
            );
        }
    }
}

/// A child's name as written: a literal name must be valid for its kind, and the literal
/// text of a name template may hold nothing no name of the kind can (`_`, capitals).
fn check_name(c: &mut Compiler<'_>, at: &str, id: &str, api_version: &str, kind: &str, name: &str) {
    use crate::schema::names;
    let group = group_version(api_version).0;
    if matches!(classify(name), Scalar::Literal) {
        if let Some(why) = names::invalid(group, kind, name) {
            c.error(at, Some(id), format!("metadata.name {name:?} is not a valid name: {why}"), "write a valid name (lowercase letters, digits, `-`), or make it from the resource's: `name: \"{{ name }}-web\"`");
        }
        return;
    }
    // Only a template of expressions alone: a `{% %}` block may filter its text or leave it
    // out of some renders, and a comment is no text.
    if name.contains("{%") || name.contains("{#") {
        return;
    }
    if let Some(ch) = names::never_in(group, kind, &literal_text(name)) {
        c.error(at, Some(id), format!("metadata.name {name:?} holds {ch:?} in its text, which no {kind} name may hold: every render would be refused"), "use lowercase letters, digits and `-` in the name's text (`| lower` or `| replace` for values)");
    }
}

/// The text of a template outside its `{{ }}` and `{% %}` blocks.
fn literal_text(template: &str) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(i) = rest.find(['{']) {
        let (head, tail) = rest.split_at(i);
        out.push_str(head);
        let close = match () {
            _ if tail.starts_with("{{") => "}}",
            _ if tail.starts_with("{%") => "%}",
            _ if tail.starts_with("{#") => "#}",
            _ => {
                out.push('{');
                rest = &tail[1..];
                continue;
            }
        };
        match tail.find(close) {
            Some(j) => rest = &tail[j + 2..],
            None => return out,
        }
    }
    out.push_str(rest);
    out
}
