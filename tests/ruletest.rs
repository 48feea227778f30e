//! `ruleop test` and the offline CEL check of `render --strict`, as a rule author runs
//! them: no cluster.

mod common;

fn ruleop(args: &[&str]) -> (i32, String, String) {
    common::ruleop_cli(args, false)
}

#[test]
fn test_runs_the_shipped_rules_tests_and_a_broken_rule_fails_with_a_diff() {
    let (code, stdout, stderr) =
        ruleop(&["test", "rules/", "tests/fixtures/", "examples/versions/"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("test result: ok. 20 passed; 0 failed"),
        "{stdout}"
    );
    // The figure, printed (not asserted): the whole suite runs with no cluster.
    println!("{}", stdout.lines().last().unwrap_or_default());

    // The same tests against a rule whose default replicas changed.
    let dir = tempfile::tempdir().unwrap();
    let rule = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/rules/website.yaml"))
        .unwrap()
        .replace(
            "replicas: integer | default=2",
            "replicas: integer | default=3",
        );
    std::fs::write(dir.path().join("website.yaml"), rule).unwrap();
    std::fs::create_dir(dir.path().join("tests")).unwrap();
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/rules/tests/website_test.yaml"),
        dir.path().join("tests/website_test.yaml"),
    )
    .unwrap();
    let junit = dir.path().join("junit.xml");
    let (code, stdout, _) = ruleop(&[
        "test",
        dir.path().to_str().unwrap(),
        "--junit",
        junit.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stdout}");
    assert!(
        stdout.contains("test result: FAILED. 1 passed; 1 failed"),
        "{stdout}"
    );
    assert!(
        stdout.contains("child Deployment my-blog-web: spec.replicas: expected 2, got 3"),
        "{stdout}"
    );
    assert!(
        stdout.contains("--- expected\n+++ actual"),
        "a diff: {stdout}"
    );
    assert!(
        stdout.contains("-  replicas: 2\n+  replicas: 3"),
        "{stdout}"
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("<testsuites name=\"ruleop test\" tests=\"2\" failures=\"1\">"),
        "{xml}"
    );
    assert!(
        xml.contains(
            "<failure message=\"child Deployment my-blog-web: spec.replicas: expected 2, got 3\">"
        ),
        "{xml}"
    );
}

#[test]
fn test_update_writes_snapshots_and_a_change_is_caught_by_them() {
    let dir = tempfile::tempdir().unwrap();
    let rules =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/rules/myapp.yaml")).unwrap();
    std::fs::write(dir.path().join("myapp.yaml"), &rules).unwrap();
    let test = dir.path().join("myapp_test.yaml");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/rules/tests/myapp_test.yaml"),
        &test,
    )
    .unwrap();
    let (code, stdout, stderr) = ruleop(&["test", "--update", test.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let snap = std::fs::read_to_string(dir.path().join("myapp_test.snap.yaml")).unwrap();
    assert!(
        snap.contains("kind: Deployment") && snap.contains("replicas: 3"),
        "{snap}"
    );
    let (code, stdout, _) = ruleop(&["test", test.to_str().unwrap()]);
    assert_eq!(code, 0, "the snapshot matches: {stdout}");
    // A change the test's own expectations do not cover: a new label.
    std::fs::write(
        dir.path().join("myapp.yaml"),
        rules.replace(
            "        labels:\n          app: \"{{ name }}\"\n",
            "        labels:\n          app: \"{{ name }}\"\n          tier: web\n",
        ),
    )
    .unwrap();
    let (code, stdout, _) = ruleop(&["test", test.to_str().unwrap()]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stdout.contains("differs from its snapshot"), "{stdout}");
    assert!(stdout.contains("+      tier: web"), "{stdout}");
}

#[test]
fn rules_folders_skip_test_files_and_snapshots() {
    let (code, stdout, stderr) = ruleop(&[
        "check",
        "--rules",
        "tests/fixtures/microservice/rules.yaml",
        "--rules",
        "rules/",
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("3 rule(s) ok"),
        "rules/tests/ holds no rules: {stdout}"
    );
}

#[test]
fn render_strict_refuses_a_resource_that_breaks_a_cel_validation_of_its_kind() {
    let dir = tempfile::tempdir().unwrap();
    let rule = "name: cache\nwatch: {group: example.com, version: v1, resource: caches}\nschema:\n  kind: Cache\n  spec:\n    mode: string | enum=standalone,replicated default=standalone\n    size: integer | default=1\n    db: string | rule=\"self.startsWith('db-')\" message=\"the database is named db-...\"\n  validations:\n    - {rule: \"self.mode == 'standalone' || self.size >= 3\", message: replicated needs 3 or more}\nchildren:\n  - id: config\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"{{ name }}\"}, data: {size: \"{{ spec.size | string }}\"}}\n";
    let rules = dir.path().join("cache.yaml");
    std::fs::write(&rules, rule).unwrap();
    let cr = |spec: &str| {
        let f = dir.path().join("cr.yaml");
        std::fs::write(
            &f,
            format!("apiVersion: example.com/v1\nkind: Cache\nmetadata: {{name: c, namespace: n}}\nspec: {spec}\n"),
        )
        .unwrap();
        f
    };
    let good = cr("{mode: replicated, size: 3, db: db-main}");
    let (code, _, stderr) = ruleop(&[
        "render",
        "--strict",
        "--rules",
        rules.to_str().unwrap(),
        good.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let bad = cr("{mode: replicated, size: 2, db: main}");
    let (code, stdout, stderr) = ruleop(&[
        "render",
        "--strict",
        "--rules",
        rules.to_str().unwrap(),
        bad.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains("spec: replicated needs 3 or more"),
        "{stderr}"
    );
    assert!(
        stderr.contains("spec.db: the database is named db-..."),
        "{stderr}"
    );
    assert!(
        stdout.is_empty(),
        "nothing rendered for a refused resource: {stdout}"
    );
}

const PAIR: &str = "name: pair
watch: {group: t.ruleop.dev, version: v1, resource: pairs}
children:
  - id: config
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"{{ name }}-a\"}, data: {a: \"1\"}}
  - id: app
    after: [config]
    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"{{ name }}-b\"}, data: {b: \"1\"}}
";

const RESOURCE: &str =
    "    resource: {apiVersion: t.ruleop.dev/v1, kind: Pair, metadata: {name: p}}\n";

/// Writes `pair.yaml` and a test file with `tests` into a new folder; runs `ruleop test`.
fn run_pair(tests: &str) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("pair.yaml"), PAIR).unwrap();
    std::fs::write(
        dir.path().join("pair_test.yaml"),
        format!("tests:\n{tests}"),
    )
    .unwrap();
    ruleop(&["test", dir.path().to_str().unwrap()])
}

#[test]
fn absent_fails_for_an_object_a_waiting_child_keeps() {
    // Not in the cluster: absent it is.
    let fresh = format!(
        "  - name: fresh\n{RESOURCE}    steps:\n      - expect: {{waiting: [{{child: app}}], children: [{{kind: ConfigMap, name: p-b, absent: true}}]}}\n"
    );
    let (code, out, err) = run_pair(&fresh);
    assert_eq!(code, 0, "{out}{err}");
    // In the cluster while its child waits: it stays, so `absent` fails.
    let kept = format!(
        "  - name: kept\n{RESOURCE}    observed:\n      - {{apiVersion: v1, kind: ConfigMap, metadata: {{name: p-b}}}}\n    steps:\n      - expect: {{children: [{{kind: ConfigMap, name: p-b, absent: true}}]}}\n"
    );
    let (code, out, _) = run_pair(&kept);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("a waiting child's object stays"), "{out}");
}

#[test]
fn test_files_refuse_what_would_check_nothing() {
    // A misspelled condition field is refused, not ignored.
    let typo = format!(
        "  - name: typo\n{RESOURCE}    steps:\n      - expect: {{conditions: {{Ready: {{stauts: \"True\"}}}}}}\n"
    );
    let (code, out, _) = run_pair(&typo);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("unknown field `stauts`"), "{out}");
    // Conditions may be booleans.
    let boolean = format!(
        "  - name: boolean\n{RESOURCE}    steps:\n      - expect: {{conditions: {{Synced: false}}}}\n"
    );
    let (code, out, _) = run_pair(&boolean);
    assert_eq!(code, 0, "{out}");
    // A resource of a kind the rule does not watch.
    let other = "  - name: other\n    resource: {apiVersion: t.ruleop.dev/v2, kind: Pair, metadata: {name: p}}\n    steps: [{expect: {}}]\n";
    let (code, out, _) = run_pair(other);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("rule `pair` watches t.ruleop.dev/v1"), "{out}");
    // Two tests of one name.
    let twice =
        format!("  - name: a\n{RESOURCE}    steps: []\n  - name: a\n{RESOURCE}    steps: []\n");
    let (code, out, _) = run_pair(&twice);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("two tests are named \"a\""), "{out}");
    // No test file at all: a wrong path in CI fails.
    let empty = tempfile::tempdir().unwrap();
    let (code, _, err) = ruleop(&["test", empty.path().to_str().unwrap()]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("no test files"), "{err}");
    // A malformed resource is a failure with a message, not a crash.
    let malformed = "  - name: malformed\n    resource: {metadata: 5}\n    steps: [{expect: {}}]\n";
    let (code, out, err) = run_pair(malformed);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("`metadata` a mapping"), "{out}");
}

