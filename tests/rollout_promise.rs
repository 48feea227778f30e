//! A rollout keeps its promise on the real control plane: a stalled rollout leaves the
//! resources it has not reached as they are (the objects of a kind the new revision drops
//! included); the health gate waits for each child's own readiness (a Deployment whose new
//! pods cannot be scheduled holds the canary, whatever the rule's `ready` says); and a
//! second Rule on a served kind is refused while the serving one goes on.

mod common;

use common::{Operator, eventually, get_json, install_crds, kubectl, kubectl_ok, website_rule};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

const RULE_CRD: &str = "deploy/crds/rules.ruleop.dev.yaml";
const SITES_CRD: &str = "deploy/crds/websites.sre.example.com.yaml";
const LONG: Duration = Duration::from_secs(240);

fn apply(v: &Value) {
    kubectl_ok(
        &["apply", "--server-side", "--force-conflicts", "-f", "-"],
        Some(&serde_json::to_string(v).unwrap()),
    );
}

fn list(kind: &str, ns: &str) -> Vec<Value> {
    let out = kubectl_ok(&["get", kind, "-n", ns, "-o", "json"], None);
    serde_json::from_str::<Value>(&out).unwrap()["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn name_of(o: &Value) -> String {
    o["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn condition<'a>(o: &'a Value, type_: &str) -> &'a Value {
    common::condition(o, type_).unwrap_or(&Value::Null)
}

fn ready(w: &Value) -> bool {
    condition(w, "Ready")["status"] == "True"
}

fn rollout_of(name: &str) -> Value {
    get_json("rule", "", name)
        .map(|r| r["status"]["rollout"].clone())
        .unwrap_or(Value::Null)
}

/// `n` WebSites of one replica each.
fn websites(ns: &str, n: usize) {
    let sites: Vec<Value> = (0..n)
        .map(|i| {
            json!({"apiVersion": "sre.example.com/v1alpha1", "kind": "WebSite",
            "metadata": {"name": format!("site-{i}"), "namespace": ns},
            "spec": {"image": "nginx:1.27", "replicas": 1}})
        })
        .collect();
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&json!({"apiVersion": "v1", "kind": "List", "items": sites}).to_string()),
    );
}

/// A ruleop serving the Rules labelled `ns`, with its state in `ns`.
fn operator(ns: &str) -> Operator {
    let selector = format!("ruleop.dev/test={ns}");
    Operator::start(
        ns,
        &[],
        &[
            "--rule-objects=true",
            "--rule-selector",
            &selector,
            "--lease-namespace",
            ns,
        ],
    )
}

/// Sets (`ruleop.dev/revision=N`) or removes (`ruleop.dev/revision-`) a WebSite's pin.
fn pin(ns: &str, site: &str, annotation: &str) {
    kubectl_ok(&["annotate", "website", site, "-n", ns, annotation], None);
}

async fn all_ready_on(ns: &str, n: usize, revision: i64) {
    eventually(
        LONG,
        &format!("every WebSite Ready on revision {revision}"),
        || async {
            let all = list("websites", ns);
            (all.len() == n
                && all
                    .iter()
                    .all(|w| ready(w) && w["status"]["ruleRevision"] == revision))
            .then_some(())
        },
    )
    .await;
}

/// The uid of each ConfigMap `<site>-extra`, by site.
fn extras(ns: &str) -> BTreeMap<String, String> {
    list("configmaps", ns)
        .iter()
        .filter_map(|c| {
            let site = name_of(c).strip_suffix("-extra")?.to_string();
            Some((site, c["metadata"]["uid"].as_str()?.to_string()))
        })
        .collect()
}

