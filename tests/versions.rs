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

/// ruleop with the rules in `rules` (none: ""), installing their CRDs and serving its
/// webhook on a free port, its configuration scoped to this namespace's Rules: the port and
/// the configuration's name.
fn start(ns: &str, rules: &str, extra: &[&str]) -> (Operator, u16, String) {
    let port = common::free_port();
    let (op, hook) = serve(ns, rules, extra, port, true);
    (op, port, hook)
}

/// ruleop serving its webhook on `port`, installing the rules' CRDs or not: it and the
/// webhook configuration's name.
fn serve(ns: &str, rules: &str, extra: &[&str], port: u16, install: bool) -> (Operator, String) {
    let flags = common::webhook_args(ns, port);
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    if install {
        args.push("--install-crds");
    }
    args.extend_from_slice(extra);
    let hook = format!("ruleop-{ns}");
    let files: Vec<&str> = [rules].into_iter().filter(|r| !r.is_empty()).collect();
    (Operator::start(ns, &files, &args), hook)
}

/// The kind's resources and CRD deleted while ruleop still serves the conversions (with
/// no replica up, the API server cannot delete the resources stored in another version,
/// and the CRD stays Terminating), then ruleop stopped.
fn cleanup(op: Operator, crd: &str, ns: &str, hook: &str) {
    let _ = kubectl(&["delete", crd, "--all", "-n", ns, "--timeout=60s"], None);
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
    let rules = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/versions");
    let (op, port, hook) = start(&ns, rules, &[]);
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

/// The Rule object of the rules file `text`, labelled for the operator of `ns`.
fn rule_object(name: &str, ns: &str, text: &str) -> Value {
    let (_dir, file) = dir_with(text);
    let (code, out, err) = common::ruleop_cli(&["rule", "--rules", file.to_str().unwrap()], false);
    assert_eq!(code, 0, "{err}");
    let doc = out.split("\n---\n").nth(1).expect("one Rule");
    let mut rule: Value = serde_yaml::from_str(doc).unwrap();
    rule["metadata"] = json!({"name": name, "labels": {"ruleop.dev/test": ns}});
    rule
}

/// A directory holding `text` as its one rules file (kept while the first lives).
fn dir_with(text: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rule.yaml");
    std::fs::write(&file, text).unwrap();
    (dir, file)
}

/// The API server's StorageVersionMigrations ruleop asked for of `crd`, by name (those
/// of an earlier CRD of that name too).
fn migrations_of(crd: &str) -> Vec<String> {
    let (ok, out, _) = kubectl(&["get", "storageversionmigrations", "-o", "json"], None);
    if !ok {
        return Vec::new();
    }
    let list: Value = serde_json::from_str(&out).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["metadata"]["name"].as_str())
        .filter(|n| n.starts_with(&format!("ruleop-{crd}-")))
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn a_new_storage_version_migrates_the_stored_objects_and_trims_stored_versions() {
    const CRD: &str = "gateways.storage.ruleop.dev";
    let client = common::client().await;
    let _ = kubectl(
        &["delete", "crd", CRD, "--ignore-not-found", "--timeout=60s"],
        None,
    );
    common::install_crds(&["deploy/crds/rules.ruleop.dev.yaml"]);
    let ns = common::namespace(&client, "e2e-storage").await;
    let fixture = include_str!("fixtures/versions/gateway.yaml")
        .replace("versions.ruleop.dev", "storage.ruleop.dev");
    let stored_in =
        |v: &str| fixture.replace("  versions:\n", &format!("  storage: {v}\n  versions:\n"));
    // A Rule object (its status shows the migration), migrated by ruleop itself even
    // where the cluster serves the API server's migrator.
    let name = format!("gateway-{ns}");
    let apply_rule = |v: &str| {
        kubectl_ok(
            &["apply", "-f", "-"],
            Some(&rule_object(&name, &ns, &stored_in(v)).to_string()),
        )
    };
    let (op, _, hook) = start(
        &ns,
        "",
        &["--storage-migration", "ruleop", "--rule-objects=true"],
    );
    eventually(T, "the Rule admitted", || async {
        kubectl(
            &["apply", "-f", "-"],
            Some(&rule_object(&name, &ns, &stored_in("v1alpha1")).to_string()),
        )
        .0
        .then_some(())
    })
    .await;
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
    // v1alpha1 may not stop being served while objects are stored in it.
    let unserved = dir_with(&stored_in("v1").replace(
        "    - name: v1alpha1\n",
        "    - name: v1alpha1\n      served: false\n",
    ));
    let check = || {
        common::ruleop_cli(
            &[
                "check",
                "--against-cluster",
                "--rules",
                unserved.1.to_str().unwrap(),
            ],
            true,
        )
    };
    let (code, _, err) = check();
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("stops being served while objects are still stored in it"),
        "{err}"
    );
    let storage = eventually(T, "the Rule's status.storage", || async {
        let s = get_json("rule", "", &name)?["status"]["storage"].clone();
        (s["version"] == "v1alpha1").then_some(s)
    })
    .await;
    assert_eq!(storage["storedVersions"], json!(["v1alpha1"]), "{storage}");

    // The rule now stores v1: ruleop applies the CRD, writes both objects again, and
    // trims storedVersions; the Rule's status says so.
    apply_rule("v1");
    eventually(T, "storedVersions trimmed to v1", || async {
        (stored()? == json!(["v1"])).then_some(())
    })
    .await;
    let storage = eventually(T, "the migration done in the Rule's status", || async {
        let s = get_json("rule", "", &name)?["status"]["storage"].clone();
        (s["migration"]["phase"] == "Done").then_some(s)
    })
    .await;
    assert_eq!(storage["version"], "v1", "{storage}");
    assert_eq!(storage["storedVersions"], json!(["v1"]), "{storage}");
    let m = &storage["migration"];
    assert_eq!(m["by"], "ruleop", "{storage}");
    assert_eq!(m["from"], json!(["v1alpha1"]), "{storage}");
    // Both objects migrated: written again by ruleop, or by a write of their own since
    // (the rule's new revision writes their status).
    assert_eq!(m["objects"], 2, "{storage}");
    assert!(m["rewritten"].as_u64().unwrap() <= 2, "{storage}");
    assert!(migrations_of(CRD).is_empty(), "ruleop migrated by itself");
    // Once none is stored in it, it may.
    let (code, _, err) = check();
    assert_eq!(code, 0, "{err}");
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
    let _ = kubectl(&["delete", "rule", &name, "--ignore-not-found"], None);
}

