use super::*;
use serde_json::json;

const RULE: &str = r#"
name: site
watch: {group: x.io, version: v1, resource: sites}
schema:
  kind: Site
  spec:
    image: string
    service:
      type: string | default=ClusterIP
      annotations: map[string]string
    hosts: map[string]integer
  versions:
    - name: v1alpha1
      spec:
        image: string
        serviceType: string
        hosts: "[]string"
        legacy: boolean
      convert:
        - move: {from: spec.serviceType, to: spec.service.type}
        - default: {field: spec.service.annotations, value: {}}
        - transform:
            from: spec.hosts
            to: spec.hosts
            toHub: "{'placeholder': 1} if value else {}"
            fromHub: "value | list"
      lossy: [spec.legacy]
children: []
"#;

fn rule() -> std::sync::Arc<crate::rules::CompiledRule> {
    crate::rules::testing::rule(RULE)
}

#[test]
fn a_moved_field_goes_to_its_place_and_back() {
    let r = rule();
    let c = r.conversion.as_ref().unwrap();
    let old = json!({"apiVersion": "x.io/v1alpha1", "kind": "Site", "metadata": {"name": "a"},
        "spec": {"image": "nginx", "serviceType": "NodePort"}, "status": {"ready": true}});
    let new = convert(c, &r.program, &old, "v1").unwrap();
    assert_eq!(
        new,
        json!({"apiVersion": "x.io/v1", "kind": "Site", "metadata": {"name": "a"},
            "spec": {"image": "nginx", "service": {"type": "NodePort", "annotations": {}}},
            "status": {"ready": true}})
    );
    assert_eq!(convert(c, &r.program, &new, "v1alpha1").unwrap(), old);
}

#[test]
fn fields_with_no_place_are_kept_aside_and_come_back() {
    let r = rule();
    let c = r.conversion.as_ref().unwrap();
    let old = json!({"apiVersion": "x.io/v1alpha1", "kind": "Site", "metadata": {"name": "a"},
        "spec": {"image": "nginx", "legacy": true}});
    let new = convert(c, &r.program, &old, "v1").unwrap();
    assert_eq!(
        new["metadata"]["annotations"]["convert.ruleop.dev/v1alpha1"],
        json!(r#"{"spec.legacy":true}"#)
    );
    assert!(new["spec"].get("legacy").is_none());
    assert_eq!(convert(c, &r.program, &new, "v1alpha1").unwrap(), old);
    // A hub object's annotations of the Service, which v1alpha1 has no place for.
    let hub = json!({"apiVersion": "x.io/v1", "kind": "Site", "metadata": {"name": "b"},
        "spec": {"service": {"type": "ClusterIP", "annotations": {"a": "b"}}}});
    let spoke = convert(c, &r.program, &hub, "v1alpha1").unwrap();
    assert_eq!(spoke["spec"], json!({"serviceType": "ClusterIP"}));
    assert_eq!(convert(c, &r.program, &spoke, "v1").unwrap(), hub);
}

#[test]
fn a_transform_runs_its_expression_each_way() {
    let r = rule();
    let c = r.conversion.as_ref().unwrap();
    let old = json!({"apiVersion": "x.io/v1alpha1", "kind": "Site", "metadata": {"name": "a"},
        "spec": {"hosts": ["a"]}});
    let new = convert(c, &r.program, &old, "v1").unwrap();
    assert_eq!(new["spec"]["hosts"], json!({"placeholder": 1}));
    assert_eq!(
        convert(c, &r.program, &new, "v1alpha1").unwrap()["spec"]["hosts"],
        json!(["placeholder"])
    );
}

#[test]
fn an_unknown_version_or_group_is_an_error() {
    let r = rule();
    let c = r.conversion.as_ref().unwrap();
    let obj = json!({"apiVersion": "x.io/v9", "kind": "Site", "metadata": {"name": "a"}});
    assert!(matches!(
        convert(c, &r.program, &obj, "v1"),
        Err(ConvertError::UnknownVersion(v)) if v == "v9"
    ));
    let obj = json!({"apiVersion": "y.io/v1", "kind": "Site"});
    assert!(matches!(
        convert(c, &r.program, &obj, "v1"),
        Err(ConvertError::NoVersion(_))
    ));
}

/// The answer to `review`, as JSON.
fn answered<'a>(
    review: &Value,
    find: impl Fn(&str, &str) -> Option<(&'a Conversion, &'a Program)>,
) -> Value {
    let body = serde_json::to_vec(review).unwrap();
    serde_json::from_slice(&review::answer_body(&body, find).unwrap().0).unwrap()
}

