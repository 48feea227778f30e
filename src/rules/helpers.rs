//! Helpers a template author expects, as filters: hashing (`sha256`, for checksums that
//! roll pods when a config changes), `b64encode`/`b64decode`, `toyaml`/`fromyaml` and
//! `fromjson` (minijinja has `tojson`), and `prepend`/`append` for mapping a list
//! (`spec.hosts | map('prepend', 'https://') | list`). And the load-time check that every filter and
//! test a template names exists, so `| upperr` fails `ruleop check`, not a render.

use base64::Engine;
use minijinja::value::Value as JinjaValue;
use minijinja::{Environment, Error, ErrorKind};
use sha2::{Digest, Sha256};

/// The filters ruleop adds to minijinja's.
pub const FILTERS: &[&str] = &[
    "sha256",
    "b64encode",
    "b64decode",
    "toyaml",
    "fromyaml",
    "fromjson",
    "prepend",
    "append",
];

/// minijinja's built-in filters and tests (for "did you mean", and an editor's completion).
pub const BUILTIN_FILTERS: &[&str] = &[
    "abs",
    "attr",
    "batch",
    "bool",
    "capitalize",
    "count",
    "d",
    "default",
    "dictsort",
    "e",
    "escape",
    "first",
    "float",
    "groupby",
    "indent",
    "int",
    "items",
    "join",
    "last",
    "length",
    "lines",
    "list",
    "lower",
    "map",
    "max",
    "min",
    "pprint",
    "reject",
    "rejectattr",
    "replace",
    "reverse",
    "round",
    "safe",
    "select",
    "selectattr",
    "slice",
    "sort",
    "split",
    "string",
    "sum",
    "title",
    "tojson",
    "trim",
    "unique",
    "upper",
    "urlencode",
    "chain",
    "zip",
];
const BUILTIN_TESTS: &[&str] = &[
    "boolean",
    "defined",
    "divisibleby",
    "endingwith",
    "eq",
    "equalto",
    "even",
    "false",
    "filter",
    "float",
    "ge",
    "gt",
    "in",
    "integer",
    "iterable",
    "le",
    "lower",
    "lt",
    "mapping",
    "ne",
    "none",
    "number",
    "odd",
    "safe",
    "sameas",
    "sequence",
    "startingwith",
    "string",
    "test",
    "true",
    "undefined",
    "upper",
];

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(ErrorKind::InvalidOperation, msg.into())
}

/// The bytes a value is hashed or encoded as: a string as itself, anything else as JSON.
fn bytes_of(v: &JinjaValue) -> Result<Vec<u8>, Error> {
    match v.as_str() {
        Some(s) => Ok(s.as_bytes().to_vec()),
        None => serde_json::to_vec(v).map_err(|e| invalid(format!("cannot hash {v}: {e}"))),
    }
}

fn sha256(v: JinjaValue) -> Result<String, Error> {
    Ok(Sha256::digest(bytes_of(&v)?)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

fn b64encode(v: JinjaValue) -> Result<String, Error> {
    Ok(base64::engine::general_purpose::STANDARD.encode(bytes_of(&v)?))
}

fn b64decode(s: &str) -> Result<String, Error> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(s.trim())
        .map_err(|e| invalid(format!("b64decode: not base64: {e}")))?;
    String::from_utf8(bytes).map_err(|_| invalid("b64decode: the decoded bytes are not UTF-8 text"))
}

fn toyaml(v: JinjaValue) -> Result<String, Error> {
    serde_yaml::to_string(&v).map_err(|e| invalid(format!("toyaml: {e}")))
}

fn fromyaml(s: &str) -> Result<JinjaValue, Error> {
    let v: serde_json::Value =
        serde_yaml::from_str(s).map_err(|e| invalid(format!("fromyaml: {e}")))?;
    Ok(JinjaValue::from(minijinja::value::Serde(&v)))
}

fn fromjson(s: &str) -> Result<JinjaValue, Error> {
    let v: serde_json::Value =
        serde_json::from_str(s).map_err(|e| invalid(format!("fromjson: {e}")))?;
    Ok(JinjaValue::from(minijinja::value::Serde(&v)))
}

fn text_of(v: &JinjaValue) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_string)
}

fn prepend(v: JinjaValue, before: &str) -> String {
    format!("{before}{}", text_of(&v))
}

fn append(v: JinjaValue, after: &str) -> String {
    format!("{}{after}", text_of(&v))
}

