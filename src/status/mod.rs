//! Step 4: compute a custom resource's status from its observed children. Pure: the
//! custom resource and the live children go in as JSON, the status comes out as JSON.
//!
//! Defined behaviour of a JSONPath field: no match gives the default (or leaves the field
//! out, and says so in the report); several matches fill an `array` field and are an
//! error for any other type; a value of the wrong type is an error. Errors never stop the
//! other fields: each is reported, and the field takes its default or is left out.
//!
//! Owns: the status fields and the `Ready` verdict, the conditions' merge
//! ([`merge_conditions`]) and the status fields a kind's schema drops ([`StatusSchema`]).
//! Uses: `rules`, `render` (the plan, readiness). Used by: `reconcile`, the CLI.

mod conditions;

mod schema;
pub mod verdict;

pub use conditions::{Condition, condition_of, merge_conditions};
pub use schema::StatusSchema;

use crate::render::{Plan, Scope, readiness};
use crate::rules::compile::jinja_reason;
use crate::rules::{CompiledChild, CompiledRule, FieldSource, FieldType, Source};
use jsonpath_rust::query::js_path_process;
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::HashMap;

/// What the status computation found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Report {
    /// The exported fields, in rule order.
    pub fields: Map<String, Value>,
    /// Every child ready, and the rule's `ready` expression (if any) true.
    pub ready: bool,
    /// What Ready means for this rule, for the Ready condition's message.
    pub checked: String,
    /// Why the resource is not ready, or what came back empty (shown in the Ready condition).
    pub notes: Vec<String>,
    /// Fields that could not be computed (type mismatches, several matches, errors).
    pub problems: Vec<String>,
}

/// A child as status expressions and paths see it: its live object, or for a collection
/// the list of its live objects in item order. `observed` is keyed by
/// [`crate::render::Rendered::instance`] (`id`, or `id[index]`).
pub fn child_value<'a>(
    c: &CompiledChild,
    observed: &'a HashMap<String, Value>,
) -> Option<Cow<'a, Value>> {
    if c.each.is_none() {
        return observed.get(&c.id).map(Cow::Borrowed);
    }
    let prefix = format!("{}[", c.id);
    let mut items: Vec<(usize, &Value)> = observed
        .iter()
        .filter_map(|(k, v)| {
            let i = k.strip_prefix(&prefix)?.strip_suffix(']')?.parse().ok()?;
            Some((i, v))
        })
        .collect();
    items.sort_by_key(|(i, _)| *i);
    let list = items.into_iter().map(|(_, v)| v.clone()).collect();
    Some(Cow::Owned(Value::Array(list)))
}

/// Computes the status of `cr` from `observed` (instance → live object, see
/// [`child_value`]). `scope` is the render scope of `cr` (its spec with defaults); `plan` is
/// what its render gave (None when it failed): the objects that should exist, and the
/// children that wait.
pub fn compute(
    rule: &CompiledRule,
    scope: &Scope,
    cr: &Value,
    plan: Option<&Plan>,
    observed: &HashMap<String, Value>,
) -> Report {
    let mut report = Report::default();
    let mut all = Map::new();
    let instances = observed;
    // The template values every expression sees, made once: the scope's, then `children`
    // and `self` only if an expression reads them (they are whole objects); `status` is
    // added per expression, as it grows field by field.
    let mut base: Vec<(String, minijinja::Value)> = scope.vars();
    if rule.status_reads.contains("children") {
        let children: Map<String, Value> = rule
            .children
            .iter()
            .map(|c| {
                (
                    c.id.clone(),
                    child_value(c, instances)
                        .map(Cow::into_owned)
                        .unwrap_or(Value::Null),
                )
            })
            .collect();
        base.push((
            "children".into(),
            minijinja::Value::from(minijinja::value::Serde(&children)),
        ));
    }
    if rule.status_reads.contains("self") {
        base.push((
            "self".into(),
            minijinja::Value::from(minijinja::value::Serde(cr)),
        ));
    }
    let context = |status: &Map<String, Value>| {
        let mut vars: std::collections::BTreeMap<String, minijinja::Value> =
            base.iter().cloned().collect();
        vars.insert(
            "status".into(),
            minijinja::Value::from(minijinja::value::Serde(status)),
        );
        minijinja::Value::from(vars)
    };

    for f in &rule.fields {
        let value = match &f.source {
            FieldSource::Path { from, query, text } => {
                let found = Found {
                    cr,
                    instances,
                    report: &mut report,
                };
                path_value(
                    rule,
                    &f.name,
                    f.ty == FieldType::Array,
                    (from, query, text),
                    found,
                )
            }
            FieldSource::Value(e) => match rule.program.eval(e, &context(&all)) {
                Err(x) => {
                    report
                        .problems
                        .push(format!("{}: {}", f.name, jinja_reason(&x)));
                    None
                }
                Ok(v) if v.is_undefined() || v.is_none() => None,
                Ok(v) => serde_json::to_value(&v).ok().map(|mut v| {
                    crate::render::normalize(&mut v);
                    v
                }),
            },
        };
        let value = match value {
            Some(v) if f.ty.admits(&v) => Some(v),
            Some(v) => {
                report
                    .problems
                    .push(format!("{}: {v} is not of type {}", f.name, f.ty.name()));
                f.default.clone()
            }
            None => f.default.clone(),
        };
        if let Some(v) = value {
            all.insert(f.name.clone(), v.clone());
            if f.export {
                report.fields.insert(f.name.clone(), v);
            }
        }
    }

    let (waiting, bases) = plan
        .map(|p| blocking(rule, scope, p, instances))
        .unwrap_or_default();
    let vars = context(&all);
    report.ready = ready(rule, &vars, waiting, &mut report);
    report.checked = checked(&bases, rule.ready.as_ref().map(|e| e.source.as_ref()));
    report
}