#[tokio::test]
async fn a_stalled_rollout_keeps_the_objects_of_the_resources_it_has_not_reached() {
    let n = 4;
    let client = common::client().await;
    install_crds(&[RULE_CRD, SITES_CRD]);
    let ns = common::namespace(&client, "stalled").await;
    let name = format!("site-{ns}");
    let _op = operator(&ns);
    // Revision 1 makes an extra ConfigMap per site.
    let mut one = website_rule(&name, &ns);
    one["spec"]["rollout"] = json!({"steps": [{"resources": 1}], "waitReady": "1m"});
    one["spec"]["children"].as_array_mut().unwrap().push(json!({
        "id": "extra",
        "template": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "{{ name }}-extra"}, "data": {"site": "{{ name }}"}}}));
    apply(&one);
    websites(&ns, n);
    all_ready_on(&ns, n, 1).await;
    let before = eventually(LONG, "every extra ConfigMap", || async {
        let e = extras(&ns);
        (e.len() == n).then_some(e)
    })
    .await;

    // Revision 2 drops the ConfigMap and its Deployment is refused by the API server (a
    // Deployment's pods restart Always): the canary's write fails, the rollout pauses.
    let mut two = website_rule(&name, &ns);
    two["spec"]["rollout"] = one["spec"]["rollout"].clone();
    two["spec"]["children"][0]["template"]["spec"]["template"]["spec"]["restartPolicy"] =
        json!("Never");
    apply(&two);
    let paused = eventually(LONG, "the rollout paused at the canary", || async {
        let ro = rollout_of(&name);
        (ro["revision"] == 2 && ro["phase"] == "Paused").then_some(ro)
    })
    .await;
    assert_eq!(paused["step"], 0, "{paused}");
    assert_eq!(paused["reached"], 1, "{paused}");
    let canary = list("websites", &ns)
        .iter()
        .filter(|w| w["status"]["ruleRevision"] == 2)
        .map(name_of)
        .collect::<Vec<_>>();
    assert!(
        canary.len() <= 1,
        "only the canary took revision 2: {canary:?}"
    );
    // A few seconds more: the kind revision 2 dropped is not retired while revision 1 is
    // in force for the others; their ConfigMaps are the same objects.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after = extras(&ns);
    for (site, uid) in &before {
        if canary.contains(site) {
            continue;
        }
        assert_eq!(
            after.get(site),
            Some(uid),
            "{site}: its ConfigMap kept (not deleted and made again) while the rollout has not reached it"
        );
    }
    let _ = kubectl(&["delete", "rule", &name], None);
    common::delete_namespace(&ns);
}

#[tokio::test]
async fn the_health_gate_waits_for_the_deployment_to_roll_out_whatever_the_rule_says() {
    let n = 3;
    let client = common::client().await;
    install_crds(&[RULE_CRD, SITES_CRD]);
    let ns = common::namespace(&client, "gate").await;
    let name = format!("site-{ns}");
    let _op = operator(&ns);
    let rollout = json!({"steps": [{"resources": 1}], "waitReady": "20s"});
    let mut one = website_rule(&name, &ns);
    one["spec"]["rollout"] = rollout.clone();
    apply(&one);
    websites(&ns, n);
    all_ready_on(&ns, n, 1).await;

    // Revision 2's pods ask for a node no node is: they stay Pending while the old pod
    // serves, so the rule's `ready` (readyReplicas >= replicas) still holds.
    let mut two = website_rule(&name, &ns);
    two["spec"]["rollout"] = rollout;
    two["spec"]["children"][0]["template"]["spec"]["template"]["spec"]["nodeSelector"] =
        json!({"ruleop.dev/no-such-node": "true"});
    apply(&two);
    let paused = eventually(LONG, "the rollout paused at the canary", || async {
        let ro = rollout_of(&name);
        assert_ne!(
            ro["phase"], "Complete",
            "the gate let a Deployment still rolling pass: {ro}"
        );
        (ro["revision"] == 2 && ro["phase"] == "Paused").then_some(ro)
    })
    .await;
    assert_eq!(paused["step"], 0, "{paused}");
    assert_eq!(
        paused["failed"].as_array().map(Vec::len),
        Some(1),
        "{paused}"
    );
    let sites = list("websites", &ns);
    let canary: Vec<&Value> = sites
        .iter()
        .filter(|w| w["status"]["ruleRevision"] == 2)
        .collect();
    assert_eq!(canary.len(), 1, "only the canary took revision 2");
    let message = condition(canary[0], "Ready")["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        condition(canary[0], "Ready")["status"] == "False"
            && message.contains("child `deployment`"),
        "the canary's Ready says its Deployment has not rolled out: {message}"
    );
    for w in &sites {
        if w["status"]["ruleRevision"] == 2 {
            continue;
        }
        let d = get_json("deployment", &ns, &format!("{}-web", name_of(w))).unwrap();
        assert!(
            d["spec"]["template"]["spec"]["nodeSelector"].is_null(),
            "{}: not reached, its pods as they were",
            name_of(w)
        );
    }
    let _ = kubectl(&["delete", "rule", &name], None);
    common::delete_namespace(&ns);
}

