//! A path a rule reads inside an object (`status.readyReplicas`, `spec.ports[0].port`)
//! resolved against the OpenAPI schema of the object's kind: the first field the schema
//! does not have, with the names it has there, or the type of the value there. `$ref`, `allOf`, lists (an index or every
//! item) and maps (`additionalProperties`) are followed; a free-form field (kept whatever
//! it holds: `x-kubernetes-preserve-unknown-fields`, an object with no properties, a
//! quantity) ends the check, as anything may be under it. `metadata` of any object is
//! `ObjectMeta`. Pure.

use super::typed::{object_meta, resolve};
use crate::suggest::edit_distance;
use serde_json::Value;

/// One step of a path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seg {
    /// A field (`.name`, `['name']`), or a key of a map.
    Field(String),
    /// One item of a list (`[0]`, `[-1]`, `.0`), or one value of a map (`[key]`).
    Item,
    /// Every item of a list or value of a map (`[*]`, a filter, a slice).
    Each,
}

/// Where a path leaves what the schema knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Miss {
    /// The path inside the object up to and including the wrong step (`status.readyReplica`).
    pub field: String,
    pub why: Why,
    /// A close name the schema has there, if any.
    pub close: Option<String>,
    /// The names the schema has there (for a hint when none is close).
    pub names: Vec<String>,
}

/// What is wrong with the step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// The object there has no such field.
    Unknown,
    /// A field of a list (`spec.ports.port`): the list at this path has no fields.
    OfList(String),
    /// Something inside a scalar (`status.replicas.x`): at this path, of this type.
    OfScalar(String, &'static str),
}

/// The path, as written inside the object (`spec.ports[0].port`).
pub fn display(segs: &[Seg]) -> String {
    let mut out = String::new();
    for s in segs {
        match s {
            Seg::Field(f) if out.is_empty() => out.push_str(f),
            Seg::Field(f) => {
                out.push('.');
                out.push_str(f);
            }
            Seg::Item => out.push_str("[0]"),
            Seg::Each => out.push_str("[*]"),
        }
    }
    out
}

/// What a schema node is, for the walk.
enum Node<'a> {
    /// Anything may be under it.
    Free,
    /// An object with these fields (and, for `extra`, any other key of that schema).
    Object(&'a Value, Option<&'a Value>),
    /// A map: every key has this schema.
    Map(&'a Value),
    List(&'a Value),
    /// A value with no fields (a string, a number...), named by its type.
    Scalar(&'static str),
}

fn node(s: &Value) -> Node<'_> {
    let s = resolve(s);
    if s.is_null() || s["x-kubernetes-preserve-unknown-fields"] == true {
        return Node::Free;
    }
    if s["x-kubernetes-int-or-string"] == true || s["format"] == "int-or-string" {
        return Node::Scalar("an integer or a string");
    }
    let extra = s.get("additionalProperties");
    match (s["type"].as_str(), s["properties"].as_object(), extra) {
        (Some("array"), ..) => Node::List(s.get("items").unwrap_or(&Value::Null)),
        (Some("string"), ..) => Node::Scalar("a string"),
        (Some("integer"), ..) => Node::Scalar("an integer"),
        (Some("number"), ..) => Node::Scalar("a number"),
        (Some("boolean"), ..) => Node::Scalar("a boolean"),
        (_, Some(_), e) => Node::Object(s, e.filter(|e| e.is_object())),
        (_, None, Some(e)) if e.is_object() => Node::Map(e),
        _ => Node::Free,
    }
}

/// Where a walk along a path ends.
enum End<'a> {
    /// At this schema: every step is known.
    At(&'a Value),
    /// In a free-form field: anything may follow.
    Free,
    Miss(Miss),
}

/// The first step of `path` (inside an object of `schema`) that the schema does not
/// have; None when every step is known or the path enters a free-form field.
pub fn miss(schema: &Value, path: &[Seg]) -> Option<Miss> {
    match walk(schema, path) {
        End::Miss(m) => Some(m),
        End::At(_) | End::Free => None,
    }
}

/// The JSON type of the value at `path` (inside an object of `schema`): `object`,
/// `array`, `string`, `integer`, `number` or `boolean`; None when it is not known (a
/// free-form field, an int-or-string, a path the schema does not have).
pub fn type_at(schema: &Value, path: &[Seg]) -> Option<&'static str> {
    let End::At(s) = walk(schema, path) else {
        return None;
    };
    let s = resolve(s);
    if s["x-kubernetes-int-or-string"] == true || s["format"] == "int-or-string" {
        return None;
    }
    match s["type"].as_str()? {
        "object" => Some("object"),
        "array" => Some("array"),
        "string" => Some("string"),
        "integer" => Some("integer"),
        "number" => Some("number"),
        "boolean" => Some("boolean"),
        _ => None,
    }
}

