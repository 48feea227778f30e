//! What the watched kind's CRD tells about a rule, offline (`ruleop check --crd`,
//! `ruleop render --crd`): every `spec.…` a template or expression reads must be a field
//! of the CRD's schema (or of the rule's `defaults`), with "did you mean"; and the CRD's
//! defaults are applied to a custom resource before it is rendered, as the API server
//! would. Pure.

use super::compile::{CompiledRule, Node};
use super::error::{LoadError, Location, RuleProblem};
use crate::suggest::edit_distance;
use serde_json::{Map, Value};

/// The `openAPIV3Schema` of the CRD among `crds` that serves the rule's watched resource.
pub fn schema_for<'a>(rule: &CompiledRule, crds: &'a [Value]) -> Option<&'a Value> {
    let w = &rule.watch;
    crds.iter()
        .filter(|c| c["kind"] == "CustomResourceDefinition")
        .filter(|c| c["spec"]["group"] == w.group.as_str())
        .filter(|c| c["spec"]["names"]["plural"] == w.resource.as_str())
        .flat_map(|c| c["spec"]["versions"].as_array().into_iter().flatten())
        .find(|v| v["name"] == w.version.as_str())
        .map(|v| &v["schema"]["openAPIV3Schema"])
}

/// The schema of the rule's kind: from a CRD given for it, or else from the rule's own `schema`.
pub fn schema_of<'a>(rule: &'a CompiledRule, crds: &'a [Value]) -> Option<&'a Value> {
    let own = rule
        .crd
        .as_ref()
        .map(|c| &c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]);
    schema_for(rule, crds).or(own)
}

/// Every expression and text of the rule, with the child it belongs to.
fn sources(rule: &CompiledRule) -> Vec<(Vec<String>, usize, Option<String>)> {
    let mut out = Vec::new();
    fn walk(
        rule: &CompiledRule,
        node: &Node,
        child: &str,
        out: &mut Vec<(Vec<String>, usize, Option<String>)>,
    ) {
        match node {
            Node::Expr(e) => {
                out.push((rule.program.expression_paths(e), e.line, Some(child.into())))
            }
            Node::Text(t) => out.push((rule.program.template_paths(t), t.line, Some(child.into()))),
            Node::Map(entries) => {
                for (_, v) in entries {
                    walk(rule, v, child, out);
                }
            }
            Node::Seq(items) => {
                for v in items {
                    walk(rule, v, child, out);
                }
            }
            Node::Each(each) => {
                let (e, item) = &**each;
                out.push((
                    rule.program.expression_paths(&e.over),
                    e.over.line,
                    Some(child.into()),
                ));
                walk(rule, item, child, out);
            }
            Node::Literal(_) => {}
        }
    }
    for c in &rule.children {
        walk(rule, &c.template, &c.id, &mut out);
        let over = c.each.as_ref().map(|e| &e.over);
        for e in c.when.iter().chain(c.ready_when.iter()).chain(over) {
            out.push((rule.program.expression_paths(e), e.line, Some(c.id.clone())));
        }
    }
    for e in rule
        .ready
        .iter()
        .chain(rule.fields.iter().filter_map(|f| match &f.source {
            super::FieldSource::Value(e) => Some(e),
            super::FieldSource::Path { .. } => None,
        }))
    {
        out.push((rule.program.expression_paths(e), e.line, None));
    }
    out
}

/// Whether the schema node lets any field in (no fixed properties).
fn open(schema: &Value) -> bool {
    schema["x-kubernetes-preserve-unknown-fields"] == true
        || schema.get("additionalProperties").is_some()
        || schema.get("properties").is_none()
}

/// Checks one `spec.a.b` path against the spec schema and the rule's defaults; the first
/// unknown segment and the names it could have meant.
fn unknown_segment<'a>(
    path: &'a str,
    spec: &Value,
    defaults: &Map<String, Value>,
) -> Option<(&'a str, Vec<String>)> {
    let mut schema = spec;
    let mut default = Some(defaults);
    for seg in path.split('.').skip(1) {
        let in_default = default.and_then(|d| d.get(seg));
        if open(schema) {
            return None;
        }
        match schema["properties"].get(seg) {
            Some(s) => schema = s,
            None if in_default.is_some() => return None,
            None => {
                let names = schema["properties"]
                    .as_object()
                    .map(|p| p.keys().cloned().collect())
                    .unwrap_or_default();
                return Some((seg, names));
            }
        }
        default = in_default.and_then(Value::as_object);
    }
    None
}