/// A percentile of `times` (sorted here).
fn percentile(times: &mut [Duration], p: f64) -> Duration {
    times.sort();
    let i = ((times.len() as f64 * p).ceil() as usize).clamp(1, times.len()) - 1;
    times[i]
}

/// The conversion webhook's cost, as the API server adds it to a LIST: N Gateways stored
/// in v1 listed as v1alpha1 (each converted by ruleop) and as v1 (none), side by side.
/// Prints the figures (N: RULEOP_CONVERSION_N, 50 here, 1,000 in `make test-long`).
#[tokio::test]
async fn conversion_latency_of_a_list_side_by_side() {
    const CRD: &str = "gateways.latency.ruleop.dev";
    let n: usize = std::env::var("RULEOP_CONVERSION_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50);
    let client = common::client().await;
    let _ = kubectl(
        &["delete", "crd", CRD, "--ignore-not-found", "--timeout=60s"],
        None,
    );
    let ns = common::namespace(&client, "e2e-latency").await;
    let dir = tempfile::tempdir().unwrap();
    // The rule without children: only the conversions are measured.
    let fixture = include_str!("fixtures/versions/gateway.yaml")
        .replace("versions.ruleop.dev", "latency.ruleop.dev");
    let rule = &fixture[..fixture.find("children:").unwrap()];
    std::fs::write(
        dir.path().join("gateway.yaml"),
        format!("{rule}children: []\n"),
    )
    .unwrap();
    let (op, port, hook) = start(&ns, dir.path().to_str().unwrap(), &[]);
    eventually(T, "the CRD with its webhook", || async {
        let crd = get_json("crd", "", CRD)?;
        crd["spec"]["conversion"]["webhook"]["clientConfig"]["caBundle"]
            .is_string()
            .then_some(())
    })
    .await;
    let items: Vec<Value> = (0..n)
        .map(|i| {
            json!({"apiVersion": "latency.ruleop.dev/v1", "kind": "Gateway",
            "metadata": {"name": format!("g{i}"), "namespace": ns},
            "spec": {"listener": {"host": format!("g{i}.example.com"), "port": 8000 + (i % 1000)},
                "timeout": "30s", "routes": {"a": {"target": "x"}, "b": {"target": "y"}}}})
        })
        .collect();
    let list = json!({"apiVersion": "v1", "kind": "List", "items": items}).to_string();
    eventually(T, "the Gateways created", || async {
        kubectl(&["apply", "--server-side", "-f", "-"], Some(&list))
            .0
            .then_some(())
    })
    .await;
    let api = |version: &str| {
        let ar = kube::discovery::ApiResource {
            group: "latency.ruleop.dev".into(),
            version: version.into(),
            api_version: format!("latency.ruleop.dev/{version}"),
            kind: "Gateway".into(),
            plural: "gateways".into(),
        };
        kube::Api::<kube::api::DynamicObject>::namespaced_with(client.clone(), &ns, &ar)
    };
    let (v1, alpha) = (api("v1"), api("v1alpha1"));
    let mut times: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    for round in 0..30 {
        for (i, a) in [&v1, &alpha].into_iter().enumerate() {
            let started = std::time::Instant::now();
            let got = a.list(&kube::api::ListParams::default()).await.unwrap();
            let took = started.elapsed();
            assert_eq!(got.items.len(), n);
            if i == 1 {
                let spec = &got.items[0].data["spec"];
                assert!(
                    spec["host"].is_string() && spec["routes"].is_array(),
                    "converted: {spec}"
                );
            }
            if round > 0 {
                times[i].push(took);
            }
        }
    }
    let [mut plain, mut converted] = times;
    let (p50, p99) = (percentile(&mut plain, 0.5), percentile(&mut plain, 0.99));
    let (c50, c99) = (
        percentile(&mut converted, 0.5),
        percentile(&mut converted, 0.99),
    );
    println!(
        "LIST of {n} Gateways, 29 rounds: as v1 (stored, no conversion) p50 {p50:?} p99 {p99:?}; as v1alpha1 (converted by ruleop's webhook) p50 {c50:?} p99 {c99:?}"
    );
    // The webhook itself: one ConversionReview of the N objects, posted over HTTPS 50
    // times (curl's own time of each request).
    let objects: Vec<Value> = v1
        .list(&kube::api::ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|o| serde_json::to_value(o).unwrap())
        .collect();
    let review = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "bench", "desiredAPIVersion": "latency.ruleop.dev/v1alpha1", "objects": objects}});
    let body = dir.path().join("review.json");
    std::fs::write(&body, review.to_string()).unwrap();
    let mut posts = Vec::new();
    for _ in 0..50 {
        let out = std::process::Command::new("curl")
            .args([
                "-sk",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code} %{time_total}",
                "-H",
                "Content-Type: application/json",
                "--data-binary",
                &format!("@{}", body.display()),
                &format!("https://127.0.0.1:{port}/convert"),
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let (code, secs) = text.split_once(' ').unwrap();
        assert_eq!(code, "200", "{text}");
        posts.push(Duration::from_secs_f64(secs.parse().unwrap()));
    }
    let (w50, w99) = (percentile(&mut posts, 0.5), percentile(&mut posts, 0.99));
    println!(
        "ConversionReview of {n} objects posted to the webhook, 50 times: p50 {w50:?} p99 {w99:?}"
    );
    cleanup(op, CRD, &ns, &hook);
}

