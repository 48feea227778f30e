//! `ruleop lsp` at the protocol level: the binary spoken to over stdio as an editor speaks
//! to it (JSON-RPC with `Content-Length` framing). A rule with a typo gets a diagnostic at
//! the typo with its "did you mean" and a quick fix; completion offers a child kind's fields
//! and the rule's spec fields; hover shows a field's type and default; go to definition
//! lands on a child's `id:`; and every mistake of the fixtures that `ruleop check` reports
//! is a diagnostic at the same line. No cluster needed.

#[path = "lsp_client/mod.rs"]
mod lsp_client;

use lsp_client::Client;
use serde_json::{Value, json};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn uri(path: &str) -> String {
    format!("file://{ROOT}/{path}")
}

/// Where `needle` is in `text`: its 0-based line and column.
fn find(text: &str, needle: &str) -> (usize, usize) {
    text.lines()
        .enumerate()
        .find_map(|(i, l)| l.find(needle).map(|c| (i, c)))
        .unwrap_or_else(|| panic!("{needle} in the fixture"))
}

fn labels(items: &Value) -> Vec<String> {
    let list = items
        .as_array()
        .or(items["items"].as_array())
        .cloned()
        .unwrap_or_default();
    list.iter()
        .filter_map(|i| i["label"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn a_typo_is_a_diagnostic_with_its_fix_and_paths_complete_hover_and_lead_to_their_child() {
    let path = "tests/fixtures/lsp/typo.yaml";
    let text = std::fs::read_to_string(format!("{ROOT}/{path}")).unwrap();
    let u = uri(path);
    let mut c = Client::start(env!("CARGO_BIN_EXE_ruleop"), &[]);
    c.open(&u, &text);

    let diags = c.diagnostics(&u);
    assert_eq!(diags.len(), 1, "{diags:#?}");
    let d = &diags[0];
    let typo = "children.deployment.status.readyReplica";
    let (line, col) = find(&text, typo);
    assert_eq!(d["range"]["start"], json!({"line": line, "character": col}));
    assert_eq!(
        d["range"]["end"],
        json!({"line": line, "character": col + typo.len()})
    );
    assert!(
        d["message"]
            .as_str()
            .unwrap()
            .contains("did you mean `readyReplicas`"),
        "{d}"
    );
    let actions = c.request(
        "textDocument/codeAction",
        json!({"textDocument": {"uri": u}, "range": d["range"], "context": {"diagnostics": [d]}}),
    );
    let edit = &actions[0]["edit"]["changes"][&u][0];
    assert_eq!(
        edit["newText"], "children.deployment.status.readyReplicas",
        "{actions}"
    );

    // Completion after a child's path, by its kind's schema (in an expression, and in a
    // status field's JSONPath into its `from` child); after `spec.`, by the rule's.
    let (line, col) = find(&text, typo);
    let after = col + "children.deployment.status.".len();
    let got = labels(&c.at("textDocument/completion", &u, line, after));
    assert!(got.contains(&"readyReplicas".to_string()), "{got:?}");
    let (line, col) = find(&text, "$.status.readyReplicas");
    let got = labels(&c.at("textDocument/completion", &u, line, col + "$.status.".len()));
    assert!(got.contains(&"availableReplicas".to_string()), "{got:?}");
    let (line, col) = find(&text, "spec.replicas }}");
    let got = labels(&c.at("textDocument/completion", &u, line, col + "spec.".len()));
    assert!(
        got.contains(&"replicas".to_string()) && got.contains(&"image".to_string()),
        "{got:?}"
    );
    let (line, col) = find(&text, "after: [config]");
    let got = labels(&c.at("textDocument/completion", &u, line, col + "after: [".len()));
    assert!(got.contains(&"config".to_string()), "{got:?}");

    // Hover on `spec.replicas`: its type and default.
    let (line, col) = find(&text, "spec.replicas }}");
    let h = c.at("textDocument/hover", &u, line, col + "spec.re".len());
    let shown = h["contents"]["value"].as_str().unwrap_or_default();
    assert!(
        shown.contains("integer") && shown.contains("default `2`"),
        "{h}"
    );

    // A position past the end of a line (a client counting otherwise) answers, and the
    // server goes on.
    let (line, _) = find(&text, "$.status.readyReplicas");
    let _ = c.at("textDocument/hover", &u, line, 500);

    // Go to definition from `after: [config]` to the `config` child's `id:`.
    let (line, col) = find(&text, "after: [config]");
    let to = c.at(
        "textDocument/definition",
        &u,
        line,
        col + "after: [co".len(),
    );
    let (id_line, _) = find(&text, "id: config");
    assert_eq!(to["range"]["start"]["line"], id_line, "{to}");
    assert_eq!(to["uri"], u);
}

/// The lines `ruleop check` reports errors at, for one file.
fn check_lines(path: &str) -> Vec<usize> {
    let out = Command::new(env!("CARGO_BIN_EXE_ruleop"))
        .args(["check", "--rules", path])
        .current_dir(ROOT)
        .output()
        .unwrap();
    let prefix = format!("error: {path}:");
    let mut lines: Vec<usize> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix)?.split(':').next()?.parse().ok())
        .collect();
    lines.sort();
    lines
}

#[test]
fn every_mistake_check_reports_in_the_fixtures_is_a_diagnostic_at_its_line() {
    let mut files: Vec<String> = std::fs::read_dir(format!("{ROOT}/tests/fixtures/broken"))
        .unwrap()
        .map(|e| {
            format!(
                "tests/fixtures/broken/{}",
                e.unwrap().file_name().to_string_lossy()
            )
        })
        .filter(|p| p.ends_with(".yaml"))
        .collect();
    files.push("tests/fixtures/typed/mistakes.yaml".into());
    files.sort();
    let mut c = Client::start(env!("CARGO_BIN_EXE_ruleop"), &[]);
    let mut total = 0;
    for path in &files {
        let want = check_lines(path);
        let text = std::fs::read_to_string(format!("{ROOT}/{path}")).unwrap();
        let u = uri(path);
        c.open(&u, &text);
        let mut got: Vec<usize> = c
            .diagnostics(&u)
            .iter()
            .map(|d| d["range"]["start"]["line"].as_u64().unwrap() as usize + 1)
            .collect();
        got.sort();
        assert_eq!(got, want, "{path}: the diagnostics' lines, and check's");
        total += want.len();
    }
    println!(
        "lsp: {total} mistakes in {} files, each a diagnostic at check's line",
        files.len()
    );
    assert!(total >= 20, "{total}");
}

#[test]
fn a_file_of_rule_objects_gets_its_diagnostics_at_their_lines() {
    // The fixture as a Rule object (`ruleop rule` prints only rules that load).
    let rule = std::fs::read_to_string(format!("{ROOT}/tests/fixtures/lsp/typo.yaml")).unwrap();
    let spec: String = rule
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("  {l}\n"))
        .collect();
    let text = format!(
        "apiVersion: ruleop.dev/v1alpha1\nkind: Rule\nmetadata:\n  name: site\nspec:\n{spec}"
    );
    let u = "file:///tmp/ruleop-lsp-test/rules.yaml";
    let mut c = Client::start(env!("CARGO_BIN_EXE_ruleop"), &[]);
    c.open(u, &text);
    let diags = c.diagnostics(u);
    assert_eq!(diags.len(), 1, "{diags:#?}");
    let (line, col) = find(&text, "children.deployment.status.readyReplica");
    assert_eq!(
        diags[0]["range"]["start"],
        json!({"line": line, "character": col}),
        "{diags:#?}"
    );
    assert!(
        diags[0]["message"]
            .as_str()
            .unwrap()
            .contains("did you mean `readyReplicas`")
    );
    // Completion and definition inside the Rule's spec.
    let got = labels(&c.at(
        "textDocument/completion",
        u,
        line,
        col + "children.deployment.status.".len(),
    ));
    assert!(got.contains(&"readyReplicas".to_string()), "{got:?}");
}

