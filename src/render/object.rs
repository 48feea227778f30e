//! One object of a child: its template evaluated node by node, then what ruleop adds
//! (namespace, labels, ownerReference, hash annotation).

use super::context::Scope;
use super::model::{
    CHILD_LABEL, HASH_ANNOTATION, Item, ON_REMOVE_ANNOTATION, RULE_LABEL, RenderError, Rendered,
};
use super::normalize::normalize;
use crate::rules::compile::jinja_reason;
use crate::rules::program::ExprRef;
use crate::rules::spec::OnRemove;
use crate::rules::{CompiledChild, CompiledRule, Key, Node};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Whether an expression reads a live child (`observed.<id>...`): a value it lacks is
/// one the cluster has not filled in yet (a Service's clusterIP), to be waited for.
fn reads_observed(paths: &[String]) -> bool {
    paths.iter().any(|p| p.starts_with("observed."))
}

/// The most items one repetition may have.
pub const MAX_ITEMS: usize = 1000;

/// The items of a repetition: `over` must give a list (none gives no items).
pub(super) fn items_of(
    rule: &CompiledRule,
    over: &ExprRef,
    ctx: &minijinja::Value,
) -> Result<Vec<minijinja::Value>, String> {
    super::budget::spend().map_err(|e| e.to_string())?;
    let v = rule.program.eval(over, ctx).map_err(|e| jinja_reason(&e))?;
    if v.is_none() {
        return Ok(Vec::new());
    }
    if v.is_undefined() {
        return Err(format!(
            "`forEach: {}` is undefined for this resource; give it a value or write `{} | default([])`",
            over.source, over.source
        ));
    }
    if v.kind() != minijinja::value::ValueKind::Seq {
        return Err(format!(
            "`forEach: {}` gave {} ({v}), not a list",
            over.source,
            v.kind()
        ));
    }
    let items: Vec<minijinja::Value> = v
        .try_iter()
        .map(Iterator::collect)
        .map_err(|e| jinja_reason(&e))?;
    if items.len() > MAX_ITEMS {
        return Err(format!(
            "`forEach: {}` gave {} items, more than the {MAX_ITEMS} allowed",
            over.source,
            items.len()
        ));
    }
    Ok(items)
}

/// `ctx` with an item bound to `var` and its position to `index`.
pub(super) fn item_context(
    ctx: &minijinja::Value,
    var: &str,
    index: usize,
    value: minijinja::Value,
) -> minijinja::Value {
    let vars = std::collections::BTreeMap::from([
        (var, value),
        (
            crate::rules::compile::INDEX_VARIABLE,
            minijinja::Value::from(index),
        ),
    ]);
    minijinja::value::merge_maps([minijinja::Value::from(vars), ctx.clone()])
}

