//! Existing objects a rule reads: what to look for, for one custom resource (a name, or
//! labels), evaluated from the rule's templates. Finding them is the caller's (the cache
//! in the cluster, files offline); [`super::Scope::with_existing`] takes what was found.

use super::context::Scope;
use super::model::RenderError;
use super::object::eval_value;
use crate::rules::{CompiledRule, Find};
use serde_json::Value;
use std::collections::BTreeMap;

/// What to look for in the custom resource's namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    Name(String),
    Labels(BTreeMap<String, String>),
}

impl Lookup {
    /// Whether `o` (an object as JSON) is one this lookup finds.
    pub fn matches(&self, o: &Value) -> bool {
        match self {
            Lookup::Name(n) => o.pointer("/metadata/name").and_then(Value::as_str) == Some(n),
            Lookup::Labels(want) => {
                let labels = o.pointer("/metadata/labels");
                want.iter().all(|(k, v)| {
                    labels.and_then(|l| l.get(k)).and_then(Value::as_str) == Some(v.as_str())
                })
            }
        }
    }
}

/// For each of the rule's `existing`, what to look for (in rule order).
pub fn lookups(rule: &CompiledRule, scope: &Scope) -> Result<Vec<Lookup>, RenderError> {
    rule.existing
        .iter()
        .map(|e| {
            let text = |node, what: &str| -> Result<String, RenderError> {
                match eval_value(rule, &e.id, node, &scope.ctx)? {
                    Value::String(s) if !s.is_empty() => Ok(s),
                    other => Err(RenderError::Eval {
                        at: format!("{}:{}", rule.at.file.display(), e.at.line),
                        child: e.id.clone(),
                        field: what.into(),
                        reason: format!("rendered to {other}, not a non-empty string"),
                    }),
                }
            };
            Ok(match &e.find {
                Find::Name(n) => Lookup::Name(text(n, "name")?),
                Find::Selector(labels) => Lookup::Labels(
                    labels
                        .iter()
                        .map(|(k, v)| Ok((k.clone(), text(v, k)?)))
                        .collect::<Result<_, RenderError>>()?,
                ),
            })
        })
        .collect()
}

/// Looks up the rule's existing objects for the resource of `scope`. `candidates(i,
/// lookup)` gives the objects of `existing[i]`'s kind in the resource's namespace that may
/// match (the cache's, or a file's). Gives the scope with what was found, and the lookups.
pub fn find_existing(
    rule: &CompiledRule,
    scope: Scope,
    candidates: impl Fn(usize, &Lookup) -> Vec<Value>,
) -> Result<(Scope, Vec<Lookup>), RenderError> {
    if rule.existing.is_empty() {
        return Ok((scope, Vec::new()));
    }
    let lookups = lookups(rule, &scope)?;
    let scope = with_found(rule, scope, &lookups, |i, l| Ok(candidates(i, l)));
    Ok((scope, lookups))
}

/// The scope with what `candidates(i, lookup)` found for each of `lookups`: the objects of
/// `existing[i]`'s kind that may match, or why they cannot be known yet (the children that
/// read it then wait, saying so).
pub fn with_found(
    rule: &CompiledRule,
    scope: Scope,
    lookups: &[Lookup],
    candidates: impl Fn(usize, &Lookup) -> Result<Vec<Value>, String>,
) -> Scope {
    let ns = scope.namespace.clone();
    let found = rule
        .existing
        .iter()
        .zip(lookups)
        .enumerate()
        .map(|(i, (e, lookup))| {
            let objects = candidates(i, lookup)?;
            found(&e.kind, &ns, lookup, objects)
        })
        .collect();
    scope.with_existing(rule, found)
}

/// What was found for `lookup` among `objects` (the existing kind's objects in the
/// namespace): the object for a name (Err saying it is missing), the sorted list for labels.
fn found(
    kind: &str,
    ns: &str,
    lookup: &Lookup,
    objects: impl IntoIterator<Item = Value>,
) -> Result<Value, String> {
    let mut hits: Vec<Value> = objects.into_iter().filter(|o| lookup.matches(o)).collect();
    match lookup {
        Lookup::Name(n) => hits
            .pop()
            .ok_or_else(|| format!("{kind} `{n}` (not found in namespace {ns})")),
        Lookup::Labels(_) => {
            hits.sort_by(|a, b| {
                let name = |o: &Value| {
                    o.pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                };
                name(a).cmp(&name(b))
            });
            Ok(Value::Array(hits))
        }
    }
}
