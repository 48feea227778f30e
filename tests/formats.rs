//! The JSON Schemas of the rules format and of test files (for editors) are made from the
//! Rust types and kept in step with them: the committed files are what `ruleop schema`
//! prints, every shipped rule and test file is valid under them, and a misspelled field is
//! not.

mod common;

use serde_json::Value;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn schema(tests: bool) -> Value {
    let args: &[&str] = if tests {
        &["schema", "--tests"]
    } else {
        &["schema"]
    };
    let (code, stdout, stderr) = common::ruleop_cli(args, false);
    assert_eq!(code, 0, "{stderr}");
    serde_json::from_str(&stdout).unwrap()
}

fn documents(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(format!("{ROOT}/{path}")).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .filter(|v: &Value| !v.is_null())
        .collect()
}

fn errors(validator: &jsonschema::Validator, doc: &Value) -> Vec<String> {
    validator
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

#[test]
fn the_committed_schemas_are_what_the_types_give() {
    for (file, tests) in [
        ("schemas/rules.schema.json", false),
        ("schemas/rules-test.schema.json", true),
    ] {
        let committed: Value =
            serde_json::from_str(&std::fs::read_to_string(format!("{ROOT}/{file}")).unwrap())
                .unwrap();
        assert_eq!(
            committed,
            schema(tests),
            "{file} is stale: run schemas/generate-formats.sh"
        );
    }
}

#[test]
fn every_shipped_rule_is_valid_and_a_misspelled_field_is_not() {
    let validator = jsonschema::validator_for(&schema(false)).unwrap();
    // Every shipped rules file, and every fixture's `rules.yaml` (the other fixtures are
    // CRDs, resources, and rules broken on purpose).
    let rules = files(
        "rules",
        &|n| n.ends_with(".yaml") && !n.ends_with("_test.yaml"),
        false,
    )
    .into_iter()
    .chain(files("tests/fixtures", &|n| n == "rules.yaml", true));
    for file in rules {
        let file = file.as_str();
        for doc in documents(file) {
            let e = errors(&validator, &doc);
            assert!(e.is_empty(), "{file}: {e:#?}");
        }
    }
    let mut bad = documents("rules/website.yaml").remove(0);
    let child = bad["children"][0].as_object_mut().unwrap();
    let template = child.remove("template").unwrap();
    child.insert("tempalte".into(), template);
    let e = errors(&validator, &bad);
    assert!(
        e.iter().any(|e| e.contains("tempalte")),
        "a misspelled field is refused: {e:#?}"
    );
    let mut bad = documents("rules/myapp.yaml").remove(0);
    bad["children"][0]["onRemove"] = "Keep".into();
    assert!(!errors(&validator, &bad).is_empty(), "an unknown onRemove");
}

#[test]
fn every_shipped_test_file_is_valid() {
    let validator = jsonschema::validator_for(&schema(true)).unwrap();
    let tests = files("rules", &|n| n.ends_with("_test.yaml"), true)
        .into_iter()
        .chain(files(
            "tests/fixtures",
            &|n| n.ends_with("_test.yaml"),
            true,
        ));
    for file in tests {
        let file = file.as_str();
        for doc in documents(file) {
            let e = errors(&validator, &doc);
            assert!(e.is_empty(), "{file}: {e:#?}");
        }
    }
    let mut bad = documents("rules/tests/myapp_test.yaml").remove(0);
    bad["tests"][0]["steps"][0]["expct"] = serde_json::json!({});
    assert!(!errors(&validator, &bad).is_empty());
}

/// The files under `dir` (relative to the crate) whose names pass `keep`, through its
/// folders when `deep`, sorted.
fn files(dir: &str, keep: &dyn Fn(&str) -> bool, deep: bool) -> Vec<String> {
    let mut out = Vec::new();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut todo = vec![root.join(dir)];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if p.is_dir() {
                if deep {
                    todo.push(p);
                }
            } else if keep(&name) {
                out.push(p.strip_prefix(root).unwrap().to_string_lossy().to_string());
            }
        }
    }
    out.sort();
    assert!(!out.is_empty(), "no files in {dir}");
    out
}

#[test]
fn the_shipped_rbac_and_rules_configmap_are_generated_from_the_shipped_rules() {
    let root = env!("CARGO_MANIFEST_DIR");
    // What `ruleop ARGS` prints, run from the repository's root.
    let ruleop = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ruleop"))
            .args(args)
            .current_dir(root)
            .output()
            .unwrap();
        assert!(out.status.success(), "ruleop {args:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let shipped = std::fs::read_to_string(format!("{root}/deploy/rbac.yaml")).unwrap();
    assert_eq!(
        ruleop(&["rbac", "--rules", "rules/"]),
        shipped,
        "deploy/rbac.yaml is stale: run deploy/generate.sh"
    );
    let cm = common::kubectl_ok(
        &[
            "create",
            "configmap",
            "ruleop-rules",
            "--namespace",
            "ruleop-system",
            "--from-file=rules/",
            "--dry-run=client",
            "-o",
            "yaml",
        ],
        None,
    );
    // (Labelled as every object of deploy/.)
    let cm = common::kubectl_ok(
        &[
            "label",
            "--local",
            "-f",
            "-",
            "app.kubernetes.io/name=ruleop",
            "-o",
            "yaml",
        ],
        Some(&cm),
    );
    let shipped_cm =
        std::fs::read_to_string(format!("{root}/deploy/rules-configmap.yaml")).unwrap();
    assert!(
        shipped_cm.ends_with(&cm),
        "deploy/rules-configmap.yaml is stale: run deploy/generate.sh"
    );
    for (rule, crd) in [
        (
            "rules/website.yaml",
            "deploy/crds/websites.sre.example.com.yaml",
        ),
        (
            "rules/myapp.yaml",
            "deploy/crds/myapps.myscheme.example.com.yaml",
        ),
    ] {
        let shipped = std::fs::read_to_string(format!("{root}/{crd}")).unwrap();
        assert_eq!(
            ruleop(&["crd", "--rules", rule]),
            shipped,
            "{crd} is stale: run deploy/generate.sh"
        );
    }
}
