//! The kind's fields, written one per line (`replicas: integer | default=2 minimum=1`),
//! made into OpenAPI; their defaults and bounds. Pure.
//!
//! A field is one line: its type, then markers: `replicas: integer | default=2
//! minimum=1`. Types: `string`, `integer`, `number`, `boolean`, `object` (any fields),
//! `array` (of anything), `[]<type>`, `map[string]<type>`; a nested mapping is an object
//! with those fields.
//! Markers: `required=true`, `default=<YAML value>`, `enum=a,b,c`, `minimum=`,
//! `maximum=`, `minLength=`, `maxLength=`, `minItems=`, `maxItems=`, `minProperties=`,
//! `maxProperties=`, `pattern=`,
//! `format=`, `description=`, `nullable=true`; a value with spaces is quoted (`"..."` or
//! `'...'`), inside which a backslash escapes only the quote and itself.

use serde_json::{Map, Value, json};

/// A problem with one field of the schema: its dotted path and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaProblem {
    pub path: String,
    pub problem: String,
    pub fix: String,
}

pub(crate) fn problem(
    path: &str,
    problem: impl Into<String>,
    fix: impl Into<String>,
) -> SchemaProblem {
    SchemaProblem {
        path: path.to_string(),
        problem: problem.into(),
        fix: fix.into(),
    }
}

/// Splits `a=1 b="x y" c=z` into (key, value) pairs.
fn markers(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let Some((key, after)) = rest.split_once('=') else {
            return Err(format!("marker {rest:?} has no `=value`"));
        };
        let key = key.trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            return Err(format!("{key:?} is not a marker name"));
        }
        // A value in double or single quotes (single ones need no escaping inside a
        // double-quoted YAML line: `"string | description='The image'"`).
        let quote = after.chars().next().filter(|c| *c == '"' || *c == '\'');
        let (value, next) = if let Some(q) = quote {
            let quoted = &after[1..];
            let mut value = String::new();
            let mut chars = quoted.char_indices();
            let mut end = None;
            // Inside quotes a backslash escapes only the quote and itself (`\"`, `\\`);
            // any other backslash is kept, so a pattern's `\d` and `\.` stay as written.
            while let Some((i, c)) = chars.next() {
                match c {
                    '\\' => match quoted[i + 1..].chars().next() {
                        Some(n) if n == q || n == '\\' => {
                            chars.next();
                            value.push(n);
                        }
                        _ => value.push('\\'),
                    },
                    c if c == q => {
                        end = Some(i);
                        break;
                    }
                    c => value.push(c),
                }
            }
            let Some(end) = end else {
                return Err(format!("the quoted value of `{key}` has no closing quote"));
            };
            (value, &quoted[end + 1..])
        } else {
            let end = after.find(char::is_whitespace).unwrap_or(after.len());
            (after[..end].to_string(), &after[end..])
        };
        out.push((key.to_string(), value));
        rest = next.trim_start();
    }
    Ok(out)
}

/// The OpenAPI of a type name.
fn type_schema(ty: &str) -> Result<Value, String> {
    let ty = ty.trim();
    if let Some(item) = ty.strip_prefix("[]") {
        return Ok(json!({"type": "array", "items": type_schema(item)?}));
    }
    if let Some(item) = ty.strip_prefix("map[string]") {
        return Ok(json!({"type": "object", "additionalProperties": type_schema(item)?}));
    }
    match ty {
        "string" | "integer" | "number" | "boolean" => Ok(json!({"type": ty})),
        // A port or a percentage: the API server takes either (`targetPort`, `maxSurge`).
        "int-or-string" => Ok(int_or_string()),
        // A resource quantity (`1Gi`, `500m`, `2`), as Kubernetes writes its schema.
        "quantity" => {
            let mut s = int_or_string();
            s["pattern"] = json!(QUANTITY);
            Ok(s)
        }
        "object" => Ok(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})),
        // A list of anything (a status field `type: array` with no `schema` line).
        "array" => {
            Ok(json!({"type": "array", "items": {"x-kubernetes-preserve-unknown-fields": true}}))
        }
        other => Err(format!("unknown type {other:?}")),
    }
}

/// The pattern of a Kubernetes resource quantity (as CRDs generated for `resource.Quantity` carry).
pub const QUANTITY: &str = r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

fn int_or_string() -> Value {
    json!({"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": true})
}

