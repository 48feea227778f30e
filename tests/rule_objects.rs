//! Rules as cluster objects on the real control plane: a Rule applied with kubectl serves
//! its kind with no restart, says how it stands in its status and `kubectl get rules`, and
//! a broken edit keeps the last good generation serving while its status says why.

mod common;

use common::{
    Operator, eventually, get_json, install_crds, kubectl, kubectl_ok, manifest_in, website_rule,
};
use serde_json::{Value, json};
use std::time::Duration;

const T: Duration = Duration::from_secs(60);
pub const RULE_CRD: &str = "deploy/crds/rules.ruleop.dev.yaml";

fn apply(v: &Value) {
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&serde_json::to_string(v).unwrap()),
    );
}

/// A ruleop serving the Rules labelled `ruleop.dev/test=<ns>`, its state in `ns`, with
/// `extra` arguments.
fn rules_operator(ns: &str, extra: &[&str]) -> Operator {
    let selector = format!("ruleop.dev/test={ns}");
    let mut args = vec![
        "--rule-objects=true",
        "--rule-selector",
        &selector,
        "--lease-namespace",
        ns,
    ];
    args.extend_from_slice(extra);
    Operator::start(ns, &[], &args)
}

/// The Rule's status once `f` holds of it.
async fn rule_status(name: &str, what: &str, f: impl Fn(&Value) -> bool) -> Value {
    eventually(T, what, || async {
        let r = get_json("rule", "", name)?;
        f(&r["status"]).then(|| r["status"].clone())
    })
    .await
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

#[tokio::test]
async fn a_rule_applied_with_kubectl_serves_and_a_broken_edit_keeps_the_last_good_serving() {
    let client = common::client().await;
    install_crds(&[RULE_CRD, "deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "rule-objects").await;
    let name = format!("site-{ns}");
    let selector = format!("ruleop.dev/test={ns}");
    let op = Operator::start(
        &ns,
        &[],
        &["--rule-objects=true", "--rule-selector", &selector],
    );
    // No rules at start: the Rule is applied while ruleop runs.
    let mut rule = website_rule(&name, &ns);
    apply(&rule);
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&manifest_in("examples/website.yaml", &ns)),
    );
    eventually(T, "the Deployment", || async {
        let d = get_json("deployment", &ns, "my-blog-web")?;
        (d["spec"]["replicas"] == 3).then_some(())
    })
    .await;
    let s = rule_status(&name, "Accepted and Ready", |s| {
        condition(s, "Accepted")["status"] == "True"
            && condition(s, "Ready")["status"] == "True"
            && s["resources"] == 1
    })
    .await;
    assert_eq!(s["kind"], "WebSite");
    assert_eq!(s["observedGeneration"], 1);
    assert_eq!(s["revision"], 1);
    // Each resource records the revision that reconciled it (`kubectl get -o wide`).
    eventually(T, "the resource's revision", || async {
        let w = get_json("website", &ns, "my-blog")?;
        (w["status"]["ruleRevision"] == 1).then_some(())
    })
    .await;
    let wide = kubectl_ok(
        &["get", "website", "my-blog", "-n", &ns, "-o", "wide"],
        None,
    );
    assert!(wide.lines().next().unwrap().contains("REVISION"), "{wide}");
    let table = kubectl_ok(&["get", "rule", &name], None);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "KIND",
            "REVISION",
            "RESOURCES",
            "UPDATED",
            "READY",
            "AGE"
        ]
    );
    let row = table.lines().nth(1).unwrap();
    assert!(row.contains("WebSite") && row.contains("True"), "{table}");

    // A broken edit: stored (no webhook here), not in force; generation 1 keeps serving.
    rule["spec"]["children"][0]["template"]["spec"]["replicas"] = json!("three");
    apply(&rule);
    let s = rule_status(&name, "generation 2 refused", |s| {
        s["observedGeneration"] == 2 && condition(s, "Accepted")["status"] == "False"
    })
    .await;
    let message = condition(&s, "Accepted")["message"].as_str().unwrap();
    assert!(
        message.contains("spec.children[0].template.spec.replicas")
            && message.contains("generation 1 stays in force"),
        "{message}"
    );
    assert_eq!(condition(&s, "Ready")["status"], "True");
    kubectl_ok(
        &[
            "patch",
            "website",
            "my-blog",
            "-n",
            &ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":4}}"#,
        ],
        None,
    );
    eventually(T, "generation 1 still serves a scale", || async {
        let d = get_json("deployment", &ns, "my-blog-web")?;
        (d["spec"]["replicas"] == 4).then_some(())
    })
    .await;

    // Fixed, with a new label: generation 3 in force, a new revision (a spec that equals
    // an earlier one would be that revision again).
    rule["spec"]["children"][0]["template"]["spec"]["replicas"] = json!("{{ spec.replicas }}");
    rule["spec"]["children"][0]["template"]["metadata"]["labels"]["edition"] = json!("2");
    apply(&rule);
    rule_status(&name, "generation 3 accepted, revision 2", |s| {
        s["observedGeneration"] == 3
            && condition(s, "Accepted")["status"] == "True"
            && s["revision"] == 2
    })
    .await;
    eventually(T, "the resource on revision 2", || async {
        let w = get_json("website", &ns, "my-blog")?;
        (w["status"]["ruleRevision"] == 2).then_some(())
    })
    .await;
    // Both revisions kept, owned by the Rule.
    let revisions = kubectl_ok(
        &[
            "get",
            "controllerrevisions",
            "-n",
            "default",
            "-l",
            &format!("ruleop.dev/rule={name}"),
            "-o",
            "json",
        ],
        None,
    );
    let revisions: Value = serde_json::from_str(&revisions).unwrap();
    let mut numbers: Vec<i64> = revisions["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["revision"].as_i64().unwrap())
        .collect();
    numbers.sort();
    assert_eq!(numbers, [1, 2]);

    // Deleted: the rule stops; its children stay, as with a rules file removed.
    kubectl_ok(&["delete", "rule", &name], None);
    eventually(T, "the rule stopped", || async {
        op.logs()
            .contains("rule removed: stopping its controller")
            .then_some(())
    })
    .await;
    assert!(get_json("deployment", &ns, "my-blog-web").is_some());
    let _ = kubectl(&["delete", "namespace", &ns, "--wait=false"], None);
}

