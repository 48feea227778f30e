use super::*;

#[test]
fn a_field_line_gives_its_openapi() {
    let (s, req) = field(
        "integer | default=2 minimum=1 format=int32",
        "spec.replicas",
    )
    .unwrap();
    assert_eq!(
        s,
        json!({"type": "integer", "default": 2, "minimum": 1, "format": "int32"})
    );
    assert!(!req);
    let (s, req) = field(
        r#"string | required=true description="Image is the \"container\" image""#,
        "spec.image",
    )
    .unwrap();
    assert_eq!(
        s,
        json!({"type": "string", "description": "Image is the \"container\" image"})
    );
    assert!(req);
    let (s, _) = field(
        "string | enum=ClusterIP,NodePort,LoadBalancer default=ClusterIP",
        "x",
    )
    .unwrap();
    assert_eq!(s["enum"], json!(["ClusterIP", "NodePort", "LoadBalancer"]));
    let (s, _) = field("[]map[string]integer | maxItems=3", "x").unwrap();
    assert_eq!(
        s,
        json!({"type": "array", "maxItems": 3, "items": {"type": "object", "additionalProperties": {"type": "integer"}}})
    );
    let (s, _) = field("object", "x").unwrap();
    assert_eq!(s["x-kubernetes-preserve-unknown-fields"], true);
}

#[test]
fn a_wrong_field_line_says_what_and_where() {
    let e = field("integr", "spec.replicas").unwrap_err();
    assert_eq!(e.path, "spec.replicas");
    assert!(e.problem.contains("unknown type \"integr\""), "{e:?}");
    let e = field("integer | default=two", "spec.replicas").unwrap_err();
    assert!(
        e.problem
            .contains("default \"two\" is not of type \"integer\""),
        "{e:?}"
    );
    let e = field("integer | minimun=1", "spec.replicas").unwrap_err();
    assert!(e.problem.contains("unknown marker `minimun`"), "{e:?}");
    let e = field("string | description=\"open", "x").unwrap_err();
    assert!(e.problem.contains("no closing quote"), "{e:?}");
    let e = field("integer | default=0 minimum=1", "x").unwrap_err();
    assert!(
        e.problem.contains("default 0 is outside `minimum=1`"),
        "{e:?}"
    );
    let e = field("string | enum=a,b default=c", "x").unwrap_err();
    assert!(e.problem.contains("is not one of the enum"), "{e:?}");
}

#[test]
fn objects_nest_collect_required_fields_and_give_their_defaults() {
    let spec: Map<String, Value> = serde_yaml::from_str(
        "image: string | required=true\nreplicas: integer | default=2\nprobe:\n  path: string | default=/healthz\n  period: integer\n",
    )
    .unwrap();
    let s = object(&spec, "spec").unwrap();
    assert_eq!(s["required"], json!(["image"]));
    assert_eq!(
        s["properties"]["probe"]["properties"]["path"]["default"],
        "/healthz"
    );
    assert_eq!(
        Value::Object(defaults(&s)),
        json!({"replicas": 2, "probe": {"path": "/healthz"}})
    );
    let bad: Map<String, Value> = serde_yaml::from_str("a: integr\nb: [1]\n").unwrap();
    assert_eq!(object(&bad, "spec").unwrap_err().len(), 2);
}

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
               {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}])
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
fn int_or_string_quantity_and_per_field_cel() {
    let (s, _) = field("int-or-string | default=25%", "spec.maxSurge").unwrap();
    assert_eq!(
        s,
        json!({"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": true, "default": "25%"})
    );
    let (s, _) = field("quantity | default=1Gi", "spec.storage").unwrap();
    assert_eq!(s["pattern"], QUANTITY);
    assert_eq!(s["default"], "1Gi");
    let e = field("quantity | default=lots", "spec.storage").unwrap_err();
    assert!(e.problem.contains("does not match `pattern="), "{e:?}");
    let (s, _) = field(
        r#"string | rule="self.startsWith('db-')" message="starts with db-" rule="size(self) < 20""#,
        "spec.db",
    )
    .unwrap();
    assert_eq!(
        s["x-kubernetes-validations"],
        json!([{"rule": "self.startsWith('db-')", "message": "starts with db-"}, {"rule": "size(self) < 20"}])
    );
    let e = field("string | message=alone", "spec.db").unwrap_err();
    assert!(e.problem.contains("belongs to the `rule=`"), "{e:?}");
    let e = field("string | pattern=^[a-z]+$ default=ABC", "spec.db").unwrap_err();
    assert!(e.problem.contains("does not match"), "{e:?}");
    let e = field("quantity | default=0.5", "spec.cpu").unwrap_err();
    assert!(e.problem.contains("not an integer or a string"), "{e:?}");
    assert!(field("int-or-string | default=true", "spec.port").is_err());
    assert!(field("int-or-string | default=8080", "spec.port").is_ok());
    let e = field("string | pattern=[a-", "spec.db").unwrap_err();
    assert!(e.problem.contains("not a regular expression"), "{e:?}");
}
