//! Rules as cluster objects: a `Rule` (cluster-scoped, `ruleop.dev/v1alpha1`) whose
//! `spec` is exactly one rules-file document, named by the Rule's `metadata.name`. Loaded
//! as a file's document is, and every problem named by its path inside the Rule
//! (`spec.children[1].template.spec.replicas`) rather than a line.

use super::compile::{CompiledRule, ObjectSource};
use super::error::LoadError;
use super::lines::index_documents;
use super::load::load_str;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;

pub const GROUP: &str = "ruleop.dev";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "Rule";
pub const PLURAL: &str = "rules";
/// The Rule kind's CRD.
pub const CRD_NAME: &str = "rules.ruleop.dev";

/// The Rule kind's apiVersion.
pub fn api_version() -> String {
    format!("{GROUP}/{VERSION}")
}

/// One problem of a Rule, at its path in the object.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ObjectProblem {
    /// `spec.children[1].template.spec.replicas`; `spec` when no field is named.
    pub path: String,
    /// What is wrong and the fix, as `ruleop check` says it.
    pub message: String,
}

impl std::fmt::Display for ObjectProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// What one Rule object gave.
#[derive(Debug, Clone)]
pub struct ObjectLoad {
    pub name: String,
    pub uid: String,
    pub generation: i64,
    /// The revision its status says was in force (`status.revision`).
    pub revision: Option<i64>,
    /// When it was created (RFC 3339, as the API server writes it: ordered as text).
    pub created: String,
    /// The resource its status says it serves (`status.watch`, `group/resource`): every
    /// replica reads the same, so every replica lets it go on.
    pub serving: Option<String>,
    /// The compiled rule, when the Rule has no problem.
    pub rule: Option<Arc<CompiledRule>>,
    pub problems: Vec<ObjectProblem>,
}

/// What `status.watch` says the Rule serves (written while a generation of it is in
/// force, removed when none is).
pub fn serving(obj: &Value) -> Option<String> {
    obj["status"]["watch"].as_str().map(str::to_string)
}

/// The pseudo-path a Rule's rule is known by in logs (`Rule/website`).
pub fn source_path(name: &str) -> PathBuf {
    PathBuf::from(format!("{KIND}/{name}"))
}