#[tokio::test]
async fn the_webhook_refuses_a_broken_rule_and_with_ruleop_down_the_last_good_revision_serves() {
    let client = common::client().await;
    install_crds(&[RULE_CRD, "deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "rule-webhook").await;
    let name = format!("site-{ns}");
    let hook = format!("ruleop-{ns}");
    let port = common::free_port();
    let flags = common::webhook_args(&ns, port);
    let mut args: Vec<&str> = flags.iter().map(String::as_str).collect();
    args.push("--rule-objects=true");
    let mut op = Operator::start(&ns, &[], &args);
    let rule = website_rule(&name, &ns);
    apply(&rule);
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&manifest_in("examples/website.yaml", &ns)),
    );
    rule_status(&name, "accepted", |s| {
        condition(s, "Accepted")["status"] == "True" && s["revision"] == 1
    })
    .await;
    // Refused at apply, once the webhook serves: the check's message, at its path.
    let mut broken = rule.clone();
    broken["spec"]["children"][0]["template"]["spec"]["replicas"] = json!("three");
    let text = serde_json::to_string(&broken).unwrap();
    let refusal = eventually(T, "the webhook refuses", || async {
        let (ok, _, err) = kubectl(&["apply", "--dry-run=server", "-f", "-"], Some(&text));
        (!ok).then_some(err)
    })
    .await;
    assert!(
        refusal.contains("denied the request")
            && refusal.contains("spec.children[0].template.spec.replicas"),
        "{refusal}"
    );
    let (ok, _, err) = kubectl(&["apply", "-f", "-"], Some(&text));
    assert!(!ok, "refused for real too: {err}");
    // A second Rule on the kind this one serves is refused, naming the one serving.
    let second = website_rule(&format!("second-{ns}"), &ns);
    let (ok, _, err) = kubectl(
        &["apply", "-f", "-"],
        Some(&serde_json::to_string(&second).unwrap()),
    );
    assert!(
        !ok && err.contains(&format!("is served by rule `{name}` (Rule/{name})")),
        "{err}"
    );
    assert_eq!(
        get_json("rule", "", &name).unwrap()["metadata"]["generation"],
        1
    );

    // ruleop down: the webhook fails open, the broken Rule is stored.
    op.kill();
    eventually(T, "stored with ruleop down", || async {
        kubectl(&["apply", "-f", "-"], Some(&text)).0.then_some(())
    })
    .await;
    // ruleop back: the broken generation is not in force, the last good revision serves.
    let mut op = Operator::start(&ns, &[], &args);
    let s = rule_status(&name, "generation 2 refused", |s| {
        s["observedGeneration"] == 2 && condition(s, "Accepted")["status"] == "False"
    })
    .await;
    let message = condition(&s, "Accepted")["message"].as_str().unwrap();
    assert!(
        message.contains("its last accepted revision stays in force")
            && message.contains("spec.children[0].template.spec.replicas"),
        "{message}"
    );
    // The stored broken Rule can still be managed: an annotation (its metadata alone) is
    // admitted by the webhook serving again; an edit of its spec that is still broken is not.
    let mut broken_again = broken.clone();
    broken_again["spec"]["children"][0]["template"]["spec"]["replicas"] = json!("four");
    let again = serde_json::to_string(&broken_again).unwrap();
    eventually(T, "the webhook serves again", || async {
        let (ok, _, _) = kubectl(&["apply", "--dry-run=server", "-f", "-"], Some(&again));
        (!ok).then_some(())
    })
    .await;
    let (ok, _, err) = kubectl(
        &[
            "annotate",
            "rule",
            &name,
            "ruleop.dev/note=kept",
            "--overwrite",
        ],
        None,
    );
    assert!(
        ok,
        "a metadata edit of a stored invalid Rule is admitted: {err}"
    );
    kubectl_ok(
        &[
            "patch",
            "website",
            "my-blog",
            "-n",
            &ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":5}}"#,
        ],
        None,
    );
    eventually(T, "the last good revision serves a scale", || async {
        let d = get_json("deployment", &ns, "my-blog-web")?;
        (d["spec"]["replicas"] == 5).then_some(())
    })
    .await;
    // A clean exit removes the configuration that sends reviews to its URL (killed, above,
    // it stayed: the webhook failed open).
    assert!(op.terminate(Duration::from_secs(20)), "exits on SIGTERM");
    assert!(
        get_json("validatingwebhookconfiguration", "", &hook).is_none(),
        "the local webhook's configuration is left behind"
    );
    let _ = kubectl(&["delete", "rule", &name], None);
    common::delete_namespace(&ns);
}

