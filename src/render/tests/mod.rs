//! Rendering the shipped rules and hostile custom resources, with no cluster.

use super::*;
use crate::rules::testing::{rule, website};
use serde_json::json;

fn website_cr(spec: Value) -> Value {
    json!({"apiVersion": "sre.example.com/v1alpha1", "kind": "WebSite", "metadata": {"name": "my-blog", "namespace": "team-a", "uid": "u-1"}, "spec": spec})
}

#[test]
fn website_renders_the_original_deployment_and_service() {
    let out = render(
        &website(),
        &website_cr(json!({"image": "nginx:1.27", "replicas": 3})),
    )
    .unwrap();
    assert_eq!(out.len(), 2);
    let d = &out[0].object;
    assert_eq!(d["kind"], "Deployment");
    assert_eq!(d["metadata"]["name"], "my-blog-web");
    assert_eq!(d["metadata"]["namespace"], "team-a");
    assert_eq!(d["metadata"]["labels"]["app.kubernetes.io/name"], "website");
    assert_eq!(
        d["metadata"]["labels"]["app.kubernetes.io/instance"],
        "my-blog"
    );
    assert_eq!(
        d["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "website-operator"
    );
    // The origin's selector: all three labels, on the pod template and the Service too.
    let origin = json!({"app.kubernetes.io/name": "website", "app.kubernetes.io/instance": "my-blog", "app.kubernetes.io/managed-by": "website-operator"});
    assert_eq!(d["spec"]["selector"]["matchLabels"], origin);
    assert_eq!(d["spec"]["template"]["metadata"]["labels"], origin);
    assert_eq!(
        d["spec"]["replicas"],
        json!(3),
        "an integer stays an integer"
    );
    let c = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(c["name"], "web");
    assert_eq!(c["image"], "nginx:1.27");
    assert_eq!(
        c["ports"][0],
        json!({"containerPort": 80, "protocol": "TCP"}),
        "port defaults to 80; the origin's container port has no name"
    );
    assert_eq!(
        c["resources"],
        json!({"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}})
    );
    assert_eq!(
        d["metadata"]["ownerReferences"][0],
        json!({"apiVersion": "sre.example.com/v1alpha1", "kind": "WebSite", "name": "my-blog", "uid": "u-1", "controller": true, "blockOwnerDeletion": true})
    );
    let s = &out[1].object;
    assert_eq!(s["kind"], "Service");
    assert_eq!(s["metadata"]["name"], "my-blog-web");
    assert_eq!(
        s["spec"]["type"], "ClusterIP",
        "serviceType defaults to ClusterIP"
    );
    assert_eq!(s["spec"]["ports"][0]["port"], json!(80));
    assert_eq!(s["spec"]["ports"][0]["targetPort"], json!(80));
    assert_eq!(s["spec"]["selector"], origin);
    assert_eq!(
        s["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "website-operator"
    );
}

#[test]
fn website_defaults_replicas_to_two() {
    let out = render(&website(), &website_cr(json!({"image": "nginx"}))).unwrap();
    assert_eq!(out[0].object["spec"]["replicas"], json!(2));
}

#[test]
fn myapp_renders_the_original_deployment() {
    let r = rule(include_str!("../../../rules/myapp.yaml"));
    let cr = json!({"apiVersion": "myscheme.example.com/v1", "kind": "MyApp", "metadata": {"name": "shop", "namespace": "ns"}, "spec": {"image": "busybox", "replicas": 4}});
    let out = render(&r, &cr).unwrap();
    let d = &out[0].object;
    assert_eq!(d["metadata"]["name"], "shop");
    assert_eq!(d["metadata"]["labels"]["app"], "shop");
    assert_eq!(d["spec"]["selector"]["matchLabels"], json!({"app": "shop"}));
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["name"],
        "app"
    );
    assert_eq!(d["spec"]["replicas"], json!(4));
}

#[test]
fn rendering_is_deterministic_so_hashes_are_stable() {
    let cr = website_cr(json!({"image": "nginx"}));
    assert_eq!(
        render(&website(), &cr).unwrap(),
        render(&website(), &cr).unwrap()
    );
}

#[test]
fn hostile_strings_land_verbatim_and_never_change_the_structure() {
    let hostile = [
        "nginx\nkind: ClusterRole",
        "x: y\n---\napiVersion: v1\nkind: Secret",
        "{{ 7 * 7 }}",
        "{% for i in range(10) %}x{% endfor %}",
        "\"quoted\" 'single' `back`",
        "- a\n- b",
        "...\n---",
        "&anchor *alias !!binary",
    ];
    let clean = render(&website(), &website_cr(json!({"image": "nginx"}))).unwrap();
    for h in hostile {
        let out = render(&website(), &website_cr(json!({"image": h}))).unwrap();
        assert_eq!(out.len(), 2, "no extra object for {h:?}");
        assert_eq!(
            out[0].object["spec"]["template"]["spec"]["containers"][0]["image"],
            json!(h),
            "verbatim for {h:?}"
        );
        let mut a = out[0].object.clone();
        let mut b = clean[0].object.clone();
        a["spec"]["template"]["spec"]["containers"][0]["image"] = json!("");
        b["spec"]["template"]["spec"]["containers"][0]["image"] = json!("");
        a["metadata"]["annotations"] = json!(null);
        b["metadata"]["annotations"] = json!(null);
        assert_eq!(a, b, "only the image differs for {h:?}");
    }
}

#[test]
fn a_hostile_name_stays_inside_its_string_and_is_refused_as_a_name() {
    let mut cr = website_cr(json!({"image": "nginx"}));
    cr["metadata"]["name"] = json!("a\nnamespace: kube-system");
    // Its text stays one string (no field is added), and as a name it is refused before
    // any request: nothing is sent.
    let err = render(&website(), &cr).unwrap_err().to_string();
    assert!(
        err.contains("child `deployment`: metadata.name rendered to \"a\\nnamespace: kube-system-web\", not a valid name")
            && err.contains("fix:"),
        "{err}"
    );
    for path in ["x/../../secrets/y", "x?dryRun=All"] {
        cr["metadata"]["name"] = json!(path);
        let err = render(&website(), &cr).unwrap_err().to_string();
        assert!(err.contains("may not appear in a name"), "{path}: {err}");
    }
}

#[test]
fn booleans_and_numbers_keep_their_types_and_text_makes_strings() {
    let r = rule(
        r#"
name: types
watch: {group: x.io, version: v1, resource: things}
children:
  - id: cm
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "{{ name }}"}
      data:
        text: "port {{ spec.port }}"
      binaryData: "{{ spec.nothing | default(none) }}"
      immutable: "{{ spec.flag }}"
"#,
    );
    let cr =
        json!({"metadata": {"name": "a", "namespace": "n"}, "spec": {"port": 8080, "flag": true}});
    let out = render(&r, &cr).unwrap();
    assert_eq!(out[0].object["data"]["text"], json!("port 8080"));
    assert_eq!(out[0].object["immutable"], json!(true));
    assert!(
        out[0].object.get("binaryData").is_none(),
        "none is dropped, not sent as null"
    );
}

#[test]
fn a_template_naming_another_namespace_is_refused_at_render() {
    let r = rule(
        r#"
name: escape
watch: {group: x.io, version: v1, resource: things}
children:
  - id: cm
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: "{{ name }}"
        namespace: "{{ spec.target }}"
"#,
    );
    let ok = json!({"metadata": {"name": "a", "namespace": "n"}, "spec": {"target": "n"}});
    assert!(render(&r, &ok).is_ok(), "its own namespace is fine");
    let bad =
        json!({"metadata": {"name": "a", "namespace": "n"}, "spec": {"target": "kube-system"}});
    let e = render(&r, &bad).unwrap_err();
    assert!(
        matches!(e, RenderError::OtherNamespace { ref found, .. } if found == "kube-system"),
        "{e}"
    );
}

#[test]
fn an_undefined_value_is_an_error_that_names_the_child_and_field() {
    let out = render(&website(), &website_cr(json!({"replicas": 1})));
    let e = out.unwrap_err().to_string();
    assert!(e.contains("child `deployment`"), "{e}");
    assert!(e.contains("spec.template.spec.containers[0].image"), "{e}");
    assert!(e.contains("undefined"), "{e}");
    let line = include_str!("../../../rules/website.yaml")
        .lines()
        .position(|l| l.contains("image: \"{{ spec.image }}\""))
        .unwrap()
        + 1;
    assert!(
        e.starts_with(&format!("test.yaml:{line}: ")),
        "the file and line of the template: {e}"
    );
}

#[test]
fn a_false_condition_leaves_the_child_out() {
    let r = rule(
        r#"
name: cond
watch: {group: x.io, version: v1, resource: things}
children:
  - id: cm
    when: spec.enabled
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "{{ name }}"}
"#,
    );
    let on = json!({"metadata": {"name": "a", "namespace": "n"}, "spec": {"enabled": true}});
    let off = json!({"metadata": {"name": "a", "namespace": "n"}, "spec": {"enabled": false}});
    assert_eq!(render(&r, &on).unwrap().len(), 1);
    assert_eq!(render(&r, &off).unwrap().len(), 0);
}

#[test]
fn a_runaway_template_is_stopped_by_fuel() {
    let r = rule(
        r#"
name: loop
watch: {group: x.io, version: v1, resource: things}
children:
  - id: cm
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "{{ name }}"}
      data:
        x: "{% for i in range(100000) %}{% for j in range(100000) %}.{% endfor %}{% endfor %}"
"#,
    );
    let cr = json!({"metadata": {"name": "a", "namespace": "n"}});
    let e = render(&r, &cr).unwrap_err().to_string();
    assert!(e.contains("fuel") || e.contains("range"), "{e}");
}