/// The StaticSite fixture, copied to a folder with its rule changed by `edit` and its
/// tests by `edit_tests`; what `ruleop test` says of it.
fn staticsite(
    edit: impl Fn(String) -> String,
    edit_tests: impl Fn(String) -> String,
) -> (i32, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let from = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/staticsite");
    let rule = std::fs::read_to_string(format!("{from}/rules.yaml")).unwrap();
    let tests = std::fs::read_to_string(format!("{from}/staticsite_test.yaml")).unwrap();
    std::fs::write(dir.path().join("rules.yaml"), edit(rule)).unwrap();
    std::fs::write(dir.path().join("staticsite_test.yaml"), edit_tests(tests)).unwrap();
    ruleop(&["test", dir.path().to_str().unwrap()])
}

#[test]
fn children_the_api_server_would_refuse_fail_their_step_with_the_template_line() {
    // `tls` as a list of host names (it is a list of objects): the step that turns TLS on
    // fails, naming the Ingress template's line.
    let hosts_only = |r: String| {
        r.replace(
            "tls: \"{{ [{'hosts': [host], 'secretName': host ~ '-tls'}] if spec.tls else none }}\"",
            "tls: \"{{ [host] if spec.tls else none }}\"",
        )
    };
    let (code, out, _) = staticsite(hosts_only, |t| t);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("step 5 (TLS, from a Secret named after the host): child `ingress[0]` (Ingress docs-0, made by the template at "),
        "{out}"
    );
    assert!(out.contains("rules.yaml:79): the API server would refuse it: spec.tls[0]: \"docs.example.com\" is a string"), "{out}");
    assert!(!out.contains("step 4 ("), "the steps before pass: {out}");

    // One Ingress whose rules come from the hosts: with none, `rules: []`, which the API
    // server refuses though the schema takes it.
    let one_ingress = |r: String| {
        let start = r.find("  - id: ingress").unwrap();
        format!(
            "{}{}",
            &r[..start],
            r#"  - id: ingress
    template:
      apiVersion: networking.k8s.io/v1
      kind: Ingress
      metadata:
        name: "{{ name }}"
      spec:
        rules:
          - forEach: spec.hosts
            as: host
            item:
              host: "{{ host }}"
"#
        )
    };
    let no_hosts_test = |t: String| {
        t.replace(
            "{kind: Ingress, name: intranet-0, absent: true}",
            "{kind: Service, name: intranet}",
        )
    };
    let (code, out, _) = staticsite(one_ingress, no_hosts_test);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("child `ingress` (Ingress intranet, made by the template at "),
        "{out}"
    );
    assert!(
        out.contains("spec: an Ingress needs `rules` or a `defaultBackend`"),
        "{out}"
    );
}