/// Renders one object of a child with `ctx` as its variables (the scope's, plus what the
/// child reads of others and its item), or None when its `when` condition is false.
pub fn render_child(
    rule: &CompiledRule,
    child: &CompiledChild,
    scope: &Scope,
    ctx: &minijinja::Value,
    item: Option<Item>,
) -> Result<Option<Rendered>, RenderError> {
    let eval_err = |at: &str, line: usize, e: minijinja::Error| RenderError::Eval {
        at: place(rule, line),
        child: child.id.clone(),
        field: field_of(at),
        reason: jinja_reason(&e),
    };
    if let Some(w) = &child.when {
        super::budget::spend()?;
        let v = rule
            .program
            .eval(w, ctx)
            .map_err(|e| eval_err(&w.at, w.line, e))?;
        if !v.is_true() {
            return Ok(None);
        }
    }
    let mut object = eval_node(rule, &child.id, &child.template, ctx)?;
    normalize(&mut object);
    let Some(obj) = object.as_object_mut() else {
        return Err(RenderError::Eval {
            at: place(rule, child.at.line),
            child: child.id.clone(),
            field: String::new(),
            reason: "template did not give an object".into(),
        });
    };
    obj.insert(
        "apiVersion".into(),
        Value::String(child.api_version.clone()),
    );
    obj.insert("kind".into(), Value::String(child.kind.clone()));
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    let meta = meta
        .as_object_mut()
        .expect("metadata was just made an object");
    let name = placed(child, scope, meta)?;
    let labels = meta
        .entry("labels")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Some(labels) = labels.as_object_mut() {
        labels.insert(RULE_LABEL.into(), Value::String(rule.name.clone()));
        labels.insert(CHILD_LABEL.into(), Value::String(child.id.clone()));
    }
    if let Some(owner) = &scope.owner {
        meta.insert("ownerReferences".into(), Value::Array(vec![owner.clone()]));
    }
    if child.on_remove == OnRemove::Orphan {
        let ann = meta
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(ann) = ann.as_object_mut() {
            ann.insert(ON_REMOVE_ANNOTATION.into(), Value::String("Orphan".into()));
        }
    }
    // One serialization serves the size cap and the hash.
    let bytes = serde_json::to_vec(&object).unwrap_or_default();
    let size = bytes.len();
    if size > crate::rules::program::MAX_OBJECT_BYTES {
        return Err(RenderError::Eval {
            at: place(rule, child.at.line),
            child: child.id.clone(),
            field: String::new(),
            reason: format!(
                "the rendered object is {size} bytes, more than the {} allowed",
                crate::rules::program::MAX_OBJECT_BYTES
            ),
        });
    }
    let hash = hash_bytes(&bytes);
    if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        let ann = meta
            .entry("annotations")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(ann) = ann.as_object_mut() {
            ann.insert(HASH_ANNOTATION.into(), Value::String(hash.clone()));
        }
    }
    Ok(Some(Rendered {
        id: child.id.clone(),
        api_version: child.api_version.clone(),
        kind: child.kind.clone(),
        name,
        namespace: scope.namespace.clone(),
        object,
        hash,
        item,
        size,
    }))
}

/// The rendered object's name, once its namespace is the resource's (set when left out,
/// refused when another) and its name one the kind admits.
fn placed(
    child: &CompiledChild,
    scope: &Scope,
    meta: &mut Map<String, Value>,
) -> Result<String, RenderError> {
    match meta.get("namespace") {
        None => {}
        Some(Value::String(ns)) if *ns == scope.namespace => {}
        Some(other) => {
            return Err(RenderError::OtherNamespace {
                child: child.id.clone(),
                found: other
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| other.to_string()),
                expected: scope.namespace.clone(),
            });
        }
    }
    meta.insert("namespace".into(), Value::String(scope.namespace.clone()));
    let name = match meta.get("name") {
        Some(Value::String(n)) if !n.is_empty() => n.clone(),
        other => {
            return Err(RenderError::BadName {
                child: child.id.clone(),
                found: other
                    .map(Value::to_string)
                    .unwrap_or_else(|| "nothing".into()),
            });
        }
    };
    if let Some(why) = crate::schema::names::invalid(
        super::model::group_of(&child.api_version),
        &child.kind,
        &name,
    ) {
        return Err(RenderError::InvalidName {
            child: child.id.clone(),
            name,
            why,
        });
    }
    Ok(name)
}

/// `file:line` in the rule's file.
fn place(rule: &CompiledRule, line: usize) -> String {
    format!("{}:{line}", rule.at.file.display())
}

/// A short stable hash of a JSON value.
pub fn hash_of(v: &Value) -> String {
    hash_bytes(&serde_json::to_vec(v).unwrap_or_default())
}

