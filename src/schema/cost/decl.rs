//! The type a CEL rule sees at a place in a schema, with the sizes the API server assumes:
//! a port of Kubernetes' `SchemaDeclType` (k8s.io/apiserver/pkg/cel/common/schemas.go,
//! release 1.36). A string, list or map with no `maxLength`, `maxItems` or
//! `maxProperties` is as long as the largest request (3 MiB) could make it, given the
//! smallest serialized size of what it holds.

use serde_json::Value;
use std::collections::BTreeMap;

/// The largest request the API server takes (`MaxRequestSizeBytes`).
pub(super) const MAX_REQUEST: i64 = 3 * 1024 * 1024;
const MIN_STRING: i64 = 2;
const MIN_BOOL: i64 = 4;
const MIN_NUMBER: i64 = 1;
const MAX_DURATION: i64 = 32;
const MIN_DURATION: i64 = 3;
const DATE: i64 = 12;
const MAX_DATETIME: i64 = 32;
const MIN_DATETIME: i64 = 21;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Bool,
    Int,
    Double,
    String,
    Bytes,
    Duration,
    Timestamp,
    List,
    Map,
    Object,
    Dyn,
}

/// Where a size came from the request limit, and the marker that would bound it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Unbounded {
    /// The field, as the rule writes it (`spec.hosts`).
    pub field: String,
    /// `maxLength`, `maxItems` or `maxProperties`.
    pub marker: &'static str,
    /// Whether the marker is about the field's items (`[]string | maxLength=`).
    pub of_items: bool,
}

/// A CEL declared type with its size bounds.
#[derive(Debug, Clone)]
pub(super) struct Decl {
    pub kind: Kind,
    /// The largest size (`size()`) a value may have: characters, items or keys.
    pub max_elements: u64,
    /// The fewest bytes the value takes in JSON.
    pub min_size: i64,
    /// An object's fields, by their CEL names (escaped).
    pub fields: BTreeMap<String, Decl>,
    /// A list's items or a map's values.
    pub elem: Option<Box<Decl>>,
    /// Set when `max_elements` comes from the request limit.
    pub unbounded: Option<Unbounded>,
}

impl Decl {
    fn simple(kind: Kind, min_size: i64) -> Self {
        Decl {
            kind,
            max_elements: 0,
            min_size,
            fields: BTreeMap::new(),
            elem: None,
            unbounded: None,
        }
    }

    /// A map's keys: strings whose size the API server takes as 0.
    pub fn key() -> Self {
        Decl::simple(Kind::String, MIN_STRING)
    }
}

/// Where a node of the schema is, for the messages: the field as the rule writes it, and
/// whether the node is that field's items or values.
#[derive(Debug, Clone)]
pub(super) struct Place {
    pub field: String,
    pub items: bool,
}

impl Place {
    pub fn child(&self, name: &str) -> Place {
        Place {
            field: if self.field.is_empty() {
                name.to_string()
            } else {
                format!("{}.{name}", self.field)
            },
            items: false,
        }
    }

    pub fn items(&self) -> Place {
        Place {
            field: self.field.clone(),
            items: true,
        }
    }

    fn unbounded(&self, marker: &'static str) -> Option<Unbounded> {
        Some(Unbounded {
            field: self.field.clone(),
            marker,
            of_items: self.items,
        })
    }
}

/// The declared type of `schema`; `root` for the root of a resource (or an embedded
/// one), where `apiVersion`, `kind` and `metadata.name` are always there. None where the
/// API server has no type either (a list with no `items`).
pub(super) fn decl(schema: &Value, root: bool, at: &Place) -> Option<Decl> {
    if schema["x-kubernetes-int-or-string"] == true {
        let mut d = Decl::simple(Kind::Dyn, 1);
        match schema["maxLength"].as_i64() {
            Some(n) => d.max_elements = (n.max(0) * 4) as u64,
            None => {
                d.max_elements = (MAX_REQUEST - 2) as u64;
                d.unbounded = at.unbounded("maxLength");
            }
        }
        return Some(d);
    }
    match schema["type"].as_str()? {
        "array" => list(schema, at),
        "object" => object(schema, root, at),
        "string" => Some(string(schema, at)),
        "boolean" => Some(Decl::simple(Kind::Bool, MIN_BOOL)),
        "number" => Some(Decl::simple(Kind::Double, MIN_NUMBER)),
        "integer" => Some(Decl::simple(Kind::Int, MIN_NUMBER)),
        _ => None,
    }
}

fn embedded(schema: &Value) -> bool {
    schema["x-kubernetes-embedded-resource"] == true
}

fn list(schema: &Value, at: &Place) -> Option<Decl> {
    let items = schema.get("items")?;
    let elem = decl(items, embedded(items), &at.items())?;
    let mut d = Decl::simple(Kind::List, MIN_STRING);
    match schema["maxItems"].as_i64() {
        Some(n) => d.max_elements = n.max(0) as u64,
        None => {
            d.max_elements = ((MAX_REQUEST - 2) / (elem.min_size + 1)) as u64;
            d.unbounded = at.unbounded("maxItems");
        }
    }
    d.elem = Some(Box::new(elem));
    Some(d)
}

