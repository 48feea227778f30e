//! A template compiled node by node: every string scalar on its own (a literal, a lone
//! expression, or text), templated keys, and repeated list entries (`forEach` inside an
//! object), whose item variables the nodes inside see.

use super::compiler::{
    CHILD_VARIABLES, Compiler, INDEX_VARIABLE, NO_EXTRA, READY_VARIABLES, Scalar,
    TEMPLATE_VARIABLES, classify, is_identifier,
};
use super::model::{Each, Key, Node};
use serde_json::Value;
use std::sync::Arc;

/// A list entry that repeats: `{forEach: <list>, as: <name>, item: <entry>}`.
pub(super) struct Repetition<'a> {
    over: &'a str,
    var: Option<&'a str>,
    item: &'a Value,
}

/// Whether a list entry is a repetition: a mapping of `forEach` (a string), `item`, and
/// optionally `as`, and nothing else.
pub(super) fn repetition(v: &Value) -> Option<Repetition<'_>> {
    let m = v.as_object()?;
    let keys_ok = m
        .keys()
        .all(|k| matches!(k.as_str(), "forEach" | "as" | "item"));
    if !keys_ok {
        return None;
    }
    Some(Repetition {
        over: m.get("forEach")?.as_str()?,
        var: m.get("as").and_then(Value::as_str),
        item: m.get("item")?,
    })
}

/// `forEach` is an expression, like `when`; `"{{ spec.ports }}"` is taken as `spec.ports`.
pub(super) fn bare(src: &str) -> &str {
    match classify(src) {
        Scalar::Expr(inner) => inner,
        _ => src,
    }
}

impl Compiler<'_> {
    /// The item variable of a repetition: `as`, or `item`.
    pub(super) fn item_variable(
        &mut self,
        path: &str,
        child: &str,
        given: Option<&str>,
    ) -> Arc<str> {
        let var = given.unwrap_or("item");
        let taken = TEMPLATE_VARIABLES.contains(&var)
            || CHILD_VARIABLES.contains(&var)
            || READY_VARIABLES.contains(&var)
            || var == INDEX_VARIABLE
            || self.scope_vars.iter().any(|v| v == var);
        if !is_identifier(var) || taken {
            self.error(
                path,
                Some(child),
                format!("`as: {var}` cannot name the item: it is not an identifier, or another variable has that name"),
                "pick another name, e.g. `as: port`",
            );
        }
        var.into()
    }

    /// Compiles a repeated list entry.
    pub(super) fn each(&mut self, rep: Repetition<'_>, path: &str, child: &str) -> Node {
        let var = self.item_variable(&format!("{path}.as"), child, rep.var);
        let over = self.expr(
            &format!("{path}.forEach"),
            Some(child),
            bare(rep.over),
            NO_EXTRA,
        );
        let outer = self.scope_vars.len();
        self.scope_vars.push(var.to_string());
        self.scope_vars.push(INDEX_VARIABLE.into());
        let item = self.node(rep.item, &format!("{path}.item"), child);
        self.scope_vars.truncate(outer);
        Node::Each(Box::new((Each { over, var }, item)))
    }
}

impl Compiler<'_> {
    /// Compiles a template node: each string scalar on its own.
    pub(super) fn node(&mut self, v: &Value, path: &str, child: &str) -> Node {
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
                    .map(|(i, v)| {
                        let p = format!("{path}[{i}]");
                        match repetition(v) {
                            Some(rep) => self.each(rep, &p, child),
                            None => self.node(v, &p, child),
                        }
                    })
                    .collect(),
            ),
            other => Node::Literal(other.clone()),
        }
    }
}
