//! Collections, references between children, waiting, and the graph's checks at load.

use super::*;

fn microservice() -> std::sync::Arc<crate::rules::CompiledRule> {
    rule(include_str!(
        "../../../tests/fixtures/microservice/rules.yaml"
    ))
}

fn shop(spec: Value) -> Value {
    json!({"apiVersion": "example.ruleop.dev/v1", "kind": "Microservice",
        "metadata": {"name": "shop", "namespace": "n", "uid": "u-9"}, "spec": spec})
}

fn shop_spec() -> Value {
    json!({"image": "shop:1", "replicas": 2, "secretName": "db", "config": {"A": "1"},
        "ports": [{"name": "http", "port": 8080}, {"name": "metrics", "port": 9090}],
        "allowFrom": ["frontend", "prometheus"]})
}

fn secret() -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db", "namespace": "n"}})
}

/// Renders with the Secret present and `live` (by name) as the cluster's objects.
fn plan_with(spec: Value, live: &[(&str, Value)]) -> Plan {
    let r = microservice();
    let s = scope(&r, &shop(spec))
        .unwrap()
        .with_existing(&r, vec![Ok(secret())]);
    let live: std::collections::HashMap<String, Value> = live
        .iter()
        .map(|(n, v)| (n.to_string(), v.clone()))
        .collect();
    render_with(&r, &s, &|c: &Rendered| live.get(&c.name).cloned()).unwrap()
}

fn names(p: &Plan) -> Vec<String> {
    p.children
        .iter()
        .map(|c| c.instance() + ":" + &c.name)
        .collect()
}

#[test]
fn a_collection_makes_one_object_per_item_and_a_list_entry_repeats_per_item() {
    let p = plan_with(shop_spec(), &[]);
    let n = names(&p);
    assert!(
        n.contains(&"allow[0]:shop-from-frontend".to_string()),
        "{n:?}"
    );
    assert!(
        n.contains(&"allow[1]:shop-from-prometheus".to_string()),
        "{n:?}"
    );
    let svc = p.children.iter().find(|c| c.id == "service").unwrap();
    assert_eq!(
        svc.object["spec"]["ports"],
        json!([{"name": "http", "port": 8080, "targetPort": "http"},
               {"name": "metrics", "port": 9090, "targetPort": "metrics"}]),
        "one port per entry, each a map with integers, no string building"
    );
    // No peers: no policies; no ports: no Service (its `when`), and the Deployment's
    // container has an empty port list, not a broken entry.
    let mut spec = shop_spec();
    spec["allowFrom"] = json!([]);
    spec["ports"] = json!([]);
    let job = plan_with(spec.clone(), &[])
        .children
        .iter()
        .find(|c| c.id == "migrate")
        .unwrap()
        .name
        .clone();
    let done = json!({"status": {"succeeded": 1}});
    let p = plan_with(spec, &[(&job, done)]);
    assert!(!names(&p).iter().any(|n| n.starts_with("allow")), "{p:?}");
    assert!(!names(&p).iter().any(|n| n.starts_with("service")));
    let app = p
        .children
        .iter()
        .find(|c| c.id == "app")
        .expect("the Deployment renders");
    assert_eq!(
        app.object["spec"]["template"]["spec"]["containers"][0]["ports"],
        json!([])
    );
}

#[test]
fn a_child_waits_for_what_it_reads_and_comes_after() {
    // Nothing in the cluster: the Deployment waits for the Job, the address for the Service.
    let p = plan_with(shop_spec(), &[]);
    let waiting: Vec<&str> = p.waiting.iter().map(|w| w.id.as_str()).collect();
    assert_eq!(waiting, vec!["app", "address"], "{p:?}");
    assert!(p.waiting[0].reason.contains("to be created"), "{p:?}");
    let job = p
        .children
        .iter()
        .find(|c| c.id == "migrate")
        .unwrap()
        .name
        .clone();
    // The Job exists but has not completed: still waiting, saying why.
    let p = plan_with(shop_spec(), &[(&job, json!({"status": {}}))]);
    assert!(
        p.waiting[0].reason.contains("the Job has not completed"),
        "{p:?}"
    );
    // Completed, and the Service has its cluster IP: everything renders.
    let done = json!({"status": {"conditions": [{"type": "Complete", "status": "True"}]}});
    let svc = json!({"spec": {"clusterIP": "10.0.0.7"}});
    let p = plan_with(shop_spec(), &[(&job, done.clone()), ("shop", svc)]);
    assert!(p.waiting.is_empty(), "{p:?}");
    let address = p.children.iter().find(|c| c.id == "address").unwrap();
    assert_eq!(address.object["data"]["clusterIP"], "10.0.0.7");
    // The Service exists but has no cluster IP yet: the address waits for that field.
    let p = plan_with(shop_spec(), &[(&job, done), ("shop", json!({"spec": {}}))]);
    let w = p.waiting.iter().find(|w| w.id == "address").unwrap();
    assert!(
        w.reason.contains("observed.service.spec.clusterIP"),
        "{w:?}"
    );
}

