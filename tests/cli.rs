//! `ruleop check` and `ruleop render` work with no cluster, and every error names the
//! file, the rule, the child and the line.

mod common;

fn ruleop(args: &[&str]) -> (i32, String, String) {
    common::ruleop_cli(args, false)
}

#[test]
fn check_accepts_the_shipped_rules() {
    let (code, stdout, stderr) = ruleop(&["check", "--rules", "rules/"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stdout.contains("2 rule(s) ok"), "{stdout}");
}

#[test]
fn check_reports_each_broken_file_with_file_rule_child_and_line() {
    let cases = [
        (
            "bad-yaml.yaml:3:",
            "rule `bad-yaml`",
            None,
            "did not find expected",
        ),
        (
            "unknown-field.yaml:5:",
            "rule `unknown-field`",
            Some("child `cm`"),
            "unknown field `tempalte`",
        ),
        (
            "template-syntax.yaml:11:",
            "rule `template-syntax`",
            Some("child `cm`"),
            "syntax error",
        ),
        (
            "bad-jsonpath.yaml:14:",
            "rule `bad-jsonpath`",
            None,
            "bad JSONPath",
        ),
        (
            "unknown-kind.yaml:7:",
            "rule `unknown-kind`",
            Some("child `web`"),
            "unknown kind \"Deploymnet\" in apps/v1",
        ),
        (
            "other-namespace.yaml:10:",
            "rule `other-namespace`",
            Some("child `cm`"),
            "metadata.namespace",
        ),
        (
            "other-namespace.yaml:14:",
            "rule `other-namespace`",
            Some("child `role`"),
            "cluster-scoped",
        ),
        (
            "unknown-variable.yaml:11:",
            "rule `unknown-variable`",
            Some("child `cm`"),
            "unknown variable `spce`",
        ),
        (
            "same-child-name.yaml:13:",
            "rule `same-child-name`",
            Some("child `second`"),
            "children `first` and `second` both make ConfigMap",
        ),
        (
            "unknown-filter.yaml:11:",
            "rule `unknown-filter`",
            Some("child `cm`"),
            "unknown filter `upperr`",
        ),
        (
            "unquoted-template.yaml:9:",
            "rule `unquoted-template`",
            Some("child `cm`"),
            "an unquoted `{{ ... }}` is a YAML map, not a template",
        ),
        (
            "bad-adopt.yaml:5:",
            "rule `bad-adopt`",
            Some("child `cm`"),
            "unknown variant `Always`, expected one of `IfControlled`, `IfOrphan`, `Never`",
        ),
        (
            "cycle.yaml:4:",
            "rule `cycle`",
            Some("child `config`"),
            "children depend on each other in a cycle: config → app → config",
        ),
        (
            "bad-name.yaml:10:",
            "rule `bad-name`",
            Some("child `config`"),
            "holds '_' in its text, which no ConfigMap name may hold",
        ),
        (
            "mistyped-status.yaml:24:",
            "rule `mistyped-status`",
            Some("child `deployment`"),
            "`$.status.conditions` gives an array in Deployment, and the status field `ready` is `type: integer`",
        ),
        (
            "same-watch.yaml:4:",
            "rule `same-watch-b`",
            None,
            "which rule `same-watch-a` at",
        ),
    ];
    let (code, stdout, stderr) = ruleop(&["check", "--rules", "tests/fixtures/broken/"]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    for (at, rule, child, what) in cases {
        let line = stderr
            .lines()
            .find(|l| l.contains(at) && l.contains(what))
            .unwrap_or_else(|| panic!("no error at {at} about {what:?} in:\n{stderr}"));
        assert!(line.contains(rule), "{line}");
        if let Some(c) = child {
            assert!(line.contains(c), "{line}");
        }
    }
    assert!(
        stderr.contains("fix: did you mean `Deployment`?"),
        "{stderr}"
    );
    assert!(stdout.contains("1 rule(s) ok, 16 error(s)"), "{stdout}");
    assert!(stderr.contains("fix: did you mean `spec`?"), "{stderr}");
    assert!(
        stderr.contains("fix: write one of the values the message lists"),
        "{stderr}"
    );
    assert!(stderr.contains("fix: quote the template"), "{stderr}");
    assert!(stderr.contains("fix: did you mean `upper`?"), "{stderr}");
}

#[test]
fn render_prints_the_children_with_no_cluster() {
    let (code, stdout, stderr) = ruleop(&["render", "--rules", "rules/", "examples/website.yaml"]);
    assert_eq!(code, 0, "{stderr}");
    let docs: Vec<serde_json::Value> = serde_yaml::Deserializer::from_str(&stdout)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    assert_eq!(docs.len(), 2);
    assert_eq!(docs[0]["kind"], "Deployment");
    assert_eq!(docs[0]["spec"]["replicas"], 3);
    assert_eq!(docs[1]["kind"], "Service");
}

#[test]
fn render_with_observed_children_prints_the_status() {
    let dir = tempfile::tempdir().unwrap();
    let observed = dir.path().join("observed.yaml");
    std::fs::write(
        &observed,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: my-blog-web, generation: 1}\nspec: {replicas: 3}\nstatus: {observedGeneration: 1, replicas: 3, updatedReplicas: 3, readyReplicas: 3}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: my-blog-web}\n",
    )
    .unwrap();
    let (code, stdout, stderr) = ruleop(&[
        "render",
        "--rules",
        "rules/",
        "examples/website.yaml",
        "--observed",
        observed.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    // The status is on stderr: stdout is the children alone, to pipe into kubectl.
    assert!(stderr.contains("readyReplicas: 3"), "{stderr}");
    assert!(
        stderr.contains("url: http://my-blog-web.default.svc.cluster.local:80"),
        "{stderr}"
    );
    assert!(stderr.contains("ready: true"), "{stderr}");
    let docs: Vec<serde_json::Value> = serde_yaml::Deserializer::from_str(&stdout)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .collect();
    assert!(
        docs.iter()
            .all(|d| d["kind"] == "Deployment" || d["kind"] == "Service"),
        "only children on stdout: {stdout}"
    );
    let status = dir.path().join("status.yaml");
    let (code, _, stderr) = ruleop(&[
        "render",
        "--rules",
        "rules/",
        "examples/website.yaml",
        "--observed",
        observed.to_str().unwrap(),
        "--status",
        status.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    let written = std::fs::read_to_string(&status).unwrap();
    assert!(
        written.contains("resource: my-blog") && written.contains("readyReplicas: 3"),
        "{written}"
    );
    assert!(!stderr.contains("readyReplicas"), "{stderr}");
}

#[test]
fn check_gives_one_verdict_per_rule_and_warns_of_an_empty_file() {
    let dir = tempfile::tempdir().unwrap();
    let rule = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/rules/website.yaml"))
        .unwrap()
        .replace("{{ spec.replicas }}", "{{ spec.replcias }}");
    let file = dir.path().join("website.yaml");
    std::fs::write(&file, &rule).unwrap();
    let (code, stdout, stderr) = ruleop(&[
        "check",
        "--rules",
        file.to_str().unwrap(),
        "--crd",
        "deploy/crds/",
    ]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stderr.contains("spec.replcias"), "{stderr}");
    assert!(
        !stdout.contains("ok   website"),
        "not both ok and error: {stdout}"
    );
    assert!(stdout.contains("0 rule(s) ok, 1 error(s)"), "{stdout}");

    let empty = dir.path().join("empty.yaml");
    std::fs::write(&empty, "# nothing yet\n").unwrap();
    let (code, stdout, stderr) = ruleop(&["check", "--rules", empty.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(stderr.contains("warning: no rule"), "{stderr}");
    let (code, _, _) = ruleop(&["check", "--strict", "--rules", empty.to_str().unwrap()]);
    assert_eq!(code, 1, "an empty rules file fails --strict");
}

#[test]
fn text_logs_carry_no_colour_codes_when_not_on_a_terminal() {
    let (code, stdout, stderr) = ruleop(&[
        "run",
        "--rules",
        "tests/fixtures/broken/bad-yaml.yaml",
        "--log-format",
        "text",
    ]);
    assert_ne!(code, 0, "no rule loads: {stdout}{stderr}");
    assert!(stderr.contains("bad-yaml.yaml"), "{stderr}");
    assert!(!stderr.contains('\x1b'), "ANSI codes in a pipe: {stderr:?}");
}

#[test]
fn check_with_the_crd_refuses_a_spec_field_the_crd_does_not_have() {
    let (code, stdout, stderr) = ruleop(&["check", "--rules", "rules/", "--crd", "deploy/crds/"]);
    assert_eq!(
        code, 0,
        "the shipped rules read only their CRDs' fields: {stdout}{stderr}"
    );
    let dir = tempfile::tempdir().unwrap();
    let rule = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/rules/website.yaml"))
        .unwrap()
        .replace("{{ spec.replicas }}", "{{ spec.replcias }}");
    let file = dir.path().join("website.yaml");
    std::fs::write(&file, &rule).unwrap();
    let line = rule
        .lines()
        .position(|l| l.contains("spec.replcias"))
        .unwrap()
        + 1;
    let (code, _, stderr) = ruleop(&[
        "check",
        "--rules",
        file.to_str().unwrap(),
        "--crd",
        "deploy/crds/websites.sre.example.com.yaml",
    ]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!(
            "website.yaml:{line}: rule `website`, child `deployment`"
        )) && stderr.contains("did you mean `replicas`?"),
        "{stderr}"
    );
}

#[test]
fn check_finds_ten_child_schema_mistakes_each_with_its_line() {
    let file = "tests/fixtures/typed/mistakes.yaml";
    let (code, stdout, stderr) = ruleop(&["check", "--rules", file]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stdout.contains("0 rule(s) ok, 10 error(s)"),
        "{stdout}{stderr}"
    );
    let text = std::fs::read_to_string(format!("{}/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
    // Every line marked `# N` is named by exactly one error.
    for (i, line) in text.lines().enumerate() {
        let Some(mark) = line
            .split("# ")
            .nth(1)
            .filter(|m| m.starts_with(|c: char| c.is_ascii_digit()))
        else {
            continue;
        };
        let at = format!("mistakes.yaml:{}: rule `typed-mistakes`", i + 1);
        assert_eq!(
            stderr.matches(&at).count(),
            1,
            "mistake {mark} at line {}: {stderr}",
            i + 1
        );
    }
}

#[test]
fn check_with_a_crd_checks_children_of_its_kind() {
    let dir = tempfile::tempdir().unwrap();
    let rule = dir.path().join("shop.yaml");
    std::fs::write(
        &rule,
        "name: shops\nwatch: {group: x.io, version: v1, resource: shops}\nchildren:\n  - id: ms\n    template:\n      apiVersion: example.ruleop.dev/v1\n      kind: Microservice\n      metadata: {name: \"{{ name }}\"}\n      spec:\n        imgae: nginx\n        secretName: s\n",
    )
    .unwrap();
    let (code, _, _) = ruleop(&["check", "--rules", rule.to_str().unwrap()]);
    assert_eq!(code, 0, "without the CRD its fields pass");
    let (code, stdout, stderr) = ruleop(&[
        "check",
        "--rules",
        rule.to_str().unwrap(),
        "--crd",
        "tests/fixtures/microservice/crd.yaml",
    ]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains(
            "shop.yaml:10: rule `shops`, child `ms`: Microservice spec.imgae: unknown field `imgae`"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("`spec` lacks the required field `image`"),
        "{stderr}"
    );
    // render --strict with the CRD checks the rendered object of its kind too.
    let cr = dir.path().join("cr.yaml");
    std::fs::write(
        &cr,
        "apiVersion: x.io/v1\nkind: Shop\nmetadata: {name: a, namespace: n}\nspec: {}\n",
    )
    .unwrap();
    let (code, _, stderr) = ruleop(&[
        "render",
        "--strict",
        "--rules",
        rule.to_str().unwrap(),
        "--crd",
        "tests/fixtures/microservice/crd.yaml",
        cr.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr
            .contains("child `ms` (Microservice a): spec: `spec` lacks the required field `image`"),
        "{stderr}"
    );
}

#[test]
fn render_checks_the_resource_and_strict_its_children_values_too() {
    let dir = tempfile::tempdir().unwrap();
    let cr = dir.path().join("cr.yaml");
    // An image that is a number, and a port that is text: the rule is right, the values are not.
    std::fs::write(
        &cr,
        "apiVersion: myscheme.example.com/v1\nkind: MyApp\nmetadata: {name: a, namespace: n}\nspec: {image: 5, replicas: 2}\n",
    )
    .unwrap();
    // Even without --strict, the resource is checked against its kind's schema (the
    // rule's): the API server would refuse it, so nothing is printed.
    let (code, stdout, stderr) = ruleop(&[
        "render",
        "--rules",
        "rules/myapp.yaml",
        cr.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.is_empty(), "{stdout}");
    assert!(
        stderr.contains("resource `a` (MyApp): spec.image"),
        "{stderr}"
    );
    let (code, stdout, stderr) = ruleop(&[
        "render",
        "--strict",
        "--rules",
        "rules/myapp.yaml",
        cr.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stderr.contains("spec.template.spec.containers[0].image: 5 is an integer; `spec.template.spec.containers[0].image` is a string"),
        "{stderr}"
    );
    assert!(
        stdout.is_empty(),
        "nothing printed for a resource that fails: {stdout}"
    );
}

#[test]
fn render_strict_checks_the_resource_against_the_rules_schema() {
    let dir = tempfile::tempdir().unwrap();
    let cr = dir.path().join("cr.yaml");
    std::fs::write(
        &cr,
        "apiVersion: sre.example.com/v1alpha1\nkind: WebSite\nmetadata: {name: w, namespace: n}\nspec: {image: nginx, serviceType: ClusterIp, prot: 80}\n",
    )
    .unwrap();
    let (code, stdout, stderr) = ruleop(&[
        "render",
        "--strict",
        "--rules",
        "rules/website.yaml",
        cr.to_str().unwrap(),
    ]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    for want in [
        "resource `w` (WebSite): spec.prot: unknown field `prot`\n  fix: did you mean `port`?",
        "resource `w` (WebSite): spec.serviceType: \"ClusterIp\" is not an allowed value of `spec.serviceType`\n  fix: did you mean `ClusterIP`?",
    ] {
        assert!(stderr.contains(want), "{want}\n---\n{stderr}");
    }
}

#[test]
fn render_with_the_crd_applies_its_defaults_first() {
    let dir = tempfile::tempdir().unwrap();
    // The rule without its schema (so without defaults): only the CRD's can fill
    // spec.replicas.
    let full = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/rules/website.yaml"))
        .unwrap();
    let (start, end) = (
        full.find("schema:\n").unwrap(),
        full.find("children:\n").unwrap(),
    );
    let rule = format!("{}{}", &full[..start], &full[end..]);
    let file = dir.path().join("website.yaml");
    std::fs::write(&file, &rule).unwrap();
    let cr = dir.path().join("cr.yaml");
    std::fs::write(
        &cr,
        "apiVersion: sre.example.com/v1alpha1\nkind: WebSite\nmetadata: {name: a, namespace: n}\nspec: {image: nginx}\n",
    )
    .unwrap();
    let (code, _, stderr) = ruleop(&[
        "render",
        "--rules",
        file.to_str().unwrap(),
        cr.to_str().unwrap(),
    ]);
    assert_eq!(
        code, 1,
        "without the CRD, spec.replicas is undefined: {stderr}"
    );
    let (code, stdout, stderr) = ruleop(&[
        "render",
        "--rules",
        file.to_str().unwrap(),
        "--crd",
        "deploy/crds/websites.sre.example.com.yaml",
        cr.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("replicas: 2") && stdout.contains("type: ClusterIP"),
        "{stdout}"
    );
}

#[test]
fn check_takes_on_remove_and_notes_an_orphan_that_could_not_come_back() {
    let dir = tempfile::tempdir().unwrap();
    let rule = "name: o\nwatch: {group: x.io, version: v1, resource: os}\nchildren:\n  - id: data\n    onRemove: Orphan\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"{{ name }}-data\"}}\n";
    let f = dir.path().join("o.yaml");
    std::fs::write(&f, rule).unwrap();
    let (code, stdout, stderr) = ruleop(&["check", "--rules", f.to_str().unwrap()]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stderr.contains("o.yaml:4") && stderr.contains("set `adopt: IfOrphan`"),
        "{stderr}"
    );
    std::fs::write(
        &f,
        rule.replace(
            "    onRemove: Orphan\n",
            "    onRemove: Orphan\n    adopt: IfOrphan\n",
        ),
    )
    .unwrap();
    let (code, _, stderr) = ruleop(&["check", "--rules", f.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(!stderr.contains("IfOrphan"), "{stderr}");
    std::fs::write(&f, rule.replace("Orphan", "Keep")).unwrap();
    let (code, stdout, stderr) = ruleop(&["check", "--rules", f.to_str().unwrap()]);
    assert_eq!(code, 1);
    let all = format!("{stdout}{stderr}");
    assert!(
        all.contains("o.yaml:5") && all.contains("unknown variant `Keep`"),
        "{all}"
    );
}

#[test]
fn examples_rules_yaml_is_the_shipped_rules_as_rule_objects() {
    let (code, out, err) = ruleop(&["rule", "--rules", "rules/"]);
    assert_eq!(code, 0, "{err}");
    let shipped =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/examples/rules.yaml"))
            .unwrap();
    assert_eq!(
        out, shipped,
        "examples/rules.yaml is stale: run deploy/generate.sh"
    );
    // Each Rule loads as the rule it was made from: the same fingerprint.
    let dir = tempfile::tempdir().unwrap();
    let new = dir.path().join("new.yaml");
    std::fs::write(&new, &shipped).unwrap();
    let (code, out, _) = ruleop(&[
        "diff",
        "--rules",
        "rules/",
        "--to",
        new.to_str().unwrap(),
        "examples/website.yaml",
        "examples/myapp.yaml",
    ]);
    assert_eq!(code, 0, "the Rules render what the files do: {out}");
}

#[test]
fn rule_labels_every_rule_it_prints_and_refuses_a_label_the_api_server_would() {
    let (code, out, err) = ruleop(&[
        "rule",
        "--rules",
        "rules/",
        "--label",
        "ruleop.dev/installation=web",
        "-l",
        "team=sre",
    ]);
    assert_eq!(code, 0, "{err}");
    let rules: Vec<serde_json::Value> = out
        .split("\n---\n")
        .filter_map(|d| {
            serde_yaml::from_str::<Option<serde_json::Value>>(d)
                .ok()
                .flatten()
        })
        .filter(|d| d.get("kind").is_some())
        .collect();
    assert!(rules.len() >= 2, "{out}");
    for r in &rules {
        assert_eq!(
            r["metadata"]["labels"],
            serde_json::json!({"ruleop.dev/installation": "web", "team": "sre"}),
            "{r}"
        );
        assert!(r["spec"].get("children").is_some(), "{r}");
    }
    let (code, _, err) = ruleop(&["rule", "--rules", "rules/", "--label", "team"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("KEY=VALUE") && err.contains("--label"),
        "{err}"
    );
}

#[test]
fn the_version_names_the_commit_and_every_cluster_command_takes_a_kubeconfig_and_a_context() {
    let (code, out, _) = ruleop(&["--version"]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("ruleop 0.") && out.contains("(commit "),
        "{out}"
    );
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    std::fs::write(
        &kc,
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: t}}]\ncontexts: [{name: here, context: {cluster: c, user: u}}]\ncurrent-context: here\n",
    )
    .unwrap();
    let kc = kc.to_str().unwrap();
    // A context the file does not have: said, before any request.
    let (code, out, err) = ruleop(&[
        "check",
        "--against-cluster",
        "--rules",
        "rules/",
        "--kubeconfig",
        kc,
        "--context",
        "nowhere",
    ]);
    assert_ne!(code, 0, "{out}");
    assert!(err.contains("nowhere"), "{err}");
    // The file's own context: its server is asked (and is not there).
    let (code, _, err) = ruleop(&[
        "check",
        "--against-cluster",
        "--rules",
        "rules/",
        "--kubeconfig",
        kc,
    ]);
    assert_ne!(code, 0);
    assert!(
        err.contains("127.0.0.1:1") || err.to_lowercase().contains("connect"),
        "{err}"
    );
}

#[test]
fn results_as_documents_exit_codes_and_completions() {
    // check: the verdicts as JSON and YAML; a broken rule is exit 1 and named.
    let (code, out, err) = ruleop(&["check", "--rules", "rules/", "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["ok"], true);
    let names: Vec<&str> = doc["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["myapp", "website"]);
    let dir = tempfile::tempdir().unwrap();
    let broken = dir.path().join("broken.yaml");
    std::fs::write(
        &broken,
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/rules/myapp.yaml"))
            .unwrap()
            .replace("{{ spec.image }}", "{{ spec.image "),
    )
    .unwrap();
    let (code, out, _) = ruleop(&["check", "--rules", broken.to_str().unwrap(), "-o", "yaml"]);
    assert_eq!(code, 1, "a broken rule: {out}");
    let doc: serde_json::Value = serde_yaml::from_str(&out).unwrap();
    assert_eq!(doc["ok"], false);
    assert_eq!(doc["errors"][0]["rule"], "myapp", "{doc}");
    assert!(
        doc["errors"][0]["message"]
            .as_str()
            .unwrap()
            .contains("broken.yaml:"),
        "{doc}"
    );
    // test: each file, test and step.
    let (code, out, err) = ruleop(&["test", "rules/tests", "-o", "json"]);
    assert_eq!(code, 0, "{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["passed"], true);
    assert_eq!(doc["files"].as_array().unwrap().len(), 2, "{doc}");
    assert!(doc["files"][0]["tests"][0]["passed"].as_bool().unwrap());
    // diff offline: what a changed default would do, resource by resource.
    let new = dir.path().join("website.yaml");
    std::fs::write(
        &new,
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/rules/website.yaml"))
            .unwrap()
            .replace("cpu: 100m", "cpu: 200m"),
    )
    .unwrap();
    let (code, out, err) = ruleop(&[
        "diff",
        "--rules",
        "rules/website.yaml",
        "--to",
        new.to_str().unwrap(),
        "examples/website.yaml",
        "-o",
        "json",
    ]);
    assert_eq!(code, 1, "something would change: {out}{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(doc["summary"]["podTemplates"], 1, "{doc}");
    assert_eq!(
        doc["resources"][0]["changed"][0]["podTemplate"], true,
        "{doc}"
    );
    // Could not run (no cluster there): 2, not the 1 of wrong rules.
    let (code, _, err) = ruleop(&[
        "--kubeconfig",
        "/nonexistent/kubeconfig",
        "trace",
        "website/x",
    ]);
    assert_eq!(code, 2, "{err}");
    // Completions for the shells.
    for shell in ["bash", "zsh", "fish"] {
        let (code, out, err) = ruleop(&["completion", shell]);
        assert_eq!(code, 0, "{err}");
        assert!(
            out.contains("ruleop") && out.contains("trace"),
            "{shell}: {out}"
        );
    }
}

#[test]
fn diff_to_a_new_default_leaves_the_stored_resources_alone() {
    let dir = tempfile::tempdir().unwrap();
    let shipped =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/rules/website.yaml"))
            .unwrap();
    let new = dir.path().join("website.yaml");
    let old_default = "port: integer | default=80 ";
    assert!(shipped.contains(old_default));
    std::fs::write(
        &new,
        shipped.replace(old_default, "port: integer | default=8080 "),
    )
    .unwrap();
    let cr = dir.path().join("cr.yaml");
    std::fs::write(
        &cr,
        "apiVersion: sre.example.com/v1alpha1\nkind: WebSite\nmetadata: {name: a, namespace: n}\nspec: {image: nginx}\n",
    )
    .unwrap();
    let diff = |to: &std::path::Path| {
        ruleop(&[
            "diff",
            "--rules",
            "rules/website.yaml",
            "--to",
            to.to_str().unwrap(),
            cr.to_str().unwrap(),
        ])
    };
    // The API server stored port 80 when the resource was written: the new default does
    // not reach it, so no pod restarts.
    let (code, out, err) = diff(&new);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("0 touched"), "{out}");
    assert!(out.contains("pods that would restart): 0"), "{out}");
    // A change the stored resource does see still counts.
    std::fs::write(
        &new,
        shipped.replace(
            "- name: web\n",
            "- name: web\n                imagePullPolicy: Always\n",
        ),
    )
    .unwrap();
    let (code, out, err) = diff(&new);
    assert_eq!(code, 1, "something would change: {out}{err}");
    assert!(out.contains("pods that would restart): 1"), "{out}");
}

#[test]
fn render_converts_a_resource_written_in_another_version_of_the_kind() {
    let dir = tempfile::tempdir().unwrap();
    let cr = dir.path().join("old.yaml");
    std::fs::write(
        &cr,
        "apiVersion: sre.example.com/v1alpha1\nkind: WebSite\nmetadata: {name: shop, namespace: default}\nspec: {image: nginx, serviceType: NodePort}\n",
    )
    .unwrap();
    let (code, stdout, stderr) = ruleop(&[
        "render",
        "--rules",
        "examples/versions/website.yaml",
        cr.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("type: NodePort"), "{stdout}");
    assert!(
        stdout.contains("replicas: 2"),
        "v1alpha1's default: {stdout}"
    );
}

#[test]
fn moving_the_seed_website_to_two_versions_changes_no_child() {
    // The seed rule (v1alpha1) to the two-version one (v1 watched, v1alpha1 converted):
    // every WebSite keeps its children as they are.
    let (code, stdout, stderr) = ruleop(&[
        "diff",
        "--rules",
        "rules/website.yaml",
        "--to",
        "examples/versions/website.yaml",
        "examples/website.yaml",
    ]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains("0 created, 0 changed, 0 deleted")
            && stdout.contains("pods that would restart): 0"),
        "{stdout}"
    );
}

/// Every command that reads rules takes files of Rule objects too (as `ruleop rule` prints
/// them): `check` says they are fine or where one is wrong, by file and line, and `render`
/// renders from them.
#[test]
fn check_and_render_take_files_of_rule_objects_with_their_lines() {
    let dir = tempfile::tempdir().unwrap();
    let (code, objects, err) = ruleop(&["rule", "--rules", "rules/"]);
    assert_eq!(code, 0, "{err}");
    let good = dir.path().join("rules.yaml");
    std::fs::write(&good, &objects).unwrap();
    let good = good.to_str().unwrap();
    let (code, out, err) = ruleop(&["check", "--rules", good]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("2 rule(s) ok"), "{out}");
    let (code, out, err) = ruleop(&["render", "--rules", good, "examples/website.yaml"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("kind: Deployment") && out.contains("kind: Service"),
        "{out}"
    );

    // A typo in one Rule: its file, its line, its path in the Rule and the fix.
    let broken_text = objects.replacen(
        "status.readyReplicas >= spec.replicas",
        "status.readyReplica >= spec.replicas",
        1,
    );
    assert_ne!(broken_text, objects, "the ready expression is in the Rules");
    let broken = dir.path().join("broken.yaml");
    std::fs::write(&broken, &broken_text).unwrap();
    let (line, _) = broken_text
        .lines()
        .enumerate()
        .find(|(_, l)| l.contains("status.readyReplica >="))
        .unwrap();
    let (code, out, err) = ruleop(&["check", "--rules", broken.to_str().unwrap()]);
    assert_eq!(code, 1, "{out}{err}");
    // (The Rules come in name order: myapp's is the first ready expression.)
    let want = format!(
        "{}:{}: rule `myapp`: spec.status.ready: `status.readyReplica`",
        broken.display(),
        line + 1
    );
    assert!(
        err.contains(&want) && err.contains("did you mean"),
        "{want} in {err}"
    );
}

/// `render --strict` names the file and the line of the field the rendered child gets wrong.
#[test]
fn render_strict_names_the_file_and_line_of_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string("rules/website.yaml")
        .unwrap()
        .replace(
            "type: \"{{ spec.serviceType }}\"",
            "type: \"{{ spec.image }}\"",
        );
    let line = text
        .lines()
        .position(|l| l.contains("type: \"{{ spec.image }}\""))
        .unwrap()
        + 1;
    let file = dir.path().join("website.yaml");
    std::fs::write(&file, &text).unwrap();
    let file = file.to_str().unwrap();
    let (code, _, err) = ruleop(&["check", "--rules", file]);
    assert_eq!(code, 0, "only a render shows it: {err}");
    let (code, _, err) = ruleop(&[
        "render",
        "--rules",
        file,
        "examples/website.yaml",
        "--strict",
    ]);
    assert_eq!(code, 1, "{err}");
    let want = format!("{file}:{line}: rule `website`, child `service`");
    assert!(
        err.contains(&want) && err.contains("spec.type"),
        "{want} in {err}"
    );
}