#[test]
fn a_review_converts_every_object_or_fails_naming_it() {
    let r = rule();
    let c = r.conversion.as_ref().unwrap();
    let review = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "u1", "desiredAPIVersion": "x.io/v1", "objects": [
            {"apiVersion": "x.io/v1alpha1", "kind": "Site", "metadata": {"name": "a"}, "spec": {"serviceType": "NodePort"}}]}});
    let out = answered(&review, |g, k| {
        (g == "x.io" && k == "Site").then_some((c, &r.program))
    });
    assert_eq!(out["response"]["uid"], "u1");
    assert_eq!(out["response"]["result"]["status"], "Success", "{out}");
    assert_eq!(
        out["response"]["convertedObjects"][0]["spec"]["service"]["type"],
        "NodePort"
    );
    let out = answered(&review, |_, _| None);
    assert_eq!(out["response"]["result"]["status"], "Failure");
    assert!(
        out["response"]["result"]["message"]
            .as_str()
            .unwrap()
            .contains("no rule converts Site.x.io"),
        "{out}"
    );
}

fn errors(text: &str) -> Vec<String> {
    let (_, errors) = crate::rules::load_str(text, std::path::Path::new("v.yaml"));
    errors.iter().map(ToString::to_string).collect()
}

#[test]
fn check_refuses_a_conversion_that_leaves_a_field_out() {
    let text = RULE.replace(
        "        - move: {from: spec.serviceType, to: spec.service.type}\n",
        "",
    );
    let all = errors(&text);
    assert!(
        all.iter().any(
            |e| e.contains("`spec.serviceType` of v1alpha1 has no counterpart in v1")
                && e.contains("move: {from: spec.serviceType, to: spec.service.type}")
        ),
        "{all:?}"
    );
    assert!(
        all.iter()
            .any(|e| e.contains("`spec.service.type` of v1 has no counterpart in v1alpha1")),
        "{all:?}"
    );
    let text = RULE.replace("to: spec.service.type}", "to: spec.service.typ}");
    let all = errors(&text);
    assert!(
        all.iter().any(|e| e.contains("v.yaml:20")
            && e.contains(
                "`spec.service.typ` is no field of v1 (did you mean `spec.service.type`?)"
            )),
        "{all:?}"
    );
    let text = RULE.replace("name: v1alpha1", "name: v1beta");
    assert!(
        errors(&text)
            .iter()
            .any(|e| e.contains("not a Kubernetes version name"))
    );
    let text = RULE.replace("  versions:", "  storage: v2\n  versions:");
    assert!(
        errors(&text)
            .iter()
            .any(|e| e.contains("`storage: v2` names no version"))
    );
}

#[test]
fn check_refuses_a_default_the_hub_field_would_refuse() {
    // A default of another type than its field.
    let text = RULE.replace(
        "field: spec.service.annotations, value: {}",
        "field: spec.service.annotations, value: none",
    );
    let all = errors(&text);
    assert!(
        all.iter().any(|e| e.contains("v.yaml:21")
            && e.contains("`\"none\"` is no value of v1's `spec.service.annotations`, an object")),
        "{all:?}"
    );
    // A value outside the field's enum.
    let text = RULE
        .replace(
            "type: string | default=ClusterIP",
            "type: string | enum=ClusterIP,NodePort",
        )
        .replace(
            "        - move: {from: spec.serviceType, to: spec.service.type}\n",
            "        - default: {field: spec.service.type, value: LoadBalancer}\n",
        )
        .replace("        serviceType: string\n", "");
    let all = errors(&text);
    assert!(
        all.iter()
            .any(|e| e.contains("`\"LoadBalancer\"` is no value")
                && e.contains("one of [\"ClusterIP\",\"NodePort\"]")),
        "{all:?}"
    );
}