fn hash_bytes(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .take(10)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `children[0].template.spec.replicas` → `spec.replicas`: the field in the child.
fn field_of(at: &str) -> String {
    match at.find(".template") {
        Some(i) => at[i + ".template".len()..]
            .trim_start_matches('.')
            .to_string(),
        None => at.rsplit('.').next().unwrap_or(at).to_string(),
    }
}

/// Evaluates one template node for the child (or existing object) `id`.
pub(super) fn eval_value(
    rule: &CompiledRule,
    id: &str,
    node: &Node,
    ctx: &minijinja::Value,
) -> Result<Value, RenderError> {
    eval_node(rule, id, node, ctx)
}

fn eval_node(
    rule: &CompiledRule,
    id: &str,
    node: &Node,
    ctx: &minijinja::Value,
) -> Result<Value, RenderError> {
    let err = |at: &str, line: usize, reason: String| RenderError::Eval {
        at: place(rule, line),
        child: id.to_string(),
        field: field_of(at),
        reason,
    };
    if matches!(node, Node::Expr(_) | Node::Text(_)) {
        super::budget::spend()?;
    }
    Ok(match node {
        Node::Literal(v) => v.clone(),
        Node::Expr(e) => {
            let unobserved = || {
                reads_observed(&rule.program.expression_paths(e)).then(|| RenderError::Unobserved {
                    child: id.to_string(),
                    what: e.source.to_string(),
                })
            };
            let v = rule.program.eval(e, ctx).map_err(|x| {
                // `observed.lb.status.loadBalancer.ingress[0].ip` before there is an
                // address: an index into nothing, not yet there rather than wrong.
                match (x.kind(), unobserved()) {
                    (minijinja::ErrorKind::UndefinedError, Some(wait)) => wait,
                    _ => err(&e.at, e.line, jinja_reason(&x)),
                }
            })?;
            if v.is_undefined() {
                if let Some(wait) = unobserved() {
                    return Err(wait);
                }
                return Err(err(
                    &e.at,
                    e.line,
                    format!(
                        "`{}` is undefined for this resource; give it a value or write `{} | default(...)`",
                        e.source, e.source
                    ),
                ));
            }
            serde_json::to_value(&v).map_err(|x| {
                err(
                    &e.at,
                    e.line,
                    format!("value cannot be written as JSON: {x}"),
                )
            })?
        }
        Node::Text(t) => Value::String(rule.program.render(t, ctx).map_err(|x| {
            let paths = rule.program.template_paths(t);
            if x.kind() == minijinja::ErrorKind::UndefinedError && reads_observed(&paths) {
                RenderError::Unobserved {
                    child: id.to_string(),
                    what: paths.join(", "),
                }
            } else {
                err(&t.at, t.line, jinja_reason(&x))
            }
        })?),
        Node::Map(entries) => {
            let mut m = Map::with_capacity(entries.len());
            for (k, v) in entries {
                let key = match k {
                    Key::Literal(s) => s.clone(),
                    Key::Text(t) => rule
                        .program
                        .render(t, ctx)
                        .map_err(|x| err(&t.at, t.line, jinja_reason(&x)))?,
                };
                let value = eval_node(rule, id, v, ctx)?;
                if !value.is_null() {
                    m.insert(key, value);
                }
            }
            Value::Object(m)
        }
        Node::Seq(items) => {
            let mut out = Vec::with_capacity(items.len());
            for i in items {
                if let Node::Each(each) = i {
                    let (e, item) = &**each;
                    let list = items_of(rule, &e.over, ctx)
                        .map_err(|reason| err(&e.over.at, e.over.line, reason))?;
                    for (index, value) in list.into_iter().enumerate() {
                        let ctx = item_context(ctx, &e.var, index, value);
                        let v = eval_node(rule, id, item, &ctx)?;
                        if !v.is_null() {
                            out.push(v);
                        }
                    }
                    continue;
                }
                let v = eval_node(rule, id, i, ctx)?;
                if !v.is_null() {
                    out.push(v);
                }
            }
            Value::Array(out)
        }
        // Only inside a list (the compiler puts it nowhere else).
        Node::Each(_) => Value::Null,
    })
}