/// Pods' uids of a WebSite's Deployment (by its labels).
fn pods_of(ns: &str, site: &str) -> Vec<String> {
    common::website_pods(|args| kubectl_ok(args, None), ns, site)
}

#[tokio::test]
async fn the_two_version_website_serves_both_and_moves_its_storage_with_no_pod_restarted() {
    // The example's kind in a group, plural and kind of its own: the origin tests' CRD
    // stays as it is, and `kubectl get website` elsewhere never finds this one (kubectl
    // keeps discovery a while after the CRD is gone).
    const GROUP: &str = "sites.ruleop.dev";
    const KIND: &str = "SiteVersion";
    const CRD: &str = "siteversions.sites.ruleop.dev";
    let client = common::client().await;
    let _ = kubectl(
        &["delete", "crd", CRD, "--ignore-not-found", "--timeout=60s"],
        None,
    );
    for old in migrations_of(CRD) {
        let _ = kubectl(&["delete", "storageversionmigration", &old], None);
    }
    let ns = common::namespace(&client, "e2e-website-v1").await;
    let example = include_str!("../examples/versions/website.yaml")
        .replace("sre.example.com", GROUP)
        .replace("  resource: websites\n", "  resource: siteversions\n")
        .replace("  kind: WebSite\n", &format!("  kind: {KIND}\n"));
    assert!(example.contains(CRD.split('.').next().unwrap()) && example.contains(KIND));
    let stored_in = |v: &str| example.replace("  storage: v1\n", &format!("  storage: {v}\n"));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("website.yaml");
    std::fs::write(&file, stored_in("v1alpha1")).unwrap();
    let (op, _, hook) = start(
        &ns,
        dir.path().to_str().unwrap(),
        &["--rules-poll-seconds", "1"],
    );
    let site = |name: &str, version: &str, spec: Value| {
        json!({"apiVersion": format!("{GROUP}/{version}"), "kind": KIND,
            "metadata": {"name": name, "namespace": ns}, "spec": spec})
        .to_string()
    };
    eventually(
        T,
        "a v1alpha1 WebSite taken (the CRD and its webhook up)",
        || async {
            kubectl(
                &["apply", "-f", "-"],
                Some(&site(
                    "old",
                    "v1alpha1",
                    json!({"image": "nginx:1.27", "serviceType": "NodePort"}),
                )),
            )
            .0
            .then_some(())
        },
    )
    .await;
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&site(
            "new",
            "v1",
            json!({"image": "nginx:1.27", "service": {"type": "ClusterIP"}}),
        )),
    );
    // Both converge: their Deployments' pods run, their Services say the type asked.
    let mut pods = Vec::new();
    for (name, service_type) in [("old", "NodePort"), ("new", "ClusterIP")] {
        eventually(T, &format!("{name}'s Service"), || async {
            let s = get_json("service", &ns, &format!("{name}-web"))?;
            (s["spec"]["type"] == service_type).then_some(())
        })
        .await;
        let uids = eventually(T, &format!("{name}'s two pods"), || async {
            let uids = pods_of(&ns, name);
            (uids.len() == 2).then_some(uids)
        })
        .await;
        pods.push(uids);
    }
    // Each version shows the other's WebSite converted.
    let new_as_alpha = get_json(&format!("siteversions.v1alpha1.{GROUP}"), &ns, "new").unwrap();
    assert_eq!(new_as_alpha["spec"]["serviceType"], "ClusterIP");
    let old_as_v1 = get_json(&format!("siteversions.v1.{GROUP}"), &ns, "old").unwrap();
    assert_eq!(old_as_v1["spec"]["service"]["type"], "NodePort");
    assert_eq!(old_as_v1["spec"]["replicas"], 2);

    // The storage version moves to v1: migrated, storedVersions trimmed, no pod restarted.
    std::fs::write(&file, stored_in("v1")).unwrap();
    let by_api = kubectl(
        &["api-resources", "--api-group=storagemigration.k8s.io"],
        None,
    )
    .1
    .contains("storageversionmigrations");
    // The API server's migrator starts once its cache has seen the kind at the
    // migration's resourceVersion: on a quiet kind, at the next change of one of its
    // objects (or the next etcd progress notification, minutes later). A user's edit,
    // every few seconds, once the migration has its resourceVersion.
    let edits = std::cell::Cell::new(0);
    let edited = std::cell::Cell::new(std::time::Instant::now());
    eventually(T, "storedVersions trimmed to v1", || async {
        let crd = get_json("crd", "", CRD)?;
        if crd["status"]["storedVersions"] == json!(["v1"]) {
            return Some(());
        }
        let counted = migrations_of(CRD).first().and_then(|m| {
            get_json("storageversionmigration", "", m)
                .map(|m| m["status"]["resourceVersion"].is_string())
        });
        if by_api && counted == Some(true) && edited.get().elapsed() > Duration::from_secs(3) {
            edits.set(edits.get() + 1);
            edited.set(std::time::Instant::now());
            let value = format!("edited={}", edits.get());
            kubectl_ok(
                &["annotate", CRD, "old", "-n", &ns, &value, "--overwrite"],
                None,
            );
        }
        None
    })
    .await;
    // Where the cluster serves it (the project's control plane does), the API server's
    // migrator rewrote the objects, asked for by ruleop.
    if by_api {
        let asked = migrations_of(CRD);
        assert_eq!(asked.len(), 1, "{asked:?}");
        let svm = get_json("storageversionmigration", "", &asked[0]).unwrap();
        let succeeded = svm["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == "Succeeded" && c["status"] == "True");
        assert!(succeeded, "{svm}");
    }
    for (name, before) in ["old", "new"].iter().zip(&pods) {
        assert_eq!(
            &pods_of(&ns, name),
            before,
            "{name}'s pods were not replaced"
        );
    }
    cleanup(op, CRD, &ns, &hook);
}

