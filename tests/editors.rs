//! `ruleop lsp` tried in a real editor: Neovim (Debian's package, installed by
//! tests/tools/neovim.sh where the machine has none and can), headless, with the
//! configuration of editors/nvim/ruleop.lua as a user would load it. It opens a rule with a
//! typo and writes what it received to a file (tests/editors/nvim_driver.lua): the test
//! compares the diagnostic (at the typo, "did you mean `readyReplicas`"), the completion
//! after `children.deployment.status.` (`readyReplicas`), the hover on `spec.replicas` (its
//! type and default) and the definition from `after: [config]` (the `config` child's line).
//! Where no Neovim can run, the test says so and checks nothing. And the VS Code extension
//! of editors/vscode/ packages with npm.

use serde_json::{Value, json};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn find(text: &str, needle: &str) -> (usize, usize) {
    text.lines()
        .enumerate()
        .find_map(|(i, l)| l.find(needle).map(|c| (i, c)))
        .unwrap_or_else(|| panic!("{needle} in the fixture"))
}

#[test]
fn neovim_gets_the_diagnostic_completion_hover_and_definition() {
    let nvim = Command::new(format!("{ROOT}/tests/tools/neovim.sh"))
        .output()
        .expect("tests/tools/neovim.sh");
    let nvim = String::from_utf8_lossy(&nvim.stdout).trim().to_string();
    if let Some(why) = nvim.strip_prefix("none: ") {
        eprintln!("neovim test skipped: {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(format!("{ROOT}/tests/fixtures/lsp/typo.yaml")).unwrap();
    let file = dir.path().join("site.yaml");
    std::fs::write(&file, &text).unwrap();
    let (cl, cc) = find(&text, "children.deployment.status.");
    let (hl, hc) = find(&text, "spec.replicas }}");
    let (dl, dc) = find(&text, "after: [config]");
    let at = json!({
        "completion": [cl, cc + "children.deployment.status.".len()],
        "hover": [hl, hc + "spec.re".len()],
        "definition": [dl, dc + "after: [co".len()],
    });
    let out = dir.path().join("out.json");
    let run = Command::new(&nvim)
        .args(["--headless", "-n", "-i", "NONE", "-u"])
        .arg(format!("{ROOT}/tests/editors/nvim_driver.lua"))
        .env(
            "RULEOP_NVIM_CONFIG",
            format!("{ROOT}/editors/nvim/ruleop.lua"),
        )
        .env("RULEOP_BIN", env!("CARGO_BIN_EXE_ruleop"))
        .env("RULEOP_FILE", &file)
        .env("RULEOP_AT", at.to_string())
        .env("RULEOP_OUT", &out)
        .env("HOME", dir.path())
        .output()
        .expect("nvim");
    let got: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap_or_else(|e| {
        panic!(
            "nvim wrote nothing ({e}): {}{}",
            String::from_utf8_lossy(&run.stdout),
            String::from_utf8_lossy(&run.stderr)
        )
    }))
    .unwrap();
    println!("neovim: {got}");

    let diags = got["diagnostics"].as_array().unwrap();
    let typo = "children.deployment.status.readyReplica";
    let (tl, tc) = find(&text, typo);
    let found = diags
        .iter()
        .find(|d| d["line"] == tl)
        .unwrap_or_else(|| panic!("a diagnostic at line {}: {diags:?}", tl + 1));
    assert_eq!(found["col"], tc, "{found}");
    assert_eq!(found["end_col"], tc + typo.len(), "{found}");
    assert!(
        found["message"]
            .as_str()
            .unwrap()
            .contains("did you mean `readyReplicas`"),
        "{found}"
    );
    let labels: Vec<&str> = got["completion"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(labels.contains(&"readyReplicas"), "{labels:?}");
    let hover = got["hover"].as_str().unwrap();
    assert!(
        hover.contains("integer") && hover.contains("default `2`"),
        "{hover}"
    );
    assert_eq!(got["definition"], find(&text, "id: config").0, "{got}");
}

/// The VS Code extension (editors/vscode/) packages with npm from its lockfile, the
/// language client inside; where npm is missing, the test says so and checks nothing.
#[test]
fn the_vscode_extension_packages_with_its_language_client() {
    if Command::new("npm").arg("--version").output().is_err() {
        eprintln!("vscode test skipped: no npm");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    for f in [
        "package.json",
        "package-lock.json",
        "extension.js",
        "README.md",
    ] {
        std::fs::copy(format!("{ROOT}/editors/vscode/{f}"), dir.path().join(f)).unwrap();
    }
    let npm = |args: &[&str]| {
        let out = Command::new("npm")
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "npm {args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    };
    npm(&["ci", "--no-audit", "--no-fund"]);
    npm(&["run", "package"]);
    let listing = Command::new("python3")
        .args(["-m", "zipfile", "-l", "ruleop.vsix"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(listing.contains("extension/extension.js"), "{listing}");
    assert!(
        listing.contains("node_modules/vscode-languageclient/node.js"),
        "the language client is packaged: {listing}"
    );
}