fn object(schema: &Value, root: bool, at: &Place) -> Option<Decl> {
    if let Some(values) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        let elem = decl(values, embedded(values), &at.items())?;
        let mut d = Decl::simple(Kind::Map, MIN_STRING);
        match schema["maxProperties"].as_i64() {
            Some(n) => d.max_elements = n.max(0) as u64,
            None => {
                d.max_elements = ((MAX_REQUEST - 2) / (elem.min_size + 6)) as u64;
                d.unbounded = at.unbounded("maxProperties");
            }
        }
        d.elem = Some(Box::new(elem));
        return Some(d);
    }
    let mut d = Decl::simple(Kind::Object, 2);
    let required: Vec<&str> = schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let props = schema["properties"].as_object();
    for (name, prop) in props.into_iter().flatten() {
        let Some(t) = decl(prop, embedded(prop), &at.child(name)) else {
            continue;
        };
        if required.contains(&name.as_str()) && prop.get("default").is_none() {
            d.min_size += name.len() as i64 + t.min_size + 4;
        }
        if let Some(escaped) = escape(name) {
            d.fields.insert(escaped, t);
        }
    }
    if root {
        // As the API server does (`WithTypeAndObjectMeta`): these are always readable.
        for name in ["apiVersion", "kind"] {
            d.fields.insert(name.to_string(), plain_string(at));
        }
        let mut meta = Decl::simple(Kind::Object, 2);
        meta.fields.insert("name".into(), plain_string(at));
        meta.fields.insert("generateName".into(), plain_string(at));
        d.fields.insert("metadata".to_string(), meta);
    }
    Some(d)
}

fn plain_string(at: &Place) -> Decl {
    string(
        &serde_json::json!({"type": "string"}),
        &at.child("metadata"),
    )
}

fn string(schema: &Value, at: &Place) -> Decl {
    let format = schema["format"].as_str().unwrap_or("");
    let (kind, min, fixed) = match format {
        "byte" => (Kind::Bytes, MIN_STRING, None),
        "duration" => (Kind::Duration, MIN_DURATION, Some(MAX_DURATION)),
        "date" => (Kind::Timestamp, DATE, Some(DATE)),
        "date-time" => (Kind::Timestamp, MIN_DATETIME, Some(MAX_DATETIME)),
        _ => (Kind::String, MIN_STRING, None),
    };
    let mut d = Decl::simple(kind, min);
    if let Some(n) = fixed {
        d.max_elements = n as u64;
        return d;
    }
    let enum_max = schema["enum"]
        .as_array()
        .filter(|e| !e.is_empty() && kind == Kind::String)
        .map(|e| e.iter().filter_map(Value::as_str).map(str::len).max());
    match (schema["maxLength"].as_i64(), enum_max) {
        (Some(n), _) if kind == Kind::String => d.max_elements = (n.max(0) * 4) as u64,
        (Some(n), _) => d.max_elements = n.max(0) as u64,
        (None, Some(m)) => d.max_elements = m.unwrap_or(0) as u64,
        (None, None) => {
            d.max_elements = (MAX_REQUEST - 2) as u64;
            d.unbounded = at.unbounded("maxLength");
        }
    }
    d
}

const RESERVED: [&str; 19] = [
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
];

/// A property's name as CEL reads it (`my-field` is `my__dash__field`); None for a name
/// CEL cannot spell (the field is not visible to rules).
pub(super) fn escape(name: &str) -> Option<String> {
    if RESERVED.contains(&name) || name == "void" || name == "while" {
        return Some(format!("__{name}__"));
    }
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_-./".contains(c))
    {
        return None;
    }
    let mut out = String::new();
    let mut rest = name;
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("__") {
            out.push_str("__underscores__");
            rest = &rest[2..];
            continue;
        }
        match c {
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c => out.push(c),
        }
        rest = &rest[c.len_utf8()..];
    }
    Some(out)
}

/// How many times a rule at a node may run per object: the product of the `maxItems` and
/// `maxProperties` of the lists and maps above it; None when one of them has no bound
/// (the API server then counts how many of the node's values fit in a request).
pub(super) fn max_elements(schema: &Value) -> Option<u64> {
    match schema["type"].as_str() {
        Some("object")
            if schema
                .get("additionalProperties")
                .is_some_and(Value::is_object) =>
        {
            schema["maxProperties"].as_i64().map(|n| n.max(0) as u64)
        }
        Some("array") => schema["maxItems"].as_i64().map(|n| n.max(0) as u64),
        _ => Some(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn top() -> Place {
        Place {
            field: "spec".into(),
            items: false,
        }
    }

    #[test]
    fn sizes_come_from_markers_or_the_request_limit() {
        let s = json!({"type": "object", "required": ["name"], "properties": {
            "name": {"type": "string", "maxLength": 10},
            "hosts": {"type": "array", "items": {"type": "string"}},
            "content": {"type": "object", "additionalProperties": {"type": "string"}, "maxProperties": 5},
            "mode": {"type": "string", "enum": ["a", "bbb"]},
        }});
        let d = decl(&s, false, &top()).unwrap();
        assert_eq!(d.fields["name"].max_elements, 40);
        assert_eq!(d.min_size, 2 + 4 + 2 + 4);
        let hosts = &d.fields["hosts"];
        assert_eq!(hosts.max_elements, (MAX_REQUEST as u64 - 2) / 3);
        assert_eq!(hosts.unbounded.as_ref().unwrap().marker, "maxItems");
        let item = hosts.elem.as_ref().unwrap();
        assert_eq!(item.unbounded.as_ref().unwrap().field, "spec.hosts");
        assert!(item.unbounded.as_ref().unwrap().of_items);
        assert_eq!(d.fields["content"].max_elements, 5);
        assert_eq!(d.fields["mode"].max_elements, 3);
    }

    #[test]
    fn names_are_escaped_as_cel_reads_them() {
        assert_eq!(escape("my-field").as_deref(), Some("my__dash__field"));
        assert_eq!(escape("a.b/c").as_deref(), Some("a__dot__b__slash__c"));
        assert_eq!(escape("namespace").as_deref(), Some("__namespace__"));
        assert_eq!(escape("a__b").as_deref(), Some("a__underscores__b"));
        assert_eq!(escape("a b"), None);
    }
}
