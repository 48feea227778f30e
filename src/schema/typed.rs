//! Child templates checked against the OpenAPI schema of their kind, when the rule loads:
//! unknown fields (with "did you mean"), literals of the wrong type or outside an enum,
//! text where a number goes, a lone `{{ expr }}` whose value is known to be a map where a
//! list goes (or the reverse), and required fields no template provides. Built-in kinds
//! use the schemas of the Kubernetes version ruleop targets, shipped in the binary
//! (`schemas/kubernetes.json`, made by `schemas/generate.sh`); kinds from CRDs use the
//! CRD's schema when it is given. The same walk checks rendered objects (`render --strict`).
//! Pure.

use crate::suggest::edit_distance;
use serde_json::Value;
use std::sync::LazyLock;

static BUILTIN: LazyLock<Value> = LazyLock::new(|| {
    serde_json::from_str(include_str!("../../schemas/kubernetes.json")).unwrap_or(Value::Null)
});

/// The Kubernetes version whose schemas ship in the binary.
pub fn kubernetes_version() -> &'static str {
    BUILTIN["kubernetes"].as_str().unwrap_or("unknown")
}

thread_local! {
    /// CRDs given to `ruleop check --crd`: their kinds are checked too, on this thread.
    static CRDS: std::cell::RefCell<Vec<Value>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Makes the kinds of these CRDs known to the checks of rules loaded on this thread
/// afterwards (`ruleop check --crd`).
pub fn use_crds(crds: &[Value]) {
    CRDS.with(|c| *c.borrow_mut() = crds.to_vec());
}

/// The schema of a kind from the CRDs given with [`use_crds`].
pub fn from_crds(api_version: &str, kind: &str) -> Option<Value> {
    let (group, version) = api_version.rsplit_once('/')?;
    CRDS.with(|c| {
        c.borrow()
            .iter()
            .filter(|d| d["spec"]["group"] == group && d["spec"]["names"]["kind"] == kind)
            .flat_map(|d| {
                d["spec"]["versions"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
            })
            .find(|v| v["name"] == version)
            .map(|v| v["schema"]["openAPIV3Schema"].clone())
    })
}

/// The kind and schema of the CRD given with [`use_crds`] that serves `group`,
/// `version` and `plural` (a rule's watched resource).
pub fn crd_serving(group: &str, version: &str, plural: &str) -> Option<(String, Value)> {
    CRDS.with(|c| {
        let crds = c.borrow();
        let crd = crds.iter().find(|d| {
            d["kind"] == "CustomResourceDefinition"
                && d["spec"]["group"] == group
                && d["spec"]["names"]["plural"] == plural
        })?;
        let kind = crd["spec"]["names"]["kind"].as_str()?.to_string();
        let v = crd["spec"]["versions"]
            .as_array()?
            .iter()
            .find(|v| v["name"] == version)?;
        Some((kind, v["schema"]["openAPIV3Schema"].clone()))
    })
}

/// The schema of a built-in kind.
pub fn builtin(api_version: &str, kind: &str) -> Option<&'static Value> {
    let name = BUILTIN["kinds"][format!("{api_version} {kind}")].as_str()?;
    BUILTIN["schemas"].get(name)
}

/// The schema of every object's `metadata` (`ObjectMeta`), from the shipped schemas.
pub fn object_meta() -> &'static Value {
    &BUILTIN["schemas"]["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]
}

/// Follows `$ref` (directly or as the one entry of `allOf`) into the shipped schemas.
pub fn resolve(s: &Value) -> &Value {
    let mut s = s;
    for _ in 0..8 {
        let r = s
            .get("$ref")
            .or_else(|| s["allOf"].as_array().and_then(|a| a.first()?.get("$ref")));
        match r.and_then(Value::as_str) {
            Some(r) => match r
                .strip_prefix("#/components/schemas/")
                .and_then(|n| BUILTIN["schemas"].get(n))
            {
                Some(next) => s = next,
                None => return &Value::Null,
            },
            None => return s,
        }
    }
    s
}

/// What a template scalar is, as far as the check can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// A literal value (checked as such).
    Literal,
    /// Text with templates: always a string.
    Text,
    /// A lone expression whose value is known to be a map, a list, or a scalar of a JSON type.
    Map,
    List,
    Scalar(&'static str),
    /// A lone expression of unknown type.
    Unknown,
}

/// One problem: the dotted path under the object, what is wrong, and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// Where in the rules file (`children[0].template.spec.replicas`), for the line.
    pub at: String,
    /// Where in the object (`spec.replicas`).
    pub field: String,
    pub problem: String,
    pub fix: String,
}

