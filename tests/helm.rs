//! The Helm chart (charts/ruleop/), with helm built from Go modules (tests/tools/helm):
//!
//! - it lints, and renders what deploy/ holds, object for object (Helm's own labels and
//!   deploy/'s Namespace aside): with the defaults, in per-rule mode (examples/per-rule/'s
//!   ruleop), and with the monitoring package (deploy/monitoring/); its generated files are
//!   fresh, and its appVersion is ruleop's;
//! - on a control plane of its own: `helm install`, ruleop run as the chart's ServiceAccount
//!   with the chart's arguments and rules makes a WebSite Ready, and its start logs no
//!   warning, no 403 and no 409; a second installation (`web`, in a namespace of its own,
//!   `--skip-crds`) installs beside it; a changed CRD applies over Helm's with the manual's
//!   command; `helm upgrade` with other
//!   values and a new chart version restarts no pod of the WebSite, and with `installCRDs`
//!   ruleop upgrades the Rule CRD Helm left as it was; `ruleop release` lets the WebSite's
//!   workload go (it outlives the WebSite); `helm uninstall` and the namespace's deletion
//!   leave nothing of ruleop but the CRDs (Helm keeps those by design).

mod common;

use common::chart::{helm, objects};
use common::{Cluster, eventually, kubectl_at};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const NS: &str = "ruleop-system";
const T: Duration = Duration::from_secs(120);

/// What Helm adds to every object, taken off: its labels (and an emptied label map).
fn without_helm_labels(mut o: Value) -> Value {
    if let Some(labels) = o["metadata"]["labels"].as_object_mut() {
        for l in [
            "helm.sh/chart",
            "app.kubernetes.io/instance",
            "app.kubernetes.io/managed-by",
            "app.kubernetes.io/version",
        ] {
            labels.remove(l);
        }
        if labels.is_empty() {
            o["metadata"].as_object_mut().unwrap().remove("labels");
        }
    }
    o
}

/// `helm template` of the chart with `set` (values), as objects.
fn chart(set: &[&str]) -> BTreeMap<String, Value> {
    let mut args = vec![
        "template",
        "ruleop",
        "charts/ruleop",
        "--namespace",
        NS,
        "--include-crds",
    ];
    for s in set {
        args.extend(["--set", s]);
    }
    objects(&helm(&args, None))
        .into_iter()
        .map(|(k, v)| (k, without_helm_labels(v)))
        .collect()
}

/// `kubectl kustomize` of a folder, as objects.
fn kustomize(dir: &str) -> BTreeMap<String, Value> {
    let (ok, out, err) = common::kubectl(&["kustomize", &format!("{ROOT}/{dir}")], None);
    assert!(ok, "kubectl kustomize {dir}: {err}");
    objects(&out)
}

/// The paths where `a` and `b` differ, with both values (cut short).
fn differences(at: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let null = Value::Null;
                differences(
                    &format!("{at}/{k}"),
                    x.get(k).unwrap_or(&null),
                    y.get(k).unwrap_or(&null),
                    out,
                );
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                differences(&format!("{at}/{i}"), p, q, out);
            }
        }
        _ if a != b => {
            let cut = |v: &Value| v.to_string().chars().take(300).collect::<String>();
            out.push(format!("{at}: chart {} / deploy {}", cut(a), cut(b)));
        }
        _ => {}
    }
}

/// Each object of `want` is in `got` as it is there, and `got` holds no other.
fn same(what: &str, got: &BTreeMap<String, Value>, want: &BTreeMap<String, Value>) {
    let keys = |m: &BTreeMap<String, Value>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(got), keys(want), "{what}: not the same objects");
    for (k, w) in want {
        let mut d = Vec::new();
        differences("", &got[k], w, &mut d);
        assert!(
            d.is_empty(),
            "{what}: {k} differs from deploy/ (make the chart and deploy/ agree):\n{}",
            d.join("\n")
        );
    }
}