/// A deleted Rule lets its resources go: the children that ask to be orphaned are let go,
/// the finalizers it put on (ordered deletion, orphans) are taken off, so deleting a
/// resource afterwards does not hang; the other children stay until the garbage
/// collector takes them with their resource.
#[tokio::test]
async fn a_deleted_rule_releases_its_finalizers_and_lets_its_orphans_go() {
    let client = common::client().await;
    install_crds(&[RULE_CRD, "tests/fixtures/trust/crd.yaml"]);
    let ns = common::namespace(&client, "rule-release").await;
    let name = format!("boxes-{ns}");
    // A removed rule is released once it has stayed away this long.
    let _op = rules_operator(&ns, &["--rules-settle-seconds", "3"]);
    let cm = |id: &str, extra: &str| {
        json!({"id": id, "onRemove": extra, "template": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("{{{{ name }}}}-{id}")}, "data": {"a": "1"}}})
    };
    apply(&json!({"apiVersion": "ruleop.dev/v1alpha1", "kind": "Rule",
        "metadata": {"name": name, "labels": {"ruleop.dev/test": ns}},
        "spec": {"watch": {"group": "trust.ruleop.dev", "version": "v1", "resource": "boxes"},
            "deletion": "Ordered",
            "children": [cm("app", "Delete"), cm("keep", "Orphan")]}}));
    common::apply_box(&ns, "b", json!({}));
    let held = |b: &Value| {
        b["metadata"]["finalizers"].as_array().is_some_and(|f| {
            f.iter()
                .any(|f| f.as_str().is_some_and(|f| f.starts_with("ruleop.dev/")))
        })
    };
    eventually(T, "the box held by both finalizers", || async {
        let b = get_json("box", &ns, "b")?;
        let f = b["metadata"]["finalizers"].as_array()?.len();
        (held(&b) && f == 2 && get_json("configmap", &ns, "b-keep").is_some()).then_some(())
    })
    .await;
    kubectl_ok(&["delete", "rule", &name], None);
    eventually(T, "the finalizers released, the orphan let go", || async {
        let b = get_json("box", &ns, "b")?;
        let keep = get_json("configmap", &ns, "b-keep")?;
        let let_go = keep["metadata"]["ownerReferences"]
            .as_array()
            .is_none_or(Vec::is_empty);
        (!held(&b) && let_go).then_some(())
    })
    .await;
    let app = get_json("configmap", &ns, "b-app").expect("the other child stays");
    assert!(
        app["metadata"]["ownerReferences"].is_array(),
        "still the box's: {app}"
    );
    kubectl_ok(&["delete", "box", "b", "-n", &ns, "--wait=false"], None);
    eventually(T, "the box gone, its orphan kept", || async {
        (get_json("box", &ns, "b").is_none() && get_json("configmap", &ns, "b-keep").is_some())
            .then_some(())
    })
    .await;
    common::delete_namespace(&ns);
}