/// The walk over one object (a template, or a rendered object).
pub struct Check<'a> {
    /// How a string scalar of the template is to be taken.
    pub shape: &'a dyn Fn(&str) -> Shape,
    pub out: Vec<Finding>,
}

fn type_of(s: &Value) -> Option<&str> {
    if s["x-kubernetes-int-or-string"] == true {
        return Some("integer or string");
    }
    s["type"].as_str()
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// Whether a value of JSON type `have` may stand where `s` wants one.
fn fits(s: &Value, have: &str) -> bool {
    if s["format"] == "int-or-string" || s["x-kubernetes-int-or-string"] == true {
        return matches!(have, "integer" | "string");
    }
    match type_of(s) {
        None => true,
        Some("number") => matches!(have, "integer" | "number"),
        Some(t) => t == have,
    }
}

impl Check<'_> {
    fn push(&mut self, at: &str, field: &str, problem: String, fix: String) {
        self.out.push(Finding {
            at: at.to_string(),
            field: field.to_string(),
            problem,
            fix,
        });
    }

    /// Checks `v` (at `at` in the rule, `field` in the object) against `schema`.
    pub fn value(&mut self, v: &Value, schema: &Value, at: &str, field: &str) {
        let s = resolve(schema);
        if s.is_null()
            || s["x-kubernetes-preserve-unknown-fields"] == true && s.get("properties").is_none()
        {
            return;
        }
        match v {
            Value::String(text) => self.string(text, s, at, field),
            Value::Object(m) => self.object(m, s, at, field),
            Value::Array(items) => self.array(items, s, at, field),
            Value::Null => {}
            other => self.literal(other, s, at, field),
        }
    }

    fn literal(&mut self, v: &Value, s: &Value, at: &str, field: &str) {
        let have = json_type(v);
        if !fits(s, have) {
            let want = type_of(s).unwrap_or("?");
            let fix = if want == "string" {
                format!(
                    "quote it: `\"{}\"`",
                    v.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| v.to_string())
                )
            } else {
                format!("write a{} {want}", article(want))
            };
            self.push(
                at,
                field,
                format!(
                    "{v} is a{} {have}; `{field}` is a{} {want}",
                    article(have),
                    article(want)
                ),
                fix,
            );
            return;
        }
        if let Some(allowed) = s["enum"].as_array()
            && !allowed.contains(v)
        {
            let names: Vec<String> = allowed
                .iter()
                .map(|a| {
                    a.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| a.to_string())
                })
                .collect();
            let close = v
                .as_str()
                .and_then(|t| names.iter().find(|n| edit_distance(n, t) <= 2));
            let fix = match close {
                Some(n) => format!("did you mean `{n}`?"),
                None => format!("one of: {}", names.join(", ")),
            };
            self.push(
                at,
                field,
                format!("{v} is not an allowed value of `{field}`"),
                fix,
            );
            return;
        }
        self.bounds(v, s, at, field);
    }

    /// A value outside the field's bounds or pattern (`minimum`, `maxLength`, `maxItems`…).
    fn bounds(&mut self, v: &Value, s: &Value, at: &str, field: &str) {
        if let Some(why) = super::fields::out_of_bounds(s, v) {
            self.push(
                at,
                field,
                format!("{v} {why}"),
                format!("give `{field}` a value the schema allows"),
            );
        }
    }

    fn string(&mut self, text: &str, s: &Value, at: &str, field: &str) {
        let want = type_of(s).unwrap_or("");
        match (self.shape)(text) {
            Shape::Literal => self.literal(&Value::String(text.to_string()), s, at, field),
            Shape::Text if !fits(s, "string") => self.push(
                at,
                field,
                format!("text (a template with other text around it) is always a string; `{field}` is a{} {want}", article(want)),
                "make the scalar exactly one `{{ expr }}`, so it keeps the value's type".into(),
            ),
            shape @ (Shape::Map | Shape::List | Shape::Scalar(_)) => {
                let have = match shape {
                    Shape::Map => "object",
                    Shape::List => "array",
                    Shape::Scalar(t) => t,
                    _ => return,
                };
                // Where the API server takes it (a number into an int-or-string field, an
                // integer into a number) it fits; a number into a string field it refuses.
                if !fits(s, have) {
                    let fix = if want == "string" {
                        format!("write `{} | string }}}}`", text.trim().trim_end_matches("}}").trim_end())
                    } else {
                        format!("give `{field}` a{} {want}", article(want))
                    };
                    self.push(at, field, format!("`{text}` gives a{} {have}; `{field}` is a{} {want}", article(have), article(want)), fix);
                }
            }
            _ => {}
        }
    }

    /// A mapping or a list (`what`) where the schema wants something else.
    fn wrong_container(&mut self, what: &str, s: &Value, at: &str, field: &str) {
        let want = type_of(s).unwrap_or("?");
        self.push(
            at,
            field,
            format!("{what} where `{field}` is a{} {want}", article(want)),
            format!("write a{} {want}", article(want)),
        );
    }

    fn object(&mut self, m: &serde_json::Map<String, Value>, s: &Value, at: &str, field: &str) {
        if !fits(s, "object") {
            return self.wrong_container("a mapping", s, at, field);
        }
        let props = s["properties"].as_object();
        let extra = s.get("additionalProperties").filter(|a| a.is_object());
        // Fields a schema keeps whatever they are: unknown ones are not errors there.
        let open = s["x-kubernetes-preserve-unknown-fields"] == true
            || s["additionalProperties"] == true
            || s["x-kubernetes-embedded-resource"] == true;
        // Every object has these at its root, listed in its schema or not.
        let type_meta =
            |k: &str| field.is_empty() && matches!(k, "apiVersion" | "kind" | "metadata");
        let templated_key = m.keys().any(|k| k.contains("{{") || k.contains("{%"));
        for (k, v) in m {
            let sub_at = if at.is_empty() {
                k.clone()
            } else {
                format!("{at}.{k}")
            };
            let sub_field = if field.is_empty() {
                k.clone()
            } else {
                format!("{field}.{k}")
            };
            match (props.and_then(|p| p.get(k)), extra) {
                (Some(ps), _) => self.value(v, ps, &sub_at, &sub_field),
                (None, Some(a)) => self.value(v, a, &sub_at, &sub_field),
                (None, None) if k.contains("{{") || props.is_none() || open || type_meta(k) => {}
                (None, None) => {
                    let names: Vec<&String> = props.map(|p| p.keys().collect()).unwrap_or_default();
                    let fix = match names
                        .iter()
                        .filter(|n| edit_distance(n, k) <= 2)
                        .min_by_key(|n| edit_distance(n, k))
                    {
                        Some(n) => format!("did you mean `{n}`?"),
                        None => {
                            let place = if field.is_empty() {
                                "the object".to_string()
                            } else {
                                format!("`{field}`")
                            };
                            format!(
                                "{place} has: {}",
                                names
                                    .iter()
                                    .map(|n| n.as_str())
                                    .collect::<Vec<_>>()
                                    .join(", ")
                            )
                        }
                    };
                    self.push(&sub_at, &sub_field, format!("unknown field `{k}`"), fix);
                }
            }
        }
        if templated_key {
            return;
        }
        for r in s["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !m.contains_key(r) {
                let place = if field.is_empty() {
                    "the object".to_string()
                } else {
                    format!("`{field}`")
                };
                self.push(
                    at,
                    field,
                    format!("{place} lacks the required field `{r}`"),
                    format!("give `{r}` a value"),
                );
            }
        }
    }

    fn array(&mut self, items: &[Value], s: &Value, at: &str, field: &str) {
        if !fits(s, "array") {
            return self.wrong_container("a list", s, at, field);
        }
        // The count of a list (not one with repeated entries: its length is not known).
        if !items.iter().any(|v| v.get("forEach").is_some()) {
            let count = Value::Array(vec![Value::Null; items.len()]);
            if let Some(why) = super::fields::out_of_bounds(s, &count) {
                self.push(
                    at,
                    field,
                    format!("{} items {why}", items.len()),
                    format!("give `{field}` a count the schema allows"),
                );
            }
        }
        let item_schema = s.get("items").unwrap_or(&Value::Null);
        for (i, v) in items.iter().enumerate() {
            let sub_at = format!("{at}[{i}]");
            let sub_field = format!("{field}[{i}]");
            // A repeated entry (`forEach` / `item`): its item is checked as an entry.
            match v
                .as_object()
                .filter(|m| m.contains_key("forEach") && m.contains_key("item"))
            {
                Some(m) => self.value(
                    &m["item"],
                    item_schema,
                    &format!("{sub_at}.item"),
                    &sub_field,
                ),
                None => self.value(v, item_schema, &sub_at, &sub_field),
            }
        }
    }
}

