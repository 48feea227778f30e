//! The Dockerfile builds: its build stage's context (the files its `COPY` lines name, and
//! nothing else) is reproduced in an empty folder and its `cargo build` command run there.
//! No container engine is needed. The build shares this repo's target folder, so only
//! ruleop itself is compiled again.

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
fn the_dockerfile_build_stage_builds_the_binary_from_its_own_context() {
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
    let args: Vec<&str> = run.split_whitespace().skip(1).collect();
    let out = Command::new(env!("CARGO"))
        .args(&args)
        .current_dir(ctx.path())
        .env("CARGO_TARGET_DIR", root.join("target"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "`{run}` in the Dockerfile's context failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bin = root.join("target/release/ruleop");
    let version = Command::new(&bin).arg("--version").output().unwrap();
    assert!(version.status.success(), "{bin:?} --version");
}