#[tokio::test]
async fn a_second_rule_on_a_served_kind_is_refused_and_the_serving_one_goes_on() {
    let client = common::client().await;
    install_crds(&[RULE_CRD, SITES_CRD]);
    let ns = common::namespace(&client, "second-rule").await;
    let (first, second) = (format!("a-{ns}"), format!("b-{ns}"));
    let _op = operator(&ns);
    apply(&website_rule(&first, &ns));
    websites(&ns, 1);
    all_ready_on(&ns, 1, 1).await;
    // Stored (no webhook here): only the newcomer is refused.
    let mut other = website_rule(&second, &ns);
    other["spec"]["children"][0]["template"]["metadata"]["annotations"] = json!({"second": "yes"});
    apply(&other);
    let refused = eventually(LONG, "the newcomer refused", || async {
        let r = get_json("rule", "", &second)?;
        let accepted = condition(&r, "Accepted").clone();
        (accepted["status"] == "False").then_some(accepted)
    })
    .await;
    let message = refused["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("`{first}` goes on serving")),
        "{message}"
    );
    let serving = get_json("rule", "", &first).unwrap();
    assert_eq!(
        condition(&serving, "Accepted")["status"],
        "True",
        "{serving}"
    );
    // The serving rule still reconciles: a scale reaches the Deployment, made by it.
    kubectl_ok(
        &[
            "patch",
            "website",
            "site-0",
            "-n",
            &ns,
            "--type=merge",
            "-p",
            r#"{"spec":{"replicas":2}}"#,
        ],
        None,
    );
    let d = eventually(LONG, "the scale reaches the Deployment", || async {
        let d = get_json("deployment", &ns, "site-0-web")?;
        (d["spec"]["replicas"] == 2).then_some(d)
    })
    .await;
    assert!(
        d["metadata"]["annotations"]["second"].is_null(),
        "the newcomer wrote nothing"
    );
    let s = get_json("rule", "", &first).unwrap();
    assert_eq!(condition(&s, "Ready")["status"], "True", "{s}");
    for r in [&first, &second] {
        let _ = kubectl(&["delete", "rule", r], None);
    }
    common::delete_namespace(&ns);
}

#[tokio::test]
async fn a_replica_holding_an_older_generation_of_a_rule_than_the_cluster_ran_does_nothing() {
    let client = common::client().await;
    install_crds(&[RULE_CRD, SITES_CRD]);
    let ns = common::namespace(&client, "lagging").await;
    let name = format!("site-{ns}");
    apply(&website_rule(&name, &ns));
    let rule = get_json("rule", "", &name).expect("the Rule");
    let uid = rule["metadata"]["uid"].as_str().unwrap().to_string();
    assert_eq!(rule["metadata"]["generation"], 1);
    // Another replica ran generation 2 of this Rule (its watch was ahead of this one's):
    // the cluster's record says so (the inventory key of a ruleop scoped to one namespace
    // is `<rule>.<namespace>`).
    let since = k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let log = json!([{"fingerprint": "generation-2", "since": since, "why": "generation",
        "object": {"uid": uid, "generation": 2}}]);
    apply(&json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "ruleop-inventory", "namespace": ns},
        "data": {format!("_versions.{name}.{ns}"): log.to_string()}}));
    websites(&ns, 1);
    let op = operator(&ns);
    let addr = op.admin_addr().await;
    eventually(LONG, "the rule said to be older", || async {
        (op.logs()
            .contains("older generation than one the cluster has run"))
        .then_some(())
    })
    .await;
    assert_eq!(common::admin_metric(&addr, "ruleop_rule_older"), 1.0);
    // It writes nothing meanwhile: no child, no status.
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        get_json("deployment", &ns, "site-0-web").is_none(),
        "an older generation made a Deployment"
    );
    let site = get_json("website", &ns, "site-0").expect("the WebSite");
    assert!(
        site["status"].is_null(),
        "an older generation wrote a status: {site}"
    );
    // The Rule's next generation reaches this replica: it runs.
    let mut two = website_rule(&name, &ns);
    two["spec"]["children"][0]["template"]["metadata"]["annotations"] = json!({"edited": "yes"});
    apply(&two);
    // (Its first revision: generation 1 never ran.)
    all_ready_on(&ns, 1, 1).await;
    let d = get_json("deployment", &ns, "site-0-web").expect("the Deployment");
    assert_eq!(
        d["metadata"]["annotations"]["edited"], "yes",
        "generation 2 made it"
    );
    assert_eq!(common::admin_metric(&addr, "ruleop_rule_older"), 0.0);
    drop(op);
    let _ = kubectl(&["delete", "rule", &name], None);
    common::delete_namespace(&ns);
}

