//! The kind's schema on the real control plane: `ruleop run --install-crds` installs the
//! CRD made from a rule, applies an additive change live, and refuses a breaking one
//! while the old CRD keeps serving.

mod common;

use common::{Operator, eventually, get_json, kubectl, kubectl_ok, wait_json};
use std::time::Duration;

const CRD: &str = "gadgets.schema.ruleop.dev";

fn rule(spec: &str, data: &str) -> String {
    format!(
        "name: gadget\nwatch: {{group: schema.ruleop.dev, version: v1, resource: gadgets}}\nschema:\n  kind: Gadget\n  spec:\n{spec}children:\n  - id: cm\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {{name: \"{{{{ name }}}}\"}}\n      data:\n{data}"
    )
}

fn size_type() -> Option<String> {
    let crd = get_json("crd", "", CRD)?;
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["size"]["type"]
        .as_str()
        .map(str::to_string)
}

#[tokio::test]
async fn install_crds_creates_applies_additive_changes_and_refuses_breaking_ones() {
    let client = common::client().await;
    let _ = kubectl(
        &["delete", "crd", CRD, "--ignore-not-found", "--wait=true"],
        None,
    );
    let ns = common::namespace(&client, "e2e-schema").await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gadget.yaml");
    let v1 = rule(
        "    size: integer | default=1 minimum=1\n",
        "        size: \"{{ spec.size | string }}\"\n",
    );
    std::fs::write(&file, &v1).unwrap();
    let op = Operator::start(
        &ns,
        &[dir.path().to_str().unwrap()],
        &["--install-crds", "--rules-poll-seconds", "1"],
    );

    // No CRD before: ruleop makes it, and serves the kind.
    eventually(Duration::from_secs(60), "CRD established", || async {
        let crd = get_json("crd", "", CRD)?;
        let conds = crd["status"]["conditions"].as_array()?.clone();
        conds
            .iter()
            .any(|c| c["type"] == "Established" && c["status"] == "True")
            .then_some(())
    })
    .await;
    let gadget = |name: &str, spec: &str| {
        format!(
            "apiVersion: schema.ruleop.dev/v1\nkind: Gadget\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {spec}\n"
        )
    };
    kubectl_ok(&["apply", "-f", "-"], Some(&gadget("g", "{}")));
    wait_json(
        "configmap",
        &ns,
        "g",
        "size from the schema's default",
        |c| c["data"]["size"] == "1",
    )
    .await;
    // The schema's bounds hold at the API server.
    let (ok, _, err) = kubectl(&["apply", "-f", "-"], Some(&gadget("bad", "{size: 0}")));
    assert!(!ok && err.contains("spec.size"), "{err}");

    // Additive: a new optional field with a default, live.
    let v2 = rule(
        "    size: integer | default=1 minimum=1\n    color: string | default=blue\n",
        "        size: \"{{ spec.size | string }}\"\n        color: \"{{ spec.color }}\"\n",
    );
    std::fs::write(&file, &v2).unwrap();
    wait_json(
        "configmap",
        &ns,
        "g",
        "color from the new field's default",
        |c| c["data"]["color"] == "blue",
    )
    .await;

    // Breaking: size becomes a string. Refused with the reason; the old CRD serves.
    let v3 = v2.replace("size: integer | default=1 minimum=1", "size: string");
    std::fs::write(&file, &v3).unwrap();
    let refusal = eventually(Duration::from_secs(60), "refusal logged", || async {
        op.records()
            .into_iter()
            .find(|r| r["message"] == "CRD not installed")
            .and_then(|r| r["error"].as_str().map(str::to_string))
    })
    .await;
    assert!(
        refusal.contains("v1 spec.size: type changed from \"integer\" to \"string\""),
        "{refusal}"
    );
    assert_eq!(size_type().as_deref(), Some("integer"));
    kubectl_ok(&["apply", "-f", "-"], Some(&gadget("h", "{size: 3}")));
    wait_json("configmap", &ns, "h", "served by the old CRD", |c| {
        c["data"]["size"] == "3"
    })
    .await;
    common::delete_namespace(&ns);
    let _ = kubectl(&["delete", "crd", CRD, "--wait=false"], None);
}