/// A Rule taking over a removed Rule's kind first takes the removed one's children of the
/// kinds it makes (they are its own from then on: kept when it renders them, let go or
/// pruned as any child of its when not) and lets go its other children that ask to be
/// orphaned. Deleting the box afterwards leaves every orphan.
#[tokio::test]
async fn a_rule_taking_over_a_removed_rules_kind_lets_its_orphans_go_first() {
    let client = common::client().await;
    install_crds(&[RULE_CRD, "tests/fixtures/trust/crd.yaml"]);
    let ns = common::namespace(&client, "rule-takeover").await;
    let (old, new) = (format!("old-{ns}"), format!("new-{ns}"));
    // The removed rule's own release would come only after this wait.
    let _op = rules_operator(&ns, &["--rules-settle-seconds", "600"]);
    let child = |id: &str, kind: &str, extra: &str| {
        json!({"id": id, "onRemove": extra, "template": {"apiVersion": "v1", "kind": kind,
            "metadata": {"name": format!("{{{{ name }}}}-{id}")}, "data": {"a": "MQ=="}}})
    };
    let rule = |name: &str, children: Value| {
        json!({"apiVersion": "ruleop.dev/v1alpha1", "kind": "Rule",
            "metadata": {"name": name, "labels": {"ruleop.dev/test": ns}},
            "spec": {"watch": {"group": "trust.ruleop.dev", "version": "v1", "resource": "boxes"},
                "children": children}})
    };
    let children = json!([
        child("app", "ConfigMap", "Delete"),
        child("keep", "ConfigMap", "Orphan"),
        child("vault", "Secret", "Orphan")
    ]);
    apply(&rule(&old, children));
    common::apply_box(&ns, "b", json!({}));
    let app = eventually(T, "the old rule's children", || async {
        let b = get_json("box", &ns, "b")?;
        let f = b["metadata"]["finalizers"].to_string();
        let vault = get_json("secret", &ns, "b-vault")?;
        (f.contains("ruleop.dev/orphan") && get_json("configmap", &ns, "b-keep").is_some())
            .then_some(vault)?;
        get_json("configmap", &ns, "b-app")
    })
    .await;
    // The old Rule goes; the new one serves the kind at once: ConfigMaps only, none asking
    // to be orphaned.
    kubectl_ok(&["delete", "rule", &old], None);
    let children = json!([
        child("app", "ConfigMap", "Delete"),
        child("web", "ConfigMap", "Delete")
    ]);
    apply(&rule(&new, children));
    let let_go = |o: &Value| {
        o["metadata"]["ownerReferences"]
            .as_array()
            .is_none_or(Vec::is_empty)
            && o["metadata"]["labels"]["ruleop.dev/rule"].is_null()
    };
    eventually(
        T,
        "the new rule's children, the old orphans let go",
        || async {
            let keep = get_json("configmap", &ns, "b-keep")?;
            let vault = get_json("secret", &ns, "b-vault")?;
            let app = get_json("configmap", &ns, "b-app")?;
            let mine = app["metadata"]["labels"]["ruleop.dev/rule"] == new.as_str();
            let web = get_json("configmap", &ns, "b-web").is_some();
            (web && mine && let_go(&keep) && let_go(&vault)).then_some(())
        },
    )
    .await;
    let now = get_json("configmap", &ns, "b-app").unwrap();
    assert_eq!(
        now["metadata"]["uid"], app["metadata"]["uid"],
        "the child both rules make is taken over, not made again"
    );
    kubectl_ok(&["delete", "box", "b", "-n", &ns, "--wait=false"], None);
    // The garbage collector took the box's owned children: the orphans stay.
    eventually(T, "the box and its owned children gone", || async {
        let gone = ["b-web", "b-app"]
            .iter()
            .all(|c| get_json("configmap", &ns, c).is_none());
        (get_json("box", &ns, "b").is_none() && gone).then_some(())
    })
    .await;
    assert!(
        get_json("configmap", &ns, "b-keep").is_some()
            && get_json("secret", &ns, "b-vault").is_some(),
        "the old rule's orphans outlive the box"
    );
    let _ = kubectl(&["delete", "rule", &new], None);
    common::delete_namespace(&ns);
}

