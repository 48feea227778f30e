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

#[test]
fn markers_about_values_on_a_list_or_a_map_apply_to_its_items() {
    let (s, _) = field(
        "[]string | pattern=^[a-z]+$ maxItems=3 enum=a,b maxLength=5",
        "spec.hosts",
    )
    .unwrap();
    assert_eq!(s["maxItems"], 3, "the list's own bound");
    assert_eq!(s["items"]["pattern"], "^[a-z]+$");
    assert_eq!(s["items"]["enum"], json!(["a", "b"]));
    assert_eq!(s["items"]["maxLength"], 5);
    assert!(s.get("pattern").is_none(), "{s}");
    let (s, _) = field("map[string]integer | minimum=1", "spec.limits").unwrap();
    assert_eq!(s["additionalProperties"]["minimum"], 1);
}

#[test]
fn a_marker_value_may_be_in_single_quotes() {
    let (s, _) = field(
        "string | description='The Redis image' pattern='^[a-z]+$'",
        "spec.image",
    )
    .unwrap();
    assert_eq!(s["description"], "The Redis image");
    assert_eq!(s["pattern"], "^[a-z]+$");
}

#[test]
fn a_backslash_in_quotes_escapes_only_the_quote_and_itself() {
    let (s, _) = field(r#"string | pattern="^[a-z]+\.example\.com$""#, "spec.host").unwrap();
    assert_eq!(s["pattern"], json!(r"^[a-z]+\.example\.com$"));
    let (s, _) = field(r"string | pattern='^\d+$'", "spec.n").unwrap();
    assert_eq!(s["pattern"], json!(r"^\d+$"));
    let (s, _) = field(r#"string | description="a \"b\" c\\d""#, "spec.d").unwrap();
    assert_eq!(s["description"], json!(r#"a "b" c\d"#));
    let (s, _) = field(r"string | pattern=^\w+$", "spec.w").unwrap();
    assert_eq!(s["pattern"], json!(r"^\w+$"));
}

#[test]
fn each_fix_is_about_its_own_mistake() {
    let fix = |line: &str| field(line, "spec.x").unwrap_err().fix;
    assert!(fix("boolean | default=no").contains("`default=true` or `default=false`"));
    assert!(fix("integer | default=two").contains("`default=2`"));
    assert!(fix("[]string | default=a").contains("`default=[]`"));
    assert!(fix(r"string | pattern=^(\d+$").contains("backslash is written once"));
    assert!(fix("integer | minimum=one").contains("`minimum=1`"));
    assert!(fix("strin | default=a").contains("a type is string, integer"));
    assert!(fix(r#"string | description="open"#).contains("`\\\"` is a quote"));
    assert!(fix("string | message=x").contains("write `rule=` first"));
    for line in ["boolean | default=no", "integer | minimum=one", "strin"] {
        assert!(
            !fix(line).contains("default=2 minimum=1"),
            "{line}: a generic example"
        );
    }
}

#[test]
fn a_map_takes_a_bound_on_its_keys() {
    let (s, _) = field(
        "map[string]string | maxProperties=64 minProperties=1",
        "spec.files",
    )
    .unwrap();
    assert_eq!(s["maxProperties"], json!(64));
    assert_eq!(s["minProperties"], json!(1));
    assert!(s["additionalProperties"].get("maxProperties").is_none());
    assert_eq!(
        out_of_bounds(&s, &json!({})),
        Some("is outside `minProperties=1`".into())
    );
    let e = field(
        "map[string]string | maxProperties=2 default=\"{a: x, b: y, c: z}\"",
        "spec.m",
    )
    .unwrap_err();
    assert!(e.problem.contains("maxProperties=2"), "{e:?}");
}