#[test]
fn absent_changed_unchanged_and_refused_fail_when_they_do_not_hold() {
    let wrong = |t: String| {
        t.replace(
            "unchanged: [spec.selector, spec.replicas]",
            "unchanged: [spec.selector, spec.replicas, 'spec.template.metadata.annotations[\"checksum/files\"]']",
        )
        .replace("absent: [spec.tls]", "absent: [spec.rules]")
        .replace("changed: [spec.replicas]\n", "changed: [spec.replicas, spec.selector]\n")
        .replace("refused: \"spec.replicas\"", "refused: \"spec.image\"")
    };
    let (code, out, _) = staticsite(|r| r, wrong);
    assert_eq!(code, 1, "{out}");
    for line in [
        "step 1 (no TLS unless asked): child Ingress docs-0: spec.rules: expected absent, got [",
        "step 2 (new files, new checksum): child Deployment docs: spec.template.metadata.annotations[\"checksum/files\"]: expected unchanged since the step before, was \"",
        "step 3 (more replicas, the same checksum): child Deployment docs: spec.selector: expected changed since the step before, still {\"matchLabels\":{\"app\":\"docs\"}}",
        "step 4 (replicas the kind refuses; the resource stays as it was): the resource is refused, but not with \"spec.image\": the resource: spec.replicas: 0 is outside `minimum=1`",
    ] {
        assert!(out.contains(line), "{line}\n{out}");
    }
    // A change the schema takes, expected refused; a path that cannot be read.
    let accepted = |t: String| {
        t.replace(
            "resource: {spec: {replicas: 0}}",
            "resource: {spec: {replicas: 2}}",
        )
        .replace(
            "has: {spec: {replicas: 3}}, unchanged: [spec]",
            "unchanged: ['spec..replicas']",
        )
    };
    let (code, out, _) = staticsite(|r| r, accepted);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("the resource was expected to be refused with \"spec.replicas\", and its kind's schema takes it"), "{out}");
    assert!(
        out.contains("unchanged: path \"spec..replicas\": a key is empty"),
        "{out}"
    );
}

