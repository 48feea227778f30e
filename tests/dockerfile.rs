//! The Dockerfile's build stage: its context (the files its `COPY` lines name, and nothing
//! else) is reproduced in an empty folder, and cargo reads the package there as the stage's
//! `cargo build --locked` would (every target's file present, the lock file in step). The
//! build itself is not run again (the image test runs the binary as the image runs it:
//! tests/image.rs, which also reads the runtime stage's USER, ENTRYPOINT and CMD).

use std::path::Path;
use std::process::Command;

/// The build stage: (`COPY` sources and destinations, the `RUN` command).
fn build_stage(dockerfile: &str) -> (Vec<(Vec<String>, String)>, String) {
    let mut copies = Vec::new();
    let mut run = None;
    let mut in_build = false;
    for line in dockerfile.lines().map(str::trim) {
        if let Some(from) = line.strip_prefix("FROM ") {
            in_build = from.contains(" AS build");
            continue;
        }
        if !in_build {
            continue;
        }
        if let Some(args) = line.strip_prefix("COPY ") {
            let mut parts: Vec<String> = args.split_whitespace().map(str::to_string).collect();
            let dest = parts.pop().expect("COPY has a destination");
            copies.push((parts, dest));
        } else if let Some(cmd) = line.strip_prefix("RUN ") {
            run = Some(cmd.to_string());
        }
    }
    (copies, run.expect("the build stage runs a command"))
}

fn copy_tree(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            copy_tree(&e.path(), &to.join(e.file_name()));
        }
    } else {
        std::fs::create_dir_all(to.parent().unwrap()).unwrap();
        std::fs::copy(from, to).unwrap();
    }
}

#[test]
fn the_dockerfile_build_stage_has_every_file_cargo_needs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dockerfile = std::fs::read_to_string(root.join("Dockerfile")).unwrap();
    let (copies, run) = build_stage(&dockerfile);
    assert!(run.starts_with("cargo build"), "{run}");
    let ctx = tempfile::tempdir().unwrap();
    for (sources, dest) in &copies {
        for s in sources {
            let to = if dest.ends_with('/') || sources.len() > 1 {
                ctx.path().join(dest.trim_start_matches("./")).join(s)
            } else {
                ctx.path().join(dest.trim_start_matches("./"))
            };
            copy_tree(&root.join(s), &to);
        }
    }
    assert!(
        run.contains("--locked") && run.contains("--bin ruleop"),
        "{run}"
    );
    // cargo reads every target the manifest names before it builds one (it leaves out,
    // with a warning, one whose file is missing): the context has them all.
    let named = |dir: &Path| {
        let out = Command::new(env!("CARGO"))
            .args([
                "metadata",
                "--locked",
                "--offline",
                "--format-version",
                "1",
                "--no-deps",
            ])
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "cargo cannot read the package in {dir:?}:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let mut targets: Vec<String> = meta["packages"][0]["targets"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| {
                ["lib", "bin", "bench", "custom-build"]
                    .contains(&t["kind"][0].as_str().unwrap_or_default())
            })
            .map(|t| {
                format!(
                    "{} {}",
                    t["kind"][0].as_str().unwrap_or_default(),
                    t["name"].as_str().unwrap_or_default()
                )
            })
            .collect();
        targets.sort();
        targets
    };
    let in_context = named(ctx.path());
    assert!(
        in_context.contains(&"bin ruleop".to_string()),
        "{in_context:?}"
    );
    assert_eq!(
        in_context,
        named(root),
        "a target of the manifest has no file in the Dockerfile's context: COPY it"
    );
}