#[test]
fn the_chart_lints_and_renders_what_deploy_holds() {
    helm(&["lint", "--strict", "charts/ruleop"], None);
    helm(
        &[
            "lint",
            "--strict",
            "charts/ruleop",
            "--set",
            "perRule=true,installCRDs=true,watchNamespace=team-a",
        ],
        None,
    );

    // The defaults: deploy/, but its Namespace (`helm install --create-namespace`).
    let mut deploy = kustomize("deploy");
    deploy.remove(&format!("Namespace /{NS}"));
    same("the defaults", &chart(&[]), &deploy);

    // Per-rule mode: examples/per-rule/'s ruleop (the Rules and their accounts are the
    // platform team's to apply).
    let per_rule_own = objects(
        &(std::fs::read_to_string(format!("{ROOT}/examples/per-rule/rbac.yaml")).unwrap()
            + "\n---\n"
            + &std::fs::read_to_string(format!("{ROOT}/examples/per-rule/rules.yaml")).unwrap()),
    );
    let mut per_rule = kustomize("examples/per-rule");
    per_rule.remove(&format!("Namespace /{NS}"));
    per_rule.retain(|k, _| !per_rule_own.contains_key(k));
    same("perRule=true", &chart(&["perRule=true"]), &per_rule);

    // The monitoring package.
    let mut monitoring = deploy.clone();
    monitoring.extend(kustomize("deploy/monitoring"));
    same(
        "the monitoring package",
        &chart(&[
            "monitoring.serviceMonitor.enabled=true",
            "monitoring.prometheusRule.enabled=true",
            "monitoring.dashboard.enabled=true",
        ]),
        &monitoring,
    );
    // The runbooks where the team publishes docs/, and Prometheus's token from a Secret of
    // the team's (no scraper account made).
    let elsewhere = chart(&[
        "monitoring.serviceMonitor.enabled=true",
        "monitoring.prometheusRule.enabled=true",
        "monitoring.runbookBase=https://wiki.example.com/ruleop/",
        "monitoring.serviceMonitor.tokenSecret.name=prometheus-token",
        "monitoring.serviceMonitor.tokenSecret.key=jwt",
    ]);
    let alerts = &elsewhere[&format!("PrometheusRule {NS}/ruleop")]["spec"]["groups"][0]["rules"];
    assert_eq!(
        alerts[0]["annotations"]["runbook_url"],
        "https://wiki.example.com/ruleop/operating/runbooks.html#ruleopdown"
    );
    let credentials = &elsewhere[&format!("ServiceMonitor {NS}/ruleop")]["spec"]["endpoints"][0]["authorization"]
        ["credentials"];
    assert_eq!(
        credentials,
        &json!({"name": "prometheus-token", "key": "jwt"})
    );
    assert!(
        !elsewhere.keys().any(|k| k.contains("metrics-scraper")),
        "{:?}",
        elsewhere.keys()
    );

    // installCRDs: the CRD roles `ruleop rbac --install-crds` prints, and the flag.
    let with_crds = chart(&["installCRDs=true"]);
    let (code, rbac, err) = common::ruleop_cli(
        &[
            "rbac",
            "--install-crds",
            "--rules",
            "rules/",
            "--crd",
            "deploy/crds/websites.sre.example.com.yaml",
            "--crd",
            "deploy/crds/myapps.myscheme.example.com.yaml",
        ],
        false,
    );
    assert_eq!(code, 0, "{err}");
    let generated = objects(&rbac);
    let shipped = std::fs::read_to_string(format!("{ROOT}/charts/ruleop/files/rbac.yaml")).unwrap();
    assert_eq!(
        objects(&shipped),
        generated,
        "charts/ruleop/files/rbac.yaml is stale: run deploy/generate.sh"
    );
    for k in [
        "ClusterRole /ruleop-crds",
        "ClusterRoleBinding /ruleop-crds",
    ] {
        assert_eq!(with_crds.get(k), generated.get(k), "{k}");
    }
    let args = &with_crds[&format!("Deployment {NS}/ruleop")]["spec"]["template"]["spec"]["containers"]
        [0]["args"];
    assert!(
        args.as_array().unwrap().contains(&json!("--install-crds")),
        "{args}"
    );

    // Namespace mode: the rules' kinds by a Role in that namespace.
    let scoped = chart(&["watchNamespace=team-a"]);
    assert!(
        scoped.contains_key("Role team-a/ruleop"),
        "{:?}",
        scoped.keys()
    );
    assert!(!scoped.contains_key("ClusterRole /ruleop"));
    assert_eq!(
        scoped["RoleBinding team-a/ruleop"]["subjects"][0]["namespace"],
        NS
    );

    let chart_meta: Value = serde_yaml::from_str(
        &std::fs::read_to_string(format!("{ROOT}/charts/ruleop/Chart.yaml")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        chart_meta["appVersion"],
        env!("CARGO_PKG_VERSION"),
        "Chart.yaml's appVersion is ruleop's version (Cargo.toml)"
    );
}

/// `ruleop run` as the pod the chart's Deployment would start: its arguments, its rules (the
/// ConfigMap's files), its ServiceAccount's token; admin and webhook on loopback.
struct Pod {
    child: std::process::Child,
    _dir: tempfile::TempDir,
    _kubeconfig: tempfile::TempDir,
}

impl Pod {
    fn start(c: &Cluster) -> Pod {
        let dir = tempfile::tempdir().unwrap();
        let rules = dir.path().join("rules");
        std::fs::create_dir(&rules).unwrap();
        let cm: Value = serde_json::from_str(&c.kubectl(
            &["get", "configmap", "ruleop-rules", "-n", NS, "-o", "json"],
            None,
        ))
        .unwrap();
        for (name, text) in cm["data"].as_object().unwrap() {
            std::fs::write(rules.join(name), text.as_str().unwrap()).unwrap();
        }
        let deploy: Value = serde_json::from_str(&c.kubectl(
            &["get", "deployment", "ruleop", "-n", NS, "-o", "json"],
            None,
        ))
        .unwrap();
        let spec = &deploy["spec"]["template"]["spec"];
        assert_eq!(spec["serviceAccountName"], "ruleop");
        let args: Vec<String> = spec["containers"][0]["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| {
                let a = a.as_str().unwrap();
                match a.split_once('=') {
                    Some(("--rules", _)) => format!("--rules={}", rules.display()),
                    Some(("--admin-addr" | "--status-addr" | "--webhook-addr", _)) => {
                        format!("{}=127.0.0.1:0", a.split_once('=').unwrap().0)
                    }
                    _ => a.to_string(),
                }
            })
            .collect();
        let token = c.kubectl(&["create", "token", "ruleop", "-n", NS], None);
        let admin = c.kubectl(&["config", "view", "--raw", "-o", "yaml"], None);
        let (kc_dir, kc) = common::access::token_kubeconfig(&admin, &token);
        std::fs::create_dir_all(format!("{ROOT}/target/test-logs")).unwrap();
        let log = std::fs::File::create(format!("{ROOT}/target/test-logs/helm.log")).unwrap();
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_ruleop"))
            .args(&args[..])
            .env("KUBECONFIG", &kc)
            .env("POD_NAMESPACE", NS)
            .env("POD_NAME", "ruleop-test")
            .env("RUST_LOG", "info")
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap();
        Pod {
            child,
            _dir: dir,
            _kubeconfig: kc_dir,
        }
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The uids of the pods of WebSite `name` in `ns`.
fn pods_of(c: &Cluster, ns: &str, name: &str) -> Vec<String> {
    common::website_pods(|args| c.kubectl(args, None), ns, name)
}

async fn website_ready(c: &Cluster, ns: &str, name: &str) {
    let kc = c.kubeconfig.clone();
    eventually(T, "the WebSite Ready", || async {
        let (ok, out, _) = kubectl_at(&kc, &["get", "website", name, "-n", ns, "-o", "json"], None);
        let site: Value = serde_json::from_str(&out).ok().filter(|_| ok)?;
        let ready = common::condition(&site, "Ready")?;
        (ready["status"] == "True" && site["status"]["readyReplicas"] == 2).then_some(())
    })
    .await;
}

/// Cluster-scoped objects of ruleop's (by name) of a few kinds.
fn cluster_scoped_left(c: &Cluster) -> Vec<String> {
    let out = c.kubectl(
        &[
            "get",
            "clusterroles,clusterrolebindings,validatingwebhookconfigurations,validatingadmissionpolicies,validatingadmissionpolicybindings",
            "-o",
            "name",
        ],
        None,
    );
    out.lines()
        .filter(|l| {
            l.rsplit('/')
                .next()
                .unwrap_or_default()
                .starts_with("ruleop")
        })
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn helm_installs_upgrades_with_no_pod_restarted_and_uninstalls() {
    let c = Cluster::start();
    let kc = c.kubeconfig.clone();
    let kc = Some(kc.as_str());
    helm(
        &[
            "install",
            "ruleop",
            "charts/ruleop",
            "-n",
            NS,
            "--create-namespace",
        ],
        kc,
    );
    c.wait_established(&["websites.sre.example.com", "rules.ruleop.dev"]);
    c.kubectl(&["create", "namespace", "shop"], None);
    // An older chart's Rule CRD (one printer column less): Helm will not upgrade it; ruleop
    // with installCRDs does.
    c.kubectl(
        &[
            "patch",
            "crd",
            "rules.ruleop.dev",
            "--type=json",
            "-p",
            r#"[{"op":"test","path":"/spec/versions/0/additionalPrinterColumns/4/name","value":"Ready"},{"op":"remove","path":"/spec/versions/0/additionalPrinterColumns/4"}]"#,
        ],
        None,
    );
    let mut pod = Pod::start(&c);
    c.kubectl(
        &["apply", "-n", "shop", "-f", "-"],
        Some("apiVersion: sre.example.com/v1alpha1\nkind: WebSite\nmetadata: {name: front}\nspec: {image: nginx:1.27}\n"),
    );
    website_ready(&c, "shop", "front").await;
    let before = pods_of(&c, "shop", "front");
    assert_eq!(before.len(), 2, "{before:?}");
    // A clean start with the chart's RBAC warns of nothing (no 403, no 409).
    let log = std::fs::read_to_string(format!("{ROOT}/target/test-logs/helm.log")).unwrap();
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| {
            [
                "\"level\":\"WARN\"",
                "\"level\":\"ERROR\"",
                "Forbidden",
                "AlreadyExists",
                "Conflict",
                "cannot be watched",
            ]
            .iter()
            .any(|w| l.contains(w))
        })
        .collect();
    assert!(warned.is_empty(), "a clean start warned: {warned:#?}");

    // A second installation, in a namespace of its own with its rule selector: Helm finds
    // no object of the first's in its way (the CRDs are the cluster's, installed once:
    // `--skip-crds`).
    helm(
        &[
            "install",
            "web",
            "charts/ruleop",
            "-n",
            "team-web",
            "--create-namespace",
            "--skip-crds",
            "--set",
            "extraArgs={--rule-selector=team=web}",
        ],
        kc,
    );
    helm(&["uninstall", "web", "-n", "team-web", "--wait"], kc);

    // A values change and a new chart version: ruleop's pods would roll; the WebSite's
    // must not.
    let next = tempfile::tempdir().unwrap();
    let copy = std::process::Command::new("cp")
        .args([
            "-r",
            &format!("{ROOT}/charts/ruleop"),
            next.path().to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(copy.success());
    let chart_yaml = next.path().join("ruleop/Chart.yaml");
    let text = std::fs::read_to_string(&chart_yaml)
        .unwrap()
        .replace("version: 0.1.0", "version: 0.1.1-test");
    std::fs::write(&chart_yaml, text).unwrap();
    // A CRD that changed in the new chart (a printer column more): Helm leaves crds/ as
    // they were; the manual's command applies it over what Helm installed.
    let crd = next
        .path()
        .join("ruleop/crds/websites.sre.example.com.yaml");
    let changed = std::fs::read_to_string(&crd).unwrap().replacen(
        "additionalPrinterColumns:\n",
        "additionalPrinterColumns:\n    - {name: Upgraded, type: string, jsonPath: .spec.image}\n",
        1,
    );
    assert!(
        changed.contains("Upgraded"),
        "the CRD has printer columns to add to"
    );
    std::fs::write(&crd, changed).unwrap();
    c.kubectl(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=helm",
            "-f",
            crd.to_str().unwrap(),
        ],
        None,
    );
    let columns = c.kubectl(
        &[
            "get",
            "crd",
            "websites.sre.example.com",
            "-o",
            "jsonpath={.spec.versions[*].additionalPrinterColumns[*].name}",
        ],
        None,
    );
    assert!(columns.contains("Upgraded"), "{columns}");
    helm(
        &[
            "upgrade",
            "ruleop",
            next.path().join("ruleop").to_str().unwrap(),
            "-n",
            NS,
            "--set",
            "events=warnings,client.qps=50,client.burst=100,replicas=3,installCRDs=true",
        ],
        kc,
    );
    let deploy: Value = serde_json::from_str(&c.kubectl(
        &["get", "deployment", "ruleop", "-n", NS, "-o", "json"],
        None,
    ))
    .unwrap();
    let args = &deploy["spec"]["template"]["spec"]["containers"][0]["args"];
    for a in [
        "--events=warnings",
        "--qps=50",
        "--burst=100",
        "--install-crds",
    ] {
        assert!(args.as_array().unwrap().contains(&json!(a)), "{a}: {args}");
    }
    assert_eq!(
        deploy["metadata"]["labels"]["helm.sh/chart"],
        "ruleop-0.1.1-test"
    );
    // The new ruleop takes over (as the rolled pod would) and a change still converges.
    drop(pod);
    pod = Pod::start(&c);
    c.kubectl(
        &[
            "patch",
            "website",
            "front",
            "-n",
            "shop",
            "--type=merge",
            "-p",
            r#"{"spec":{"serviceType":"NodePort"}}"#,
        ],
        None,
    );
    // (A change of the Service alone: the pods have no reason to change.)
    eventually(T, "the Service of the new type", || async {
        let (ok, out, _) = kubectl_at(
            c.kubeconfig.as_str(),
            &[
                "get",
                "service",
                "front-web",
                "-n",
                "shop",
                "-o",
                "jsonpath={.spec.type}",
            ],
            None,
        );
        (ok && out.trim() == "NodePort").then_some(())
    })
    .await;
    website_ready(&c, "shop", "front").await;
    eventually(T, "the Rule CRD upgraded by ruleop", || async {
        let (ok, out, _) = kubectl_at(
            c.kubeconfig.as_str(),
            &[
                "get",
                "crd",
                "rules.ruleop.dev",
                "-o",
                "jsonpath={.spec.versions[0].additionalPrinterColumns[*].name}",
            ],
            None,
        );
        (ok && out.split_whitespace().any(|n| n == "Ready")).then_some(())
    })
    .await;
    assert_eq!(
        pods_of(&c, "shop", "front"),
        before,
        "no pod of the WebSite restarted across the upgrade"
    );

    // Uninstall as under Helm: ruleop stopped and the release gone (its rules ConfigMap with
    // it), then `ruleop release` from what the cluster holds lets the WebSite's children go
    // (they keep running, owned by nothing).
    let uids = |c: &Cluster| -> Vec<String> {
        ["deployment", "service"]
            .iter()
            .map(|k| {
                c.kubectl(
                    &[
                        "get",
                        k,
                        "front-web",
                        "-n",
                        "shop",
                        "-o",
                        "jsonpath={.metadata.uid}",
                    ],
                    None,
                )
            })
            .collect()
    };
    let children = uids(&c);
    drop(pod);
    helm(&["uninstall", "ruleop", "-n", NS, "--wait"], kc);
    let release = |c: &Cluster| {
        common::ruleop_cli(
            &[
                "--kubeconfig",
                &c.kubeconfig,
                "release",
                "--rule",
                "website",
            ],
            false,
        )
    };
    let (code, out, err) = release(&c);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("1 resources released"), "{out}");
    for kind in ["deployment", "service"] {
        let child: Value = serde_json::from_str(&c.kubectl(
            &["get", kind, "front-web", "-n", "shop", "-o", "json"],
            None,
        ))
        .unwrap();
        let meta = &child["metadata"];
        assert!(meta["ownerReferences"].is_null(), "{kind}: {meta}");
        assert!(
            meta["labels"].get("ruleop.dev/rule").is_none(),
            "{kind}: {meta}"
        );
        assert_eq!(
            meta["labels"]["app.kubernetes.io/instance"], "front",
            "{kind}: {meta}"
        );
    }
    // Nor do the Deployment's ReplicaSets keep what its controller copied from it.
    let sets: Value = serde_json::from_str(&c.kubectl(
        &[
            "get",
            "replicasets",
            "-n",
            "shop",
            "-l",
            "app.kubernetes.io/instance=front",
            "-o",
            "json",
        ],
        None,
    ))
    .unwrap();
    let sets = sets["items"].as_array().cloned().unwrap_or_default();
    assert!(!sets.is_empty());
    for rs in &sets {
        let annotations = rs["metadata"]["annotations"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        assert!(
            annotations.keys().all(|k| !k.starts_with("ruleop.dev/")),
            "{annotations:?}"
        );
    }
    // Installed again, ruleop takes back the children it released (by their uids, which
    // the WebSite kept): the same objects, no pod restarted, the record gone.
    let site: Value = serde_json::from_str(&c.kubectl(
        &["get", "website", "front", "-n", "shop", "-o", "json"],
        None,
    ))
    .unwrap();
    let kept = site["metadata"]["annotations"]["ruleop.dev/released-children"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(children.iter().all(|u| kept.contains(u.as_str())), "{kept}");
    helm(&["install", "ruleop", "charts/ruleop", "-n", NS], kc);
    let pod = Pod::start(&c);
    eventually(T, "the released children taken back", || async {
        let site: Value = serde_json::from_str(&c.kubectl(
            &["get", "website", "front", "-n", "shop", "-o", "json"],
            None,
        ))
        .ok()?;
        let deployment: Value = serde_json::from_str(&c.kubectl(
            &["get", "deployment", "front-web", "-n", "shop", "-o", "json"],
            None,
        ))
        .ok()?;
        let owner = &deployment["metadata"]["ownerReferences"][0];
        let back = owner["uid"] == site["metadata"]["uid"]
            && deployment["metadata"]["labels"]["ruleop.dev/rule"] == "website"
            && site["metadata"]["annotations"]
                .get("ruleop.dev/released-children")
                .is_none()
            && common::condition(&site, "Synced").is_some_and(|c| c["status"] == "True");
        back.then_some(())
    })
    .await;
    assert_eq!(uids(&c), children, "the same objects, taken back");
    assert_eq!(pods_of(&c, "shop", "front"), before, "no pod restarted");
    // And let go again for the last uninstall.
    drop(pod);
    helm(&["uninstall", "ruleop", "-n", NS, "--wait"], kc);
    let (code, out, err) = release(&c);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(cluster_scoped_left(&c), Vec::<String>::new());
    c.kubectl(
        &["delete", "namespace", NS, "--wait=true", "--timeout=90s"],
        None,
    );
    let site: Value = serde_json::from_str(&c.kubectl(
        &["get", "website", "front", "-n", "shop", "-o", "json"],
        None,
    ))
    .unwrap();
    let finalizers = site["metadata"]["finalizers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        finalizers
            .iter()
            .all(|f| !f.as_str().unwrap_or_default().starts_with("ruleop.dev/")),
        "no ruleop finalizer left to block the WebSite's deletion: {finalizers:?}"
    );
    c.kubectl(
        &[
            "delete",
            "namespace",
            "shop",
            "--wait=true",
            "--timeout=90s",
        ],
        None,
    );
}