/// Adds the helpers to `env`.
pub fn add_to(env: &mut Environment<'static>) {
    env.add_filter("prepend", prepend);
    env.add_filter("append", append);
    env.add_filter("sha256", sha256);
    env.add_filter("b64encode", b64encode);
    env.add_filter("b64decode", b64decode);
    env.add_filter("toyaml", toyaml);
    env.add_filter("fromyaml", fromyaml);
    env.add_filter("fromjson", fromjson);
}

/// Filters (`| name`) and tests (`is [not] name`) named in `code` (template code, not
/// text), and those named as the string argument of `map`, `select`, `reject`,
/// `selectattr` and `rejectattr`.
pub fn names_used(code: &str) -> (Vec<String>, Vec<String>) {
    let mut filters = Vec::new();
    let mut tests = Vec::new();
    let words = tokens(code);
    for (i, w) in words.iter().enumerate() {
        let next_ident = |j: usize| words.get(j).filter(|t| is_ident(t)).cloned();
        if w == "|" {
            if let Some(name) = next_ident(i + 1) {
                // A filter or test named in a string argument: `map('upper')`,
                // `select('odd')`, `selectattr('port', 'odd')`.
                let string_at = |j: usize| words.get(j).and_then(|t| literal(t));
                let opens = words.get(i + 2).is_some_and(|t| t == "(");
                match name.as_str() {
                    "map" if opens => filters.extend(string_at(i + 3)),
                    "select" | "reject" if opens => tests.extend(string_at(i + 3)),
                    "selectattr" | "rejectattr" if opens && string_at(i + 3).is_some() => {
                        tests.extend(string_at(i + 5))
                    }
                    _ => {}
                }
                filters.push(name);
            }
        } else if w == "is" {
            let j = if words.get(i + 1).is_some_and(|t| t == "not") {
                i + 2
            } else {
                i + 1
            };
            if let Some(name) = next_ident(j) {
                tests.push(name);
            }
        }
    }
    (filters, tests)
}

/// The text of a string literal token (`'upper'`), when `t` is one.
fn literal(t: &str) -> Option<String> {
    let q = t.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let inner = t.strip_prefix(q)?.strip_suffix(q)?;
    is_ident(inner).then(|| inner.to_string())
}

fn is_ident(t: &str) -> bool {
    t.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// Identifiers, single punctuation characters and string literals (with their quotes).
pub(crate) fn tokens(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = code.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '"' || c == '\'' {
            let mut lit = c.to_string();
            let mut escaped = false;
            for d in chars.by_ref() {
                lit.push(d);
                if escaped {
                    escaped = false;
                } else if d == '\\' {
                    escaped = true;
                } else if d == c {
                    break;
                }
            }
            out.push(lit);
        } else if c.is_alphanumeric() || c == '_' {
            let mut w = c.to_string();
            while let Some(&d) = chars.peek() {
                if d.is_alphanumeric() || d == '_' {
                    w.push(d);
                    chars.next();
                } else {
                    break;
                }
            }
            out.push(w);
        } else if !c.is_whitespace() {
            out.push(c.to_string());
        }
    }
    out
}

/// The code inside a text template's `{{ }}` and `{% %}` blocks.
pub fn template_code(text: &str) -> String {
    let mut code = String::new();
    let mut rest = text;
    while let Some(start) = rest.find(['{']) {
        let after = &rest[start..];
        let close = if after.starts_with("{{") {
            "}}"
        } else if after.starts_with("{%") {
            "%}"
        } else {
            rest = &rest[start + 1..];
            continue;
        };
        match after[2..].find(close) {
            Some(end) => {
                code.push_str(&after[2..2 + end]);
                code.push(' ');
                rest = &after[2 + end + 2..];
            }
            None => break,
        }
    }
    code
}

/// Whether `env` knows the filter (or test) `name`: probed, as minijinja looks names up
/// only when it runs them.
pub fn known(env: &Environment<'static>, name: &str, test: bool) -> bool {
    let probe = if test {
        format!("none is {name}")
    } else {
        format!("none | {name}")
    };
    let Ok(expr) = env.compile_expression(&probe) else {
        return false;
    };
    let unknown = if test {
        ErrorKind::UnknownTest
    } else {
        ErrorKind::UnknownFilter
    };
    !matches!(expr.eval(()), Err(e) if e.kind() == unknown)
}

