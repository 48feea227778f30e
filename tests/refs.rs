//! Typed references, with no cluster: every path a rule reads inside a child or an
//! existing object (a status JSONPath, `rendered`, `observed`, `children`, `existing`,
//! `readyWhen`) is checked by `ruleop check` against the kind's schema, each typo reported
//! with its file, line and a "did you mean"; a path into a free-form field passes.

mod common;

fn ruleop(args: &[&str]) -> (i32, String, String) {
    common::ruleop_cli(args, false)
}

/// The errors of `check` on a rule file written from `text`, and its exit code.
fn check_text(text: &str, extra: &[&str]) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rule.yaml");
    std::fs::write(&file, text).unwrap();
    let mut args = vec!["check", "--rules", file.to_str().unwrap()];
    args.extend(extra);
    let (code, stdout, stderr) = ruleop(&args);
    (code, format!("{stdout}{stderr}"))
}

#[test]
fn check_reports_every_reference_typo_with_its_line_and_a_suggestion() {
    let file = "tests/fixtures/typed/references.yaml";
    let (code, stdout, stderr) = ruleop(&["check", "--rules", file]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stdout.contains("0 rule(s) ok, 7 error(s)"),
        "{stdout}{stderr}"
    );
    let text = std::fs::read_to_string(format!("{}/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    let expect = [
        (
            "1",
            "`child.status.readyReplica`: Deployment has no field `status.readyReplica`",
            "did you mean `readyReplicas`?",
        ),
        (
            "2",
            "`rendered.content.metadata.nmae`: ConfigMap has no field `metadata.nmae`",
            "did you mean `name`?",
        ),
        (
            "3",
            "`existing.tls.dat['tls.crt']`: Secret has no field `dat`",
            "did you mean `data`?",
        ),
        (
            "4",
            "`observed.service.spec.clusterIp`: Service has no field `spec.clusterIp`",
            "did you mean `clusterIP`?",
        ),
        (
            "5",
            "`$.status.readyReplica`: Deployment has no field `status.readyReplica`",
            "did you mean `readyReplicas`?",
        ),
        (
            "6",
            "`children.deployment.status.updatedReplica`: Deployment has no field `status.updatedReplica`",
            "did you mean `updatedReplicas`?",
        ),
        (
            "7",
            "`children.deployment.status.availableReplica`: Deployment has no field `status.availableReplica`",
            "did you mean `availableReplicas`?",
        ),
    ];
    for (mark, problem, fix) in expect {
        let line = text
            .lines()
            .position(|l| l.contains(&format!("# {mark} ")))
            .unwrap()
            + 1;
        let at = format!("references.yaml:{line}: rule `typed-references`");
        let lines: Vec<&str> = stderr.lines().collect();
        let found: Vec<&[&str]> = lines.windows(2).filter(|w| w[0].contains(&at)).collect();
        assert_eq!(found.len(), 1, "mistake {mark} at line {line}: {stderr}");
        assert!(
            found[0][0].contains(problem) && found[0][1] == format!("  fix: {fix}"),
            "mistake {mark}: {found:?}"
        );
    }
}

const SITE: &str = r#"name: site
watch: {group: x.io, version: v1, resource: sites}
children:
  - id: content
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "{{ name }}"}
      data: {index.html: hello}
  - id: ms
    template:
      apiVersion: example.ruleop.dev/v1
      kind: Microservice
      metadata: {name: "{{ name }}"}
      spec: {image: nginx, secretName: s}
status:
  fields:
    - {name: page, type: string, value: "children.content.data['index.html'] | default('')"}
    - {name: anything, type: string, from: content, path: "$.data.anything"}
    - {name: phase, type: string, value: "READ"}
"#;

#[test]
fn a_path_into_a_free_form_field_passes() {
    // A ConfigMap's data is a map of strings; a CRD's status keeps unknown fields.
    let text = SITE.replace("READ", "children.ms.status.whatever.below | default('')");
    let crd = ["--crd", "tests/fixtures/microservice/crd.yaml"];
    let (code, out) = check_text(&text, &crd);
    assert_eq!(code, 0, "{out}");
    let (code, out) = check_text(&text, &[]);
    assert_eq!(code, 0, "{out}");
}

#[test]
fn a_crd_kind_is_checked_when_its_crd_is_given() {
    let text = SITE.replace("READ", "children.ms.spec.imgae");
    let (code, out) = check_text(&text, &[]);
    assert_eq!(
        code, 0,
        "without the CRD the kind's fields are not known: {out}"
    );
    let crd = ["--crd", "tests/fixtures/microservice/crd.yaml"];
    let (code, out) = check_text(&text, &crd);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("rule.yaml:20: rule `site`: `children.ms.spec.imgae`: Microservice has no field `spec.imgae`\n  fix: did you mean `image`?"),
        "{out}"
    );
}

#[test]
fn the_shipped_rules_and_the_fixtures_read_only_fields_their_kinds_have() {
    let (code, stdout, stderr) = ruleop(&["check", "--rules", "rules/"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    for dir in [
        "cache",
        "late",
        "microservice",
        "ordered",
        "origin",
        "trust",
    ] {
        let path = format!("tests/fixtures/{dir}");
        let (_, stdout, stderr) = ruleop(&[
            "check",
            "--rules",
            &path,
            "--crd",
            "tests/fixtures/microservice/crd.yaml",
        ]);
        for what in ["has no field", "is a list", "nothing is inside it"] {
            assert!(!stderr.contains(what), "{path}: {stdout}{stderr}");
        }
    }
}