/// A marker value as YAML (`2` a number, `true` a boolean, `[]` a list, else a string).
fn yaml_value(text: &str) -> Value {
    serde_yaml::from_str::<Value>(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// Whether `v` is of the schema's type (for defaults and enum values).
pub(crate) fn admits(schema: &Value, v: &Value) -> bool {
    if schema["x-kubernetes-int-or-string"] == true {
        return v.is_string() || v.is_i64() || v.is_u64();
    }
    match schema["type"].as_str() {
        Some("string") => v.is_string(),
        Some("integer") => v.is_i64() || v.is_u64(),
        Some("number") => v.is_number(),
        Some("boolean") => v.is_boolean(),
        Some("array") => v.is_array(),
        Some("object") => v.is_object(),
        _ => true,
    }
}

/// The markers of a field line (`type | name=value ...`), and what each means.
pub const MARKERS: &[(&str, &str)] = &[
    ("required", "`required=true`: the field must be given"),
    (
        "default",
        "the value the API server fills in when the field is left out (`default=2`)",
    ),
    (
        "enum",
        "the values allowed, apart by commas (`enum=ClusterIP,NodePort`)",
    ),
    (
        "minimum",
        "the smallest number allowed (on a list or a map: of each item)",
    ),
    (
        "maximum",
        "the largest number allowed (on a list or a map: of each item)",
    ),
    ("minLength", "the shortest string allowed"),
    ("maxLength", "the longest string allowed"),
    ("minItems", "the fewest items a list may have"),
    ("maxItems", "the most items a list may have"),
    ("minProperties", "the fewest keys a map may have"),
    (
        "maxProperties",
        "the most keys a map may have (a CEL rule over the map needs it for its cost)",
    ),
    (
        "pattern",
        "a regular expression (RE2) every string must match",
    ),
    (
        "format",
        "the OpenAPI format (`int32`, `date-time`, `uri`, ...)",
    ),
    (
        "description",
        "the field's description, shown by `kubectl explain` (in quotes when it has spaces)",
    ),
    ("nullable", "`nullable=true`: the field may be null"),
    (
        "rule",
        "a CEL validation of the field (`self` is its value): `rule=\"self > 0\"`",
    ),
    ("message", "the message of the `rule=` just before it"),
];

/// The types a field line may start with.
pub const TYPES: &[&str] = &[
    "string",
    "integer",
    "number",
    "boolean",
    "object",
    "array",
    "int-or-string",
    "quantity",
    "[]string",
    "map[string]string",
];

/// One field written as `type | markers`; gives its OpenAPI and whether it is required.
pub fn field(text: &str, path: &str) -> Result<(Value, bool), SchemaProblem> {
    let (ty, marks) = text.split_once('|').unwrap_or((text, ""));
    let bad = |p: String, fix: &str| problem(path, p, fix);
    let mut schema = type_schema(ty).map_err(|p| {
        bad(p, "a type is string, integer, number, boolean, object, array, int-or-string, quantity, []<type> or map[string]<type>, then `|` and the markers: `replicas: integer | default=2`")
    })?;
    // On a list or a map, the markers about values apply to its items (`[]string |
    // pattern=...` checks each string; on the list itself it would check nothing).
    let item = match ty.trim() {
        t if t.starts_with("[]") => Some("items"),
        t if t.starts_with("map[string]") => Some("additionalProperties"),
        _ => None,
    };
    let mut required = false;
    let marks = markers(marks).map_err(|p| {
        bad(p, "markers are `name=value`, apart by spaces; a value with spaces in quotes, inside which `\\\"` is a quote and `\\\\` a backslash: `description=\"The \\\"main\\\" image\"`")
    })?;
    for (key, value) in marks {
        let number = || -> Result<Value, SchemaProblem> {
            if let Ok(i) = value.parse::<i64>() {
                return Ok(json!(i));
            }
            value.parse::<f64>().map(|f| json!(f)).map_err(|_| {
                bad(
                    format!("`{key}={value}` is not a number"),
                    &format!("write a number: `{key}=1`"),
                )
            })
        };
        match key.as_str() {
            "required" => required = value == "true",
            "default" => set_default(&mut schema, &value, path)?,
            "enum" => set_enum(values_of(&mut schema, item), &value),
            "minimum" | "maximum" | "minLength" | "maxLength" => {
                values_of(&mut schema, item)[key.as_str()] = number()?;
            }
            "minItems" | "maxItems" => schema[key.as_str()] = number()?,
            // On a map (or an object of any fields): how many keys it may hold; a bound a
            // CEL rule over the map needs for its estimated cost.
            "minProperties" | "maxProperties" => schema[key.as_str()] = number()?,
            "pattern" => {
                // The API server compiles it as an RE2 expression, close to this crate's.
                if let Err(e) = regex::Regex::new(&value) {
                    return Err(bad(
                        format!("`pattern={value}` is not a regular expression: {e}"),
                        "write the pattern as the API server reads it (RE2); a backslash is written once (`pattern=^\\d+$`): if the field line is in YAML double quotes, YAML takes one first (write `\\\\d`, or use single quotes or no quotes for the line)",
                    ));
                }
                values_of(&mut schema, item)["pattern"] = Value::String(value);
            }
            "format" => values_of(&mut schema, item)["format"] = Value::String(value),
            "description" => schema["description"] = Value::String(value),
            "nullable" => schema["nullable"] = Value::Bool(value == "true"),
            // CEL on this field (`self` is its value); each `rule=` is one validation,
            // and a `message=` after it is that validation's message.
            "rule" => {
                let list = schema["x-kubernetes-validations"].as_array().cloned();
                let mut list = list.unwrap_or_default();
                list.push(json!({"rule": value}));
                schema["x-kubernetes-validations"] = Value::Array(list);
            }
            "message" => match schema["x-kubernetes-validations"]
                .as_array_mut()
                .and_then(|l| l.last_mut())
            {
                Some(last) if last.get("message").is_none() => last["message"] = json!(value),
                _ => {
                    return Err(bad(
                        "`message=` belongs to the `rule=` just before it".into(),
                        "write `rule=` first, then its one `message=`: `rule=\"self > 0\" message=\"must be positive\"`",
                    ));
                }
            },
            other => {
                return Err(problem(
                    path,
                    format!("unknown marker `{other}`"),
                    format!(
                        "use one of: {}",
                        MARKERS
                            .iter()
                            .map(|(m, _)| *m)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
        }
    }
    if let Some(d) = schema.get("default")
        && let Some(why) = outside(&schema, d)
    {
        return Err(problem(
            path,
            format!("default {d} {why}"),
            "make the default one the field allows",
        ));
    }
    Ok((schema, required))
}

/// A `default=` marker: the value as the field's type reads it (a string field's is the
/// text as written: `default=2` is "2"), refused when the type does not admit it.
fn set_default(schema: &mut Value, value: &str, path: &str) -> Result<(), SchemaProblem> {
    let v = if schema["type"] == "string" {
        Value::String(value.to_string())
    } else {
        yaml_value(value)
    };
    if !admits(schema, &v) {
        let want = match schema["x-kubernetes-int-or-string"] == true {
            true => "an integer or a string (quote it: `default=\"0.5\"`)".to_string(),
            false => format!("of type {}", schema["type"]),
        };
        let fix = default_fix(schema);
        return Err(problem(path, format!("default {v} is not {want}"), &fix));
    }
    schema["default"] = v;
    Ok(())
}

/// An `enum=a,b` marker on `target` (a string field's values are all strings).
fn set_enum(target: &mut Value, value: &str) {
    let values: Vec<Value> = value.split(',').map(|v| yaml_value(v.trim())).collect();
    let values: Vec<Value> = if target["type"] == "string" {
        values
            .into_iter()
            .map(|v| match v {
                Value::String(_) => v,
                other => Value::String(other.to_string()),
            })
            .collect()
    } else {
        values
    };
    target["enum"] = Value::Array(values);
}

/// The fix for a default not of its field's type: a default of that type.
fn default_fix(schema: &Value) -> String {
    let example = match schema["type"].as_str() {
        Some("boolean") => {
            "`default=true` or `default=false` (YAML's yes/no/on/off are not booleans here)"
        }
        Some("integer") => "a whole number: `default=2`",
        Some("number") => "a number: `default=0.5`",
        Some("array") => "a list in YAML flow style: `default=[]` or `default=[a,b]`",
        Some("object") => "a mapping in YAML flow style: `default={}`",
        _ => "an integer or a quoted string: `default=80` or `default=\"50%\"`",
    };
    format!("write {example}")
}

/// Where the markers about values go: the schema itself, or its items (`item`: `items` of
/// a list, `additionalProperties` of a map).
fn values_of<'a>(schema: &'a mut Value, item: Option<&str>) -> &'a mut Value {
    match item {
        Some(k) => &mut schema[k],
        None => schema,
    }
}

/// Why `v` is not a value `schema` allows (its enum, bounds and pattern), if it is not.
fn outside(schema: &Value, v: &Value) -> Option<String> {
    if let Some(e) = schema["enum"].as_array()
        && !e.contains(v)
    {
        return Some(format!("is not one of the enum {}", schema["enum"]));
    }
    out_of_bounds(schema, v)
}

/// Why `v` is outside the bounds of `schema` (minimum, maximum, lengths, item counts) or
/// does not match its pattern, if it is.
pub(crate) fn out_of_bounds(schema: &Value, v: &Value) -> Option<String> {
    let n = |k: &str| schema.get(k).and_then(Value::as_f64);
    let len = v
        .as_str()
        .map(|s| s.chars().count() as f64)
        .or_else(|| v.as_array().map(|a| a.len() as f64));
    let checks = [
        ("minimum", v.as_f64(), true),
        ("maximum", v.as_f64(), false),
        ("minLength", len.filter(|_| v.is_string()), true),
        ("maxLength", len.filter(|_| v.is_string()), false),
        ("minItems", len.filter(|_| v.is_array()), true),
        ("maxItems", len.filter(|_| v.is_array()), false),
        ("minProperties", v.as_object().map(|m| m.len() as f64), true),
        (
            "maxProperties",
            v.as_object().map(|m| m.len() as f64),
            false,
        ),
    ];
    let bound = checks.into_iter().find_map(|(k, have, low)| {
        let (have, bound) = (have?, n(k)?);
        let bad = if low { have < bound } else { have > bound };
        bad.then(|| format!("is outside `{k}={}`", schema[k]))
    });
    bound.or_else(|| {
        let (text, pattern) = (v.as_str()?, schema["pattern"].as_str()?);
        let re = regex::Regex::new(pattern).ok()?;
        (!re.is_match(text)).then(|| format!("does not match `pattern={pattern}`"))
    })
}

/// An object from a mapping of fields (each a line or a nested mapping).
pub fn object(fields: &Map<String, Value>, path: &str) -> Result<Value, Vec<SchemaProblem>> {
    let mut props = Map::new();
    let mut required = Vec::new();
    let mut problems = Vec::new();
    for (name, v) in fields {
        let at = format!("{path}.{name}");
        match v {
            Value::String(text) => match field(text, &at) {
                Ok((s, req)) => {
                    if req {
                        required.push(Value::String(name.clone()));
                    }
                    props.insert(name.clone(), s);
                }
                Err(p) => problems.push(p),
            },
            Value::Object(inner) => match object(inner, &at) {
                Ok(mut s) => {
                    // An absent object gets its fields' defaults only if it defaults
                    // to `{}` itself (the API server defaults inside present objects).
                    if !defaults(&s).is_empty() {
                        s["default"] = json!({});
                    }
                    props.insert(name.clone(), s);
                }
                Err(mut p) => problems.append(&mut p),
            },
            other => problems.push(problem(
                &at,
                format!("{other} is neither a field (`type | markers`) nor a mapping of fields"),
                "write e.g. `image: string | required=true`",
            )),
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let mut out = json!({"type": "object", "properties": props});
    if !required.is_empty() {
        out["required"] = Value::Array(required);
    }
    Ok(out)
}

/// The defaults a schema gives, as nested maps (what the API server fills in for an
/// object that has none of these fields).
pub fn defaults(schema: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    for (name, s) in schema["properties"].as_object().into_iter().flatten() {
        if let Some(d) = s.get("default") {
            // An object defaulting to `{}` then gets its fields' defaults, as the server does.
            let mut d = d.clone();
            if let Some(m) = d.as_object_mut() {
                for (k, v) in defaults(s) {
                    m.entry(k).or_insert(v);
                }
            }
            out.insert(name.clone(), d);
        } else if s["type"] == "object" {
            let inner = defaults(s);
            if !inner.is_empty() {
                out.insert(name.clone(), Value::Object(inner));
            }
        }
    }
    out
}

/// The schema of the conditions ruleop writes (the Kubernetes `metav1.Condition`).
pub fn conditions(kind: &str) -> Value {
    json!({
        "description": format!("Conditions represent the latest available observations of the {kind}'s state"),
        "type": "array",
        "x-kubernetes-list-map-keys": ["type"],
        "x-kubernetes-list-type": "map",
        "items": {
            "description": "Condition contains details for one aspect of the current state of this API Resource.",
            "type": "object",
            "required": ["lastTransitionTime", "message", "reason", "status", "type"],
            "properties": {
                "lastTransitionTime": {"description": "lastTransitionTime is the last time the condition transitioned from one status to another.\nThis should be when the underlying condition changed.  If that is not known, then using the time when the API field changed is acceptable.", "format": "date-time", "type": "string"},
                "message": {"description": "message is a human readable message indicating details about the transition.\nThis may be an empty string.", "maxLength": 32768, "type": "string"},
                "observedGeneration": {"description": "observedGeneration represents the .metadata.generation that the condition was set based upon.\nFor instance, if .metadata.generation is currently 12, but the .status.conditions[x].observedGeneration is 9, the condition is out of date\nwith respect to the current state of the instance.", "format": "int64", "minimum": 0, "type": "integer"},
                "reason": {"description": "reason contains a programmatic identifier indicating the reason for the condition's last transition.\nProducers of specific condition types may define expected values and meanings for this field,\nand whether the values are considered a guaranteed API.\nThe value should be a CamelCase string.\nThis field may not be empty.", "maxLength": 1024, "minLength": 1, "pattern": "^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$", "type": "string"},
                "status": {"description": "status of the condition, one of True, False, Unknown.", "enum": ["True", "False", "Unknown"], "type": "string"},
                "type": {"description": "type of condition in CamelCase or in foo.example.com/CamelCase.", "maxLength": 316, "pattern": "^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$", "type": "string"}
            }
        }
    })
}

#[cfg(test)]
mod tests;
