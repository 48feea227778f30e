//! Status computed from sample children, with no cluster.

use super::*;
use crate::render::scope;
use crate::rules::testing::{rule, website};
use serde_json::json;

fn cr(service_type: &str) -> Value {
    json!({"metadata": {"name": "my-blog", "namespace": "web"}, "spec": {"image": "nginx", "replicas": 3, "serviceType": service_type}})
}

/// A Deployment of `n` replicas, rolled out: every replica updated and ready, no old pod.
fn rolled_out(n: i64) -> Value {
    json!({"metadata": {"generation": 1}, "spec": {"replicas": n},
        "status": {"observedGeneration": 1, "replicas": n, "updatedReplicas": n, "readyReplicas": n, "availableReplicas": n}})
}

fn compute_for(cr: &Value, observed: &[(&str, Value)]) -> Report {
    compute_with(&website(), cr, observed)
}

/// The status `r` computes for `cr` with these children (by id).
fn compute_with(r: &CompiledRule, cr: &Value, observed: &[(&str, Value)]) -> Report {
    let s = scope(r, cr).unwrap();
    let observed: HashMap<String, Value> = observed
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    let live = |rd: &crate::render::Rendered| observed.get(&rd.instance()).cloned();
    let plan = crate::render::render_with(r, &s, &live).ok();
    compute(r, &s, cr, plan.as_ref(), &observed)
}

#[test]
fn ready_replicas_and_the_cluster_url_come_from_the_children() {
    let cr = cr("ClusterIP");
    let rep = compute_for(
        &cr,
        &[
            ("deployment", rolled_out(3)),
            ("service", json!({"spec": {}})),
        ],
    );
    assert_eq!(rep.fields["readyReplicas"], json!(3), "{rep:?}");
    assert!(rep.fields.contains_key("url"), "{rep:?}");
    assert_eq!(
        rep.fields["url"],
        json!("http://my-blog-web.web.svc.cluster.local:80")
    );
    assert!(rep.ready, "{rep:?}");
    assert!(
        !rep.fields.contains_key("loadBalancerIP"),
        "helper fields are not exported"
    );
}

#[test]
fn a_load_balancer_with_an_ingress_ip_gives_its_url() {
    let cr = cr("LoadBalancer");
    let svc = json!({"status": {"loadBalancer": {"ingress": [{"ip": "203.0.113.7"}]}}});
    let rep = compute_for(
        &cr,
        &[
            ("deployment", json!({"status": {"readyReplicas": 1}})),
            ("service", svc),
        ],
    );
    assert_eq!(rep.fields["url"], json!("http://203.0.113.7"));
    assert!(!rep.ready, "1 of 3 ready");
    assert!(
        rep.notes.iter().any(|n| n.contains("ready expression")),
        "{:?}",
        rep.notes
    );
}

#[test]
fn missing_children_give_defaults_and_say_why() {
    let rep = compute_for(&cr("ClusterIP"), &[]);
    assert_eq!(rep.fields["readyReplicas"], json!(0));
    assert!(
        rep.notes
            .iter()
            .any(|n| n.contains("child `deployment` does not exist yet")),
        "{:?}",
        rep.notes
    );
    assert!(!rep.ready);
}

#[test]
fn a_value_of_the_wrong_type_is_a_problem_and_the_default_is_used() {
    let rep = compute_for(
        &cr("ClusterIP"),
        &[("deployment", json!({"status": {"readyReplicas": "three"}}))],
    );
    assert_eq!(rep.fields["readyReplicas"], json!(0));
    assert!(
        rep.problems
            .iter()
            .any(|p| p.contains("not of type integer")),
        "{:?}",
        rep.problems
    );
}

#[test]
fn several_matches_fill_arrays_and_are_an_error_for_scalars() {
    let r = rule(
        r#"
name: multi
watch: {group: x.io, version: v1, resource: things}
children:
  - id: d
    template: {apiVersion: apps/v1, kind: Deployment, metadata: {name: "{{ name }}"}}
status:
  fields:
    - {name: images, from: d, path: "$.spec.template.spec.containers[*].image", type: array}
    - {name: image, from: d, path: "$.spec.template.spec.containers[*].image", type: string}
"#,
    );
    let cr = json!({"metadata": {"name": "a", "namespace": "n"}});
    let d =
        json!({"spec": {"template": {"spec": {"containers": [{"image": "a"}, {"image": "b"}]}}}});
    let rep = compute_with(&r, &cr, &[("d", d)]);
    assert_eq!(rep.fields["images"], json!(["a", "b"]));
    assert!(!rep.fields.contains_key("image"));
    assert!(
        rep.problems.iter().any(|p| p.contains("matched 2 values")),
        "{:?}",
        rep.problems
    );
}