#[test]
fn filters_types_and_markers_complete_and_a_marker_says_what_it_means() {
    let path = "tests/fixtures/lsp/typo.yaml";
    let text = std::fs::read_to_string(format!("{ROOT}/{path}"))
        .unwrap()
        .replace(
            "image: \"{{ spec.image }}\"\n  - id",
            "image: \"{{ spec.image | sh }}\"\n  - id",
        );
    let u = uri("tests/fixtures/lsp/filters.yaml");
    let mut c = Client::start(env!("CARGO_BIN_EXE_ruleop"), &[]);
    c.open(&u, &text);
    let (line, col) = find(&text, "spec.image | sh");
    let got = labels(&c.at(
        "textDocument/completion",
        &u,
        line,
        col + "spec.image | sh".len(),
    ));
    assert!(
        got.contains(&"sha256".to_string()) && got.contains(&"upper".to_string()),
        "{got:?}"
    );

    let (line, col) = find(&text, "default=2 minimum=0");
    let got = labels(&c.at("textDocument/completion", &u, line, col));
    assert!(
        got.contains(&"default".to_string()) && got.contains(&"pattern".to_string()),
        "{got:?}"
    );
    let (line, col) = find(&text, "integer | default=2");
    let got = labels(&c.at("textDocument/completion", &u, line, col));
    assert!(got.contains(&"int-or-string".to_string()), "{got:?}");
    let (line, col) = find(&text, "default=2 minimum=0");
    let h = c.at("textDocument/hover", &u, line, col + 2);
    let shown = h["contents"]["value"].as_str().unwrap_or_default();
    assert!(
        shown.contains("marker `default`") && shown.contains("left out"),
        "{h}"
    );
}

