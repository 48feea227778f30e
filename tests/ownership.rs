//! The ownership model on the real control plane: ruleop creates what is missing, touches
//! only what it owns, adopts only what its policy allows, and cleans up only its own.

mod common;

use common::{
    Operator, condition, eventually, get_json, install_crds, kubectl, kubectl_ok, wait_json,
};
use serde_json::Value;
use std::time::Duration;

const T: Duration = Duration::from_secs(60);

/// What ruleop could have written of a child (not its resourceVersion: the
/// controller-manager writes a Deployment's status).
fn written(v: &Value) -> Value {
    common::view::written_view(v, false)
}

fn uid(v: &Value) -> String {
    v["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn website(ns: &str, name: &str) -> String {
    format!(
        "apiVersion: sre.example.com/v1alpha1\nkind: WebSite\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{image: \"nginx:1.27\", replicas: 1}}\n"
    )
}

/// Waits for the resource's `Synced` condition to have `reason`; returns its message.
async fn synced_reason(kind: &str, ns: &str, name: &str, reason: &str) -> String {
    let w = wait_json(kind, ns, name, &format!("Synced {reason}"), |w| {
        condition(w, "Synced").is_some_and(|c| c["reason"] == reason)
    })
    .await;
    condition(&w, "Synced").unwrap()["message"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn warning_events(ns: &str, reason: &str) -> usize {
    let out = kubectl_ok(
        &[
            "get",
            "events.events.k8s.io",
            "-n",
            ns,
            "--field-selector",
            &format!("reason={reason}"),
            "-o",
            "json",
        ],
        None,
    );
    let v: Value = serde_json::from_str(&out).unwrap();
    v["items"].as_array().map_or(0, Vec::len)
}

#[tokio::test]
async fn objects_of_others_are_left_byte_for_byte_and_the_resource_says_not_owned() {
    let client = common::client().await;
    install_crds(&[
        "deploy/crds/websites.sre.example.com.yaml",
        "tests/fixtures/cache/crd.yaml",
    ]);
    let ns = common::namespace(&client, "own-others").await;
    // Another team's Service and ConfigMap, with the names ruleop would render.
    kubectl_ok(
        &[
            "create",
            "service",
            "clusterip",
            "victim-web",
            "--tcp=8443:8443",
            "-n",
            &ns,
        ],
        None,
    );
    kubectl_ok(
        &[
            "create",
            "configmap",
            "team-config",
            "--from-literal=owner=team",
            "-n",
            &ns,
        ],
        None,
    );
    // A Deployment controlled by another object (here a ConfigMap stands for any controller).
    kubectl_ok(&["create", "configmap", "boss", "-n", &ns], None);
    let boss = get_json("configmap", &ns, "boss").unwrap();
    let owned = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: ctrl-web\n  namespace: {ns}\n  ownerReferences: [{{apiVersion: v1, kind: ConfigMap, name: boss, uid: {}, controller: true}}]\nspec:\n  selector: {{matchLabels: {{a: b}}}}\n  template:\n    metadata: {{labels: {{a: b}}}}\n    spec: {{containers: [{{name: c, image: busybox}}]}}\n",
        uid(&boss)
    );
    kubectl_ok(&["create", "-f", "-"], Some(&owned));
    // A user's object that copies the rule's label, and no more.
    kubectl_ok(
        &[
            "create",
            "service",
            "clusterip",
            "copied-web",
            "--tcp=9000:9000",
            "-n",
            &ns,
        ],
        None,
    );
    kubectl_ok(
        &[
            "label",
            "service",
            "copied-web",
            "ruleop.dev/rule=website",
            "-n",
            &ns,
        ],
        None,
    );
    let theirs = [
        ("service", "victim-web"),
        ("configmap", "team-config"),
        ("deployment", "ctrl-web"),
        ("service", "copied-web"),
    ];
    let before: Vec<Value> = theirs
        .iter()
        .map(|(k, n)| written(&get_json(k, &ns, n).unwrap()))
        .collect();

    let _op = Operator::start(
        &ns,
        &["rules/website.yaml", "tests/fixtures/cache/rules.yaml"],
        &[],
    );
    for name in ["victim", "ctrl", "copied"] {
        kubectl_ok(&["apply", "-f", "-"], Some(&website(&ns, name)));
    }
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: test.ruleop.dev/v1alpha1\nkind: Cache\nmetadata: {{name: team, namespace: {ns}}}\nspec: {{persistent: false}}\n"
        )),
    );
    let m = synced_reason("website", &ns, "victim", "NotOwned").await;
    assert!(
        m.contains("Service victim-web") && m.contains("controller: none"),
        "{m}"
    );
    let m = synced_reason("website", &ns, "ctrl", "NotOwned").await;
    assert!(
        m.contains("Deployment ctrl-web") && m.contains("ConfigMap boss"),
        "{m}"
    );
    let m = synced_reason("website", &ns, "copied", "NotOwned").await;
    assert!(m.contains("Service copied-web"), "{m}");
    let m = synced_reason("cache", &ns, "team", "NotOwned").await;
    assert!(m.contains("ConfigMap team-config"), "{m}");
    // What ruleop may make, it made: the victim's Deployment.
    wait_json("deployment", &ns, "victim-web", "made by ruleop", |_| true).await;
    eventually(T, "NotOwned Warning Events", || async {
        (warning_events(&ns, "NotOwned") >= 4).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after: Vec<Value> = theirs
        .iter()
        .map(|(k, n)| written(&get_json(k, &ns, n).unwrap()))
        .collect();
    assert_eq!(before, after, "the other objects were written to");

    // Deleting the resources deletes none of them.
    for name in ["victim", "ctrl", "copied"] {
        kubectl_ok(&["delete", "website", name, "-n", &ns], None);
    }
    kubectl_ok(&["delete", "cache", "team", "-n", &ns], None);
    eventually(T, "victim's own Deployment collected", || async {
        get_json("deployment", &ns, "victim-web")
            .is_none()
            .then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let last: Vec<Value> = theirs
        .iter()
        .map(|(k, n)| written(&get_json(k, &ns, n).expect("still there")))
        .collect();
    assert_eq!(before, last, "the other objects survive their namesakes");
    common::delete_namespace(&ns);
}

#[tokio::test]
async fn a_name_another_object_held_is_taken_as_soon_as_that_object_goes() {
    let client = common::client().await;
    install_crds(&["deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "own-freed").await;
    kubectl_ok(
        &[
            "create",
            "service",
            "clusterip",
            "held-web",
            "--tcp=81:81",
            "-n",
            &ns,
        ],
        None,
    );
    let op = Operator::start(&ns, &["rules/website.yaml"], &[]);
    let addr = op.admin_addr().await;
    kubectl_ok(&["apply", "-f", "-"], Some(&website(&ns, "held")));
    synced_reason("website", &ns, "held", "NotOwned").await;
    let freed = r#"ruleop_held_names_freed_total{rule="website"}"#;
    assert_eq!(common::admin_metric(&addr, freed), 0.0);
    // Its owner removes it: the name's watch sees it go, and the WebSite takes the name
    // (not on its backoff's next try).
    kubectl_ok(&["delete", "service", "held-web", "-n", &ns], None);
    let svc = wait_json("service", &ns, "held-web", "the WebSite's Service", |s| {
        s["metadata"]["labels"]["ruleop.dev/rule"] == "website"
    })
    .await;
    assert_eq!(svc["spec"]["ports"][0]["port"], 80, "{svc}");
    synced_reason("website", &ns, "held", "Applied").await;
    assert!(
        common::admin_metric(&addr, freed) >= 1.0,
        "the release was seen by the name's watch"
    );
    common::delete_namespace(&ns);
}

/// A Cache rule whose ConfigMap is named by the resource: two resources can collide.
const SHARED_NAME_RULE: &str = r#"
name: shared-name
watch: {group: test.ruleop.dev, version: v1alpha1, resource: caches}
children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "{{ spec.configName }}"}
      data: {writer: "{{ name }}"}
"#;

#[tokio::test]
async fn two_resources_rendering_one_name_never_flip_the_object() {
    let client = common::client().await;
    install_crds(&["tests/fixtures/cache/crd.yaml"]);
    let ns = common::namespace(&client, "own-collide").await;
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.yaml");
    std::fs::write(&rules, SHARED_NAME_RULE).unwrap();
    let _op = Operator::start(&ns, &[rules.to_str().unwrap()], &[]);
    let cache = |name: &str| {
        format!(
            "apiVersion: test.ruleop.dev/v1alpha1\nkind: Cache\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{configName: shared}}\n"
        )
    };
    kubectl_ok(&["apply", "-f", "-"], Some(&cache("first")));
    synced_reason("cache", &ns, "first", "Applied").await;
    kubectl_ok(&["apply", "-f", "-"], Some(&cache("second")));
    let m = synced_reason("cache", &ns, "second", "NotOwned").await;
    assert!(
        m.contains("Cache first"),
        "names the current controller: {m}"
    );
    let cm = get_json("configmap", &ns, "shared").unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let later = get_json("configmap", &ns, "shared").unwrap();
    assert_eq!(written(&later), written(&cm), "no flip-flop");
    assert_eq!(later["data"]["writer"], "first");
    common::delete_namespace(&ns);
}

const RETIRING_RULE_V1: &str = r#"
name: retiring
watch: {group: test.ruleop.dev, version: v1alpha1, resource: caches}
children:
  - id: config
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "{{ name }}-config"}
  - id: extra
    template:
      apiVersion: v1
      kind: Secret
      metadata: {name: "{{ name }}-extra"}
      stringData: {a: b}
  - id: hpa
    template:
      apiVersion: autoscaling/v1
      kind: HorizontalPodAutoscaler
      metadata: {name: "{{ name }}"}
      spec:
        scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: "{{ name }}"}
        minReplicas: 1
        maxReplicas: 3
"#;

#[tokio::test]
async fn a_kind_removed_while_ruleop_was_stopped_is_cleaned_up_on_start_and_a_version_change_deletes_nothing()
 {
    let client = common::client().await;
    install_crds(&["tests/fixtures/cache/crd.yaml"]);
    let ns = common::namespace(&client, "own-retire").await;
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules.yaml");
    std::fs::write(&rules, RETIRING_RULE_V1).unwrap();
    let mut op = Operator::start(&ns, &[rules.to_str().unwrap()], &[]);
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: test.ruleop.dev/v1alpha1\nkind: Cache\nmetadata: {{name: c, namespace: {ns}}}\nspec: {{}}\n"
        )),
    );
    wait_json("secret", &ns, "c-extra", "made", |_| true).await;
    let hpa = wait_json("hpa", &ns, "c", "made", |_| true).await;
    // A user's Secret that copies the rule's label.
    kubectl_ok(
        &[
            "create",
            "secret",
            "generic",
            "users",
            "--from-literal=x=y",
            "-n",
            &ns,
        ],
        None,
    );
    kubectl_ok(
        &[
            "label",
            "secret",
            "users",
            "ruleop.dev/rule=retiring",
            "-n",
            &ns,
        ],
        None,
    );
    // The inventory records what the rule makes.
    eventually(T, "the inventory", || async {
        get_json("configmap", "default", "ruleop-inventory")
            .and_then(|cm| {
                cm["data"][format!("retiring.{ns}")]
                    .as_str()
                    .map(str::to_string)
            })
            .filter(|v| v.contains("Secret"))
    })
    .await;

    // While ruleop is stopped, the rule loses its Secret and moves its HPA to autoscaling/v2.
    op.kill();
    let v2 = RETIRING_RULE_V1
        .replace(
            "  - id: extra\n    template:\n      apiVersion: v1\n      kind: Secret\n      metadata: {name: \"{{ name }}-extra\"}\n      stringData: {a: b}\n",
            "",
        )
        .replace("autoscaling/v1", "autoscaling/v2");
    assert!(!v2.contains("Secret"));
    std::fs::write(&rules, &v2).unwrap();
    // A version the cluster has not run retires the kinds an earlier one recorded once it
    // has been the newest for the settle time (it could be an old one that never ran).
    let _op = Operator::start(
        &ns,
        &[rules.to_str().unwrap()],
        &["--rules-settle-seconds", "3"],
    );
    eventually(T, "the retired Secret cleaned up on start", || async {
        get_json("secret", &ns, "c-extra").is_none().then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let hpa_after = get_json("hpa", &ns, "c").expect("the HPA stays");
    assert_eq!(
        uid(&hpa_after),
        uid(&hpa),
        "a version change deletes nothing"
    );
    assert!(
        get_json("secret", &ns, "users").is_some(),
        "a user object with the rule's label survives"
    );
    assert!(get_json("configmap", &ns, "c-config").is_some());
    common::delete_namespace(&ns);
}

fn replica_sets(ns: &str) -> Vec<String> {
    let out = kubectl_ok(&["get", "rs", "-n", ns, "-o", "name"], None);
    let mut v: Vec<String> = out.lines().map(str::to_string).collect();
    v.sort();
    v
}

#[tokio::test]
async fn children_of_a_typed_operator_are_adopted_with_nothing_recreated() {
    let client = common::client().await;
    install_crds(&["deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "own-adopt").await;
    common::website_with_typed_children(&ns, "typed", "typed-operator/only: \"yes\"");
    eventually(T, "the typed operator's ReplicaSet", || async {
        (replica_sets(&ns).len() == 1).then_some(())
    })
    .await;
    let d0 = get_json("deployment", &ns, "typed-web").unwrap();
    let s0 = get_json("service", &ns, "typed-web").unwrap();
    let rs0 = replica_sets(&ns);

    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("website.yaml");
    let rule = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/rules/website.yaml"))
        .unwrap();
    std::fs::write(&rules, &rule).unwrap();
    let _op = Operator::start(&ns, &[rules.to_str().unwrap()], &[]);
    synced_reason("website", &ns, "typed", "Applied").await;
    let d1 = wait_json("deployment", &ns, "typed-web", "adopted", |d| {
        d["metadata"]["labels"]["ruleop.dev/rule"] == "website"
    })
    .await;
    let s1 = wait_json("service", &ns, "typed-web", "adopted", |s| {
        s["metadata"]["labels"]["ruleop.dev/rule"] == "website"
    })
    .await;
    assert_eq!(uid(&d1), uid(&d0), "the Deployment was not recreated");
    assert_eq!(uid(&s1), uid(&s0), "the Service was not recreated");
    // (The generation moves: a Deployment counts annotation changes too, and ours carry
    // ruleop's hash. The pods are what matters.)
    assert_eq!(
        d1["spec"]["template"], d0["spec"]["template"],
        "the pod template did not change"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(replica_sets(&ns), rs0, "no new ReplicaSet");
    assert!(
        d1["metadata"]["annotations"]
            .get("typed-operator/only")
            .is_none(),
        "the previous manager's fields are ruleop's now: what the rule does not render goes"
    );
    let managers = kubectl_ok(
        &[
            "get",
            "deployment",
            "typed-web",
            "-n",
            &ns,
            "--show-managed-fields",
            "-o",
            "jsonpath={range .metadata.managedFields[*]}{.manager}/{.operation}/{.subresource} {end}",
        ],
        None,
    );
    assert!(
        !managers
            .split_whitespace()
            .any(|m| m.starts_with("manager/")),
        "{managers}"
    );

    // A field then removed from the rule disappears from the child.
    std::fs::write(
        &rules,
        rule.replace(
            "                  limits:\n                    cpu: 500m\n                    memory: 256Mi\n",
            "",
        ),
    )
    .unwrap();
    wait_json("deployment", &ns, "typed-web", "limits removed", |d| {
        d["spec"]["template"]["spec"]["containers"][0]["resources"]
            .get("limits")
            .is_none()
    })
    .await;
    common::delete_namespace(&ns);
}

#[tokio::test]
async fn an_adoption_policy_of_never_leaves_even_the_resources_own_object_alone() {
    let client = common::client().await;
    install_crds(&["deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "own-never").await;
    common::website_with_typed_children(&ns, "kept", "");
    let d0 = get_json("deployment", &ns, "kept-web").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("website.yaml");
    let rule = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/rules/website.yaml"))
        .unwrap()
        .replace(
            "  - id: deployment\n",
            "  - id: deployment\n    adopt: Never\n",
        );
    std::fs::write(&rules, &rule).unwrap();
    let _op = Operator::start(&ns, &[rules.to_str().unwrap()], &[]);
    let m = synced_reason("website", &ns, "kept", "NotOwned").await;
    assert!(m.contains("Deployment kept-web"), "{m}");
    let (_, out, _) = kubectl(
        &["get", "deployment", "kept-web", "-n", &ns, "-o", "json"],
        None,
    );
    let d1: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(written(&d1), written(&d0));
    common::delete_namespace(&ns);
}

/// A child that mounts another is not applied while that one is someone else's: with a
/// hand-made ConfigMap in the way, the WebSite is `NotOwned` and its Deployment is not
/// made (it would serve content ruleop never wrote); once the ConfigMap is gone, both are
/// made.
#[tokio::test]
async fn a_child_that_mounts_another_waits_while_that_one_is_not_ruleops() {
    let client = common::client().await;
    install_crds(&["deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "own-mounts").await;
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("blog.yaml");
    std::fs::write(
        &rules,
        r#"name: blog
watch: {group: sre.example.com, version: v1alpha1, resource: websites}
children:
  - id: content
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata: {name: "{{ name }}-content"}
      data: {index.html: "<h1>{{ name }}</h1>"}
  - id: web
    template:
      apiVersion: apps/v1
      kind: Deployment
      metadata: {name: "{{ name }}-web"}
      spec:
        selector: {matchLabels: {app: "{{ name }}"}}
        template:
          metadata: {labels: {app: "{{ name }}"}}
          spec:
            containers: [{name: web, image: "{{ spec.image }}"}]
            volumes: [{name: content, configMap: {name: "{{ name }}-content"}}]
"#,
    )
    .unwrap();
    kubectl_ok(
        &[
            "create",
            "configmap",
            "blog-content",
            "-n",
            &ns,
            "--from-literal=index.html=theirs",
        ],
        None,
    );
    let _op = Operator::start(&ns, &[rules.to_str().unwrap()], &[]);
    kubectl_ok(&["apply", "-f", "-"], Some(&website(&ns, "blog")));
    let m = synced_reason("website", &ns, "blog", "NotOwned").await;
    assert!(m.contains("ConfigMap blog-content"), "{m}");
    assert!(
        m.contains(
            "Deployment blog-web (child `web`) is not applied: it refers to ConfigMap blog-content"
        ),
        "{m}"
    );
    // Held across reconciles (the NotOwned retry comes back and holds it again).
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        get_json("deployment", &ns, "blog-web").is_none(),
        "the Deployment mounting another's ConfigMap was made"
    );
    let theirs = get_json("configmap", &ns, "blog-content").unwrap();
    assert_eq!(
        theirs["data"]["index.html"], "theirs",
        "theirs is left alone"
    );
    // The ConfigMap gone (and the WebSite touched, so it is looked at now): both made.
    kubectl_ok(&["delete", "configmap", "blog-content", "-n", &ns], None);
    kubectl_ok(
        &[
            "annotate",
            "website",
            "blog",
            "-n",
            &ns,
            "touched=1",
            "--overwrite",
        ],
        None,
    );
    wait_json(
        "deployment",
        &ns,
        "blog-web",
        "made once the ConfigMap is ruleop's",
        |_| true,
    )
    .await;
    let ours = get_json("configmap", &ns, "blog-content").unwrap();
    assert_eq!(ours["data"]["index.html"], "<h1>blog</h1>");
    common::delete_namespace(&ns);
}