/// The findings about a whole object (rendered, or a custom resource) against `schema`.
pub fn check_object(obj: &Value, schema: &Value) -> Vec<Finding> {
    let literal = |_: &str| Shape::Literal;
    let mut check = Check {
        shape: &literal,
        out: Vec::new(),
    };
    check.value(obj, schema, "", "");
    check.out
}

fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "n"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(obj: Value) -> Vec<Finding> {
        let schema = builtin("apps/v1", "Deployment").unwrap();
        let shape = |s: &str| {
            if s == "{{ labels }}" {
                Shape::Map
            } else if s.contains("{{") {
                if s.trim().starts_with("{{") && s.trim().ends_with("}}") {
                    Shape::Unknown
                } else {
                    Shape::Text
                }
            } else {
                Shape::Literal
            }
        };
        let mut c = Check {
            shape: &shape,
            out: Vec::new(),
        };
        c.value(&obj, schema, "t", "");
        c.out
    }

    #[test]
    fn the_shipped_schemas_know_the_built_in_kinds() {
        assert!(kubernetes_version().starts_with("v1."));
        for (av, k) in [
            ("apps/v1", "Deployment"),
            ("v1", "Service"),
            ("v1", "ConfigMap"),
            ("batch/v1", "Job"),
            ("networking.k8s.io/v1", "Ingress"),
            ("autoscaling/v2", "HorizontalPodAutoscaler"),
        ] {
            assert!(builtin(av, k).is_some(), "{av} {k}");
        }
    }

    #[test]
    fn a_good_deployment_passes() {
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "labels": "{{ labels }}"},
            "spec": {"replicas": "{{ spec.replicas }}", "selector": {"matchLabels": "{{ labels }}"},
              "template": {"metadata": {"labels": "{{ labels }}"}, "spec": {"containers": [{"name": "a", "image": "{{ spec.image }}",
                "ports": [{"forEach": "spec.ports", "item": {"containerPort": "{{ item }}"}}],
                "resources": {"limits": {"cpu": 1, "memory": "1Gi"}}}]}}}});
        assert_eq!(check(d), vec![]);
    }

    #[test]
    fn each_kind_of_mistake_is_found_with_its_place() {
        let d = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "lables": {}},
            "spec": {"replicas": "3", "selector": {"matchLabels": {}},
              "template": {"spec": {"contianers": [], "containers": [{"image": "x", "imagePullPolicy": "Allways", "args": "{{ labels }}",
                "ports": [{"containerPort": "{{ spec.port }}-x"}]}]}}}});
        let found: Vec<(String, String)> =
            check(d).into_iter().map(|f| (f.at, f.problem)).collect();
        let has = |at: &str, what: &str| found.iter().any(|(a, p)| a == at && p.contains(what));
        assert!(
            has("t.metadata.lables", "unknown field `lables`"),
            "{found:#?}"
        );
        assert!(
            has(
                "t.spec.replicas",
                "\"3\" is a string; `spec.replicas` is a integer"
            ) || has("t.spec.replicas", "is a string"),
            "{found:#?}"
        );
        assert!(
            has(
                "t.spec.template.spec.contianers",
                "unknown field `contianers`"
            ),
            "{found:#?}"
        );
        assert!(
            has(
                "t.spec.template.spec.containers[0]",
                "lacks the required field `name`"
            ),
            "{found:#?}"
        );
        assert!(
            has(
                "t.spec.template.spec.containers[0].imagePullPolicy",
                "not an allowed value"
            ),
            "{found:#?}"
        );
        assert!(
            has("t.spec.template.spec.containers[0].args", "gives a"),
            "{found:#?}"
        );
        assert!(
            has(
                "t.spec.template.spec.containers[0].ports[0].containerPort",
                "always a string"
            ),
            "{found:#?}"
        );
        assert_eq!(found.len(), 7, "{found:#?}");
    }

    #[test]
    fn a_resource_is_checked_against_its_bounds_and_patterns() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "size": {"type": "integer", "minimum": 1, "maximum": 9},
            "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 5},
            "hosts": {"type": "array", "maxItems": 1, "items": {"type": "string"}},
            "storage": {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": true}}}}});
        let good = json!({"apiVersion": "x/v1", "kind": "C", "metadata": {"name": "a"},
            "spec": {"size": 3, "name": "abc", "hosts": ["a"], "storage": "1Gi"}});
        assert_eq!(check_object(&good, &schema), vec![]);
        let bad =
            json!({"spec": {"size": 0, "name": "ABCDEFG", "hosts": ["a", "b"], "storage": 2}});
        let found: Vec<(String, String)> = check_object(&bad, &schema)
            .into_iter()
            .map(|f| (f.field, f.problem))
            .collect();
        assert_eq!(
            found,
            vec![
                (
                    "spec.hosts".to_string(),
                    "2 items is outside `maxItems=1`".to_string()
                ),
                (
                    "spec.name".to_string(),
                    "\"ABCDEFG\" is outside `maxLength=5`".to_string()
                ),
                (
                    "spec.size".to_string(),
                    "0 is outside `minimum=1`".to_string()
                ),
            ]
        );
    }
}