/// The rule's reads of `spec` fields the CRD does not have, as errors with file and line.
pub fn check_spec_fields(rule: &CompiledRule, schema: &Value) -> Vec<LoadError> {
    let spec = &schema["properties"]["spec"];
    let mut errors = Vec::new();
    let mut reported = std::collections::HashSet::new();
    for (paths, line, child) in sources(rule) {
        for path in paths.iter().filter(|p| p.starts_with("spec.")) {
            let Some((seg, names)) = unknown_segment(path, spec, &rule.defaults) else {
                continue;
            };
            let close = names
                .iter()
                .filter(|n| edit_distance(n, seg) <= 2)
                .min_by_key(|n| edit_distance(n, seg));
            let fix = match close {
                Some(n) => format!("did you mean `{n}`?"),
                None if names.is_empty() => "the CRD's schema has no fields there".into(),
                None => format!("the CRD has: {}", names.join(", ")),
            };
            let problem = format!("`{path}`: the CRD's spec has no field `{seg}`");
            if !reported.insert(problem.clone()) {
                continue;
            }
            errors.push(LoadError::Rule(Box::new(RuleProblem {
                at: Location {
                    file: rule.at.file.clone(),
                    line,
                },
                rule: rule.name.clone(),
                child: child.clone(),
                problem,
                fix,
            })));
        }
    }
    errors
}

/// Applies the schema's defaults to `obj`, as the API server does when it stores an
/// object: a missing field with a `default` gets it, inside every object present.
pub fn apply_defaults(obj: &mut Value, schema: &Value) {
    let Some(map) = obj.as_object_mut() else {
        return;
    };
    let Some(props) = schema["properties"].as_object() else {
        return;
    };
    for (name, s) in props {
        if !map.contains_key(name)
            && let Some(d) = s.get("default")
        {
            map.insert(name.clone(), d.clone());
        }
        if let Some(child) = map.get_mut(name) {
            apply_defaults(child, s);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::testing::website;

    fn website_crd() -> Vec<Value> {
        crate::rules::testing::yaml_docs(include_str!(
            "../../deploy/crds/websites.sre.example.com.yaml"
        ))
    }

    #[test]
    fn the_shipped_rule_reads_only_fields_its_crd_has() {
        let crds = website_crd();
        let rule = website();
        let schema = schema_for(&rule, &crds).expect("the WebSite CRD serves the rule's version");
        assert!(check_spec_fields(&rule, schema).is_empty());
    }

    #[test]
    fn a_misspelt_spec_field_is_an_error_with_its_line_and_a_suggestion() {
        let crds = website_crd();
        let text = include_str!("../../rules/website.yaml").replace(
            "replicas: \"{{ spec.replicas }}\"",
            "replicas: \"{{ spec.replcias }}\"",
        );
        let rule = crate::rules::testing::rule(&text);
        let schema = schema_for(&rule, &crds).unwrap();
        let errors = check_spec_fields(&rule, schema);
        assert_eq!(errors.len(), 1, "{errors:?}");
        let e = errors[0].to_string();
        let line = text
            .lines()
            .position(|l| l.contains("spec.replcias"))
            .unwrap()
            + 1;
        assert!(e.starts_with(&format!("test.yaml:{line}: ")), "{e}");
        assert!(
            e.contains("no field `replcias`") && e.contains("did you mean `replicas`?"),
            "{e}"
        );
    }

    #[test]
    fn defaults_are_applied_as_the_api_server_would() {
        let crds = website_crd();
        let rule = website();
        let schema = schema_for(&rule, &crds).unwrap();
        let mut cr = serde_json::json!({"spec": {"image": "nginx", "replicas": 5}});
        apply_defaults(&mut cr, schema);
        assert_eq!(
            cr["spec"],
            serde_json::json!({"image": "nginx", "replicas": 5, "port": 80, "serviceType": "ClusterIP"})
        );
    }
}