fn one_child_rule(field: &str) -> std::sync::Arc<CompiledRule> {
    rule(&format!(
        "name: hostile\nwatch: {{group: x.io, version: v1, resource: things}}\nchildren:\n  - id: cm\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {{name: \"{{{{ name }}}}\"}}\n      data:\n        x: '{field}'\n"
    ))
}

fn cr_with(spec: Value) -> Value {
    json!({"metadata": {"name": "a", "namespace": "n"}, "spec": spec})
}

/// The error of a render that must fail, without printing a huge object if it did not.
fn error_of(r: Result<Vec<Rendered>, RenderError>) -> String {
    match r {
        Ok(out) => panic!(
            "expected an error, got {} object(s) of {} bytes",
            out.len(),
            out.iter()
                .map(|o| o.object.to_string().len())
                .sum::<usize>()
        ),
        Err(e) => e.to_string(),
    }
}

#[test]
fn deep_recursion_is_stopped_by_the_recursion_limit() {
    let r = one_child_rule("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}");
    let e = error_of(render(&r, &cr_with(json!({}))));
    assert!(e.contains("recursion limit"), "{e}");
}

#[test]
fn a_huge_string_is_stopped_by_the_output_cap() {
    // Text within the fuel, over the 256 KiB a templated string may render to.
    let r = one_child_rule("big: {{ \"x\" * 300000 }}");
    let e = error_of(render(&r, &cr_with(json!({}))));
    assert!(e.contains("more than the 262144 allowed"), "{e}");
    // A lone expression is bounded by the object cap.
    let r = one_child_rule("{{ \"x\" * 2000000 }}");
    let e = error_of(render(&r, &cr_with(json!({}))));
    assert!(
        e.contains("rendered object is") || e.contains("fuel"),
        "{e}"
    );
    // A size taken from the custom resource: stopped (by fuel, before any cap).
    let r = one_child_rule("{{ \"-\" * spec.width }}");
    let e = error_of(render(&r, &cr_with(json!({"width": 90_000_000}))));
    assert!(e.contains("fuel") || e.contains("more than the"), "{e}");
}

