//! A kind in several versions on the real control plane: ruleop installs the CRD with
//! every version and its conversion webhook, serves the conversions, and resources
//! written in any version converge; each version reads the others' resources converted.

mod common;

use common::{Operator, eventually, get_json, kubectl, kubectl_ok};
use serde_json::{Value, json};
use std::time::Duration;

const T: Duration = Duration::from_secs(90);
const CRD: &str = "gateways.versions.ruleop.dev";

fn gateway(ns: &str, name: &str, version: &str, spec: Value) -> String {
    json!({"apiVersion": format!("versions.ruleop.dev/{version}"), "kind": "Gateway",
        "metadata": {"name": name, "namespace": ns}, "spec": spec})
    .to_string()
}

fn get(ns: &str, version: &str, name: &str) -> Option<Value> {
    get_json(&format!("gateways.{version}.versions.ruleop.dev"), ns, name)
}

/// The kind's resources and CRD deleted while ruleop still serves the conversions (with
/// no replica up, the API server cannot delete the resources stored in another version,
/// and the CRD stays Terminating), then ruleop stopped.
fn cleanup(op: Operator, crd: &str, ns: &str, hook: &str) {
    let group = crd.split_once('.').unwrap().1;
    let _ = kubectl(
        &[
            "delete",
            &format!("gateways.{group}"),
            "--all",
            "-n",
            ns,
            "--timeout=60s",
        ],
        None,
    );
    let _ = kubectl(
        &["delete", "crd", crd, "--ignore-not-found", "--timeout=60s"],
        None,
    );
    drop(op);
    let _ = kubectl(
        &[
            "delete",
            "validatingwebhookconfiguration",
            hook,
            "--ignore-not-found",
        ],
        None,
    );
}

