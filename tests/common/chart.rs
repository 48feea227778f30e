//! The Helm chart (charts/ruleop/) as the tests see it: helm (built from Go modules) and the
//! objects it renders.

use serde_json::Value;
use std::collections::BTreeMap;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// helm with `args`, its own state (repositories, cache) out of $HOME, and `kubeconfig`.
fn command(args: &[&str], kubeconfig: Option<&str>) -> std::process::Command {
    let mut cmd = std::process::Command::new(super::go_tool("helm"));
    cmd.args(args).current_dir(ROOT);
    let home = std::path::Path::new(ROOT).join("target/helm-home");
    cmd.env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"));
    match kubeconfig {
        Some(kc) => cmd.env("KUBECONFIG", kc),
        None => cmd.env_remove("KUBECONFIG"),
    };
    cmd
}

/// Runs helm; gives stdout, failing the test with stderr when helm fails.
pub fn helm(args: &[&str], kubeconfig: Option<&str>) -> String {
    let out = command(args, kubeconfig).output().expect("running helm");
    assert!(
        out.status.success(),
        "helm {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `args`, then `--set` and each of `set`.
fn with_set<'a>(mut args: Vec<&'a str>, set: &[&'a str]) -> Vec<&'a str> {
    for s in set {
        args.extend(["--set", s]);
    }
    args
}

/// The objects of a multi-document YAML text, by `Kind namespace/name`.
pub fn objects(text: &str) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for doc in serde_yaml::Deserializer::from_str(text) {
        let v: Value = serde::Deserialize::deserialize(doc).unwrap();
        if v.is_null() {
            continue;
        }
        // (`kubectl create --dry-run` writes a null creationTimestamp.)
        let mut v = v;
        if v["metadata"]["creationTimestamp"].is_null()
            && let Some(m) = v["metadata"].as_object_mut()
        {
            m.remove("creationTimestamp");
        }
        let key = format!(
            "{} {}/{}",
            v["kind"].as_str().unwrap_or_default(),
            v["metadata"]["namespace"].as_str().unwrap_or_default(),
            v["metadata"]["name"].as_str().unwrap_or_default()
        );
        out.insert(key, v);
    }
    out
}

/// `helm template` of the chart as release `release` in `namespace`, with `set` (values).
pub fn template(release: &str, namespace: &str, set: &[&str]) -> BTreeMap<String, Value> {
    let args = with_set(
        vec![
            "template",
            release,
            "charts/ruleop",
            "--namespace",
            namespace,
        ],
        set,
    );
    objects(&helm(&args, None))
}

/// `helm template` with `set` when helm refuses it: its message.
pub fn refused(set: &[&str]) -> String {
    let args = with_set(vec!["template", "ruleop", "charts/ruleop"], set);
    let out = command(&args, None).output().expect("running helm");
    assert!(!out.status.success(), "helm {args:?} took it");
    String::from_utf8_lossy(&out.stderr).into_owned()
}
