//! The CEL validations of a kind's schema (`x-kubernetes-validations`) evaluated offline,
//! as the API server evaluates them when a resource is created: each rule at its place in
//! the schema, with `self` the value there. With the Kubernetes CEL library's functions
//! that rules use (regular expressions, `all`/`exists`, `size`, string and list helpers);
//! a rule that needs what is not here (a function of the Kubernetes library this does not
//! have, `oldSelf` of a transition rule) is named in a note, never passed in silence.

use cel::{Context, Env, Program, Value as Cel};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

/// A validation that failed: where, which rule, and its message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    pub path: String,
    pub rule: String,
    pub message: String,
}

/// What the validations of a schema say about an object.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    pub violations: Vec<Violation>,
    /// Rules that could not be evaluated here, and why.
    pub notes: Vec<String>,
}

static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    // The strings, lists and math extensions hold most of the Kubernetes library's
    // functions (`lowerAscii`, `split`, `join`, `indexOf`, `sum`, `min`, `max`...).
    let _ = env.add_extension(cel::extensions::strings);
    let _ = env.add_extension(cel::extensions::lists);
    let _ = env.add_extension(cel::extensions::math);
    Arc::new(env)
});

/// Evaluates every `x-kubernetes-validations` rule of `schema` (an OpenAPI schema) on
/// `obj`, at `path` (`spec`, say, for the schema of the spec).
pub fn validate(schema: &Value, obj: &Value, path: &str) -> Verdict {
    let mut v = Verdict::default();
    walk(schema, obj, path, &mut v);
    v
}

fn walk(schema: &Value, obj: &Value, path: &str, out: &mut Verdict) {
    if obj.is_null() {
        return;
    }
    for rule in schema["x-kubernetes-validations"]
        .as_array()
        .into_iter()
        .flatten()
    {
        check(rule, obj, path, out);
    }
    if let (Some(props), Some(o)) = (schema["properties"].as_object(), obj.as_object()) {
        for (k, s) in props {
            if let Some(v) = o.get(k) {
                walk(s, v, &join(path, k), out);
            }
        }
    }
    if let (Some(items), Some(a)) = (schema.get("items"), obj.as_array()) {
        for (i, v) in a.iter().enumerate() {
            walk(items, v, &format!("{path}[{i}]"), out);
        }
    }
    if let (Some(values), Some(o)) = (schema.get("additionalProperties"), obj.as_object())
        && values.is_object()
    {
        for (k, v) in o {
            walk(values, v, &join(path, k), out);
        }
    }
}

fn join(path: &str, k: &str) -> String {
    if path.is_empty() {
        k.to_string()
    } else {
        format!("{path}.{k}")
    }
}

fn check(rule: &Value, obj: &Value, path: &str, out: &mut Verdict) {
    let Some(text) = rule["rule"].as_str() else {
        return;
    };
    if text.contains("oldSelf") {
        out.notes.push(format!(
            "{path}: `{text}` is a transition rule (it reads `oldSelf`, the object before an update): not checked on a new resource"
        ));
        return;
    }
    // The CEL crate is young: a panic inside it is a note on this rule, not a crash.
    let compiled = std::panic::catch_unwind(|| ENV.compile(text));
    let program = match compiled {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => {
            out.notes
                .push(format!("{path}: `{text}` could not be read here: {e}"));
            return;
        }
        Err(_) => {
            out.notes
                .push(format!("{path}: `{text}` could not be read here"));
            return;
        }
    };
    let violation = |message: String| Violation {
        path: path.to_string(),
        rule: text.to_string(),
        message,
    };
    match run(&program, obj) {
        Some(Ok(Cel::Bool(true))) => {}
        Some(Ok(Cel::Bool(false))) => out.violations.push(violation(message_of(rule, obj, text))),
        Some(Ok(other)) => out
            .notes
            .push(format!("{path}: `{text}` gave {other:?}, not a boolean")),
        // What the API server refuses the object for too: the rule fails on this value.
        Some(Err(
            e @ (cel::ExecutionError::NoSuchKey(_)
            | cel::ExecutionError::UnexpectedType { .. }
            | cel::ExecutionError::ValuesNotComparable(..)
            | cel::ExecutionError::UnsupportedIndex(..)),
        )) => out.violations.push(violation(format!(
            "the rule fails on this value ({e}); the API server refuses such an object"
        ))),
        Some(Err(e)) => out.notes.push(format!(
            "{path}: `{text}` could not be evaluated here ({e}): the API server will"
        )),
        None => out.notes.push(format!(
            "{path}: `{text}` could not be evaluated here: the API server will"
        )),
    }
}