#[test]
fn one_root_cause_is_reported_in_full_once() {
    let undefined = |r: String| {
        r.replace(
            "image: \"{{ spec.image }}\"",
            "image: \"{{ spec.imagee }}\"",
        )
    };
    let dir = tempfile::tempdir().unwrap();
    let from = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/staticsite");
    let rule = std::fs::read_to_string(format!("{from}/rules.yaml")).unwrap();
    // The typo is refused at load (a typed reference): the render of a rule that loads but
    // fails on every step stands in for it.
    std::fs::write(dir.path().join("rules.yaml"), undefined(rule.clone())).unwrap();
    let (_, out, err) = ruleop(&[
        "check",
        "--rules",
        dir.path().join("rules.yaml").to_str().unwrap(),
    ]);
    assert!(format!("{out}{err}").contains("imagee"), "{out}{err}");
    let failing = rule.replace(
        "replicas: \"{{ spec.replicas }}\"",
        "replicas: \"{{ spec.replicas / (spec.replicas - spec.replicas) }}\"",
    );
    let ready = |t: String| {
        t.replace(
            "- name: no TLS unless asked\n        expect:\n",
            "- name: no TLS unless asked\n        expect:\n          conditions: {Synced: \"True\"}\n",
        )
    };
    assert!(ready(rule.clone()) == rule, "the edit is of the tests");
    let (code, out, _) = staticsite(|_| failing.clone(), ready);
    assert_eq!(code, 1, "{out}");
    let first = out
        .matches("step 1 (no TLS unless asked): the render failed: ")
        .count();
    assert_eq!(first, 1, "{out}");
    assert!(
        out.contains("step 2 (new files, new checksum): as in step 1: the render failed: "),
        "{out}"
    );
    assert!(
        !out.contains("condition Ready"),
        "what follows from the failed render is not reported: {out}"
    );
}

#[test]
fn a_child_of_a_crds_kind_is_checked_against_its_schema_and_cel_rules() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("maker.yaml"),
        r#"name: maker
watch: {group: t.ruleop.dev, version: v1, resource: makers}
children:
  - id: widget
    template:
      apiVersion: w.ruleop.dev/v1
      kind: Widget
      metadata: {name: "{{ name }}"}
      spec:
        size: "{{ spec.size }}"
"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("maker_test.yaml"),
        r#"tests:
  - name: sizes
    resource: {apiVersion: t.ruleop.dev/v1, kind: Maker, metadata: {name: m}, spec: {size: 3}}
    steps:
      - name: small
      - name: too big
        resource: {spec: {size: 20}}
"#,
    )
    .unwrap();
    // (Beside the rules it would be read as one.)
    let elsewhere = tempfile::tempdir().unwrap();
    let crd = elsewhere.path().join("widget-crd.yaml");
    std::fs::write(
        &crd,
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.w.ruleop.dev}
spec:
  group: w.ruleop.dev
  names: {kind: Widget, plural: widgets, singular: widget, listKind: WidgetList}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                size: {type: integer}
              x-kubernetes-validations:
                - rule: self.size <= 10
                  message: a widget holds at most 10
"#,
    )
    .unwrap();
    let tests = dir.path().join("maker_test.yaml");
    // Without the CRD, nothing is known of a Widget.
    let (code, out, _) = ruleop(&["test", tests.to_str().unwrap()]);
    assert_eq!(code, 0, "{out}");
    let (code, out, _) = ruleop(&[
        "test",
        tests.to_str().unwrap(),
        "--crd",
        crd.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("step 2 (too big): child `widget` (Widget m, made by the template at "),
        "{out}"
    );
    assert!(
        out.contains("a widget holds at most 10 (rule: self.size <= 10)"),
        "{out}"
    );
    assert!(!out.contains("step 1 ("), "{out}");
}

#[test]
fn absent_written_as_one_path_says_how_to_write_it() {
    let one = format!(
        "  - name: one\n{RESOURCE}    steps:\n      - expect: {{children: [{{kind: ConfigMap, name: p-b, absent: spec.tls}}]}}\n"
    );
    let (code, out, _) = run_pair(&one);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("`absent: spec.tls`: a path goes in a list: `absent: [spec.tls]`"),
        "{out}"
    );
}