/// The closest known name, for "did you mean".
pub fn closest(name: &str, test: bool) -> Option<&'static str> {
    let known: Vec<&'static str> = if test {
        BUILTIN_TESTS.to_vec()
    } else {
        BUILTIN_FILTERS.iter().chain(FILTERS).copied().collect()
    };
    known
        .into_iter()
        .map(|k| (crate::suggest::edit_distance(k, name), k))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, k)| k)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// minijinja as rules use it: no escaping, undefined values an error, these helpers.
    fn env() -> Environment<'static> {
        let mut env = Environment::new();
        env.set_auto_escape_callback(|_| minijinja::AutoEscape::None);
        env.set_undefined_behavior(minijinja::UndefinedBehavior::SemiStrict);
        add_to(&mut env);
        env
    }

    fn eval(expr: &str, ctx: serde_json::Value) -> JinjaValue {
        let env = env();
        env.compile_expression(expr)
            .unwrap()
            .eval(minijinja::Value::from(minijinja::value::Serde(&ctx)))
            .unwrap()
    }

    #[test]
    fn sha256_hashes_text_as_itself_and_anything_else_as_json() {
        assert_eq!(
            eval("'abc' | sha256", serde_json::json!({}))
                .as_str()
                .unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let a = eval("data | sha256", serde_json::json!({"data": {"k": "v"}}));
        let b = eval("data | sha256", serde_json::json!({"data": {"k": "w"}}));
        assert_ne!(a, b, "a changed value changes the checksum");
        assert_eq!(a.as_str().unwrap().len(), 64);
    }

    #[test]
    fn base64_yaml_and_json_round_trip() {
        assert_eq!(
            eval("'hi' | b64encode", serde_json::json!({})).as_str(),
            Some("aGk=")
        );
        assert_eq!(
            eval("'aGk=' | b64decode", serde_json::json!({})).as_str(),
            Some("hi")
        );
        let v = eval(
            "(m | toyaml) | fromyaml",
            serde_json::json!({"m": {"a": [1, 2]}}),
        );
        assert_eq!(
            serde_json::to_value(&v).unwrap(),
            serde_json::json!({"a": [1, 2]})
        );
        let v = eval("'{\"x\": 1}' | fromjson", serde_json::json!({}));
        assert_eq!(
            serde_json::to_value(&v).unwrap(),
            serde_json::json!({"x": 1})
        );
        let env = env();
        assert!(
            env.compile_expression("'%%' | b64decode")
                .unwrap()
                .eval(())
                .is_err()
        );
    }

    #[test]
    fn a_list_maps_to_urls_with_prepend_and_append() {
        let v = eval(
            "hosts | map('prepend', 'https://') | map('append', '/') | list",
            serde_json::json!({"hosts": ["a.example.com", "b.example.com"]}),
        );
        assert_eq!(
            serde_json::to_value(&v).unwrap(),
            serde_json::json!(["https://a.example.com/", "https://b.example.com/"])
        );
        let port = eval("8080 | prepend(':')", serde_json::json!({}));
        assert_eq!(port.as_str(), Some(":8080"));
    }

    #[test]
    fn filters_and_tests_named_in_code_are_found_and_strings_skipped() {
        let (f, t) =
            names_used("spec.x | default('a | upperr') | upper is not defined and y is odd");
        assert_eq!(f, vec!["default", "upper"]);
        assert_eq!(t, vec!["defined", "odd"]);
        assert_eq!(
            template_code("a {{ x | lower }}-{% if y is even %}z{% endif %}"),
            " x | lower   if y is even   endif  "
        );
    }

    #[test]
    fn filters_and_tests_named_in_string_arguments_are_found() {
        let (f, t) = names_used(
            "hosts | map('prepand', 'https://') | select('odd') | selectattr('port', 'evn') | map(attribute='x')",
        );
        assert_eq!(f, vec!["prepand", "map", "select", "selectattr", "map"]);
        assert_eq!(t, vec!["odd", "evn"]);
    }

    #[test]
    fn unknown_names_are_told_from_known_ones_with_a_suggestion() {
        let env = env();
        assert!(known(&env, "upper", false));
        assert!(known(&env, "sha256", false));
        assert!(!known(&env, "upperr", false));
        assert!(known(&env, "defined", true));
        assert!(!known(&env, "definedd", true));
        assert_eq!(closest("upperr", false), Some("upper"));
        assert_eq!(closest("sha265", false), Some("sha256"));
        assert_eq!(closest("prepand", false), Some("prepend"));
    }
}