#[test]
fn a_huge_object_from_a_lone_expression_is_refused() {
    let r = rule(
        "name: big\nwatch: {group: x.io, version: v1, resource: things}\nchildren:\n  - id: cm\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: \"{{ name }}\"}\n      data: \"{{ spec.blob }}\"\n",
    );
    let blob: serde_json::Map<String, Value> = (0..2000)
        .map(|i| (format!("k{i}"), json!("y".repeat(1000))))
        .collect();
    let e = error_of(render(&r, &cr_with(json!({"blob": blob}))));
    assert!(e.contains("rendered object is"), "{e}");
}

#[test]
fn namespace_cannot_be_used_to_accumulate_across_iterations() {
    let r = one_child_rule(
        "{% set ns = namespace(s=\"x\") %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
    );
    let e = error_of(render(&r, &cr_with(json!({}))));
    assert!(e.contains("cm"), "{e}");
}

#[test]
fn a_custom_resource_of_a_mebibyte_renders_and_unused_data_costs_nothing() {
    let big = "z".repeat(1024 * 1024);
    let cr = website_cr(json!({"image": "nginx", "notes": big}));
    let out = render(&website(), &cr).unwrap();
    assert_eq!(out.len(), 2);
}

#[test]
fn wrongly_typed_and_missing_spec_fields_have_defined_outcomes() {
    // A string where the template expects a number: rendered as given (the API server
    // refuses it for a Deployment, and that refusal lands on the resource).
    let out = render(
        &website(),
        &website_cr(json!({"image": "nginx", "replicas": "three"})),
    )
    .unwrap();
    assert_eq!(out[0].object["spec"]["replicas"], json!("three"));
    // An object where a string belongs stays that object (the API server refuses it too).
    let out = render(&website(), &website_cr(json!({"image": {"nested": true}}))).unwrap();
    assert_eq!(
        out[0].object["spec"]["template"]["spec"]["containers"][0]["image"],
        json!({"nested": true})
    );
    // A missing required field: an error naming the child and field.
    let e = render(&website(), &website_cr(json!({})))
        .unwrap_err()
        .to_string();
    assert!(e.contains("spec.template.spec.containers[0].image"), "{e}");
}