/// Runs the ruleop command line against the test cluster: (exit code, stdout, stderr).
fn ruleop(args: &[&str]) -> (i32, String, String) {
    common::ruleop_cli(args, true)
}

#[tokio::test]
async fn check_against_cluster_checks_children_of_crd_kinds_against_what_it_serves() {
    const WIDGETS: &str = "widgets.openapi.ruleop.dev";
    let _ = kubectl(
        &[
            "delete",
            "crd",
            WIDGETS,
            "--ignore-not-found",
            "--wait=true",
        ],
        None,
    );
    let dir = tempfile::tempdir().unwrap();
    // The Widget kind, installed from its rule's schema as GitOps would (`ruleop crd`).
    let widget = dir.path().join("widget.yaml");
    std::fs::write(
        &widget,
        "name: widget\nwatch: {group: openapi.ruleop.dev, version: v1, resource: widgets}\nschema:\n  kind: Widget\n  spec:\n    size: integer | default=1\n    color: string | enum=red,blue default=red\n",
    )
    .unwrap();
    let (code, crd, err) = ruleop(&["crd", "--rules", widget.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    kubectl_ok(&["apply", "-f", "-"], Some(&crd));
    // A rule whose child is a Widget, with three mistakes the shipped schemas cannot see.
    let maker = dir.path().join("maker.yaml");
    std::fs::write(
        &maker,
        "name: maker\nwatch: {group: openapi.ruleop.dev, version: v1, resource: makers}\nchildren:\n  - id: widget\n    template:\n      apiVersion: openapi.ruleop.dev/v1\n      kind: Widget\n      metadata: {name: \"{{ name }}\"}\n      spec:\n        size: \"3\"\n        colour: red\n        color: green\n",
    )
    .unwrap();
    let (code, _, err) = ruleop(&["check", "--rules", maker.to_str().unwrap()]);
    assert_eq!(code, 0, "offline, a CRD kind's fields pass: {err}");
    // The API server publishes a new CRD's schema within seconds.
    let err = eventually(
        Duration::from_secs(60),
        "checked against /openapi/v3",
        || async {
            let (code, _, err) = ruleop(&[
                "check",
                "--against-cluster",
                "--rules",
                maker.to_str().unwrap(),
            ]);
            (code == 1 && err.contains("colour")).then_some(err)
        },
    )
    .await;
    for (line, want) in [
        (10, "\"3\" is a string; `spec.size` is an integer"),
        (11, "unknown field `colour`"),
        (12, "\"green\" is not an allowed value of `spec.color`"),
    ] {
        assert!(
            err.lines()
                .any(|l| l.contains(&format!("maker.yaml:{line}")) && l.contains(want)),
            "line {line}: {want}\n---\n{err}"
        );
    }
    let _ = kubectl(&["delete", "crd", WIDGETS, "--wait=false"], None);
}

/// A rule whose ConfigMap key and Ingress pass every offline check but not the API server.
const SITE: &str = "name: site
watch: {group: dryrun.ruleop.dev, version: v1, resource: sites}
schema:
  kind: Site
  spec:
    host: string | default=a.example
children:
  - id: page
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: \"{{ name }}-page\"}
      data:
        a/b.html: \"<p>hi</p>\"
  - id: ingress
    template:
      apiVersion: networking.k8s.io/v1
      kind: Ingress
      metadata: {name: \"{{ name }}\"}
      spec:
        rules: []
  - id: svc
    template:
      apiVersion: v1
      kind: Service
      metadata: {name: \"{{ name }}\"}
      spec:
        ports: [{port: 80}]
";

#[tokio::test]
async fn a_sample_is_judged_by_the_api_server_with_each_refusal_at_its_template_line() {
    let dir = tempfile::tempdir().unwrap();
    let site = dir.path().join("site.yaml");
    std::fs::write(&site, SITE).unwrap();
    let (code, _, err) = ruleop(&["check", "--rules", site.to_str().unwrap()]);
    assert_eq!(code, 0, "offline, both pass: {err}");
    // Its namespace need not exist: the children are judged in the default one.
    let sample = dir.path().join("sample.yaml");
    let sample_text = "apiVersion: dryrun.ruleop.dev/v1\nkind: Site\nmetadata: {name: one, namespace: no-such-ns}\nspec: {host: b.example}\n";
    std::fs::write(&sample, sample_text).unwrap();
    let (code, out, err) = ruleop(&[
        "check",
        "--against-cluster",
        "--rules",
        site.to_str().unwrap(),
        "--sample",
        sample.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(out.contains("0 rule(s) ok, 2 error(s)"), "{out}");
    for (line, child, want) in [
        (14, "page", "a valid config key must consist of"),
        (
            20,
            "ingress",
            "either `defaultBackend` or `rules` must be specified",
        ),
    ] {
        assert!(
            err.lines().any(|l| l
                .contains(&format!("site.yaml:{line}: rule `site`, child `{child}`"))
                && l.contains(want)),
            "line {line}, {child}: {want}\n---\n{err}"
        );
    }
    assert!(!err.contains("child `svc`"), "the Service is valid: {err}");
    // A dry-run: nothing was stored.
    let (_, found, _) = kubectl(&["get", "configmap", "-A", "-o", "name"], None);
    assert!(!found.contains("one-page"), "{found}");
    // The same children, judged in the steps of a test.
    let test = dir.path().join("site_test.yaml");
    std::fs::write(
        &test,
        format!("rules: [site.yaml]\ntests:\n  - name: one site\n    resource:\n{}    steps:\n      - expect: {{waiting: []}}\n",
            sample_text.lines().map(|l| format!("      {l}\n")).collect::<String>()),
    )
    .unwrap();
    // Offline, these two are among the API server's own checks that ruleop knows: the
    // same lines.
    let (code, out, _) = ruleop(&["test", test.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    for (line, child, want) in [
        (14, "page", "no '/'"),
        (20, "ingress", "either `defaultBackend` or `rules`"),
    ] {
        assert!(
            out.lines().any(|l| l.contains(&format!("child `{child}`"))
                && l.contains(&format!("site.yaml:{line})"))
                && l.contains(want)),
            "line {line}, {child}: {want}\n---\n{out}"
        );
    }
    let (code, out, _) = ruleop(&["test", "--server", test.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("a valid config key must consist of"), "{out}");
    assert!(out.contains("either `defaultBackend` or `rules`"), "{out}");
    // The shipped rules pass, with their examples and their tests.
    let (code, out, err) = ruleop(&[
        "check",
        "--against-cluster",
        "--rules",
        "rules",
        "--sample",
        "examples/website.yaml",
        "--sample",
        "examples/myapp.yaml",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("2 rule(s) ok"), "{out}");
    let (code, out, _) = ruleop(&[
        "test",
        "--server",
        "rules/tests",
        "tests/fixtures/microservice",
    ]);
    assert_eq!(code, 0, "{out}");
}

/// A CRD whose spec has `props` and the CEL `rule` on the spec (none if empty), the
/// bound in `props` written as `{N}`.
fn costed_crd(props: &str, rule: &str, n: u64) -> serde_json::Value {
    let props: serde_json::Value =
        serde_json::from_str(&props.replace("{N}", &n.to_string())).unwrap();
    let mut spec = serde_json::json!({"type": "object", "properties": props});
    if !rule.is_empty() {
        spec["x-kubernetes-validations"] = serde_json::json!([{"rule": rule}]);
    }
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "costs.schema.ruleop.dev"},
        "spec": {"group": "schema.ruleop.dev", "scope": "Namespaced",
            "names": {"kind": "Cost", "plural": "costs"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {
                "type": "object", "properties": {"spec": spec}}}}]},
    })
}

/// The largest bound at which `check` passes the rule (bounds grow the cost).
fn largest_passing(props: &str, rule: &str) -> u64 {
    let passes = |n: u64| {
        let crd = costed_crd(props, rule, n);
        ruleop::schema::cost::check(&crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
            .is_empty()
    };
    let (mut lo, mut hi) = (0u64, 1u64 << 40);
    assert!(passes(lo) && !passes(hi), "{rule}: no threshold");
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if passes(mid) { lo = mid } else { hi = mid }
    }
    lo
}

#[test]
fn cel_cost_estimates_refuse_exactly_what_the_api_server_refuses() {
    // Each case: where the estimate puts the limit, the API server takes the CRD, and
    // one step over it refuses it for the rule's cost.
    let cases = [
        (
            r#"{"content": {"type": "object", "maxProperties": {N}, "additionalProperties": {"type": "string", "maxLength": 64}}}"#,
            "self.content.all(k, self.content[k].matches('^[a-z]+$'))",
        ),
        (
            r#"{"content": {"type": "object", "maxProperties": {N}, "additionalProperties": {"type": "string"}}}"#,
            "self.content.all(k, k.startsWith('a'))",
        ),
        (
            r#"{"name": {"type": "string", "maxLength": {N}}}"#,
            "self.name.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$') && self.name.lowerAscii() == self.name",
        ),
        (
            r#"{"hosts": {"type": "array", "maxItems": {N}, "items": {"type": "string", "maxLength": 253}}}"#,
            "self.hosts.all(h, self.hosts.exists_one(o, o == h))",
        ),
        (
            r#"{"hosts": {"type": "array", "maxItems": {N}, "items": {"type": "string", "maxLength": 63}}}"#,
            "self.hosts.join(',').split(',').size() == size(self.hosts) && self.hosts.filter(h, h.contains('.')).map(h, h.upperAscii()).size() < 5",
        ),
        (
            r#"{"ports": {"type": "array", "maxItems": {N}, "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string", "maxLength": 15}, "port": {"type": "integer"}}}}}"#,
            "self.ports.all(p, p.port > 0 && p.name in ['http', 'https'] || p.name.indexOf('-') >= 0)",
        ),
        // A rule on each item runs once per item: its cost times maxItems.
        (
            r#"{"hosts": {"type": "array", "maxItems": {N}, "items": {"type": "string", "maxLength": 253, "x-kubernetes-validations": [{"rule": "self.matches('^[a-z.]+$') && !self.startsWith('.')"}]}}}"#,
            "",
        ),
        // Twelve rules each under the per-rule limit, over the schema's limit together.
        (
            &format!(
                r#"{{"labels": {{"type": "object", "maxProperties": {{N}}, "additionalProperties": {{"type": "string"}}, "x-kubernetes-validations": [{}]}}}}"#,
                [r#"{"rule": "self.all(k, k.startsWith('a'))"}"#; 12].join(", ")
            ),
            "",
        ),
    ];
    for (props, rule) in cases {
        let n = largest_passing(props, rule);
        eprintln!("limit at {n}: {rule}");
        for (bound, taken) in [(n, true), (n + 1, false)] {
            let crd = costed_crd(props, rule, bound).to_string();
            let (ok, _, err) = kubectl(&["create", "--dry-run=server", "-f", "-"], Some(&crd));
            assert_eq!(
                ok,
                taken,
                "{rule} with the bound at {bound}: ruleop says {}, the API server: {err}",
                if taken { "taken" } else { "refused" }
            );
            if !taken {
                assert!(
                    err.contains("cost"),
                    "{rule} refused for another reason: {err}"
                );
            }
        }
    }
}
