//! Reading, moving and sorting fields of a spec by path (segments under `spec`).

use serde_json::{Map, Value};

/// The value at `path`.
pub fn get<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.as_object()?.get(k))
}

/// Takes the value at `path` out, and the objects its removal left empty.
pub fn take(v: &mut Value, path: &[String]) -> Option<Value> {
    let (first, rest) = path.split_first()?;
    let o = v.as_object_mut()?;
    if rest.is_empty() {
        return o.remove(first);
    }
    let inner = o.get_mut(first)?;
    let out = take(inner, rest)?;
    if inner.as_object().is_some_and(Map::is_empty) {
        o.remove(first);
    }
    Some(out)
}

/// Sets `path` to `value`, making the objects on the way; an object meets an object
/// already there field by field.
pub fn set(v: &mut Value, path: &[String], value: Value) {
    let Some((first, rest)) = path.split_first() else {
        merge(v, value);
        return;
    };
    if !v.is_object() {
        *v = Value::Object(Map::new());
    }
    let Some(o) = v.as_object_mut() else {
        return;
    };
    if rest.is_empty() {
        match o.get_mut(first) {
            Some(old) if old.is_object() && value.is_object() => merge(old, value),
            _ => {
                o.insert(first.clone(), value);
            }
        }
        return;
    }
    set(o.entry(first.clone()).or_insert(Value::Null), rest, value);
}

/// Puts `from`'s fields into `into` (objects field by field; anything else replaces).
pub fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                match a.get_mut(&k) {
                    Some(old) => merge(old, v),
                    None => {
                        a.insert(k, v);
                    }
                }
            }
        }
        (into, from) => *into = from,
    }
}

/// Sorts `v` by `schema`: what has a place in it (at the same path, of a type it takes)
/// is returned; the rest goes to `lost`, by dotted path from `at`.
pub fn split(v: Value, schema: &Value, at: &str, lost: &mut Map<String, Value>) -> Value {
    let props = schema["properties"].as_object().filter(|p| !p.is_empty());
    match (v, props) {
        (Value::Object(m), Some(props)) => {
            let mut out = Map::new();
            for (k, x) in m {
                let here = format!("{at}.{k}");
                match props.get(&k) {
                    Some(s) if fits(&x, s) => {
                        out.insert(k, split(x, s, &here, lost));
                    }
                    _ => {
                        lost.insert(here, x);
                    }
                }
            }
            Value::Object(out)
        }
        (v, _) => v,
    }
}

/// Whether `v` is of a type `schema` takes.
pub fn fits(v: &Value, schema: &Value) -> bool {
    crate::schema::fields::admits(schema, v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(s: &str) -> Vec<String> {
        s.split('.').map(str::to_string).collect()
    }

    #[test]
    fn take_prunes_the_objects_it_empties_and_set_makes_them() {
        let mut v = json!({"service": {"type": "x"}, "a": 1});
        assert_eq!(take(&mut v, &p("service.type")), Some(json!("x")));
        assert_eq!(v, json!({"a": 1}));
        set(&mut v, &p("b.c.d"), json!(2));
        assert_eq!(v, json!({"a": 1, "b": {"c": {"d": 2}}}));
        set(&mut v, &p("b"), json!({"e": 3}));
        assert_eq!(v["b"], json!({"c": {"d": 2}, "e": 3}));
    }

    #[test]
    fn split_keeps_what_has_a_place_of_its_type() {
        let schema = json!({"type": "object", "properties": {
            "a": {"type": "integer"}, "m": {"type": "object", "additionalProperties": {"type": "string"}},
            "o": {"type": "object", "properties": {"x": {"type": "string"}}}}});
        let mut lost = Map::new();
        let kept = split(
            json!({"a": "no", "m": {"k": "v"}, "o": {"x": "y", "z": 1}, "gone": true}),
            &schema,
            "spec",
            &mut lost,
        );
        assert_eq!(kept, json!({"m": {"k": "v"}, "o": {"x": "y"}}));
        assert_eq!(
            Value::Object(lost),
            json!({"spec.a": "no", "spec.o.z": 1, "spec.gone": true})
        );
    }
}
