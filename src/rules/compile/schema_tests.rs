//! A rule's `schema` made into its CRD and its defaults, through the loader.

use serde_json::{Value, json};

#[test]
fn the_website_crd_made_from_the_rule_is_the_origins() {
    let rule = crate::rules::testing::website();
    let origin = crate::rules::testing::yaml_docs(include_str!(
        "../../../tests/fixtures/origin/website-crd.yaml"
    ));
    assert_eq!(rule.crd.as_ref(), origin.first());
    // Its defaults are the rule's: one place.
    assert_eq!(
        Value::Object(rule.defaults.clone()),
        json!({"replicas": 2, "port": 80, "serviceType": "ClusterIP"})
    );
}

#[test]
fn a_rule_with_a_schema_takes_no_separate_defaults_and_reports_schema_lines() {
    let text = "name: c\nwatch: {group: x.io, version: v1, resource: cs}\ndefaults: {a: 1}\nschema:\n  kind: C\n  spec:\n    a: integr\n";
    let (_, errors) = crate::rules::load_str(text, std::path::Path::new("s.yaml"));
    let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert!(
        all.iter()
            .any(|e| e.contains("s.yaml:3") && e.contains("both `schema` and `defaults`")),
        "{all:?}"
    );
    assert!(
        all.iter()
            .any(|e| e.contains("s.yaml:7") && e.contains("unknown type \"integr\"")),
        "{all:?}"
    );
}

#[test]
fn without_declared_columns_each_scalar_status_field_gets_one() {
    let text = "name: c\nwatch: {group: x.io, version: v1, resource: cs}\nschema:\n  kind: C\n  shortNames: [cc]\n  spec:\n    size: integer | default=1 minimum=1\n  validations:\n    - {rule: self.size <= 10, message: at most 10}\nstatus:\n  fields:\n    - {name: ready, type: boolean, value: 'true'}\n    - {name: hosts, type: array, value: '[]'}\n";
    let rule = crate::rules::testing::rule(text);
    let crd = rule.crd.clone().unwrap();
    assert_eq!(crd["metadata"]["name"], "cs.x.io");
    assert_eq!(
        crd["spec"]["names"],
        json!({"kind": "C", "listKind": "CList", "plural": "cs", "singular": "c", "shortNames": ["cc"]})
    );
    let v = &crd["spec"]["versions"][0];
    assert_eq!(
        v["additionalPrinterColumns"],
        json!([{"name": "Ready", "type": "boolean", "jsonPath": ".status.ready"},
               {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
               {"name": "Revision", "type": "integer", "jsonPath": ".status.ruleRevision", "priority": 1}])
    );
    let root = &v["schema"]["openAPIV3Schema"];
    assert_eq!(
        root["properties"]["spec"]["x-kubernetes-validations"],
        json!([{"rule": "self.size <= 10", "message": "at most 10"}])
    );
    assert_eq!(
        root["properties"]["status"]["properties"]["hosts"],
        json!({"type": "array", "items": {"x-kubernetes-preserve-unknown-fields": true}})
    );
    assert!(root["properties"]["status"]["properties"]["conditions"].is_object());
    assert_eq!(v["subresources"], json!({"status": {}}));
}

#[test]
fn a_cel_rule_the_api_server_would_refuse_for_its_cost_is_refused_at_its_line_with_the_bound() {
    let text = "name: c\nwatch: {group: x.io, version: v1, resource: cs}\nschema:\n  kind: C\n  spec:\n    content: map[string]string\n    hosts: \"[]string | rule=\\\"self.all(h, h.matches('^[a-z.]+$'))\\\"\"\n  validations:\n    - {rule: \"self.content.all(k, self.content[k].matches('^[a-z]+$'))\"}\n";
    let (_, errors) = crate::rules::load_str(text, std::path::Path::new("s.yaml"));
    let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
    let at = |line: &str, bound: &str| {
        all.iter()
            .any(|e| e.contains(line) && e.contains("estimated cost") && e.contains(bound))
    };
    assert!(
        at(
            "s.yaml:9",
            "on the line of `spec.content`, maxLength=… (how long each item or value may be) and maxProperties=…"
        ),
        "{all:?}"
    );
    assert!(
        at("s.yaml:7", "on the line of `spec.hosts`, maxItems=…"),
        "{all:?}"
    );
    // Bounded, the same rules are taken.
    let bounded = text
        .replace(
            "map[string]string",
            "map[string]string | maxProperties=64 maxLength=253",
        )
        .replace("[]string |", "[]string | maxItems=16 maxLength=253");
    let (_, errors) = crate::rules::load_str(&bounded, std::path::Path::new("s.yaml"));
    assert!(errors.is_empty(), "{errors:?}");
}