/// A snippet's text as the editor inserts it with its placeholders' defaults.
fn expand(snippet: &str) -> String {
    let placeholder = regex::Regex::new(r"\$\{\d+:([^}]*)\}").unwrap();
    placeholder.replace_all(snippet, "$1").replace("\\$", "$")
}

/// `text` with `body` inserted as lines at `line`, each indented by `indent`.
fn insert(text: &str, line: usize, indent: usize, body: &str) -> String {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let pad = " ".repeat(indent);
    let new: Vec<String> = body.lines().map(|l| format!("{pad}{l}")).collect();
    lines.splice(line..line, new);
    lines.join("\n") + "\n"
}

#[test]
fn every_snippet_is_offered_where_it_goes_and_check_accepts_it() {
    let base = std::fs::read_to_string(format!("{ROOT}/rules/website.yaml")).unwrap();
    let status = base.lines().position(|l| l == "status:").unwrap();
    let child = base
        .lines()
        .position(|l| l == "  - id: deployment")
        .unwrap()
        + 1;
    let fields = base.lines().position(|l| l == "  fields:").unwrap() + 1;
    // (the line typed, where, the snippets' indentation, the labels wanted)
    let places = [
        (
            "  - ",
            status,
            2,
            vec!["child: a ConfigMap", "collection: one ConfigMap per item"],
        ),
        ("    ", child, 4, vec!["readiness check"]),
        ("    - ", fields, 4, vec!["status field from a child"]),
    ];
    let mut c = Client::start(env!("CARGO_BIN_EXE_ruleop"), &[]);
    let dir = tempfile::tempdir().unwrap();
    let mut checked = 0;
    for (i, (typed, line, indent, want)) in places.into_iter().enumerate() {
        let text = insert(&base, line, 0, typed);
        let u = format!("file:///tmp/ruleop-lsp-snippets/{i}.yaml");
        c.open(&u, &text);
        let items = c.at("textDocument/completion", &u, line, typed.len());
        let list = items.as_array().cloned().unwrap_or_default();
        for label in want {
            let s = list
                .iter()
                .find(|it| it["label"] == label && it["kind"] == 15)
                .unwrap_or_else(|| panic!("the snippet {label:?} at line {}: {items}", line + 1));
            let body = expand(s["insertText"].as_str().unwrap());
            let with = insert(&base, line, indent, &body);
            let file = dir.path().join(format!("{checked}.yaml"));
            std::fs::write(&file, &with).unwrap();
            let out = Command::new(env!("CARGO_BIN_EXE_ruleop"))
                .args(["check", "--rules", file.to_str().unwrap()])
                .output()
                .unwrap();
            assert!(
                out.status.success(),
                "{label}: {}\n{with}",
                String::from_utf8_lossy(&out.stderr)
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 4);
}

#[test]
fn a_test_file_gets_its_loading_report_at_its_lines() {
    let path = "tests/fixtures/cache/cache_test.yaml";
    let text = std::fs::read_to_string(format!("{ROOT}/{path}")).unwrap();
    // Its test twice over.
    let block = &text[text.find("  - name: ").unwrap()..];
    let first = block.lines().next().unwrap();
    let twice = format!("{}\n{block}", text.trim_end());
    let u = uri("tests/fixtures/cache/twice_test.yaml");
    let mut c = Client::start(env!("CARGO_BIN_EXE_ruleop"), &[]);
    c.open(&u, &text);
    let all = c.diagnostics(&u);
    assert!(all.is_empty(), "the test file as it is: {all:#?}");
    c.open(&u, &twice);
    let diags = c.diagnostics(&u);
    let second = twice
        .lines()
        .enumerate()
        .filter(|(_, l)| *l == first)
        .nth(1)
        .unwrap()
        .0;
    assert_eq!(diags.len(), 1, "{diags:#?}");
    assert_eq!(diags[0]["range"]["start"]["line"], second, "{diags:#?}");
    assert!(
        diags[0]["message"]
            .as_str()
            .unwrap()
            .contains("two tests are named")
    );

    // A field the format does not have: at its line.
    let unknown = text.replacen("    resource:", "    resourse:", 1);
    c.open(&u, &unknown);
    let diags = c.diagnostics(&u);
    let (line, _) = find(&unknown, "    resourse:");
    assert_eq!(diags.len(), 1, "{diags:#?}");
    assert_eq!(diags[0]["range"]["start"]["line"], line, "{diags:#?}");
}