#[tokio::test]
async fn a_crd_applied_from_ruleop_crd_gets_ruleops_ca_and_converts() {
    const CRD: &str = "gateways.gitops.ruleop.dev";
    let client = common::client().await;
    let _ = kubectl(
        &["delete", "crd", CRD, "--ignore-not-found", "--timeout=60s"],
        None,
    );
    let ns = common::namespace(&client, "e2e-gitops").await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gateway.yaml");
    std::fs::write(
        &file,
        include_str!("fixtures/versions/gateway.yaml")
            .replace("versions.ruleop.dev", "gitops.ruleop.dev"),
    )
    .unwrap();
    // The CRD as GitOps applies it: `ruleop crd`, with no CA (ruleop's is made at run).
    let port = common::free_port();
    let url = format!("https://127.0.0.1:{port}/validate-rules");
    let rules = file.to_str().unwrap();
    let (code, crd, err) =
        common::ruleop_cli(&["crd", "--rules", rules, "--webhook-url", &url], false);
    assert_eq!(code, 0, "{err}");
    let printed: Value = serde_yaml::from_str(crd.split("\n---\n").nth(1).unwrap()).unwrap();
    let cc = &printed["spec"]["conversion"]["webhook"]["clientConfig"];
    assert_eq!(
        cc["url"],
        format!("https://127.0.0.1:{port}/convert"),
        "{cc}"
    );
    assert!(cc.get("caBundle").is_none(), "{cc}");
    kubectl_ok(&["apply", "-f", "-"], Some(&crd));
    kubectl_ok(
        &[
            "wait",
            "--for=condition=Established",
            &format!("crd/{CRD}"),
            "--timeout=60s",
        ],
        None,
    );

    // ruleop, not installing CRDs, writes its CA into the CRD: a v1alpha1 Gateway (stored
    // as v1) is converted and served.
    let (op, hook) = serve(&ns, rules, &[], port, false);
    let gw = json!({"apiVersion": "gitops.ruleop.dev/v1alpha1", "kind": "Gateway",
        "metadata": {"name": "a", "namespace": ns}, "spec": {"host": "a.example.com"}})
    .to_string();
    eventually(
        T,
        "a v1alpha1 Gateway taken (the CA in the CRD)",
        || async { kubectl(&["apply", "-f", "-"], Some(&gw)).0.then_some(()) },
    )
    .await;
    let ca = get_json("crd", "", CRD).unwrap()["spec"]["conversion"]["webhook"]["clientConfig"]
        ["caBundle"]
        .clone();
    assert!(ca.as_str().is_some_and(|c| !c.is_empty()), "{ca}");
    eventually(T, "the Gateway rendered", || async {
        let c = get_json("configmap", &ns, "a-gateway")?;
        (c["data"]["listen"] == "a.example.com:80").then_some(())
    })
    .await;
    assert_eq!(
        get_json("gateways.v1alpha1.gitops.ruleop.dev", &ns, "a").unwrap()["spec"]["host"],
        "a.example.com"
    );
    cleanup(op, CRD, &ns, &hook);
}

