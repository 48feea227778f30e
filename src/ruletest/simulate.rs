//! A reconcile with no cluster: a custom resource and the objects "in the cluster" go in;
//! the children, who waits, the status and the conditions come out, as the operator would
//! compute them. Used by `ruleop render --observed` and `ruleop test`.
//!
//! How observed objects are matched: an object is a child's when its `apiVersion`, `kind`
//! and `metadata.name` are the rendered child's (its namespace is not compared); an
//! object is an existing object's when its `apiVersion` and `kind` are the `existing`
//! entry's and its namespace is the resource's, or it has none.

use crate::render::{self, Plan, RenderError, Rendered, Scope};
use crate::rules::CompiledRule;
use crate::status::verdict::{self, SyncProblem};
use crate::status::{self, Report};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::Arc;

/// What a reconcile of one resource gives, offline.
pub struct Outcome {
    /// The render: the children and who waits, or why it failed.
    pub plan: Result<Plan, RenderError>,
    pub scope: Option<Scope>,
    /// The status report (None when the render failed).
    pub report: Option<Report>,
    /// `Ready` and `Synced`: (type, status, reason, message).
    pub conditions: Vec<(String, bool, String, String)>,
    /// The (apiVersion, kind) of each child that waits: an object of theirs stays.
    pub waiting_kinds: Vec<(String, String)>,
}

/// The live object of a rendered child among `live`, by apiVersion, kind and name.
pub fn find_live(c: &Rendered, live: &[Value]) -> Option<Value> {
    live.iter()
        .find(|o| {
            o.get("apiVersion").and_then(Value::as_str) == Some(c.api_version.as_str())
                && o.get("kind").and_then(Value::as_str) == Some(c.kind.as_str())
                && o.pointer("/metadata/name").and_then(Value::as_str) == Some(c.name.as_str())
        })
        .cloned()
}

/// Pairs live objects with rendered children (by instance: `id`, or `id[index]`).
pub fn match_observed(children: &[Rendered], live: &[Value]) -> HashMap<String, Value> {
    children
        .iter()
        .filter_map(|c| Some((c.instance(), find_live(c, live)?)))
        .collect()
}

/// The rule's existing objects, found among `live` (those of the resource's namespace,
/// or with none given).
pub fn existing_among(
    rule: &CompiledRule,
    scope: Scope,
    live: &[Value],
) -> Result<Scope, RenderError> {
    let ns = scope.namespace.clone();
    let candidates = |i: usize, _: &render::Lookup| {
        let e = &rule.existing[i];
        live.iter()
            .filter(|o| {
                o.get("apiVersion").and_then(Value::as_str) == Some(e.api_version.as_str())
                    && o.get("kind").and_then(Value::as_str) == Some(e.kind.as_str())
                    && o.pointer("/metadata/namespace")
                        .and_then(Value::as_str)
                        .is_none_or(|n| n == ns)
            })
            .cloned()
            .collect()
    };
    Ok(render::find_existing(rule, scope, candidates)?.0)
}

/// One reconcile of `cr` (its defaults already applied) with `live` in the cluster.
pub fn simulate(rule: &CompiledRule, cr: &Value, live: &[Value]) -> Outcome {
    let rendered = render::scope(rule, cr)
        .and_then(|s| existing_among(rule, s, live))
        .and_then(|s| {
            let find = |r: &Rendered| find_live(r, live);
            Ok((render::render_with(rule, &s, &find)?, s))
        });
    let (plan, scope) = match rendered {
        Ok((plan, scope)) => (Ok(plan), Some(scope)),
        Err(e) => (Err(e), None),
    };
    let report = match (&plan, &scope) {
        (Ok(p), Some(s)) => {
            let by_id = match_observed(&p.children, live);
            Some(status::compute(rule, s, cr, Some(p), &by_id))
        }
        _ => None,
    };
    let waiting;
    let error;
    let problem = match &plan {
        Err(e) => {
            error = e.to_string();
            Some(SyncProblem {
                reason: "RenderFailed",
                message: &error,
            })
        }
        Ok(p) if !p.waiting.is_empty() => {
            waiting = verdict::waiting_message(&p.waiting);
            Some(SyncProblem {
                reason: "Waiting",
                message: &waiting,
            })
        }
        Ok(_) => None,
    };
    let conditions = verdict::conditions(report.as_ref(), problem)
        .into_iter()
        .map(|c| (c.type_.to_string(), c.status, c.reason, c.message))
        .collect();
    let waiting_kinds = match &plan {
        Ok(p) => p
            .waiting
            .iter()
            .filter_map(|w| rule.children.iter().find(|c| c.id == w.id))
            .map(|c| (c.api_version.clone(), c.kind.clone()))
            .collect(),
        Err(_) => Vec::new(),
    };
    Outcome {
        plan,
        scope,
        report,
        conditions,
        waiting_kinds,
    }
}