/// What a status field's path reads, and where its notes and problems go.
struct Found<'a> {
    cr: &'a Value,
    instances: &'a HashMap<String, Value>,
    report: &'a mut Report,
}

/// The value of status field `name` at a JSONPath of the resource or of a child (a list of
/// every match when it is an `array`); None, with a note or a problem, when there is none.
fn path_value(
    rule: &CompiledRule,
    name: &str,
    array: bool,
    (from, query, text): (&Source, &jsonpath_rust::parser::model::JpQuery, &String),
    at: Found<'_>,
) -> Option<Value> {
    let (target, what) = match from {
        Source::Parent => (
            Some(Cow::Borrowed(at.cr)),
            "the resource itself".to_string(),
        ),
        Source::Child(i) => {
            let c = &rule.children[*i];
            (child_value(c, at.instances), format!("child `{}`", c.id))
        }
    };
    match target {
        None => {
            at.report
                .notes
                .push(format!("{}: {what} does not exist yet", name));
            None
        }
        Some(t) => match js_path_process(query, &*t) {
            Err(e) => {
                at.report
                    .problems
                    .push(format!("{}: JSONPath {text} failed: {e}", name));
                None
            }
            Ok(found) if found.is_empty() => {
                at.report
                    .notes
                    .push(format!("{}: {text} matched nothing in {what}", name));
                None
            }
            Ok(found) if array => Some(Value::Array(
                found.into_iter().map(|r| r.val().clone()).collect(),
            )),
            Ok(found) if found.len() > 1 => {
                at.report.problems.push(format!(
                    "{}: {text} matched {} values in {what}; declare `type: array` or narrow the path",
                    name,
                    found.len()
                ));
                None
            }
            Ok(found) => found
                .into_iter()
                .next()
                .map(|r| r.val().clone())
                .filter(|v| !v.is_null()),
        },
    }
}

/// Most ready children the Ready message names one by one.
const NAMED: usize = 6;

/// What Ready was decided on: each child's own check, and the rule's `ready` expression.
fn checked(bases: &[String], expression: Option<&str>) -> String {
    let mut named: Vec<&str> = bases.iter().take(NAMED).map(String::as_str).collect();
    let more = bases.len().saturating_sub(NAMED);
    let more = (more > 0).then(|| format!("{more} more"));
    named.extend(more.as_deref());
    let children = match named.is_empty() {
        true => "no children to check".to_string(),
        false => format!("each child ready by its own check ({})", named.join("; ")),
    };
    match expression {
        Some(e) => format!("{children}, and `{e}` holds"),
        None => children,
    }
}

/// Ready: every child's own readiness holds (each object the render made exists and is
/// ready by its `readyWhen` or its kind's built-in check: a Deployment rolled out, a Job
/// complete) **and** the rule's `ready` expression, if any, is true. The expression adds a
/// condition; it never waives a child's readiness. What was checked is in `report.checked`.
fn ready(
    rule: &CompiledRule,
    vars: &minijinja::Value,
    waiting: Vec<String>,
    report: &mut Report,
) -> bool {
    let children_ready = waiting.is_empty();
    report.notes.splice(0..0, waiting);
    let Some(e) = &rule.ready else {
        return children_ready;
    };
    match rule.program.eval(e, vars) {
        Ok(v) if v.is_true() => children_ready,
        Ok(_) => {
            report
                .notes
                .insert(0, format!("ready expression `{}` is false", e.source));
            false
        }
        Err(x) => {
            report.problems.push(format!("ready: {}", jinja_reason(&x)));
            false
        }
    }
}

/// Every object the render made that is missing or not ready, and every child that
/// waits, with why; and for each ready one, what its readiness rested on.
fn blocking(
    rule: &CompiledRule,
    scope: &Scope,
    plan: &Plan,
    instances: &HashMap<String, Value>,
) -> (Vec<String>, Vec<String>) {
    let mut out = Vec::new();
    let mut bases = Vec::new();
    for r in &plan.children {
        let Some(c) = rule.children.iter().find(|c| c.id == r.id) else {
            continue;
        };
        let Some(live) = instances.get(&r.instance()) else {
            out.push(format!(
                "child `{}` ({} {}) does not exist yet",
                r.instance(),
                r.kind,
                r.name
            ));
            continue;
        };
        match readiness::child_ready(rule, c, scope, live, r.item.as_ref()) {
            Ok(()) => bases.push(format!(
                "{} {} {}",
                c.kind,
                name_of(live),
                readiness::basis(c, live)
            )),
            Err(why) => out.push(format!(
                "child `{}` ({} {}): {why}",
                r.instance(),
                c.kind,
                name_of(live)
            )),
        }
    }
    out.extend(
        plan.waiting
            .iter()
            .map(|w| format!("child `{}` {}", w.id, w.reason)),
    );
    (out, bases)
}

fn name_of(live: &Value) -> &str {
    live.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("?")
}

#[cfg(test)]
mod tests;