#[test]
fn the_checksum_of_a_rendered_child_changes_with_its_content_only() {
    let job_done = |p: &Plan| {
        let job = p
            .children
            .iter()
            .find(|c| c.id == "migrate")
            .unwrap()
            .name
            .clone();
        (job, json!({"status": {"succeeded": 1}}))
    };
    let first = plan_with(shop_spec(), &[]);
    let (job, done) = job_done(&first);
    let checksum = |spec: Value| {
        let p = plan_with(spec, &[(&job, done.clone())]);
        let app = p.children.iter().find(|c| c.id == "app").unwrap().clone();
        app.object["spec"]["template"]["metadata"]["annotations"]["checksum/config"].clone()
    };
    let a = checksum(shop_spec());
    let mut more_replicas = shop_spec();
    more_replicas["replicas"] = json!(5);
    assert_eq!(a, checksum(more_replicas));
    let mut new_config = shop_spec();
    new_config["config"]["A"] = json!("2");
    assert_ne!(a, checksum(new_config));
}

#[test]
fn a_missing_existing_object_makes_its_readers_wait_naming_it() {
    let r = microservice();
    let s = scope(&r, &shop(shop_spec())).unwrap().with_existing(
        &r,
        vec![Err("Secret `db` (not found in namespace n)".into())],
    );
    let p = render_with(&r, &s, &|_| None).unwrap();
    let migrate = p.waiting.iter().find(|w| w.id == "migrate").unwrap();
    assert_eq!(
        migrate.reason,
        "waits for Secret `db` (not found in namespace n)"
    );
    // What reads nothing missing is still made.
    assert!(p.children.iter().any(|c| c.id == "config"));
}

#[test]
fn foreach_over_something_else_than_a_list_fails_the_render_with_its_line() {
    let mut spec = shop_spec();
    spec["allowFrom"] = json!("frontend");
    let r = microservice();
    let s = scope(&r, &shop(spec))
        .unwrap()
        .with_existing(&r, vec![Ok(secret())]);
    let e = render_with(&r, &s, &|_| None).unwrap_err().to_string();
    assert!(
        e.contains("not a list") && e.contains("test.yaml:110"),
        "{e}"
    );
}

#[test]
fn items_of_a_collection_with_one_name_are_refused() {
    // At load: a name that reads no item.
    let e = load_errors(&format!(
        "{HEAD}children:\n  - id: cm\n    forEach: spec.items\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: \"{{{{ name }}}}\"}}}}\n"
    ));
    assert!(
        e.len() == 1 && e[0].contains("all get one name") && e[0].contains("g.yaml:6"),
        "{e:?}"
    );
    // At render: two items that give one name.
    let r = rule(&format!(
        "{HEAD}children:\n  - id: cm\n    forEach: spec.items\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: \"{{{{ name }}}}-{{{{ item }}}}\"}}}}\n"
    ));
    let cr = json!({"metadata": {"name": "a", "namespace": "n"}, "spec": {"items": [1, 1]}});
    let e = render(&r, &cr).unwrap_err().to_string();
    assert!(e.contains("`cm[0]` and `cm[1]` both render"), "{e}");
}

fn load_errors(text: &str) -> Vec<String> {
    let (_, errors) = crate::rules::load_str(text, std::path::Path::new("g.yaml"));
    errors.iter().map(ToString::to_string).collect()
}

const HEAD: &str = "name: c\nwatch: {group: x.io, version: v1, resource: cs}\n";

#[test]
fn a_cycle_between_children_is_refused_at_load_naming_it() {
    let e = load_errors(&format!(
        "{HEAD}children:\n  - id: a\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: x}}, data: {{k: \"{{{{ rendered.b.data.k }}}}\"}}}}\n  - id: b\n    after: [a]\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: y}}}}\n"
    ));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("cycle: a → b → a") && e[0].contains("g.yaml:4"),
        "{e:?}"
    );
}

