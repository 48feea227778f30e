//! Typed references ([`super::refs`]), in whole rules: each kind of reference with a
//! typo is an error at its line with "did you mean"; good ones and free-form fields pass.

const RULE: &str = r#"name: s
watch: {group: x.io, version: v1, resource: ss}
existing:
  - {id: db, apiVersion: v1, kind: Secret, name: "{{ name }}"}
  - {id: pods, apiVersion: v1, kind: Pod, selector: {app: x}}
children:
  - id: config
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: "{{ name }}"}, data: {a: b}}
  - id: web
    readyWhen: "READY"
    template:
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: "{{ name }}", annotations: {x: "TEXT"}}
      spec:
        selector: {matchLabels: {a: b}}
        template:
          metadata: {labels: {a: b}}
          spec: {containers: [{name: c, image: "IMAGE"}]}
  - id: allow
    forEach: "['a', 'b']"
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: "{{ name }}-{{ item }}"}, data: {a: "EACH"}}
status:
  fields:
    - {name: a, type: integer, from: web, path: "PATH"}
    - {name: b, type: integer, value: "VALUE"}
"#;

/// The rule with `key` replaced by `value` (the others as they are good), and its errors.
fn errors_with(key: &str, value: &str) -> Vec<String> {
    errors_in(RULE, key, value)
}

fn errors_in(rule: &str, key: &str, value: &str) -> Vec<String> {
    let good = [
        ("READY", "child.status.readyReplicas >= 1"),
        (
            "TEXT",
            "{{ rendered.config.data.a }}-{{ observed.config.metadata.uid }}",
        ),
        ("IMAGE", "{{ existing.db.data.image | b64decode }}"),
        ("EACH", "{{ existing.pods[0].status.podIP }}"),
        ("PATH", "$.status.readyReplicas"),
        ("VALUE", "children.web.status.readyReplicas"),
    ];
    let mut text = rule.to_string();
    for (k, v) in good {
        text = text.replace(k, if k == key { value } else { v });
    }
    let (_, errors) = crate::rules::load_str(&text, std::path::Path::new("s.yaml"));
    errors.iter().map(ToString::to_string).collect()
}

/// The one error of the rule with `key` replaced, which must be at `key`'s line.
fn one(key: &str, value: &str) -> String {
    let line = RULE.lines().position(|l| l.contains(key)).unwrap() + 1;
    let mut all = errors_with(key, value);
    assert_eq!(all.len(), 1, "{all:#?}");
    assert!(
        all[0].starts_with(&format!("s.yaml:{line}: rule `s`")),
        "{}",
        all[0]
    );
    all.remove(0)
}

#[test]
fn good_references_pass() {
    assert_eq!(errors_with("", ""), Vec::<String>::new());
    // Free-form fields: a ConfigMap's data, a Secret's data, a quantity.
    for (k, v) in [
        ("TEXT", "{{ rendered.config.data.anything }}"),
        (
            "EACH",
            "{{ rendered.web.spec.template.spec.containers[0].resources.limits.cpu }}",
        ),
        (
            "TEXT",
            "{{ rendered.allow[0].data.a }}{{ rendered.allow | length }}",
        ),
        (
            "VALUE",
            "children.web.metadata.labels.items() | list | length",
        ),
        (
            "VALUE",
            "children.allow | map(attribute='metadata.name') | list | length",
        ),
        (
            "PATH",
            "$.status.conditions[?(@.type == 'Available')].status",
        ),
        ("READY", "child.status.conditions[-1].status == 'True'"),
    ] {
        assert_eq!(errors_with(k, v), Vec::<String>::new(), "{k}: {v}");
    }
}

