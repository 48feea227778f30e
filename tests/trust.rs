//! Never lose a live object, on the real control plane: each test is a way a routine
//! change could delete or recreate what is running, or freeze a status, and checks that
//! ruleop keeps what it is not certain it may delete. The rules are written by the tests
//! (kind `Box`, any spec: tests/fixtures/trust/crd.yaml).

mod common;

use common::{
    Operator, apply_box, condition, eventually, get_json, install_crds, kubectl_ok, wait_json,
};
use serde_json::{Value, json};
use std::path::Path;
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(60);
const CRD: &str = "tests/fixtures/trust/crd.yaml";
const WATCH: &str = "watch: {group: trust.ruleop.dev, version: v1, resource: boxes}";

fn write_rules(dir: &Path, text: &str) -> String {
    let path = dir.join("rules.yaml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_string()
}

fn uid(v: &Value) -> String {
    v["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn synced(b: &Value) -> Option<(String, String)> {
    condition(b, "Synced").map(|c| {
        (
            c["reason"].as_str().unwrap_or_default().to_string(),
            c["message"].as_str().unwrap_or_default().to_string(),
        )
    })
}

/// Waits for box `name` to say `Synced` with `reason`; gives its message.
async fn synced_reason(ns: &str, name: &str, reason: &str) -> String {
    let b = wait_json("box", ns, name, &format!("Synced {reason}"), |b| {
        synced(b).is_some_and(|(r, _)| r == reason)
    })
    .await;
    synced(&b).unwrap().1
}

/// Polls `kind/name` until `until` holds of it, failing if it is ever missing or made
/// again (its uid changes) meanwhile; gives the object.
async fn never_recreated(
    kind: &str,
    ns: &str,
    name: &str,
    first_uid: &str,
    until: impl Fn(&Value) -> bool,
) -> Value {
    let start = Instant::now();
    loop {
        let o = get_json(kind, ns, name)
            .unwrap_or_else(|| panic!("{kind}/{name} was deleted (uid {first_uid})"));
        assert_eq!(uid(&o), first_uid, "{kind}/{name} was made again");
        if until(&o) {
            return o;
        }
        assert!(
            start.elapsed() < T,
            "timed out waiting on {kind}/{name}: {o}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn label<'a>(o: &'a Value, k: &str) -> Option<&'a str> {
    o["metadata"]["labels"][k].as_str()
}

const DEPLOYMENT: &str = r#"
    template:
      apiVersion: apps/v1
      kind: Deployment
      metadata:
        name: "{{ name }}-web"
        annotations: ANNOTATIONS
      spec:
        replicas: 1
        selector: {matchLabels: "{{ selectorLabels }}"}
        template:
          metadata: {labels: "{{ selectorLabels }}"}
          spec: {containers: [{name: web, image: "nginx:1.27"}]}
"#;

/// Renaming a child's id in the same edit that makes it wait (it now reads a new child
/// through `observed`) keeps its object: the new id takes it over, nothing is deleted.
#[tokio::test]
async fn a_renamed_child_that_waits_keeps_its_object_and_the_new_id_takes_it_over() {
    let client = common::client().await;
    install_crds(&[CRD]);
    let ns = common::namespace(&client, "trust-rename").await;
    let dir = tempfile::tempdir().unwrap();
    let v1 = format!(
        "name: rename\n{WATCH}\nchildren:\n  - id: web\n{}",
        DEPLOYMENT.replace("ANNOTATIONS", "{}")
    );
    let rules = write_rules(dir.path(), &v1);
    let _op = Operator::start(&ns, &[&rules], &["--rules-poll-seconds", "1"]);
    apply_box(&ns, "b", json!({}));
    let d = wait_json("deployment", &ns, "b-web", "made", |_| true).await;
    synced_reason(&ns, "b", "Applied").await;
    let first = uid(&d);

    let v2 = format!(
        "name: rename\n{WATCH}\nchildren:\n  - id: config\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: \"{{{{ name }}}}-config\"}}, data: {{a: \"1\"}}}}\n  - id: app\n{}",
        DEPLOYMENT.replace(
            "ANNOTATIONS",
            "{config-uid: \"{{ observed.config.metadata.uid }}\"}"
        )
    );
    std::fs::write(&rules, v2).unwrap();
    let d = never_recreated("deployment", &ns, "b-web", &first, |d| {
        label(d, "ruleop.dev/child") == Some("app")
    })
    .await;
    assert!(
        d["metadata"]["annotations"]["config-uid"].is_string(),
        "{d}"
    );
    synced_reason(&ns, "b", "Applied").await;
    common::delete_namespace(&ns);
}

/// A resource whose 600 items are each refused by the API server still gets a status:
/// the message is cut to what a condition holds, naming how many more there are.
#[tokio::test]
async fn a_status_with_hundreds_of_refusals_is_cut_to_fit_and_written() {
    let client = common::client().await;
    install_crds(&[CRD]);
    let ns = common::namespace(&client, "trust-long").await;
    let dir = tempfile::tempdir().unwrap();
    let rule = format!(
        "name: toolong\n{WATCH}\nchildren:\n  - id: cm\n    forEach: spec.keys\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {{name: \"{{{{ name }}}}-{{{{ index }}}}\"}}\n      data: {{\"{{{{ item }}}}\": x}}\n"
    );
    let rules = write_rules(dir.path(), &rule);
    let _op = Operator::start(&ns, &[&rules], &[]);
    // `a/0` is not a ConfigMap key: every item is refused.
    let keys: Vec<String> = (0..600).map(|i| format!("a/{i}")).collect();
    apply_box(&ns, "many", json!({"keys": keys}));
    let message = eventually(T, "the refusals on the resource", || async {
        let b = get_json("box", &ns, "many")?;
        let (reason, message) = synced(&b)?;
        (reason == "ApplyRefused").then_some(message)
    })
    .await;
    assert!(message.len() <= 32768, "{} bytes", message.len());
    assert!(message.contains(" more"), "says how many more: {message}");
    let b = get_json("box", &ns, "many").unwrap();
    let ready = condition(&b, "Ready").unwrap();
    assert!(ready["message"].as_str().unwrap().len() <= 32768);
    common::delete_namespace(&ns);
}

/// A status field the CRD's schema refuses (longer than its maxLength) does not freeze the
/// status: the conditions say why, for this generation, and the field keeps its last
/// accepted value until the rule's value fits again.
#[tokio::test]
async fn a_status_the_schema_refuses_says_why_and_does_not_freeze() {
    let client = common::client().await;
    install_crds(&["tests/fixtures/trust/tight-crd.yaml"]);
    let ns = common::namespace(&client, "trust-refused").await;
    let dir = tempfile::tempdir().unwrap();
    let rule = "name: tight\nwatch: {group: trust.ruleop.dev, version: v1, resource: tights}\nchildren:\n  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"{{ name }}-cm\"}, data: {a: \"1\"}}\nstatus:\n  fields:\n    - name: summary\n      value: spec.text\n      type: string\n";
    let rules = write_rules(dir.path(), rule);
    let _op = Operator::start(&ns, &[&rules], &[]);
    let apply = |text: &str| {
        let t = json!({"apiVersion": "trust.ruleop.dev/v1", "kind": "Tight",
            "metadata": {"name": "t", "namespace": ns}, "spec": {"text": text}});
        kubectl_ok(&["apply", "-f", "-"], Some(&t.to_string()));
    };
    let settled = |reason: &'static str| {
        move |t: &Value| {
            t["status"]["observedGeneration"] == t["metadata"]["generation"]
                && synced(t).is_some_and(|(r, _)| r == reason)
        }
    };
    apply("short");
    let t = wait_json("tight", &ns, "t", "Synced", settled("Applied")).await;
    assert_eq!(t["status"]["summary"], "short");
    apply("a text longer than sixteen bytes");
    let t = wait_json("tight", &ns, "t", "StatusRefused", settled("StatusRefused")).await;
    let (_, message) = synced(&t).unwrap();
    assert!(
        message.contains("status.summary"),
        "names the field: {message}"
    );
    assert!(message.contains("16"), "the API server's limit: {message}");
    assert_eq!(
        t["status"]["summary"], "short",
        "the last accepted value stays"
    );
    apply("fits");
    let t = wait_json("tight", &ns, "t", "Synced again", settled("Applied")).await;
    assert_eq!(t["status"]["summary"], "fits");
    common::delete_namespace(&ns);
}

/// `after` waits for the dependency as applied now: when both change in one edit, the
/// dependent waits until the dependency's new version is ready, not its old one.
#[tokio::test]
async fn after_waits_for_the_new_version_of_its_dependency_not_the_old_one() {
    let client = common::client().await;
    install_crds(&[CRD]);
    let ns = common::namespace(&client, "trust-after").await;
    let dir = tempfile::tempdir().unwrap();
    let rule = format!(
        "name: after\n{WATCH}\nchildren:\n  - id: db\n    readyWhen: \"(child.metadata.annotations.ready | default('')) == child.data.version\"\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: \"{{{{ name }}}}-db\"}}, data: {{version: \"{{{{ spec.version }}}}\"}}}}\n  - id: app\n    after: [db]\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: \"{{{{ name }}}}-app\"}}, data: {{version: \"{{{{ spec.version }}}}\"}}}}\n"
    );
    let rules = write_rules(dir.path(), &rule);
    let _op = Operator::start(&ns, &[&rules], &[]);
    let ready = |v: &str| {
        kubectl_ok(
            &[
                "annotate",
                "--overwrite",
                "configmap",
                "s-db",
                "-n",
                &ns,
                &format!("ready={v}"),
            ],
            None,
        );
    };
    apply_box(&ns, "s", json!({"version": "v1"}));
    wait_json("configmap", &ns, "s-db", "made", |_| true).await;
    ready("v1");
    wait_json("configmap", &ns, "s-app", "made after db", |a| {
        a["data"]["version"] == "v1"
    })
    .await;

    apply_box(&ns, "s", json!({"version": "v2"}));
    wait_json("configmap", &ns, "s-db", "v2", |d| {
        d["data"]["version"] == "v2"
    })
    .await;
    // The new db is not ready (its annotation says v1): app must stay at v1.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(6) {
        let app = get_json("configmap", &ns, "s-app").unwrap();
        assert_eq!(
            app["data"]["version"], "v1",
            "app rolled before its dependency was ready"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ready("v2");
    wait_json("configmap", &ns, "s-app", "v2 once db v2 is ready", |a| {
        a["data"]["version"] == "v2"
    })
    .await;
    common::delete_namespace(&ns);
}

/// One resource whose render would copy a large field into a thousand objects fails its
/// own render with a clear message; the rule's other resources go on.
#[tokio::test]
async fn a_render_past_its_budget_fails_that_resource_alone() {
    let client = common::client().await;
    install_crds(&[CRD]);
    let ns = common::namespace(&client, "trust-budget").await;
    let dir = tempfile::tempdir().unwrap();
    let rule = format!(
        "name: budget\n{WATCH}\nchildren:\n  - id: cm\n    forEach: spec.items\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {{name: \"{{{{ name }}}}-{{{{ item }}}}\"}}\n      data: {{blob: \"{{{{ spec.blob }}}}\"}}\n"
    );
    let rules = write_rules(dir.path(), &rule);
    let _op = Operator::start(&ns, &[&rules], &[]);
    let items: Vec<String> = (0..1000).map(|i| format!("i{i}")).collect();
    apply_box(
        &ns,
        "huge",
        json!({"items": items, "blob": "x".repeat(20_000)}),
    );
    apply_box(&ns, "small", json!({"items": ["a", "b"], "blob": "y"}));
    let m = synced_reason(&ns, "huge", "RenderFailed").await;
    assert!(m.contains("budget"), "{m}");
    synced_reason(&ns, "small", "Applied").await;
    assert!(get_json("configmap", &ns, "small-a").is_some());
    let (_, out, _) = common::kubectl(&["get", "configmaps", "-n", &ns, "-o", "name"], None);
    assert!(
        !out.contains("huge-"),
        "nothing of the failed render was applied: {out}"
    );
    common::delete_namespace(&ns);
}

/// An object labelled for another rule is never taken over, whatever the adoption policy.
#[tokio::test]
async fn an_object_labelled_for_another_rule_is_never_adopted() {
    let client = common::client().await;
    install_crds(&[CRD]);
    let ns = common::namespace(&client, "trust-label").await;
    let dir = tempfile::tempdir().unwrap();
    let rule = format!(
        "name: adopter\n{WATCH}\nchildren:\n  - id: cm\n    adopt: IfOrphan\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: \"{{{{ name }}}}-cm\"}}, data: {{mine: \"yes\"}}}}\n"
    );
    let rules = write_rules(dir.path(), &rule);
    let theirs = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "o-cm", "namespace": ns, "labels": {"ruleop.dev/rule": "someone-else"}},
        "data": {"theirs": "yes"}});
    kubectl_ok(&["apply", "-f", "-"], Some(&theirs.to_string()));
    let before = common::view::written_view(&get_json("configmap", &ns, "o-cm").unwrap(), false);
    let _op = Operator::start(&ns, &[&rules], &[]);
    apply_box(&ns, "o", json!({}));
    let m = synced_reason(&ns, "o", "NotOwned").await;
    assert!(m.contains("someone-else"), "names the other rule: {m}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = common::view::written_view(&get_json("configmap", &ns, "o-cm").unwrap(), false);
    assert_eq!(before, after, "the other rule's object was written");
    common::delete_namespace(&ns);
}

/// A child with `onRemove: Orphan` is never deleted: when its `when` turns false, when it
/// leaves the rule and when its resource is deleted, its objects stay, no longer ruleop's.
#[tokio::test]
async fn an_orphaned_child_outlives_its_when_its_rule_and_its_resource() {
    let client = common::client().await;
    install_crds(&[CRD]);
    let ns = common::namespace(&client, "trust-orphan").await;
    let dir = tempfile::tempdir().unwrap();
    let data = |id: &str, extra: &str| {
        format!(
            "  - id: {id}\n    onRemove: Orphan\n{extra}    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: \"{{{{ name }}}}-{id}\"}}, data: {{kept: \"yes\"}}}}\n"
        )
    };
    let with_both = format!(
        "name: orphan\n{WATCH}\nchildren:\n{}{}  - id: plain\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: \"{{{{ name }}}}-plain\"}}}}\n",
        data("data", ""),
        data("maybe", "    when: spec.maybe\n")
    );
    let rules = write_rules(dir.path(), &with_both);
    let op = Operator::start(&ns, &[&rules], &["--rules-poll-seconds", "1"]);
    apply_box(&ns, "o", json!({"maybe": true}));
    let b = wait_json("box", &ns, "o", "held for its orphans", |b| {
        b["metadata"]["finalizers"]
            .as_array()
            .is_some_and(|f| f.iter().any(|x| x == "ruleop.dev/orphan"))
    })
    .await;
    let box_uid = uid(&b);
    let mut uids = std::collections::BTreeMap::new();
    for name in ["o-data", "o-maybe", "o-plain"] {
        uids.insert(
            name,
            uid(&wait_json("configmap", &ns, name, "made", |_| true).await),
        );
    }
    let let_go = |o: &Value| {
        label(o, "ruleop.dev/rule").is_none()
            && !o["metadata"]["ownerReferences"]
                .as_array()
                .is_some_and(|r| r.iter().any(|r| r["uid"] == box_uid.as_str()))
    };
    // `when` turns false: its object is let go, not deleted.
    apply_box(&ns, "o", json!({"maybe": false}));
    never_recreated("configmap", &ns, "o-maybe", &uids["o-maybe"], let_go).await;
    // The child leaves the rule.
    let without = format!(
        "name: orphan\n{WATCH}\nchildren:\n  - id: plain\n    onRemove: Orphan\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: \"{{{{ name }}}}-plain\"}}}}\n"
    );
    std::fs::write(&rules, without).unwrap();
    never_recreated("configmap", &ns, "o-data", &uids["o-data"], let_go).await;
    // The resource is deleted: its orphans stay.
    kubectl_ok(&["delete", "box", "o", "-n", &ns, "--wait=false"], None);
    eventually(T, "the box gone", || async {
        get_json("box", &ns, "o").is_none().then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    for name in ["o-data", "o-maybe", "o-plain"] {
        let o = get_json("configmap", &ns, name).unwrap_or_else(|| panic!("{name} was deleted"));
        assert_eq!(uid(&o), uids[name], "{name} made again");
        assert!(let_go(&o), "{name} still ruleop's: {o}");
    }
    assert!(
        op.logs().contains("orphaned child"),
        "the log says what was let go"
    );
    common::delete_namespace(&ns);
}

/// One resource nested past the decoder's limit (a free-form field, 200 maps deep: the
/// API server takes it) fails alone: the rule starts with it in the list, every other
/// resource is reconciled, and it says why on itself.
#[tokio::test]
async fn a_resource_that_cannot_be_decoded_fails_alone_and_the_rule_goes_on() {
    let client = common::client().await;
    install_crds(&[CRD]);
    let ns = common::namespace(&client, "trust-deep").await;
    let dir = tempfile::tempdir().unwrap();
    let rules = write_rules(
        dir.path(),
        &format!(
            "name: deep\n{WATCH}\nchildren:\n  - id: cm\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: \"{{{{ name }}}}-cm\"}}, data: {{v: \"{{{{ spec.v | default('none') }}}}\"}}}}\n"
        ),
    );
    // (Maps: the object's managedFields then nest as deep.)
    let deep = format!(
        r#"{{"apiVersion": "trust.ruleop.dev/v1", "kind": "Box", "metadata": {{"name": "deep", "namespace": "{ns}"}}, "spec": {{"free": {}1{}}}}}"#,
        r#"{"a": "#.repeat(200),
        "}".repeat(200)
    );
    kubectl_ok(&["create", "-f", "-"], Some(&deep));
    apply_box(&ns, "ok", json!({"v": "1"}));
    // Started with both stored: the list of boxes holds the deep one.
    let op = Operator::start(&ns, &[&rules], &[]);
    wait_json("configmap", &ns, "ok-cm", "the good box's child", |c| {
        c["data"]["v"] == "1"
    })
    .await;
    // (Read by its conditions alone: the test's own decoder stops at 128 levels too.)
    let jsonpath = "jsonpath={.status.conditions[?(@.type==\"Synced\")]}";
    let synced = eventually(T, "the deep box says why", || async {
        let (ok, out, _) =
            common::kubectl(&["get", "box", "deep", "-n", &ns, "-o", jsonpath], None);
        let c: Value = serde_json::from_str(&out).ok().filter(|_| ok)?;
        (c["reason"] == "Undecodable").then_some(c)
    })
    .await;
    let message = synced["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("recursion limit exceeded") && message.contains("fix:"),
        "{message}"
    );
    assert!(get_json("configmap", &ns, "deep-cm").is_none());
    // The rule goes on: an edit of the good box reaches its child.
    apply_box(&ns, "ok", json!({"v": "2"}));
    wait_json("configmap", &ns, "ok-cm", "the edit", |c| {
        c["data"]["v"] == "2"
    })
    .await;
    synced_reason(&ns, "ok", "Applied").await;
    assert!(
        op.logs().contains("a resource that cannot be decoded"),
        "the log says which"
    );
    common::delete_namespace(&ns);
}

/// A status field the CRD drops (applied before the CRD declares it, as GitOps may order
/// them) is written once the CRD changes to declare it: the field is not left out for good.
#[tokio::test]
async fn a_status_field_the_crd_dropped_is_written_once_the_crd_declares_it() {
    let client = common::client().await;
    let ns = common::namespace(&client, "trust-late-crd").await;
    // A kind of its own (its CRD is edited here), named after the namespace.
    let plural = format!("lates{}", ns.rsplit('-').next().unwrap_or("0"));
    let crd = |status: Value| {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.trust.ruleop.dev")},
            "spec": {"group": "trust.ruleop.dev", "scope": "Namespaced",
                "names": {"kind": format!("L{plural}"), "plural": plural, "singular": plural},
                "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "status": status}}}}]}})
    };
    let apply_crd = |status: Value| {
        kubectl_ok(
            &["apply", "--server-side", "--force-conflicts", "-f", "-"],
            Some(&crd(status).to_string()),
        );
        kubectl_ok(
            &[
                "wait",
                "--for=condition=Established",
                &format!("crd/{plural}.trust.ruleop.dev"),
                "--timeout=60s",
            ],
            None,
        );
    };
    // First without `conditions` in its status schema: the API server drops them.
    apply_crd(json!({"type": "object", "properties": {"observedGeneration": {"type": "integer"}}}));
    let dir = tempfile::tempdir().unwrap();
    let rules = write_rules(
        dir.path(),
        &format!(
            "name: late\nwatch: {{group: trust.ruleop.dev, version: v1, resource: {plural}}}\nchildren:\n  - id: cm\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: \"{{{{ name }}}}-cm\"}}}}\n"
        ),
    );
    let op = Operator::start(&ns, &[&rules], &[]);
    let item = json!({"apiVersion": "trust.ruleop.dev/v1", "kind": format!("L{plural}"),
        "metadata": {"name": "a", "namespace": ns}, "spec": {}});
    kubectl_ok(&["apply", "-f", "-"], Some(&item.to_string()));
    wait_json(&plural, &ns, "a", "its observedGeneration", |o| {
        o["status"]["observedGeneration"] == 1
    })
    .await;
    eventually(T, "the dropped field learned", || async {
        op.logs()
            .contains("the custom resource's status schema drops this field")
            .then_some(())
    })
    .await;
    assert!(condition(&get_json(&plural, &ns, "a").unwrap(), "Synced").is_none());
    // The CRD now declares every status field: the conditions are written, with no change
    // to the resource.
    apply_crd(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}));
    wait_json(&plural, &ns, "a", "its conditions written", |o| {
        condition(o, "Synced").is_some_and(|c| c["reason"] == "Applied")
    })
    .await;
    let _ = common::kubectl(
        &[
            "delete",
            "crd",
            &format!("{plural}.trust.ruleop.dev"),
            "--wait=false",
        ],
        None,
    );
    common::delete_namespace(&ns);
}