#[test]
fn references_to_unknown_or_unnamed_children_are_refused_at_load() {
    let e = load_errors(&format!(
        "{HEAD}children:\n  - id: cfg\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: x}}}}\n  - id: app\n    after: [cgf]\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: y}}, data: {{a: \"{{{{ rendered.cfgg }}}}\", b: \"{{{{ rendered[spec.x] }}}}\", c: \"{{{{ existing.db }}}}\", d: \"{{{{ children.cfg }}}}\"}}}}\n"
    ));
    let all = e.join("\n");
    assert!(
        all.contains("`cgf` names no child") && all.contains("did you mean `cfg`?"),
        "{all}"
    );
    assert!(all.contains("`cfgg` names no child"), "{all}");
    assert!(
        all.contains("`rendered` is read without naming which one"),
        "{all}"
    );
    assert!(all.contains("`db` names no existing object"), "{all}");
    assert!(
        all.contains("unknown variable `children`") && all.contains("rendered.<id>"),
        "{all}"
    );
}

#[test]
fn an_item_variable_is_seen_only_inside_its_repetition() {
    let e = load_errors(&format!(
        "{HEAD}children:\n  - id: svc\n    template:\n      apiVersion: v1\n      kind: Service\n      metadata: {{name: x, labels: {{p: \"{{{{ port.name }}}}\"}}}}\n      spec:\n        ports:\n          - forEach: spec.ports\n            as: port\n            item: {{port: \"{{{{ port.port }}}}\", name: \"p{{{{ index }}}}\"}}\n"
    ));
    assert_eq!(e.len(), 1, "{e:?}");
    assert!(
        e[0].contains("unknown variable `port`") && e[0].contains("g.yaml:8"),
        "{e:?}"
    );
}

#[test]
fn a_condition_on_a_missing_child_waits_instead_of_dropping_the_child() {
    let r = rule(&format!(
        "{HEAD}children:\n  - id: db\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: db}}}}\n  - id: app\n    when: observed.db.data.enabled == 'yes'\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: app}}}}\n"
    ));
    let cr = json!({"metadata": {"name": "a", "namespace": "n"}, "spec": {}});
    let s = scope(&r, &cr).unwrap();
    let p = render_with(&r, &s, &|_| None).unwrap();
    assert_eq!(p.waiting.len(), 1, "{p:?}");
    assert_eq!(p.waiting[0].id, "app");
    // There, and the condition decides.
    let db = json!({"data": {"enabled": "yes"}});
    let p = render_with(&r, &s, &|c: &Rendered| (c.name == "db").then(|| db.clone())).unwrap();
    assert!(p.waiting.is_empty() && p.children.len() == 2, "{p:?}");
}

