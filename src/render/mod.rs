//! Step 2: render the children of one custom resource from a compiled rule. Pure: the
//! custom resource goes in as JSON, the child objects come out as JSON, ready to apply.
//!
//! Only string scalars of a template are evaluated, each on its own, and their results
//! are put into the tree as values: never parsed as YAML again. So a custom resource can
//! never change the shape of a child, whatever its strings hold. A lone `{{ expr }}` keeps
//! the type of its value (an integer stays an integer); text around it makes a string.

mod context;
mod normalize;

pub use context::{Scope, merge_defaults, scope};
pub use normalize::normalize;

use crate::rules::compile::jinja_reason;
use crate::rules::{CompiledChild, CompiledRule, Key, Node};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Label naming the rule that made a child; children watches select on it.
pub const RULE_LABEL: &str = "ruleop.dev/rule";
/// Label naming the child id within its rule.
pub const CHILD_LABEL: &str = "ruleop.dev/child";
/// Annotation holding a hash of everything ruleop sets on the child.
pub const HASH_ANNOTATION: &str = "ruleop.dev/applied-hash";
/// The field manager of every write ruleop makes.
pub const FIELD_MANAGER: &str = "ruleop";

/// One rendered child, ready to apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub id: String,
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub namespace: String,
    pub object: Value,
    pub hash: String,
}

/// Why a custom resource's children could not be rendered. These are the user's
/// mistakes (in the custom resource, or in the rule for this custom resource): they are
/// reported on the custom resource and wait for a change.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum RenderError {
    /// The custom resource has no name.
    #[error("the custom resource has no metadata.name")]
    NoName,
    /// The custom resource is not namespaced.
    #[error(
        "the custom resource has no namespace; ruleop makes children only for namespaced kinds"
    )]
    NoNamespace,
    /// `spec` is there but is not an object.
    #[error("spec is not an object")]
    SpecNotObject,
    /// A template or expression failed for this custom resource.
    #[error("{at}: child `{child}`, field `{field}`: {reason}")]
    Eval {
        /// `file:line` of the template or expression in the rules file.
        at: String,
        child: String,
        field: String,
        reason: String,
    },
    /// The rendered child names a namespace other than the custom resource's.
    #[error(
        "child `{child}` would go to namespace {found:?}; children always live in the custom resource's namespace {expected:?}; nothing was created"
    )]
    OtherNamespace {
        child: String,
        found: String,
        expected: String,
    },
    /// The rendered child has no usable name.
    #[error("child `{child}`: metadata.name rendered to {found}, not a non-empty string")]
    BadName { child: String, found: String },
    /// Two children rendered the same object (same group, kind and name).
    #[error(
        "children `{first}` and `{second}` both render {kind} {name:?}; each apply would undo the other's: nothing was applied (give them names that differ for every resource)"
    )]
    SameObject {
        first: String,
        second: String,
        kind: String,
        name: String,
    },
}

/// Renders every child of `rule` whose condition holds for `cr`.
pub fn render(rule: &CompiledRule, cr: &Value) -> Result<Vec<Rendered>, RenderError> {
    render_in(rule, &scope(rule, cr)?)
}

/// Renders every child of `rule` whose condition holds, from an already built scope.
pub fn render_in(rule: &CompiledRule, scope: &Scope) -> Result<Vec<Rendered>, RenderError> {
    let mut out = Vec::with_capacity(rule.children.len());
    for child in &rule.children {
        if let Some(r) = render_child(rule, child, scope)? {
            out.push(r);
        }
    }
    check_distinct(&out)?;
    Ok(out)
}

/// The API group of an `apiVersion` (empty for the core group).
pub fn group_of(api_version: &str) -> &str {
    api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or("")
}

/// Refuses two rendered children that are one object.
fn check_distinct(children: &[Rendered]) -> Result<(), RenderError> {
    for (i, b) in children.iter().enumerate() {
        let same = |a: &&Rendered| {
            a.name == b.name
                && a.kind == b.kind
                && group_of(&a.api_version) == group_of(&b.api_version)
        };
        if let Some(a) = children[..i].iter().find(same) {
            return Err(RenderError::SameObject {
                first: a.id.clone(),
                second: b.id.clone(),
                kind: b.kind.clone(),
                name: b.name.clone(),
            });
        }
    }
    Ok(())
}

/// Renders one child, or None when its `when` condition is false.
pub fn render_child(
    rule: &CompiledRule,
    child: &CompiledChild,
    scope: &Scope,
) -> Result<Option<Rendered>, RenderError> {
    let eval_err = |at: &str, line: usize, e: minijinja::Error| RenderError::Eval {
        at: place(rule, line),
        child: child.id.clone(),
        field: field_of(at),
        reason: jinja_reason(&e),
    };
    if let Some(w) = &child.when {
        let v = rule
            .program
            .eval(w, &scope.ctx)
            .map_err(|e| eval_err(&w.at, w.line, e))?;
        if !v.is_true() {
            return Ok(None);
        }
    }
    let mut object = eval_node(rule, child, &child.template, scope)?;
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
    }))
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

fn eval_node(
    rule: &CompiledRule,
    child: &CompiledChild,
    node: &Node,
    scope: &Scope,
) -> Result<Value, RenderError> {
    let err = |at: &str, line: usize, reason: String| RenderError::Eval {
        at: place(rule, line),
        child: child.id.clone(),
        field: field_of(at),
        reason,
    };
    Ok(match node {
        Node::Literal(v) => v.clone(),
        Node::Expr(e) => {
            let v = rule
                .program
                .eval(e, &scope.ctx)
                .map_err(|x| err(&e.at, e.line, jinja_reason(&x)))?;
            if v.is_undefined() {
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
        Node::Text(t) => Value::String(
            rule.program
                .render(t, &scope.ctx)
                .map_err(|x| err(&t.at, t.line, jinja_reason(&x)))?,
        ),
        Node::Map(entries) => {
            let mut m = Map::with_capacity(entries.len());
            for (k, v) in entries {
                let key = match k {
                    Key::Literal(s) => s.clone(),
                    Key::Text(t) => rule
                        .program
                        .render(t, &scope.ctx)
                        .map_err(|x| err(&t.at, t.line, jinja_reason(&x)))?,
                };
                let value = eval_node(rule, child, v, scope)?;
                if !value.is_null() {
                    m.insert(key, value);
                }
            }
            Value::Object(m)
        }
        Node::Seq(items) => {
            let mut out = Vec::with_capacity(items.len());
            for i in items {
                let v = eval_node(rule, child, i, scope)?;
                if !v.is_null() {
                    out.push(v);
                }
            }
            Value::Array(out)
        }
    })
}

#[cfg(test)]
mod tests;
