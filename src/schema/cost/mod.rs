//! The estimated cost of a schema's CEL rules, and the limits the API server holds them
//! to when it takes a CRD (k8s.io/apiextensions-apiserver, validation.go): each rule's
//! cost, times how many times it may run per object, at most 10,000,000; all the rules of
//! the schema together at most 100,000,000. A rule over a list, map or string with no
//! `maxItems`, `maxProperties` or `maxLength` is costed as if the request (3 MiB) were
//! full of it, so a CRD the API server would refuse is caught here, with the fields whose
//! bound would bring it under.

mod decl;
mod estimate;
mod types;

pub use decl::Unbounded;
use decl::{MAX_REQUEST, Place};
use serde_json::Value;

/// The most one rule (times how often it runs) may cost (`StaticEstimatedCostLimit`).
pub const PER_RULE: u64 = 10_000_000;
/// The most all the rules of a schema may cost (`StaticEstimatedCRDCostLimit`).
pub const PER_SCHEMA: u64 = 100_000_000;

/// One CEL expression's estimated cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleCost {
    /// The field whose schema holds the rule, as the rule writes it (`spec`,
    /// `spec.hosts`); empty for the root.
    pub field: String,
    /// Its index in that field's `x-kubernetes-validations`.
    pub index: usize,
    pub expression: String,
    /// Whether this is the rule's `messageExpression` rather than the rule.
    pub message: bool,
    /// The most one evaluation costs.
    pub per_call: u64,
    /// How many times it may run per object.
    pub times: u64,
    /// `per_call` × `times`: what the API server holds to the limits.
    pub cost: u64,
    /// The lists, maps and strings whose missing bound the estimate had to assume.
    pub unbounded: Vec<Unbounded>,
}

/// Estimates every CEL expression of `schema`, a resource's `openAPIV3Schema`.
pub fn estimate(schema: &Value) -> Vec<RuleCost> {
    let mut out = Vec::new();
    let top = Place {
        field: String::new(),
        items: false,
    };
    walk(schema, &top, true, Some(1), &[], &mut out);
    out
}

/// A rule the API server would refuse for its cost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TooCostly {
    pub rule: RuleCost,
    pub problem: String,
    pub fix: String,
}

/// The rules of `schema` over a limit, as the API server would refuse them.
pub fn check(schema: &Value) -> Vec<TooCostly> {
    let costs = estimate(schema);
    let mut out: Vec<TooCostly> = costs
        .iter()
        .filter(|r| r.cost > PER_RULE)
        .map(|r| TooCostly {
            rule: r.clone(),
            problem: format!(
                "the API server would refuse the CRD: {} has an estimated cost of {}, {} the limit of {} per rule",
                what(r),
                thousands(r.cost),
                factor(r.cost, PER_RULE),
                thousands(PER_RULE)
            ),
            fix: fix(r),
        })
        .collect();
    let total = costs.iter().fold(0u64, |t, r| t.saturating_add(r.cost));
    if total > PER_SCHEMA && out.is_empty() {
        let top = costs.iter().max_by_key(|r| r.cost).cloned();
        if let Some(r) = top {
            out.push(TooCostly {
                problem: format!(
                    "the API server would refuse the CRD: its CEL rules have an estimated cost of {} together, {} the limit of {}; the costliest is {} ({})",
                    thousands(total),
                    factor(total, PER_SCHEMA),
                    thousands(PER_SCHEMA),
                    what(&r),
                    thousands(r.cost)
                ),
                fix: fix(&r),
                rule: r,
            });
        }
    }
    out
}

fn what(r: &RuleCost) -> String {
    let on = if r.field.is_empty() {
        "the resource".to_string()
    } else {
        format!("`{}`", r.field)
    };
    let kind = if r.message {
        "messageExpression"
    } else {
        "rule"
    };
    let times = if r.times > 1 {
        format!(" (run up to {} times per object)", thousands(r.times))
    } else {
        String::new()
    };
    format!("the {kind} `{}` on {on}{times}", r.expression)
}

/// `more than 100x`, `1.2x`, `3x` over, as the API server words it.
fn factor(cost: u64, limit: u64) -> String {
    let f = cost as f64 / limit as f64;
    if f > 100.0 {
        "more than 100x".to_string()
    } else if f < 1.5 {
        format!("{f:.2}x")
    } else {
        format!("{:.0}x", f.floor())
    }
}

