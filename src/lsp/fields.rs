//! The fields a path can go on with, and what a field is: from the rules format's JSON
//! Schema (the keys of a rules file), a kind's OpenAPI schema (built-in kinds from the
//! schemas ruleop ships, CRDs given to the server) and the rule's own `schema:` section
//! (the watched kind's spec).

use super::document::Part;
use crate::schema::typed;
use serde_json::Value;

/// The schema of `kind` in `api_version`: built in, or of a CRD the server was given.
pub fn kind_schema(api_version: &str, kind: &str) -> Option<Value> {
    typed::builtin(api_version, kind)
        .cloned()
        .or_else(|| typed::from_crds(api_version, kind))
}

/// Follows `$ref`s: the rules format's (`#/$defs/X`, in `root`) and the shipped schemas'.
fn resolve<'a>(root: &'a Value, s: &'a Value) -> &'a Value {
    let mut s = s;
    for _ in 0..8 {
        match s["$ref"].as_str().and_then(|r| r.strip_prefix("#/$defs/")) {
            Some(name) => s = &root["$defs"][name],
            None => return typed::resolve(s),
        }
    }
    s
}

/// The first alternative of `anyOf`/`oneOf`/`allOf` that is an object or a list.
fn object_like<'a>(root: &'a Value, s: &'a Value) -> &'a Value {
    let s = resolve(root, s);
    if s.get("properties").is_some() || s.get("items").is_some() {
        return s;
    }
    for k in ["anyOf", "oneOf", "allOf"] {
        for alt in s[k].as_array().into_iter().flatten() {
            let alt = resolve(root, alt);
            if alt.get("properties").is_some() || alt.get("items").is_some() {
                return alt;
            }
        }
    }
    s
}

/// The schema at `path` (segments; `[N]` or `*` for a list's items) under `s`.
pub fn at<'a>(root: &'a Value, s: &'a Value, path: &[&str]) -> Option<&'a Value> {
    let mut s = object_like(root, s);
    for seg in path {
        let next = if seg.starts_with('[') || *seg == "*" {
            s.get("items")?
        } else {
            s["properties"].get(*seg)?
        };
        s = object_like(root, next);
    }
    Some(s)
}

/// The fields of the object `s`, each with a line saying what it is.
pub fn fields(root: &Value, s: &Value) -> Vec<(String, String)> {
    let s = object_like(root, s);
    s["properties"]
        .as_object()
        .map(|props| {
            props
                .iter()
                .map(|(k, v)| (k.clone(), describe(root, v)))
                .collect()
        })
        .unwrap_or_default()
}

/// A field's type, default, values and description, as Markdown.
pub fn describe(root: &Value, s: &Value) -> String {
    let r = resolve(root, s);
    let ty = r["type"]
        .as_str()
        .map(str::to_string)
        .or_else(|| r["format"].as_str().map(str::to_string))
        .unwrap_or_else(|| {
            if r.get("properties").is_some() {
                "object".into()
            } else {
                "any".into()
            }
        });
    let mut out = format!("`{ty}`");
    if let Some(f) = r["format"].as_str().filter(|f| *f != ty) {
        out += &format!(" ({f})");
    }
    if let Some(d) = r.get("default") {
        out += &format!(", default `{d}`");
    }
    if let Some(e) = r["enum"].as_array() {
        let values: Vec<String> = e
            .iter()
            .map(|v| format!("`{}`", v.as_str().unwrap_or(&v.to_string())))
            .collect();
        out += &format!(", one of {}", values.join(", "));
    }
    let description = s["description"].as_str().or(r["description"].as_str());
    if let Some(d) = description {
        out += &format!("\n\n{d}");
    }
    out
}

/// The watched kind's schema, from the rule's `schema:` section as written.
pub fn own_schema(part: &Part) -> Option<Value> {
    let s = &part.value["schema"];
    let mut props = serde_json::Map::new();
    for key in ["spec", "status"] {
        if let Some(fields) = s[key].as_object()
            && let Ok(o) = crate::schema::fields::object(fields, key)
        {
            props.insert(key.to_string(), o);
        }
    }
    (!props.is_empty()).then(|| serde_json::json!({"type": "object", "properties": props}))
}

/// Splits a dotted path into segments (`a.b[0].c` → `a`, `b`, `[0]`, `c`).
pub fn segments(path: &str) -> Vec<&str> {
    let mut out = Vec::new();
    for part in path.trim_start_matches("$.").split('.') {
        let mut rest = part;
        while let Some(i) = rest.find('[') {
            if i > 0 {
                out.push(&rest[..i]);
            }
            let end = rest[i..].find(']').map_or(rest.len(), |e| i + e + 1);
            out.push(&rest[i..end]);
            rest = &rest[end..];
        }
        if !rest.is_empty() {
            out.push(rest);
        }
    }
    out
}