#[test]
fn expressions_read_children_self_and_earlier_fields() {
    let r = rule(
        r#"
name: reads
watch: {group: x.io, version: v1, resource: things}
children:
  - id: d
    template: {apiVersion: apps/v1, kind: Deployment, metadata: {name: "{{ name }}"}}
  - id: s
    template: {apiVersion: v1, kind: Service, metadata: {name: "{{ name }}"}}
status:
  fields:
    - {name: replicas, value: "children.d.spec.replicas", type: integer}
    - {name: owner, value: "self.metadata.name ~ '/' ~ status.replicas", type: string}
  ready: "children.s is not none and status.replicas == 4"
"#,
    );
    assert!(r.status_reads.contains("children") && r.status_reads.contains("self"));
    let cr = json!({"metadata": {"name": "a", "namespace": "n"}});
    let rep = compute_with(&r, &cr, &[("d", rolled_out(4)), ("s", json!({"spec": {}}))]);
    assert!(rep.problems.is_empty(), "{:?}", rep.problems);
    assert_eq!(rep.fields["replicas"], json!(4));
    assert_eq!(rep.fields["owner"], json!("a/4"));
    assert!(rep.ready, "{rep:?}");
}

#[test]
fn the_website_status_reads_neither_children_nor_self() {
    let r = website();
    assert!(!r.status_reads.contains("children"));
    assert!(!r.status_reads.contains("self"));
    assert!(r.status_reads.contains("status"));
}

#[test]
fn without_a_ready_expression_a_child_whose_when_is_false_is_not_awaited() {
    let r = rule(
        "name: c\nwatch: {group: x.io, version: v1, resource: cs}\nchildren:\n  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"{{ name }}\"}}\n  - id: extra\n    when: spec.extra | default(false)\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"{{ name }}-x\"}}\n",
    );
    let cr = json!({"metadata": {"name": "a", "namespace": "n"}, "spec": {}});
    let rep = compute_with(&r, &cr, &[("cm", json!({"data": {}}))]);
    assert!(rep.ready, "{rep:?}");
    let cr = json!({"metadata": {"name": "a", "namespace": "n"}, "spec": {"extra": true}});
    let rep = compute_with(&r, &cr, &[("cm", json!({"data": {}}))]);
    assert!(!rep.ready);
    assert_eq!(
        rep.notes[0],
        "child `extra` (ConfigMap a-x) does not exist yet"
    );
}

#[test]
fn ready_names_the_child_that_blocks_and_why() {
    let r = rule(
        "name: c\nwatch: {group: x.io, version: v1, resource: cs}\nchildren:\n  - id: job\n    template: {apiVersion: batch/v1, kind: Job, metadata: {name: \"{{ name }}-migrate\"}}\n  - id: db\n    readyWhen: child.status.phase == 'Ready' and spec.replicas > 0\n    template: {apiVersion: example.io/v1, kind: Database, metadata: {name: \"{{ name }}\"}}\n",
    );
    let cr = json!({"metadata": {"name": "a", "namespace": "n"}, "spec": {"replicas": 1}});
    let job = json!({"metadata": {"name": "a-migrate"}, "status": {}});
    let db = json!({"metadata": {"name": "a"}, "status": {"phase": "Provisioning"}});
    let rep = compute_with(&r, &cr, &[("job", job), ("db", db.clone())]);
    assert!(!rep.ready);
    assert_eq!(
        rep.notes,
        vec![
            "child `job` (Job a-migrate): the Job has not completed".to_string(),
            "child `db` (Database a): readyWhen `child.status.phase == 'Ready' and spec.replicas > 0` is false".to_string(),
        ]
    );
    let done = json!({"metadata": {"name": "a-migrate"}, "status": {"succeeded": 1}});
    let up = json!({"metadata": {"name": "a"}, "status": {"phase": "Ready"}});
    let rep = compute_with(&r, &cr, &[("job", done), ("db", up)]);
    assert!(rep.ready, "{rep:?}");
}

#[test]
fn the_ready_expression_adds_to_the_childrens_readiness_and_never_waives_it() {
    // Revision 2's pods cannot be scheduled: the old pod still serves, so readyReplicas
    // holds and the rule's `ready` is true, but the Deployment has not rolled out.
    let rolling = json!({"metadata": {"generation": 2}, "spec": {"replicas": 3},
        "status": {"observedGeneration": 2, "replicas": 4, "updatedReplicas": 1, "readyReplicas": 3}});
    let rep = compute_for(
        &cr("ClusterIP"),
        &[("deployment", rolling), ("service", json!({"spec": {}}))],
    );
    assert_eq!(rep.fields["readyReplicas"], json!(3));
    assert!(!rep.ready, "{rep:?}");
    assert_eq!(
        rep.notes[0],
        "child `deployment` (Deployment ?): 1/3 replicas updated"
    );
    // Rolled out, the expression decides too, and the message says what was checked.
    let rep = compute_for(
        &cr("ClusterIP"),
        &[
            ("deployment", rolled_out(3)),
            ("service", json!({"spec": {}})),
        ],
    );
    assert!(rep.ready, "{rep:?}");
    assert_eq!(
        rep.checked,
        "each child ready by its own check (Deployment ? rolled out: its latest generation seen, 3 updated and ready; Service ? exists), and `status.readyReplicas >= spec.replicas` holds"
    );
    let [ready, ..] = verdict::conditions(Some(&rep), None);
    assert_eq!(ready.message, rep.checked);
}