#[test]
fn each_kind_of_reference_with_a_typo_is_an_error_at_its_line() {
    for (key, value, says) in [
        (
            "READY",
            "child.status.readyReplica >= 1",
            "`child.status.readyReplica`: Deployment has no field `status.readyReplica`",
        ),
        (
            "TEXT",
            "{{ rendered.config.metadata.nmae }}",
            "`rendered.config.metadata.nmae`: ConfigMap has no field `metadata.nmae`",
        ),
        (
            "EACH",
            "{{ observed.web.status.readyReplica }}",
            "Deployment has no field `status.readyReplica`",
        ),
        (
            "IMAGE",
            "{{ existing.db.dat.image }}",
            "`existing.db.dat.image`: Secret has no field `dat`",
        ),
        (
            "PATH",
            "$.status.readyReplica",
            "`$.status.readyReplica`: Deployment has no field `status.readyReplica`",
        ),
        (
            "VALUE",
            "children.web.status.readyReplica",
            "`children.web.status.readyReplica`: Deployment has no field `status.readyReplica`",
        ),
        (
            "EACH",
            "{{ existing.pods[0].status.podIp }}",
            "Pod has no field `status.podIp`",
        ),
    ] {
        let e = one(key, value);
        assert!(e.contains(says), "{key}: {e}");
        assert!(e.contains("fix: did you mean `"), "{key}: {e}");
    }
}

#[test]
fn a_collection_or_a_selector_is_a_list() {
    let e = one("VALUE", "children.allow.metadata.name");
    assert!(
        e.contains("`children.allow` is a list of ConfigMap objects"),
        "{e}"
    );
    assert!(e.contains("`children.allow[0].metadata`"), "{e}");
    let e = one("EACH", "{{ existing.pods.status.podIP }}");
    assert!(
        e.contains("`existing.pods` is a list of Pod objects"),
        "{e}"
    );
    let e = one(
        "EACH",
        "{{ rendered.web.spec.template.spec.containers.image }}",
    );
    assert!(
        e.contains("`spec.template.spec.containers` of a Deployment is a list"),
        "{e}"
    );
}

#[test]
fn a_kind_with_no_known_schema_is_not_checked() {
    let rule = RULE.replace(
        "apiVersion: v1, kind: Secret",
        "apiVersion: x.io/v1, kind: Widget",
    );
    let all = errors_in(&rule, "IMAGE", "{{ existing.db.anything.at.all }}");
    assert!(all.is_empty(), "{all:#?}");
}

#[test]
fn the_resource_itself_is_checked_against_the_rules_schema() {
    let rule = |value: &str, path: &str| {
        format!(
            "name: s\nwatch: {{group: x.io, version: v1, resource: sites}}\nschema:\n  kind: Site\n  spec:\n    replicas: integer | default=1\n    config: object\nchildren:\n  - id: c\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: \"{{{{ name }}}}\"}}}}\nstatus:\n  fields:\n    - {{name: a, type: integer, value: \"{value}\"}}\n    - {{name: b, type: integer, from: self, path: \"{path}\"}}\n"
        )
    };
    let load = |text: String| {
        let (_, errors) = crate::rules::load_str(&text, std::path::Path::new("s.yaml"));
        errors.iter().map(ToString::to_string).collect::<Vec<_>>()
    };
    let good = load(rule(
        "self.spec.replicas + self.spec.config.anything.x + self.metadata.generation",
        "$.status.observedGeneration",
    ));
    assert!(good.is_empty(), "{good:#?}");
    let bad = load(rule("self.spec.replcas", "$.metadata.generatoin"));
    assert_eq!(bad.len(), 2, "{bad:#?}");
    assert!(
        bad[0].starts_with("s.yaml:13: rule `s`: `self.spec.replcas`: Site has no field `spec.replcas`\n  fix: did you mean `replicas`?"),
        "{bad:#?}"
    );
    assert!(
        bad[1].starts_with("s.yaml:14: rule `s`: `$.metadata.generatoin`: Site has no field `metadata.generatoin`\n  fix: did you mean `generation`?"),
        "{bad:#?}"
    );
}

#[test]
fn a_references_type_is_checked_where_it_is_put() {
    // The container's image is a string.
    for good in [
        "{{ rendered.config.metadata.name }}",
        "{{ existing.db.data.image }}",
        "{{ rendered.config.metadata.generation | string }}",
    ] {
        assert_eq!(errors_with("IMAGE", good), Vec::<String>::new(), "{good}");
    }
    let e = one("IMAGE", "{{ rendered.config.metadata.generation }}");
    assert!(
        e.contains("`{{ rendered.config.metadata.generation }}` gives an integer; `spec.template.spec.containers[0].image` is a string"),
        "{e}"
    );
    let e = one("IMAGE", "{{ rendered.allow }}");
    assert!(e.contains("gives an array"), "{e}");
    let e = one("IMAGE", "{{ existing.db.data }}");
    assert!(e.contains("gives an object"), "{e}");
}