#[tokio::test]
async fn resources_of_every_version_converge_and_read_as_each_other() {
    let client = common::client().await;
    let _ = kubectl(
        &["delete", "crd", CRD, "--ignore-not-found", "--wait=true"],
        None,
    );
    let ns = common::namespace(&client, "e2e-versions").await;
    let port = common::free_port();
    let addr = format!("127.0.0.1:{port}");
    let url = format!("https://127.0.0.1:{port}/validate-rules");
    let hook = format!("ruleop-{ns}");
    let selector = format!("ruleop.dev/test={ns}");
    let rules = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/versions");
    let op = Operator::start(
        &ns,
        &[rules],
        &[
            "--install-crds",
            "--lease-namespace",
            &ns,
            "--webhook-addr",
            &addr,
            "--webhook-url",
            &url,
            "--webhook-name",
            &hook,
            "--rule-selector",
            &selector,
        ],
    );
    // The CRD, with its three versions and the conversion webhook trusted by ruleop's CA.
    let crd = eventually(
        T,
        "the CRD established with its conversion webhook",
        || async {
            let crd = get_json("crd", "", CRD)?;
            let established = crd["status"]["conditions"]
                .as_array()?
                .iter()
                .any(|c| c["type"] == "Established" && c["status"] == "True");
            (established
                && crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"].is_string())
            .then_some(crd)
        },
    )
    .await;
    let names: Vec<&str> = crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["v1", "v1alpha1", "v1beta1"]);
    assert_eq!(
        crd["spec"]["conversion"]["webhook"]["clientConfig"]["url"],
        format!("https://127.0.0.1:{port}/convert")
    );

    // One written as v1alpha1 (seconds, a host and port at the top, a list of routes),
    // one as v1 (a listener, routes by name).
    let old = json!({"host": "old.example.com", "port": 8080, "timeoutSeconds": 15,
        "routes": [{"name": "b", "target": "svc-b"}, {"name": "a", "target": "svc-a"}]});
    let new = json!({"listener": {"host": "new.example.com"}, "timeout": "5s", "tier": "pro",
        "routes": {"api": {"target": "svc-api"}}});
    eventually(
        T,
        "the v1alpha1 Gateway taken (the webhook serves)",
        || async {
            kubectl(
                &["apply", "-f", "-"],
                Some(&gateway(&ns, "old", "v1alpha1", old.clone())),
            )
            .0
            .then_some(())
        },
    )
    .await;
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&gateway(&ns, "new", "v1", new.clone())),
    );

    // Both converge: the rule reads v1, whichever version each was written in.
    for (name, listen, timeout) in [
        ("old", "old.example.com:8080", "15s"),
        ("new", "new.example.com:80", "5s"),
    ] {
        let data = eventually(T, &format!("{name}'s ConfigMap"), || async {
            get_json("configmap", &ns, &format!("{name}-gateway")).map(|c| c["data"].clone())
        })
        .await;
        assert_eq!(data["listen"], listen, "{name}: {data}");
        assert_eq!(data["timeout"], timeout, "{name}: {data}");
    }
    let routes = get_json("configmap", &ns, "old-gateway").unwrap()["data"]["routes"].clone();
    let routes: Value = serde_json::from_str(routes.as_str().unwrap()).unwrap();
    assert_eq!(
        routes,
        json!({"a": {"target": "svc-a"}, "b": {"target": "svc-b"}})
    );

    // Each version reads the other's resources converted, and its own as written.
    let old_as_v1 = get(&ns, "v1", "old").unwrap();
    assert_eq!(
        old_as_v1["spec"]["listener"],
        json!({"host": "old.example.com", "port": 8080})
    );
    assert_eq!(old_as_v1["spec"]["timeout"], "15s");
    assert_eq!(old_as_v1["spec"]["tier"], "free");
    let new_as_alpha = get(&ns, "v1alpha1", "new").unwrap();
    assert_eq!(new_as_alpha["spec"]["host"], "new.example.com");
    assert_eq!(new_as_alpha["spec"]["timeoutSeconds"], 5);
    assert_eq!(
        new_as_alpha["spec"]["routes"],
        json!([{"name": "api", "target": "svc-api"}])
    );
    assert!(
        new_as_alpha["spec"].get("tier").is_none(),
        "v1alpha1 has no tier"
    );
    let old_as_alpha = get(&ns, "v1alpha1", "old").unwrap();
    assert_eq!(
        old_as_alpha["spec"], old,
        "read in the version it was written in, as written"
    );
    let new_as_beta = get(&ns, "v1beta1", "new").unwrap();
    assert_eq!(new_as_beta["spec"]["tier"], "pro");
    // `kubectl get` of the whole kind in any version lists both.
    for version in ["v1", "v1alpha1", "v1beta1"] {
        let list = kubectl_ok(
            &[
                "get",
                &format!("gateways.{version}.versions.ruleop.dev"),
                "-n",
                &ns,
                "-o",
                "name",
            ],
            None,
        );
        assert_eq!(list.lines().count(), 2, "{version}: {list}");
    }

    // A field v1 has no place for is kept through the round trip: written as v1alpha1,
    // updated as v1, read as v1alpha1 again.
    let mut with_debug = old.clone();
    with_debug["debug"] = json!(true);
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&gateway(&ns, "old", "v1alpha1", with_debug)),
    );
    kubectl_ok(
        &[
            "patch",
            "gateways.v1.versions.ruleop.dev",
            "old",
            "-n",
            &ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"listener":{"port":9090}}}"#,
        ],
        None,
    );
    let again = get(&ns, "v1alpha1", "old").unwrap();
    assert_eq!(again["spec"]["debug"], true, "{again}");
    assert_eq!(again["spec"]["port"], 9090, "{again}");
    eventually(T, "the patched port rendered", || async {
        let c = get_json("configmap", &ns, "old-gateway")?;
        (c["data"]["listen"] == "old.example.com:9090").then_some(())
    })
    .await;

    drop(op);
    let _ = kubectl(
        &[
            "delete",
            "validatingwebhookconfiguration",
            &hook,
            "--ignore-not-found",
        ],
        None,
    );
    let _ = kubectl(
        &["delete", "crd", CRD, "--ignore-not-found", "--wait=false"],
        None,
    );
}