/// A resource pinned to a revision keeps it through a rollout (counted in
/// `status.rollout.pinned`), until the Rule says `pins: Disabled`: then it takes the
/// Rule's revision like the others.
#[tokio::test]
async fn a_pin_holds_its_resource_until_the_rule_disables_pins() {
    let client = common::client().await;
    install_crds(&[RULE_CRD, SITES_CRD]);
    let ns = common::namespace(&client, "pins").await;
    let name = format!("site-{ns}");
    let _op = operator(&ns);
    let mut one = website_rule(&name, &ns);
    one["spec"]["rollout"] = json!({"steps": [{"percent": 100}], "waitReady": "2m"});
    apply(&one);
    websites(&ns, 2);
    all_ready_on(&ns, 2, 1).await;
    pin(&ns, "site-0", "ruleop.dev/revision=1");
    // Revision 2 adds a ConfigMap: the pinned site stays on revision 1, without it.
    let mut two = one.clone();
    two["spec"]["children"].as_array_mut().unwrap().push(json!({
        "id": "extra",
        "template": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "{{ name }}-extra"}, "data": {"site": "{{ name }}"}}}));
    apply(&two);
    let done = eventually(LONG, "revision 2 rolled out around the pin", || async {
        let ro = rollout_of(&name);
        (ro["revision"] == 2 && ro["phase"] == "Complete").then_some(ro)
    })
    .await;
    assert_eq!(done["pinned"], 1, "{done}");
    eventually(LONG, "site-1 on revision 2 with its ConfigMap", || async {
        let w = get_json("website", &ns, "site-1")?;
        (w["status"]["ruleRevision"] == 2 && get_json("configmap", &ns, "site-1-extra").is_some())
            .then_some(())
    })
    .await;
    let pinned = get_json("website", &ns, "site-0").unwrap();
    assert_eq!(pinned["status"]["ruleRevision"], 1, "{pinned}");
    assert!(get_json("configmap", &ns, "site-0-extra").is_none());
    // `pins: Disabled`: the pin is ignored, the site takes the Rule's revision.
    let mut three = two.clone();
    three["spec"]["pins"] = json!("Disabled");
    apply(&three);
    eventually(LONG, "the pinned site on revision 3", || async {
        let w = get_json("website", &ns, "site-0")?;
        (w["status"]["ruleRevision"] == 3 && get_json("configmap", &ns, "site-0-extra").is_some())
            .then_some(())
    })
    .await;
    let _ = kubectl(&["delete", "rule", &name], None);
    common::delete_namespace(&ns);
}

/// A pin holds what it pins, kinds included: revision 1 makes a ConfigMap per site,
/// revision 2 drops the kind; the site pinned to revision 1 keeps its ConfigMap (the kind
/// is not retired while a resource pins a revision that makes it), the other site loses
/// its own. Unpinned, the site takes revision 2 and its ConfigMap goes too.
#[tokio::test]
async fn a_pin_keeps_the_kind_the_newest_revision_dropped() {
    let client = common::client().await;
    install_crds(&[RULE_CRD, SITES_CRD]);
    let ns = common::namespace(&client, "pin-kinds").await;
    let name = format!("site-{ns}");
    let _op = operator(&ns);
    let mut one = website_rule(&name, &ns);
    one["spec"]["children"].as_array_mut().unwrap().push(json!({
        "id": "extra",
        "template": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "{{ name }}-extra"}, "data": {"site": "{{ name }}"}}}));
    apply(&one);
    websites(&ns, 2);
    all_ready_on(&ns, 2, 1).await;
    let before = extras(&ns);
    assert_eq!(before.len(), 2, "{before:?}");
    pin(&ns, "site-0", "ruleop.dev/revision=1");
    // Revision 2 makes no ConfigMap.
    let two = website_rule(&name, &ns);
    apply(&two);
    eventually(LONG, "site-1 on revision 2, its ConfigMap gone", || async {
        let w = get_json("website", &ns, "site-1")?;
        (w["status"]["ruleRevision"] == 2 && !extras(&ns).contains_key("site-1")).then_some(())
    })
    .await;
    let pinned = get_json("website", &ns, "site-0").unwrap();
    assert_eq!(pinned["status"]["ruleRevision"], 1, "{pinned}");
    // (Given the time a retirement takes, were the kind retired.)
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        extras(&ns).get("site-0"),
        before.get("site-0"),
        "the pinned site's ConfigMap, of a kind only its revision makes, is kept"
    );
    pin(&ns, "site-0", "ruleop.dev/revision-");
    eventually(LONG, "site-0 on revision 2, its ConfigMap gone", || async {
        let w = get_json("website", &ns, "site-0")?;
        (w["status"]["ruleRevision"] == 2 && extras(&ns).is_empty()).then_some(())
    })
    .await;
    let _ = kubectl(&["delete", "rule", &name], None);
    common::delete_namespace(&ns);
}