/// Loads a Rule object (as the API server gives it).
pub fn load_object(obj: &Value) -> ObjectLoad {
    let name = obj["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let mut load = ObjectLoad {
        uid: obj["metadata"]["uid"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        generation: obj["metadata"]["generation"].as_i64().unwrap_or_default(),
        revision: obj["status"]["revision"].as_i64(),
        serving: serving(obj),
        created: obj["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
        name: name.clone(),
        rule: None,
        problems: Vec::new(),
    };
    let Some(spec) = obj.get("spec").and_then(Value::as_object) else {
        load.problems.push(ObjectProblem {
            path: "spec".into(),
            message: "a Rule's spec is one rules-file document (a mapping); it has none".into(),
        });
        return load;
    };
    let given = Arc::new(Value::Object(spec.clone()));
    let mut spec = spec.clone();
    match spec.get("name") {
        None => {
            spec.insert("name".into(), Value::String(name.clone()));
        }
        Some(Value::String(n)) if *n == name => {}
        Some(other) => {
            load.problems.push(ObjectProblem {
                path: "spec.name".into(),
                message: format!(
                    "{other} is not the Rule's name {name:?}\n  fix: leave `spec.name` out (the Rule's name is the rule's), or make them equal"
                ),
            });
            return load;
        }
    }
    let text = match serde_yaml::to_string(&Value::Object(spec)) {
        Ok(t) => t,
        Err(e) => {
            load.problems.push(ObjectProblem {
                path: "spec".into(),
                message: e.to_string(),
            });
            return load;
        }
    };
    let file = source_path(&name);
    let (rules, errors) = load_str(&text, &file);
    let index = index_documents(&text)
        .docs
        .into_iter()
        .next()
        .unwrap_or_default();
    load.problems = errors
        .iter()
        .map(|e| locate(e, &file, &|line| index.path_at(line).map(str::to_string)))
        .collect();
    if load.problems.is_empty()
        && let Some(mut rule) = rules.into_iter().next()
    {
        // Just compiled: this is its only handle.
        if let Some(r) = Arc::get_mut(&mut rule) {
            r.object = Some(ObjectSource {
                uid: load.uid.clone(),
                generation: load.generation,
                created: load.created.clone(),
                spec: given,
                rollout: obj.pointer("/status/rollout").cloned(),
            });
        }
        load.rule = Some(rule);
    }
    load
}

/// A load error of a Rule's text, its `Rule/name:line[:column]: ` prefix replaced by the
/// path inside the Rule of what starts on that line.
fn locate(
    e: &LoadError,
    file: &std::path::Path,
    path_at: &dyn Fn(usize) -> Option<String>,
) -> ObjectProblem {
    let text = e.to_string();
    let prefix = format!("{}:", file.display());
    let Some(rest) = text.strip_prefix(&prefix) else {
        return ObjectProblem {
            path: "spec".into(),
            message: text,
        };
    };
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let line: usize = rest[..digits].parse().unwrap_or(0);
    let mut rest = &rest[digits..];
    // A column, when there is one.
    if let Some(r) = rest.strip_prefix(':')
        && let Some(end) = r.find(|c: char| !c.is_ascii_digit())
        && end > 0
    {
        rest = &r[end..];
    }
    let message = rest.strip_prefix(": ").unwrap_or(rest).to_string();
    let path = match path_at(line) {
        Some(p) if !p.is_empty() => format!("spec.{p}"),
        _ => "spec".into(),
    };
    ObjectProblem { path, message }
}

/// The Rule kind's CRD: cluster-scoped, its `spec` one rules-file document (checked by
/// ruleop: at `kubectl apply` by its webhook, and when it loads it), its status written
/// by ruleop.
pub fn crd() -> Value {
    let condition = serde_json::json!({"jsonPath": ".status.conditions[?(@.type==\"Ready\")].status", "name": "Ready", "type": "string"});
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{PLURAL}.{GROUP}")},
        "spec": {
            "group": GROUP,
            "names": {"kind": KIND, "listKind": "RuleList", "plural": PLURAL, "singular": "rule", "categories": ["ruleop"]},
            "scope": "Cluster",
            "versions": [{
                "name": VERSION,
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"jsonPath": ".status.kind", "name": "Kind", "type": "string"},
                    {"jsonPath": ".status.revision", "name": "Revision", "type": "integer"},
                    {"jsonPath": ".status.resources", "name": "Resources", "type": "integer"},
                    {"jsonPath": ".status.rollout.updated", "name": "Updated", "type": "integer"},
                    condition,
                    {"jsonPath": ".metadata.creationTimestamp", "name": "Age", "type": "date"},
                ],
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "description": "A ruleop rule: which custom resource to watch, the children to make from each, and its status. See the ruleop manual (docs/).",
                    "properties": {
                        "spec": {
                            "type": "object",
                            "description": "One rules-file document (its `name`, if given, is the Rule's).",
                            "x-kubernetes-preserve-unknown-fields": true,
                        },
                        "status": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": true,
                            "properties": {
                                "observedGeneration": {"type": "integer", "format": "int64"},
                                "kind": {"type": "string"},
                                "watch": {"type": "string", "description": "The resource it serves (`group/resource`): a Rule that serves a kind goes on serving it when another Rule watches it too."},
                                "revision": {"type": "integer", "format": "int64"},
                                "resources": {"type": "integer", "format": "int64"},
                                "conditions": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                                "problems": {"type": "array", "items": {"type": "string"}},
                                "warnings": {"type": "array", "items": {"type": "string"},
                                    "description": "What runs only because the installation allows it (--allow-secret-reads: each place the rule copies Secret data to)."},
                                "rollout": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                                "identity": {"type": "object", "description": "The ServiceAccount the rule runs as, the permissions it lacks and the RBAC rules that would grant them.", "x-kubernetes-preserve-unknown-fields": true},
                                "storage": {"type": "object", "description": "A kind in several versions: its storage version, the versions objects are stored in, and the last migration of the stored objects (how, from which versions, how far).", "x-kubernetes-preserve-unknown-fields": true},
                            },
                        },
                    },
                }},
            }],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(spec: Value) -> Value {
        json!({"apiVersion": "ruleop.dev/v1alpha1", "kind": "Rule",
               "metadata": {"name": "web", "uid": "u-1", "generation": 3}, "spec": spec})
    }

    fn deployment(replicas: Value) -> Value {
        json!({"watch": {"group": "x.io", "version": "v1", "resource": "webs"},
               "children": [{"id": "deploy", "template": {
                   "apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "{{ name }}"},
                   "spec": {"replicas": replicas, "selector": {"matchLabels": {"a": "b"}},
                            "template": {"metadata": {"labels": {"a": "b"}},
                                         "spec": {"containers": [{"name": "c", "image": "i"}]}}}}}]})
    }

    #[test]
    fn a_rule_object_compiles_as_its_document_named_by_the_object() {
        let load = load_object(&rule(deployment(json!(2))));
        assert!(load.problems.is_empty(), "{:?}", load.problems);
        let r = load.rule.unwrap();
        assert_eq!(r.name, "web");
        let o = r.object.as_ref().unwrap();
        assert_eq!((o.uid.as_str(), o.generation), ("u-1", 3));
        assert_eq!(*o.spec, deployment(json!(2)));
        assert_eq!(r.at.file, source_path("web"));
    }

    #[test]
    fn each_problem_is_named_by_its_path_in_the_rule() {
        let load = load_object(&rule(deployment(json!("3"))));
        assert!(load.rule.is_none());
        let p = &load.problems[0];
        assert_eq!(p.path, "spec.children[0].template.spec.replicas", "{p}");
        assert!(p.message.contains("rule `web`, child `deploy`"), "{p}");
        assert!(p.message.contains("fix:"), "{p}");

        let mut spec = deployment(json!(1));
        spec["childs"] = json!([]);
        let load = load_object(&rule(spec));
        assert!(
            load.problems[0].message.contains("unknown field `childs`"),
            "{:?}",
            load.problems
        );
    }

    #[test]
    fn a_spec_name_other_than_the_objects_or_no_spec_is_refused() {
        let mut spec = deployment(json!(1));
        spec["name"] = json!("other");
        let load = load_object(&rule(spec));
        assert_eq!(load.problems[0].path, "spec.name");
        let mut no_spec = rule(json!({}));
        no_spec.as_object_mut().unwrap().remove("spec");
        assert_eq!(load_object(&no_spec).problems[0].path, "spec");
    }

    #[test]
    fn a_prefix_with_line_and_column_becomes_a_path() {
        let file = source_path("web");
        let e = LoadError::Syntax {
            path: file.clone(),
            line: 4,
            column: 7,
            rule: None,
            child: None,
            message: "bad".into(),
        };
        let p = locate(&e, &file, &|l| {
            (l == 4).then(|| "watch.version".to_string())
        });
        assert_eq!(p.path, "spec.watch.version");
        assert!(p.message.starts_with("bad"), "{}", p.message);
    }

    #[test]
    fn a_shipped_rule_as_a_rule_object_is_the_same_rule() {
        let text = include_str!("../../rules/website.yaml");
        let (rules, errors) = load_str(text, std::path::Path::new("website.yaml"));
        assert!(errors.is_empty());
        let mut spec: Value = serde_yaml::from_str(text).unwrap();
        let name = spec.as_object_mut().unwrap().remove("name").unwrap();
        let obj = json!({"metadata": {"name": name, "uid": "u", "generation": 1}, "spec": spec});
        let load = load_object(&obj);
        assert_eq!(load.rule.unwrap().fingerprint, rules[0].fingerprint);
    }
}
