//! The status fields of a rule: each filled from a JSONPath into the resource or one of
//! its children, or from an expression; ids, names and sources checked.

use super::compiler::{Compiler, STATUS_VARIABLES, is_identifier};
use super::model::{CompiledField, FieldSource, Source};
use crate::rules::program::{ExprRef, Program};
use crate::rules::spec::RuleSpec;
use crate::suggest::edit_distance;

/// The rule's status fields, compiled; `ids` are the rule's child ids.
pub(super) fn compile_fields(
    c: &mut Compiler<'_>,
    spec: &RuleSpec,
    ids: &[&str],
) -> Vec<CompiledField> {
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

/// Every `status.<name>` a status expression reads must be a status field computed before
/// it (for `status.ready`, any of them): `status.readyReplica` would be undefined for every
/// resource, and the field it feeds would silently take its default.
pub(super) fn check_status_reads(
    c: &mut Compiler<'_>,
    p: &Program,
    fields: &[CompiledField],
    ready: Option<&ExprRef>,
) {
    let exprs = fields
        .iter()
        .enumerate()
        .filter_map(|(i, f)| match &f.source {
            FieldSource::Value(e) => Some((e, &fields[..i])),
            FieldSource::Path { .. } => None,
        })
        .chain(ready.map(|e| (e, fields)));
    let mut problems = Vec::new();
    for (e, before) in exprs {
        for path in p.expression_paths(e) {
            let mut parts = path.split('.');
            let (Some("status"), Some(name)) = (parts.next(), parts.next()) else {
                continue;
            };
            if before.iter().any(|f| f.name == name) {
                continue;
            }
            let names: Vec<&str> = before.iter().map(|f| f.name.as_str()).collect();
            let fix = match names.iter().find(|n| edit_distance(n, name) <= 2) {
                Some(n) => format!("did you mean `status.{n}`?"),
                None if names.is_empty() => "no status field comes before it: read the children (`children.<id>`) or move it after the field it reads".into(),
                None => format!("the status fields before it are: {}", names.join(", ")),
            };
            problems.push((
                e.at.clone(),
                format!("`status.{name}` is no status field computed before this expression"),
                fix,
            ));
        }
    }
    for (at, problem, fix) in problems {
        c.error(&at, None, problem, fix);
    }
}