/// A Rule that runs as a ServiceAccount and has ruleop define its kind (`--install-crds`
/// applies the CRD from its `schema`) gets nothing defined while the account may not
/// `update` that CRD: the Rule's status names what is missing; granted, the CRD is
/// installed with no restart.
#[tokio::test]
async fn a_kind_is_defined_for_a_rule_only_once_its_account_may_update_the_crd() {
    let client = common::client().await;
    install_crds(&[RULE_CRD]);
    let ns = common::namespace(&client, "define").await;
    let name = format!("things-{ns}");
    let group = format!("{ns}.ruleop.dev");
    let crd = format!("things.{group}");
    let _op = rules_operator(&ns, &["--install-crds"]);
    kubectl_ok(&["create", "serviceaccount", "maker", "-n", &ns], None);
    apply(&json!({"apiVersion": "ruleop.dev/v1alpha1", "kind": "Rule",
        "metadata": {"name": name, "labels": {"ruleop.dev/test": ns}},
        "spec": {"watch": {"group": group, "version": "v1", "resource": "things"},
            "serviceAccount": {"name": "maker", "namespace": ns},
            "schema": {"kind": "Thing", "spec": {"text": "string"}},
            "children": [{"id": "c", "template": {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "{{ name }}-c"}, "data": {"text": "{{ spec.text }}"}}}]}}));
    let status = rule_status(&name, "the missing right named", |s| {
        s["identity"]["missing"].to_string().contains(&crd)
    })
    .await;
    assert_eq!(
        status["identity"]["grant"][0]["resourceNames"],
        json!([crd]),
        "{status}"
    );
    assert!(
        get_json("crd", "", &crd).is_none(),
        "the CRD was installed for an account that may not update it"
    );
    // Granted: the CRD is installed.
    let role = format!("define-{ns}");
    kubectl_ok(
        &[
            "create",
            "clusterrole",
            &role,
            "--verb=update",
            "--resource=customresourcedefinitions.apiextensions.k8s.io",
            &format!("--resource-name={crd}"),
        ],
        None,
    );
    kubectl_ok(
        &[
            "create",
            "clusterrolebinding",
            &role,
            "--clusterrole",
            &role,
            "--serviceaccount",
            &format!("{ns}:maker"),
        ],
        None,
    );
    eventually(T, "the CRD installed once granted", || async {
        get_json("crd", "", &crd).map(|_| ())
    })
    .await;
    let _ = kubectl(&["delete", "rule", &name], None);
    let _ = kubectl(&["delete", "crd", &crd, "--wait=false"], None);
    let _ = kubectl(&["delete", "clusterrole,clusterrolebinding", &role], None);
    common::delete_namespace(&ns);
}