fn fix(r: &RuleCost) -> String {
    if r.unbounded.is_empty() {
        return "simplify the rule: it is over the limit with every field it reads bounded".into();
    }
    let mut fields: Vec<(&str, Vec<String>)> = Vec::new();
    for u in &r.unbounded {
        let what = match (u.marker, u.of_items) {
            ("maxItems", _) => "maxItems=… (how many items it may hold)",
            ("maxProperties", _) => "maxProperties=… (how many keys it may hold)",
            (_, true) => "maxLength=… (how long each item or value may be)",
            _ => "maxLength=… (how long it may be)",
        };
        match fields.iter_mut().find(|(f, _)| *f == u.field) {
            Some((_, list)) => list.push(what.to_string()),
            None => fields.push((&u.field, vec![what.to_string()])),
        }
    }
    let lines: Vec<String> = fields
        .iter()
        .map(|(f, m)| format!("on the line of `{f}`, {}", m.join(" and ")))
        .collect();
    format!(
        "bound what the rule reads, as small as your values allow: {}; without a bound the API server assumes a whole 3 MiB request of it",
        lines.join("; ")
    )
}

/// `1234567` as `1,234,567`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn walk(
    schema: &Value,
    at: &Place,
    root: bool,
    times: Option<u64>,
    above: &[Unbounded],
    out: &mut Vec<RuleCost>,
) {
    if let Some(rules) = schema["x-kubernetes-validations"].as_array() {
        rules_at(schema, at, root, times, above, rules, out);
    }
    let each = decl::max_elements(schema);
    let inner = match (times, each) {
        (Some(t), Some(e)) => Some(t.saturating_mul(e)),
        _ => None,
    };
    let mut below = above.to_vec();
    if each.is_none() {
        let marker = if schema["type"] == "array" {
            "maxItems"
        } else {
            "maxProperties"
        };
        below.push(Unbounded {
            field: at.field.clone(),
            marker,
            of_items: at.items,
        });
    }
    for (name, prop) in schema["properties"].as_object().into_iter().flatten() {
        let embedded = prop["x-kubernetes-embedded-resource"] == true;
        walk(prop, &at.child(name), embedded, inner, &below, out);
    }
    for key in ["items", "additionalProperties"] {
        if let Some(s) = schema.get(key).filter(|s| s.is_object()) {
            let embedded = s["x-kubernetes-embedded-resource"] == true;
            walk(s, &at.items(), embedded, inner, &below, out);
        }
    }
}

fn rules_at(
    schema: &Value,
    at: &Place,
    root: bool,
    times: Option<u64>,
    above: &[Unbounded],
    rules: &[Value],
    out: &mut Vec<RuleCost>,
) {
    let Some(self_type) = decl::decl(schema, root, at) else {
        return;
    };
    // Under an unbounded list or map, the API server counts how many of this node fit in
    // a request.
    let times = times.unwrap_or((MAX_REQUEST / (self_type.min_size + 1)) as u64);
    for (index, rule) in rules.iter().enumerate() {
        for (key, message) in [("rule", false), ("messageExpression", true)] {
            let Some(text) = rule[key].as_str().filter(|t| !t.trim().is_empty()) else {
                continue;
            };
            let Some((per_call, mut unbounded)) = one(&self_type, text) else {
                continue;
            };
            if per_call > 0 && times > 1 {
                unbounded.extend(above.iter().cloned());
            }
            unbounded.sort();
            unbounded.dedup();
            out.push(RuleCost {
                field: at.field.clone(),
                index,
                expression: text.to_string(),
                message,
                per_call,
                times,
                cost: if per_call == 0 {
                    0
                } else {
                    per_call.saturating_mul(times)
                },
                unbounded,
            });
        }
    }
}

/// The most one evaluation of `text` costs, with `self` of type `self_type`, and the
/// unbounded fields that went into it; None if the expression does not parse (the
/// compile check says so).
fn one(self_type: &decl::Decl, text: &str) -> Option<(u64, Vec<Unbounded>)> {
    // The CEL crate is young: a panic in its parser is no estimate, not a crash.
    let parsed = std::panic::catch_unwind(|| cel::parser::Parser::new().parse(text)).ok()?;
    let ast = parsed.ok()?;
    let mut e = estimate::Estimator::new(self_type);
    let cost = e.cost(&ast);
    Some((cost.max, e.unbounded.into_iter().collect()))
}

#[cfg(test)]
mod tests;
