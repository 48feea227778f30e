//! Records the commit ruleop is built from, for `ruleop --version` and `ruleop_build_info`:
//! `$RULEOP_COMMIT` if set (an image build, with no `.git`), else `git rev-parse`, else
//! `unknown`.
fn main() {
    println!("cargo:rerun-if-env-changed=RULEOP_COMMIT");
    println!("cargo:rerun-if-changed=.git/HEAD");
    println!("cargo:rerun-if-changed=.git/refs/heads");
    let commit = std::env::var("RULEOP_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| {
            let out = std::process::Command::new("git")
                .args(["rev-parse", "--short=12", "HEAD"])
                .output()
                .ok()?;
            out.status
                .success()
                .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=RULEOP_COMMIT={commit}");
}
