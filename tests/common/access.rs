//! ruleop run as a ServiceAccount: the RBAC `ruleop rbac` generates for some rules
//! (optionally with rules taken out), and a kubeconfig with the account's token.

use super::kubectl_ok;
use serde_json::{Value, json};

/// The RBAC `ruleop rbac` prints for `rules` (files, relative to the project or absolute),
/// for resources in `ns` and the operator's state in `op_ns`, named `name`; without the
/// rules `drop` says no to (given the resources of each rule).
pub fn generated_rbac(
    rules: &[&str],
    ns: &str,
    op_ns: &str,
    name: &str,
    drop: impl Fn(&[&str]) -> bool,
) -> String {
    let mut args = vec!["rbac"];
    for r in rules {
        args.extend(["--rules", r]);
    }
    args.extend([
        "--namespace",
        ns,
        "--operator-namespace",
        op_ns,
        "--name",
        name,
    ]);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ruleop"))
        .args(&args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    edit_rules(&text, |rules| {
        rules.retain(|r| {
            let resources: Vec<&str> = r["resources"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            !drop(&resources)
        })
    })
}

/// A stream of RBAC documents with `edit` applied to the `rules` of each (Role or
/// ClusterRole; the others as they are).
pub fn edit_rules(rbac: &str, mut edit: impl FnMut(&mut Vec<Value>)) -> String {
    let mut docs = Vec::new();
    for d in serde_yaml::Deserializer::from_str(rbac) {
        use serde::Deserialize;
        let mut v = Value::deserialize(d).unwrap();
        if let Some(rules) = v.get_mut("rules").and_then(Value::as_array_mut) {
            edit(rules);
        }
        docs.push(serde_yaml::to_string(&v).unwrap());
    }
    docs.join("---\n")
}

/// A kubeconfig for the ServiceAccount `sa` of `op_ns` (made if missing), with a token of
/// an hour; its folder goes when the first value is dropped.
pub fn service_account_kubeconfig(op_ns: &str, sa: &str) -> (tempfile::TempDir, String) {
    let _ = super::kubectl(&["create", "serviceaccount", sa, "-n", op_ns], None);
    let token = kubectl_ok(
        &["create", "token", sa, "-n", op_ns, "--duration", "1h"],
        None,
    );
    let admin = kubectl_ok(&["config", "view", "--raw", "-o", "yaml"], None);
    token_kubeconfig(&admin, &token)
}

/// A kubeconfig that reaches the cluster of `admin` (a kubeconfig's YAML, as `kubectl
/// config view --raw` prints it) with `token`; its folder goes when the first value is
/// dropped.
pub fn token_kubeconfig(admin: &str, token: &str) -> (tempfile::TempDir, String) {
    let admin: Value = serde_yaml::from_str(admin).unwrap();
    let cluster = &admin["clusters"][0]["cluster"];
    let kubeconfig = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": cluster["server"], "certificate-authority-data": cluster["certificate-authority-data"]}}],
        "users": [{"name": "sa", "user": {"token": token.trim()}}],
        "contexts": [{"name": "sa", "context": {"cluster": "c", "user": "sa"}}],
        "current-context": "sa",
    });
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    std::fs::write(&kc, serde_yaml::to_string(&kubeconfig).unwrap()).unwrap();
    let kc = kc.to_str().unwrap().to_string();
    (dir, kc)
}