/// The breaking-change guard reads the objects of every version they may be stored in:
/// with `storedVersions: [v1alpha1, v1]` (a storage move not migrated yet), a field that
/// objects stored as v1alpha1 hold may not be dropped from v1alpha1 (the API server would
/// prune it from them), though the storage version is v1.
#[tokio::test]
async fn the_guard_reads_objects_stored_in_a_version_other_than_the_storage_one() {
    const CRD: &str = "notes.guard.ruleop.dev";
    let client = common::client().await;
    let _ = kubectl(
        &["delete", "crd", CRD, "--ignore-not-found", "--timeout=60s"],
        None,
    );
    let ns = common::namespace(&client, "e2e-guard-stored").await;
    let schema = json!({"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "text": {"type": "string"}, "legacy": {"type": "string"}}}}}});
    let crd = |storage: &str| {
        let version = |name: &str| json!({"name": name, "served": true, "storage": name == storage, "schema": schema});
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": CRD},
            "spec": {"group": "guard.ruleop.dev", "scope": "Namespaced",
                "names": {"plural": "notes", "singular": "note", "kind": "Note", "listKind": "NoteList"},
                "conversion": {"strategy": "None"},
                "versions": [version("v1alpha1"), version("v1")]}})
        .to_string()
    };
    kubectl_ok(&["apply", "-f", "-"], Some(&crd("v1alpha1")));
    let note = json!({"apiVersion": "guard.ruleop.dev/v1alpha1", "kind": "Note",
        "metadata": {"name": "old", "namespace": ns},
        "spec": {"text": "a", "legacy": "kept"}})
    .to_string();
    eventually(T, "a note stored as v1alpha1", || async {
        kubectl(&["apply", "-f", "-"], Some(&note)).0.then_some(())
    })
    .await;
    kubectl_ok(&["apply", "-f", "-"], Some(&crd("v1")));
    eventually(T, "storedVersions [v1alpha1, v1]", || async {
        let c = get_json("crd", "", CRD)?;
        (c["status"]["storedVersions"] == json!(["v1alpha1", "v1"])).then_some(())
    })
    .await;
    let rule = |v1alpha1: &str| {
        format!(
            "name: guard-notes\nwatch: {{group: guard.ruleop.dev, version: v1, resource: notes}}\nschema:\n  kind: Note\n  spec:\n    text: string\n    legacy: string\n  storage: v1\n  versions:\n    - name: v1alpha1\n      spec:\n{v1alpha1}"
        )
    };
    let check = |text: &str| {
        let (_dir, file) = dir_with(text);
        common::ruleop_cli(
            &[
                "check",
                "--against-cluster",
                "--rules",
                file.to_str().unwrap(),
            ],
            true,
        )
    };
    // v1alpha1 without `legacy`: refused, the object stored as v1alpha1 holds it.
    let dropped = rule(
        "        text: string\n      convert:\n        - default: {field: spec.legacy, value: \"\"}\n",
    );
    let (code, out, err) = check(&dropped);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("v1alpha1 spec.legacy"), "{err}");
    // Kept in v1alpha1: it passes.
    let kept = rule("        text: string\n        legacy: string\n");
    let (code, out, err) = check(&kept);
    assert_eq!(code, 0, "{out}{err}");
    common::delete_namespace(&ns);
    let _ = kubectl(&["delete", "crd", CRD, "--ignore-not-found"], None);
}