impl Outcome {
    /// What the step gave, as data: the snapshot `ruleop test --update` writes.
    pub fn snapshot(&self) -> Value {
        let mut out = Map::new();
        match &self.plan {
            Ok(p) => {
                out.insert(
                    "children".into(),
                    Value::Array(p.children.iter().map(|c| c.object.clone()).collect()),
                );
                out.insert(
                    "waiting".into(),
                    Value::Array(
                        p.waiting
                            .iter()
                            .map(|w| json!({"child": w.id, "reason": w.reason}))
                            .collect(),
                    ),
                );
            }
            Err(e) => {
                out.insert("error".into(), json!(e.to_string()));
            }
        }
        if let Some(r) = &self.report {
            out.insert("status".into(), Value::Object(r.fields.clone()));
        }
        let conditions: Map<String, Value> = self
            .conditions
            .iter()
            .map(|(t, status, reason, message)| {
                let s = if *status { "True" } else { "False" };
                (
                    t.clone(),
                    json!({"status": s, "reason": reason, "message": message}),
                )
            })
            .collect();
        out.insert("conditions".into(), Value::Object(conditions));
        Value::Object(out)
    }
}

/// The rule for `cr`: the one named, the only one, or the one whose group/version match
/// and whose resource is the kind's plural.
pub fn rule_for<'a>(
    loaded: &'a [Arc<CompiledRule>],
    name: Option<&str>,
    cr: &Value,
) -> Result<&'a CompiledRule, String> {
    let api_version = cr
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = cr.get("kind").and_then(Value::as_str).unwrap_or_default();
    let chosen = match name {
        Some(n) => loaded
            .iter()
            .map(|r| &**r)
            .find(|r| r.name == n)
            .ok_or_else(|| {
                let names: Vec<&str> = loaded.iter().map(|r| r.name.as_str()).collect();
                format!("no rule named {n:?} (the rules: {})", names.join(", "))
            })?,
        None => match loaded {
            [only] => only,
            _ => return by_kind(loaded, api_version, kind),
        },
    };
    // A resource of another kind would never reach this rule in a cluster.
    let known_kind = chosen
        .crd
        .as_ref()
        .and_then(|c| c["spec"]["names"]["kind"].as_str());
    let its_version = super::versions::written_in(chosen, cr).is_some();
    if !its_version || known_kind.is_some_and(|k| k != kind) {
        return Err(format!(
            "the resource is {api_version} {kind}, but rule `{}` watches {} {}",
            chosen.name,
            chosen.watch.api_version(),
            known_kind.unwrap_or(&chosen.watch.resource)
        ));
    }
    Ok(chosen)
}

/// The one rule that watches the resource's kind: its `schema`'s kind, or (without a
/// schema) a resource named as the kind's plural.
fn by_kind<'a>(
    loaded: &'a [Arc<CompiledRule>],
    api_version: &str,
    kind: &str,
) -> Result<&'a CompiledRule, String> {
    let lower = kind.to_lowercase();
    let plurals = [
        format!("{lower}s"),
        format!("{lower}es"),
        lower
            .strip_suffix('y')
            .map(|s| format!("{s}ies"))
            .unwrap_or_default(),
        lower.clone(),
    ];
    let matches: Vec<&CompiledRule> = loaded
        .iter()
        .map(|r| &**r)
        .filter(|r| r.watch.api_version() == api_version)
        .filter(|r| {
            match r
                .crd
                .as_ref()
                .and_then(|c| c["spec"]["names"]["kind"].as_str())
            {
                Some(k) => k == kind,
                None => plurals.contains(&r.watch.resource),
            }
        })
        .collect();
    match matches.as_slice() {
        [one] => Ok(one),
        [] => Err(format!(
            "no rule watches {api_version} {kind}; name one with `rule`"
        )),
        _ => Err(format!(
            "several rules watch {api_version} {kind}; name one with `rule`"
        )),
    }
}