#[test]
fn a_map_literal_with_nested_braces_renders_as_a_map_and_none_drops_a_list_item() {
    let r = rule(
        "name: t\nwatch: {group: x.io, version: v1, resource: ts}\nchildren:\n  - id: cm\n    template:\n      apiVersion: x.io/v1\n      kind: Thing\n      metadata: {name: \"{{ name }}\"}\n      spec:\n        nested: \"{{ {'x': {'y': 1}} }}\"\n        items:\n          - \"{{ {'a': {'b': 1}} if spec.on | default(false) else none }}\"\n          - kept\n",
    );
    let cr = json!({"metadata": {"name": "n", "namespace": "ns"}, "spec": {}});
    let out = render(&r, &cr).unwrap();
    let spec = &out[0].object["spec"];
    assert_eq!(
        spec["nested"],
        json!({"x": {"y": 1}}),
        "a map, not its text"
    );
    assert_eq!(spec["items"], json!(["kept"]), "none drops the item");
}

/// The Microservice fixture: collections, references, `after` and an existing Secret.
mod graph;

#[test]
fn none_inside_text_fails_the_render_naming_the_line_and_the_fix() {
    let r = one_child_rule("x{{ spec.opt | default(none) }}y");
    let e = error_of(render(&r, &cr_with(json!({}))));
    assert!(e.contains("test.yaml:"), "{e}");
    assert!(
        e.contains("inside text is none") && e.contains("default('')"),
        "{e}"
    );
    // A lone expression that gives none still drops its field.
    let r = one_child_rule("{{ spec.opt | default(none) }}");
    let out = render(&r, &cr_with(json!({}))).unwrap();
    assert!(
        out[0].object["data"].get("x").is_none(),
        "{}",
        out[0].object
    );
}