fn walk<'a>(schema: &'a Value, path: &[Seg]) -> End<'a> {
    let mut s = schema;
    for (i, seg) in path.iter().enumerate() {
        let at = || display(&path[..=i]);
        let here = || display(&path[..i]);
        // Every object has these at its root, whatever its schema says of them.
        if i == 0 {
            match seg {
                Seg::Field(f) if f == "metadata" => {
                    s = object_meta();
                    continue;
                }
                Seg::Field(f) if f == "apiVersion" || f == "kind" => {
                    s = &STRING;
                    continue;
                }
                _ => {}
            }
        }
        s = match (node(s), seg) {
            (Node::Free, _) | (Node::Object(..), Seg::Item | Seg::Each) => return End::Free,
            (Node::Object(o, extra), Seg::Field(f)) => match (o["properties"].get(f), extra) {
                (Some(next), _) => next,
                (None, Some(e)) => e,
                (None, None) => return End::Miss(unknown(o, f, at())),
            },
            (Node::Map(v), _) => v,
            (Node::List(items), Seg::Item | Seg::Each) => items,
            (Node::List(_), Seg::Field(f)) => {
                let list = here();
                return End::Miss(Miss {
                    field: at(),
                    close: None,
                    names: vec![format!("{list}[0].{f}")],
                    why: Why::OfList(list),
                });
            }
            (Node::Scalar(what), _) => {
                return End::Miss(Miss {
                    field: at(),
                    close: None,
                    names: Vec::new(),
                    why: Why::OfScalar(here(), what),
                });
            }
        };
    }
    End::At(s)
}

static STRING: std::sync::LazyLock<Value> =
    std::sync::LazyLock::new(|| serde_json::json!({"type": "string"}));

fn unknown(object: &Value, name: &str, field: String) -> Miss {
    let names: Vec<String> = object["properties"]
        .as_object()
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    let close = names
        .iter()
        .filter(|n| edit_distance(n, name) <= 2)
        .min_by_key(|n| edit_distance(n, name))
        .cloned();
    Miss {
        field,
        why: Why::Unknown,
        close,
        names,
    }
}

impl Miss {
    /// What is wrong, for an object of `kind`: "Deployment has no field `status.readyReplica`".
    pub fn problem(&self, kind: &str) -> String {
        match &self.why {
            Why::Unknown => format!("{kind} has no field `{}`", self.field),
            Why::OfList(list) => format!(
                "`{list}` of {} {kind} is a list: it has no field `{}`",
                article(kind),
                self.field.rsplit('.').next().unwrap_or_default()
            ),
            Why::OfScalar(at, what) => {
                format!(
                    "`{at}` of {} {kind} is {what}: nothing is inside it",
                    article(kind)
                )
            }
        }
    }

    /// The fix to print: "did you mean", or what there is.
    pub fn fix(&self) -> String {
        match (&self.close, &self.why) {
            (Some(n), _) => format!("did you mean `{n}`?"),
            (None, Why::OfList(_)) => format!(
                "read an item: `{}` (`[*]` in a JSONPath)",
                self.names.join(", ")
            ),
            (None, Why::OfScalar(..)) => "read the value itself".into(),
            (None, Why::Unknown) if self.names.is_empty() => {
                "the schema has no fields there".into()
            }
            (None, Why::Unknown) => format!("there it has: {}", self.names.join(", ")),
        }
    }
}