/// The rule's message: its `messageExpression` evaluated, its `message`, or the rule.
fn message_of(rule: &Value, obj: &Value, text: &str) -> String {
    let from_expression = rule["messageExpression"].as_str().and_then(|m| {
        let p = std::panic::catch_unwind(|| ENV.compile(m)).ok()?.ok()?;
        match run(&p, obj)? {
            Ok(Cel::String(s)) => Some(s.to_string()),
            _ => None,
        }
    });
    from_expression
        .or_else(|| rule["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| format!("failed rule: {text}"))
}

/// Runs `program` with `self` = `obj`; None if the CEL crate panicked.
fn run(program: &Program, obj: &Value) -> Option<Result<Cel, cel::ExecutionError>> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let mut ctx = Context::with_env(ENV.clone());
        ctx.add_variable_from_value("self", to_cel(obj));
        program.execute(&ctx)
    }))
    .ok()
}

/// A JSON value as CEL sees a Kubernetes object: integers are `int`, objects maps.
fn to_cel(v: &Value) -> Cel {
    match v {
        Value::Null => Cel::Null,
        Value::Bool(b) => Cel::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Cel::Int(i),
            None => Cel::Float(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => Cel::String(Arc::new(s.clone())),
        Value::Array(a) => Cel::List(Arc::new(a.iter().map(to_cel).collect())),
        Value::Object(o) => {
            let m: HashMap<String, Cel> = o.iter().map(|(k, v)| (k.clone(), to_cel(v))).collect();
            Cel::from(m)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "mode": {"type": "string"},
            "size": {"type": "integer"},
            "db": {"type": "string", "x-kubernetes-validations": [{"rule": "self.startsWith('db-')", "message": "starts with db-"}]},
            "hosts": {"type": "array", "items": {"type": "string", "x-kubernetes-validations": [{"rule": "self.matches('^[a-z.]+$')"}]}},
        }, "x-kubernetes-validations": [
            {"rule": "self.mode == 'standalone' || self.size >= 3", "message": "replicated needs 3 or more"},
            {"rule": "self.hosts.all(h, size(h) < 20)"},
            {"rule": "!has(self.db) || self.db.lowerAscii() == self.db"},
        ]})
    }

    #[test]
    fn each_rule_runs_at_its_place_with_self_the_value_there() {
        let ok = json!({"mode": "standalone", "size": 1, "db": "db-one", "hosts": ["a.example"]});
        assert_eq!(validate(&schema(), &ok, "spec"), Verdict::default());
        let bad =
            json!({"mode": "replicated", "size": 2, "db": "DB-x", "hosts": ["a.example", "B!"]});
        let v = validate(&schema(), &bad, "spec");
        let found: Vec<(&str, &str)> = v
            .violations
            .iter()
            .map(|x| (x.path.as_str(), x.message.as_str()))
            .collect();
        assert_eq!(
            found,
            [
                ("spec", "replicated needs 3 or more"),
                (
                    "spec",
                    "failed rule: !has(self.db) || self.db.lowerAscii() == self.db"
                ),
                ("spec.db", "starts with db-"),
                ("spec.hosts[1]", "failed rule: self.matches('^[a-z.]+$')"),
            ]
        );
        assert!(v.notes.is_empty(), "{:?}", v.notes);
    }

    #[test]
    fn what_cannot_be_evaluated_here_is_named_never_passed() {
        let s = json!({"type": "object", "x-kubernetes-validations": [
            {"rule": "self.size == oldSelf.size"},
            {"rule": "isQuantity(self.storage)"},
        ]});
        let v = validate(&s, &json!({"size": 1, "storage": "1Gi"}), "spec");
        assert!(v.violations.is_empty());
        assert_eq!(v.notes.len(), 2, "{:?}", v.notes);
        assert!(v.notes[0].contains("transition rule"));
        assert!(v.notes[1].contains("isQuantity"), "{:?}", v.notes);
    }

    #[test]
    fn a_rule_failing_on_a_missing_field_is_refused_and_a_message_expression_is_used() {
        let s = json!({"type": "object", "x-kubernetes-validations": [
            {"rule": "self.db.startsWith('db-')"},
            {"rule": "self.size < 10", "messageExpression": "'size ' + string(self.size) + ' is 10 or more'"},
        ]});
        let v = validate(&s, &json!({"size": 12}), "spec");
        let messages: Vec<&str> = v.violations.iter().map(|x| x.message.as_str()).collect();
        assert_eq!(messages.len(), 2, "{v:?}");
        assert!(messages[0].contains("No such key: db"), "{messages:?}");
        assert_eq!(messages[1], "size 12 is 10 or more");
    }
}