/// `--webhook-certificates=external` (cert-manager's way): the webhook serves the Secret's
/// certificate as another made it, trusts its `ca.crt`, and never writes the Secret.
#[tokio::test]
async fn the_webhook_serves_a_certificate_another_made_and_never_writes_it() {
    let client = common::client().await;
    install_crds(&[RULE_CRD, "deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "rule-certs").await;
    let dir = tempfile::tempdir().unwrap();
    let openssl = |args: &[&str]| common::openssl(dir.path(), args);
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    openssl(
        &[
            &["req", "-x509"],
            &ec[..],
            &[
                "-keyout",
                "ca.key",
                "-out",
                "ca.crt",
                "-days",
                "30",
                "-subj",
                "/CN=test-ca",
            ],
        ]
        .concat(),
    );
    openssl(
        &[
            &["req"],
            &ec[..],
            &[
                "-keyout",
                "tls.key",
                "-out",
                "tls.csr",
                "-subj",
                "/CN=127.0.0.1",
            ],
        ]
        .concat(),
    );
    std::fs::write(dir.path().join("san.cnf"), "subjectAltName=IP:127.0.0.1\n").unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "tls.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        "tls.crt",
        "-days",
        "30",
        "-extfile",
        "san.cnf",
    ]);
    let hook = format!("ruleop-{ns}");
    let secret = format!("{hook}-webhook-tls");
    let file = |f: &str| format!("--from-file={}", dir.path().join(f).display());
    kubectl_ok(
        &[
            "create",
            "secret",
            "generic",
            &secret,
            "-n",
            &ns,
            &file("tls.crt"),
            &file("tls.key"),
            &file("ca.crt"),
        ],
        None,
    );
    let before = get_json("secret", &ns, &secret).unwrap()["data"].clone();
    let port = common::free_port();
    let mut flags = common::webhook_args(&ns, port);
    flags.extend([
        "--rule-objects=true".into(),
        "--webhook-certificates=external".into(),
    ]);
    let args: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut op = Operator::start(&ns, &[], &args);
    let mut broken = website_rule(&format!("site-{ns}"), &ns);
    broken["spec"]["children"][0]["template"]["spec"]["replicas"] = json!("three");
    let text = serde_json::to_string(&broken).unwrap();
    let refusal = eventually(
        T,
        "the webhook refuses, over the given certificate",
        || async {
            let (ok, _, err) = kubectl(&["apply", "--dry-run=server", "-f", "-"], Some(&text));
            (!ok && err.contains("denied the request")).then_some(err)
        },
    )
    .await;
    assert!(
        refusal.contains("spec.children[0].template.spec.replicas"),
        "{refusal}"
    );
    let vwc = get_json("validatingwebhookconfiguration", "", &hook).unwrap();
    assert_eq!(
        vwc["webhooks"][0]["clientConfig"]["caBundle"], before["ca.crt"],
        "the CA bundle is the Secret's ca.crt"
    );
    assert_eq!(
        get_json("secret", &ns, &secret).unwrap()["data"],
        before,
        "ruleop never writes a Secret another made"
    );
    assert!(op.terminate(Duration::from_secs(20)), "exits on SIGTERM");
    common::delete_namespace(&ns);
}