fn article(word: &str) -> &'static str {
    if word.starts_with(['A', 'E', 'I', 'O', 'U']) {
        "an"
    } else {
        "a"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::typed::builtin;
    use serde_json::json;

    fn path(p: &str) -> Vec<Seg> {
        p.split('.')
            .flat_map(|s| match s.strip_suffix("[0]") {
                Some(f) => vec![Seg::Field(f.into()), Seg::Item],
                None => match s.strip_suffix("[*]") {
                    Some(f) => vec![Seg::Field(f.into()), Seg::Each],
                    None => vec![Seg::Field(s.into())],
                },
            })
            .collect()
    }

    fn deployment() -> &'static Value {
        builtin("apps/v1", "Deployment").unwrap()
    }

    #[test]
    fn known_paths_pass_through_refs_lists_and_maps() {
        for p in [
            "status.readyReplicas",
            "spec.template.spec.containers[0].image",
            "spec.template.spec.containers[*].ports[0].containerPort",
            "status.conditions[*].type",
            "metadata.labels.app",
            "metadata.annotations.anything",
            "spec.template.spec.containers[0].resources.limits.cpu",
            "apiVersion",
            "kind",
        ] {
            assert_eq!(miss(deployment(), &path(p)), None, "{p}");
        }
    }

    #[test]
    fn an_unknown_field_is_found_with_a_close_name() {
        let m = miss(deployment(), &path("status.readyReplica")).unwrap();
        assert_eq!(m.field, "status.readyReplica");
        assert_eq!(
            m.problem("Deployment"),
            "Deployment has no field `status.readyReplica`"
        );
        assert_eq!(m.fix(), "did you mean `readyReplicas`?");
        let m = miss(
            deployment(),
            &path("spec.template.spec.containers[0].imgae"),
        )
        .unwrap();
        assert_eq!(m.field, "spec.template.spec.containers[0].imgae");
        assert_eq!(m.close.as_deref(), Some("image"));
        let m = miss(deployment(), &path("spec.zzz")).unwrap();
        assert_eq!(m.close, None);
        assert!(m.fix().starts_with("there it has: "), "{}", m.fix());
    }

    #[test]
    fn metadata_is_object_meta_for_every_kind() {
        let crd = json!({"type": "object", "properties": {"metadata": {"type": "object"}}});
        let m = miss(&crd, &path("metadata.nmae")).unwrap();
        assert_eq!(m.fix(), "did you mean `name`?");
        assert_eq!(miss(&crd, &path("metadata.name")), None);
        let cm = builtin("v1", "ConfigMap").unwrap();
        assert_eq!(
            miss(cm, &path("metadata.nmae"))
                .unwrap()
                .problem("ConfigMap"),
            "ConfigMap has no field `metadata.nmae`"
        );
        assert_eq!(
            miss(cm, &path("dat")).unwrap().fix(),
            "did you mean `data`?"
        );
    }

    #[test]
    fn free_form_fields_let_anything_in() {
        let cm = builtin("v1", "ConfigMap").unwrap();
        assert_eq!(miss(cm, &path("data.anything")), None);
        assert_eq!(
            miss(cm, &path("data.anything.deeper")).unwrap().field,
            "data.anything.deeper"
        );
        let crd = json!({"type": "object", "properties": {
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {"a": {"type": "string"}}},
            "status": {"type": "object"},
            "extra": {"type": "object", "properties": {"x": {"type": "string"}}, "additionalProperties": {"type": "object", "properties": {"y": {"type": "integer"}}}}}});
        assert_eq!(miss(&crd, &path("spec.whatever.below")), None);
        assert_eq!(miss(&crd, &path("status.anything")), None);
        assert_eq!(miss(&crd, &path("extra.key.y")), None);
        assert_eq!(
            miss(&crd, &path("extra.key.z")).unwrap().close,
            Some("y".into())
        );
        // A quantity has no schema: anything goes.
        assert_eq!(
            miss(
                deployment(),
                &path("spec.template.spec.containers[0].resources.limits.cpu.x")
            ),
            None
        );
    }

    #[test]
    fn a_field_of_a_list_or_a_scalar_is_a_mistake() {
        let m = miss(deployment(), &path("spec.template.spec.containers.image")).unwrap();
        assert_eq!(
            m.problem("Deployment"),
            "`spec.template.spec.containers` of a Deployment is a list: it has no field `image`"
        );
        assert!(
            m.fix().contains("`spec.template.spec.containers[0].image`"),
            "{}",
            m.fix()
        );
        let m = miss(deployment(), &path("status.replicas.x")).unwrap();
        assert_eq!(
            m.problem("Deployment"),
            "`status.replicas` of a Deployment is an integer: nothing is inside it"
        );
        let svc = builtin("v1", "Service").unwrap();
        assert!(miss(svc, &path("spec.ports[0].targetPort.x")).is_some());
        assert_eq!(miss(svc, &path("status.loadBalancer.ingress[0].ip")), None);
    }

    #[test]
    fn the_type_at_a_path_is_known_where_the_schema_says_it() {
        let d = deployment();
        assert_eq!(type_at(d, &path("status.readyReplicas")), Some("integer"));
        assert_eq!(type_at(d, &path("metadata.labels")), Some("object"));
        assert_eq!(type_at(d, &path("metadata.name")), Some("string"));
        assert_eq!(
            type_at(d, &path("spec.template.spec.containers")),
            Some("array")
        );
        assert_eq!(
            type_at(d, &path("spec.template.spec.containers[0].image")),
            Some("string")
        );
        assert_eq!(
            type_at(d, &path("spec.strategy.rollingUpdate.maxSurge")),
            None
        );
        assert_eq!(
            type_at(
                d,
                &path("spec.template.spec.containers[0].resources.limits.cpu")
            ),
            None
        );
        assert_eq!(type_at(d, &path("status.readyReplica")), None);
        assert_eq!(type_at(d, &[]), Some("object"));
    }
}