#[tokio::test]
async fn a_new_storage_version_migrates_the_stored_objects_and_trims_stored_versions() {
    const CRD: &str = "gateways.storage.ruleop.dev";
    let client = common::client().await;
    let _ = kubectl(
        &["delete", "crd", CRD, "--ignore-not-found", "--timeout=60s"],
        None,
    );
    let ns = common::namespace(&client, "e2e-storage").await;
    let port = common::free_port();
    let (addr, url) = (
        format!("127.0.0.1:{port}"),
        format!("https://127.0.0.1:{port}/validate-rules"),
    );
    let (hook, selector) = (format!("ruleop-{ns}"), format!("ruleop.dev/test={ns}"));
    let fixture = include_str!("fixtures/versions/gateway.yaml")
        .replace("versions.ruleop.dev", "storage.ruleop.dev");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gateway.yaml");
    let stored_in =
        |v: &str| fixture.replace("  versions:\n", &format!("  storage: {v}\n  versions:\n"));
    std::fs::write(&file, stored_in("v1alpha1")).unwrap();
    let op = Operator::start(
        &ns,
        &[dir.path().to_str().unwrap()],
        &[
            "--install-crds",
            "--rules-poll-seconds",
            "1",
            "--lease-namespace",
            &ns,
            "--webhook-addr",
            &addr,
            "--webhook-url",
            &url,
            "--webhook-name",
            &hook,
            "--rule-selector",
            &selector,
        ],
    );
    let stored = || get_json("crd", "", CRD).map(|c| c["status"]["storedVersions"].clone());
    eventually(T, "the CRD stored in v1alpha1", || async {
        (stored()? == json!(["v1alpha1"])).then_some(())
    })
    .await;
    let gw = |name: &str, version: &str, spec: Value| {
        json!({"apiVersion": format!("storage.ruleop.dev/{version}"), "kind": "Gateway",
            "metadata": {"name": name, "namespace": ns}, "spec": spec})
        .to_string()
    };
    eventually(T, "the webhook serves", || async {
        kubectl(
            &["apply", "-f", "-"],
            Some(&gw("a", "v1alpha1", json!({"host": "a.example.com"}))),
        )
        .0
        .then_some(())
    })
    .await;
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&gw(
            "b",
            "v1",
            json!({"listener": {"host": "b.example.com"}}),
        )),
    );
    let children = eventually(T, "both rendered", || async {
        let a = get_json("configmap", &ns, "a-gateway")?;
        let b = get_json("configmap", &ns, "b-gateway")?;
        Some([a["metadata"]["uid"].clone(), b["metadata"]["uid"].clone()])
    })
    .await;

    // The rule now stores v1: ruleop applies the CRD, writes both objects again, and
    // trims storedVersions.
    std::fs::write(&file, stored_in("v1")).unwrap();
    eventually(T, "storedVersions trimmed to v1", || async {
        (stored()? == json!(["v1"])).then_some(())
    })
    .await;
    let crd = get_json("crd", "", CRD).unwrap();
    let storage: Vec<&str> = crd["spec"]["versions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["storage"] == true)
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(storage, ["v1"]);
    // The children were not made again, and say what they said.
    for (name, uid, listen) in [
        ("a", &children[0], "a.example.com:80"),
        ("b", &children[1], "b.example.com:80"),
    ] {
        let c = get_json("configmap", &ns, &format!("{name}-gateway")).unwrap();
        assert_eq!(
            &c["metadata"]["uid"], uid,
            "{name}'s ConfigMap was not replaced"
        );
        assert_eq!(c["data"]["listen"], listen);
    }
    // Both read in every version as before.
    assert_eq!(
        get_json("gateways.v1alpha1.storage.ruleop.dev", &ns, "b").unwrap()["spec"]["host"],
        "b.example.com"
    );
    assert_eq!(
        get_json("gateways.v1.storage.ruleop.dev", &ns, "a").unwrap()["spec"]["listener"]["host"],
        "a.example.com"
    );

    cleanup(op, CRD, &ns, &hook);
}