#[test]
fn the_crd_lists_every_version_with_the_conversion_webhook() {
    let r = rule();
    let crd = r.crd.as_ref().unwrap();
    let names: Vec<_> = crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["name"].as_str().unwrap(), v["storage"] == true))
        .collect();
    assert_eq!(names, [("v1", true), ("v1alpha1", false)]);
    assert_eq!(crd["spec"]["conversion"]["strategy"], "Webhook");
    let crd = crate::schema::crd::with_conversion(
        crd.clone(),
        json!({"url": "https://127.0.0.1:9443"}),
        Some("Q0E="),
    );
    assert_eq!(
        crd["spec"]["conversion"]["webhook"]["clientConfig"],
        json!({"url": "https://127.0.0.1:9443", "caBundle": "Q0E="})
    );
}

#[test]
fn each_version_prints_its_columns_where_its_fields_are() {
    let text = RULE.replace(
        "  versions:\n",
        "  printerColumns: [{name: Type, type: string, jsonPath: .spec.service.type}, {name: Image, type: string, jsonPath: .spec.image}]\n  versions:\n",
    );
    let (rules, errors) = crate::rules::load_str(&text, std::path::Path::new("v.yaml"));
    assert!(errors.is_empty(), "{errors:?}");
    let crd = rules[0].crd.as_ref().unwrap();
    let paths = |version: &str| -> Vec<String> {
        crd["spec"]["versions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == version)
            .unwrap()["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|c| c["jsonPath"].as_str().map(str::to_string))
            .filter(|p| p.starts_with(".spec"))
            .collect()
    };
    assert_eq!(paths("v1"), [".spec.service.type", ".spec.image"]);
    assert_eq!(paths("v1alpha1"), [".spec.serviceType", ".spec.image"]);
}

#[test]
fn a_moved_object_keeps_aside_what_its_new_place_has_no_field_for() {
    let text = "name: s\nwatch: {group: x.io, version: v1, resource: ss}\nschema:\n  kind: S\n  spec:\n    service:\n      type: string\n      annotations: map[string]string\n  versions:\n    - name: v1alpha1\n      spec:\n        svc:\n          type: string\n      convert:\n        - move: {from: spec.svc, to: spec.service}\n        - default: {field: spec.service.annotations, value: {}}\nchildren: []\n";
    let r = crate::rules::testing::rule(text);
    let c = r.conversion.as_ref().unwrap();
    let hub = json!({"apiVersion": "x.io/v1", "kind": "S", "metadata": {"name": "a"},
        "spec": {"service": {"type": "LoadBalancer", "annotations": {"lb": "internal"}}}});
    let spoke = convert(c, &r.program, &hub, "v1alpha1").unwrap();
    assert_eq!(
        spoke["spec"],
        json!({"svc": {"type": "LoadBalancer"}}),
        "only what v1alpha1 has"
    );
    assert_eq!(convert(c, &r.program, &spoke, "v1").unwrap(), hub);
}

#[test]
fn a_transform_that_gives_none_keeps_the_value_aside() {
    let text = RULE.replace("fromHub: \"value | list\"", "fromHub: \"none\"");
    let r = crate::rules::testing::rule(&text);
    let c = r.conversion.as_ref().unwrap();
    let hub = json!({"apiVersion": "x.io/v1", "kind": "Site", "metadata": {"name": "a"},
        "spec": {"hosts": {"a": 1}}});
    let spoke = convert(c, &r.program, &hub, "v1alpha1").unwrap();
    assert!(spoke["spec"].get("hosts").is_none());
    assert_eq!(
        convert(c, &r.program, &spoke, "v1").unwrap()["spec"]["hosts"],
        json!({"a": 1})
    );
}

#[test]
fn a_resource_with_no_spec_comes_back_with_none() {
    let r = rule();
    let c = r.conversion.as_ref().unwrap();
    let old = json!({"apiVersion": "x.io/v1alpha1", "kind": "Site", "metadata": {"name": "a"}});
    let hub = convert(c, &r.program, &old, "v1").unwrap();
    assert_eq!(
        hub["spec"],
        json!({"service": {"annotations": {}}}),
        "the default"
    );
    assert_eq!(convert(c, &r.program, &hub, "v1alpha1").unwrap(), old);
}