/// Whether a log record of ruleop's was made within a reconcile at `revision`.
fn at_revision(record: &Value, revision: i64) -> bool {
    let span_at = |s: &Value| s["name"] == "reconcile" && s["revision"] == revision;
    span_at(&record["span"])
        || record["spans"]
            .as_array()
            .is_some_and(|spans| spans.iter().any(span_at))
}

/// An aborted revision stays aborted: revision 2 paused on its canary and was aborted,
/// revision 1's spec applied again (renumbered 3) rolled out to Complete; then ruleop is
/// restarted (as a failover would start a new leader), once as it was and once with the
/// Rule's `status.rollout` gone. No resource is ever reconciled at revision 2 again, in
/// ruleop's log or the resources' status: how each rollout ended is kept on its revision.
#[tokio::test]
async fn an_aborted_revision_stays_aborted_across_a_restart() {
    let n = 4;
    let client = common::client().await;
    install_crds(&[RULE_CRD, SITES_CRD]);
    let ns = common::namespace(&client, "aborted").await;
    let name = format!("site-{ns}");
    let mut op = operator(&ns);
    let mut one = website_rule(&name, &ns);
    one["spec"]["rollout"] = json!({"steps": [{"resources": 1}], "waitReady": "1m"});
    apply(&one);
    websites(&ns, n);
    all_ready_on(&ns, n, 1).await;
    // Revision 2's Deployments are refused by the API server: the canary pauses it.
    let mut two = one.clone();
    two["spec"]["children"][0]["template"]["spec"]["template"]["spec"]["restartPolicy"] =
        json!("Never");
    apply(&two);
    eventually(LONG, "revision 2 paused at the canary", || async {
        let ro = rollout_of(&name);
        (ro["revision"] == 2 && ro["phase"] == "Paused").then_some(())
    })
    .await;
    kubectl_ok(
        &[
            "annotate",
            "rule",
            &name,
            "ruleop.dev/rollout=abort",
            "--overwrite",
        ],
        None,
    );
    eventually(LONG, "revision 2 aborted", || async {
        let ro = rollout_of(&name);
        (ro["revision"] == 2 && ro["phase"] == "RolledBack").then_some(())
    })
    .await;
    all_ready_on(&ns, n, 1).await;
    // Revision 1's spec again: renumbered 3, rolled out to the end.
    apply(&one);
    eventually(LONG, "revision 3 complete", || async {
        let ro = rollout_of(&name);
        (ro["revision"] == 3 && ro["phase"] == "Complete").then_some(())
    })
    .await;
    all_ready_on(&ns, n, 3).await;
    // Restarted, then restarted with the Rule's `status.rollout` gone (as a restore
    // from a backup, or a status written over, leaves it): nothing is reconciled at
    // revision 2 meanwhile or after.
    for round in 0..2 {
        op.kill();
        if round == 1 {
            kubectl_ok(
                &[
                    "patch",
                    "rule",
                    &name,
                    "--subresource=status",
                    "--type=json",
                    "-p",
                    r#"[{"op": "remove", "path": "/status/rollout"}]"#,
                ],
                None,
            );
        }
        op = operator(&ns);
        let mut watched = 0;
        let until = std::time::Instant::now() + Duration::from_secs(15);
        while std::time::Instant::now() < until {
            for w in list("websites", &ns) {
                assert_ne!(
                    w["status"]["ruleRevision"],
                    2,
                    "restart {round}: {} is on the aborted revision",
                    name_of(&w)
                );
                watched += 1;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        assert!(watched > 0);
        let at_two: Vec<Value> = op
            .records()
            .into_iter()
            .filter(|r| at_revision(r, 2))
            .collect();
        assert!(
            at_two.is_empty(),
            "restart {round}: reconciled at the aborted revision: {:?}",
            &at_two[..at_two.len().min(3)]
        );
        let ro = rollout_of(&name);
        assert!(
            ro.is_null() || (ro["revision"] == 3 && ro["phase"] == "Complete"),
            "restart {round}: {ro}"
        );
    }
    all_ready_on(&ns, n, 3).await;
    drop(op);
    let _ = kubectl(&["delete", "rule", &name], None);
    common::delete_namespace(&ns);
}