#[test]
fn an_index_into_a_live_field_not_there_yet_waits() {
    let r = rule(&format!(
        "{HEAD}children:\n  - id: lb\n    template: {{apiVersion: v1, kind: Service, metadata: {{name: lb}}, spec: {{type: LoadBalancer}}}}\n  - id: dns\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: dns}}, data: {{ip: \"{{{{ observed.lb.status.loadBalancer.ingress[0].ip }}}}\"}}}}\n"
    ));
    let cr = json!({"metadata": {"name": "a", "namespace": "n"}, "spec": {}});
    let s = scope(&r, &cr).unwrap();
    let pending = json!({"status": {"loadBalancer": {}}});
    let p = render_with(&r, &s, &|c: &Rendered| {
        (c.name == "lb").then(|| pending.clone())
    })
    .unwrap();
    assert_eq!(p.waiting.len(), 1, "{p:?}");
    assert!(p.waiting[0].reason.contains("ingress[0].ip"), "{p:?}");
    let up = json!({"status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}});
    let p = render_with(&r, &s, &|c: &Rendered| (c.name == "lb").then(|| up.clone())).unwrap();
    let dns = p.children.iter().find(|c| c.id == "dns").unwrap();
    assert_eq!(dns.object["data"]["ip"], "1.2.3.4");
}

#[test]
fn an_id_with_a_dash_is_read_with_a_subscript() {
    let text = format!(
        "{HEAD}children:\n  - id: my-config\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: x}}, data: {{a: b}}}}\n  - id: app\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: y}}, data: {{sum: \"{{{{ rendered['my-config'].data | sha256 }}}}\"}}}}\n"
    );
    let r = rule(&text);
    assert!(r.children[1].reads.rendered.contains(&0));
    let e = load_errors(&text.replace("rendered['my-config']", "rendered.my"));
    assert!(
        e.iter().any(|e| e.contains("rendered['my-config']")),
        "{e:?}"
    );
}

#[test]
fn status_reads_of_existing_objects_and_item_names_are_checked() {
    let e = load_errors(&format!(
        "{HEAD}existing:\n  - {{id: db, apiVersion: v1, kind: Secret, name: x}}\nchildren:\n  - id: cm\n    forEach: spec.items\n    as: child\n    template: {{apiVersion: v1, kind: ConfigMap, metadata: {{name: \"{{{{ index }}}}\"}}}}\nstatus:\n  fields:\n    - {{name: s, type: string, value: existing.dbb.metadata.name}}\n"
    ));
    let all = e.join("\n");
    assert!(all.contains("`as: child` cannot name the item"), "{all}");
    assert!(
        all.contains("`dbb` names no existing object") && all.contains("did you mean `db`?"),
        "{all}"
    );
}

#[test]
fn in_the_cluster_a_reader_waits_until_its_dependency_is_the_one_rendered_now() {
    let r = rule(
        "name: a\nwatch: {group: x.io, version: v1, resource: as}\nchildren:\n  - id: db\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"{{ name }}-db\"}, data: {v: \"{{ spec.v }}\"}}\n  - id: app\n    after: [db]\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"{{ name }}-app\"}, data: {v: \"{{ spec.v }}\"}}\n",
    );
    let cr = json!({"apiVersion": "x.io/v1", "kind": "A", "metadata": {"name": "s", "namespace": "n", "uid": "u"}, "spec": {"v": "2"}});
    let s = scope(&r, &cr).unwrap();
    let db_now = render_with(&r, &s, &|_| None).unwrap().children[0].clone();
    let live = |hash: &str| {
        let mut o = db_now.object.clone();
        o["metadata"]["annotations"][crate::render::HASH_ANNOTATION] = json!(hash);
        o
    };
    let old = live("an-older-render");
    // Offline, the file's object is taken as it is.
    let p = render_with(&r, &s, &|c: &Rendered| (c.id == "db").then(|| old.clone())).unwrap();
    assert!(p.waiting.is_empty(), "{:?}", p.waiting);
    // In the cluster, the old db is not the one rendered now: app waits.
    let p = render_applied(&r, &s, &|c: &Rendered| (c.id == "db").then(|| old.clone())).unwrap();
    let app = p.waiting.iter().find(|w| w.id == "app").expect("app waits");
    assert!(app.reason.contains("to be applied"), "{}", app.reason);
    let current = live(&db_now.hash);
    let p = render_applied(&r, &s, &|c: &Rendered| {
        (c.id == "db").then(|| current.clone())
    })
    .unwrap();
    assert!(p.waiting.is_empty(), "{:?}", p.waiting);
}

#[test]
fn a_render_past_its_budget_fails_with_what_it_went_past() {
    let r = rule(
        "name: a\nwatch: {group: x.io, version: v1, resource: as}\nchildren:\n  - id: cm\n    forEach: spec.items\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"{{ name }}-{{ item }}\"}, data: {blob: \"{{ spec.blob }}\"}}\n",
    );
    let items: Vec<String> = (0..1000).map(|i| format!("i{i}")).collect();
    let cr = json!({"apiVersion": "x.io/v1", "kind": "A", "metadata": {"name": "s", "namespace": "n", "uid": "u"},
        "spec": {"items": items, "blob": "x".repeat(20_000)}});
    let s = scope(&r, &cr).unwrap();
    let e = render_with(&r, &s, &|_| None).unwrap_err();
    assert!(matches!(e, RenderError::Budget { .. }), "{e}");
    assert!(e.to_string().contains("bytes of objects"), "{e}");
    let small = json!({"apiVersion": "x.io/v1", "kind": "A", "metadata": {"name": "s", "namespace": "n", "uid": "u"},
        "spec": {"items": items, "blob": "x"}});
    let s = scope(&r, &small).unwrap();
    assert_eq!(render_with(&r, &s, &|_| None).unwrap().children.len(), 1000);
}
