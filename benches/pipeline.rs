//! Microbenchmarks of the pure pipeline: rules load and compile, rendering the WebSite
//! children, computing the WebSite status. `cargo bench` prints the figures.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::json;
use std::collections::HashMap;
use std::hint::black_box;
use std::path::Path;

const WEBSITE: &str = include_str!("../rules/website.yaml");

fn website() -> std::sync::Arc<ruleop::rules::CompiledRule> {
    let (mut rules, errors) = ruleop::rules::load_str(WEBSITE, Path::new("website.yaml"));
    assert!(errors.is_empty());
    rules.remove(0)
}

fn cr(i: usize) -> serde_json::Value {
    json!({
        "apiVersion": "sre.example.com/v1alpha1", "kind": "WebSite",
        "metadata": {"name": format!("site-{i}"), "namespace": "bench", "uid": format!("uid-{i}"), "generation": 1},
        "spec": {"image": "nginx:1.27", "replicas": 3, "port": 8080, "serviceType": "ClusterIP"}
    })
}

fn load(c: &mut Criterion) {
    c.bench_function("load and compile rules/website.yaml", |b| {
        b.iter(|| ruleop::rules::load_str(black_box(WEBSITE), Path::new("website.yaml")))
    });
}

fn render(c: &mut Criterion) {
    let rule = website();
    let crs: Vec<_> = (0..64).map(cr).collect();
    let mut g = c.benchmark_group("render");
    // Each iteration renders one WebSite: its two children.
    g.throughput(Throughput::Elements(2));
    let mut i = 0;
    g.bench_function("WebSite children (Deployment + Service)", |b| {
        b.iter(|| {
            i = (i + 1) % crs.len();
            ruleop::render::render(&rule, black_box(&crs[i])).unwrap()
        })
    });
    g.finish();
}

fn status(c: &mut Criterion) {
    let rule = website();
    let cr = cr(1);
    let children = ruleop::render::render(&rule, &cr).unwrap();
    let mut observed: HashMap<String, serde_json::Value> =
        children.into_iter().map(|c| (c.id, c.object)).collect();
    observed.get_mut("deployment").unwrap()["status"] = json!({"readyReplicas": 3, "replicas": 3});
    let scope = ruleop::render::scope(&rule, &cr).unwrap();
    let plan = ruleop::render::render_with(&rule, &scope, &|_| None).unwrap();
    let mut g = c.benchmark_group("status");
    g.throughput(Throughput::Elements(1));
    g.bench_function("WebSite status from its children", |b| {
        b.iter(|| ruleop::status::compute(&rule, &scope, black_box(&cr), Some(&plan), &observed))
    });
    g.finish();
}

const MICROSERVICE: &str = include_str!("../tests/fixtures/microservice/rules.yaml");

/// The Microservice fixture with 100 peers (one NetworkPolicy each) and 100 ports (one
/// Service port and one container port each), its Secret and Job there.
fn collection(c: &mut Criterion) {
    let (mut rules, errors) = ruleop::rules::load_str(MICROSERVICE, Path::new("m.yaml"));
    assert!(errors.is_empty());
    let rule = rules.remove(0);
    let peers: Vec<String> = (0..100).map(|i| format!("peer-{i}")).collect();
    let ports: Vec<_> = (0..100)
        .map(|i| json!({"name": format!("p{i}"), "port": 8000 + i}))
        .collect();
    let cr = json!({
        "apiVersion": "example.ruleop.dev/v1", "kind": "Microservice",
        "metadata": {"name": "shop", "namespace": "bench", "uid": "u"},
        "spec": {"image": "shop:1", "replicas": 2, "secretName": "db", "config": {"A": "1"},
                 "ports": ports, "allowFrom": peers}
    });
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "db"}});
    let complete = json!({"status": {"succeeded": 1}, "spec": {"clusterIP": "10.0.0.1"}});
    let live = |r: &ruleop::render::Rendered| {
        (r.kind == "Job" || r.kind == "Service").then(|| complete.clone())
    };
    let scope = || {
        ruleop::render::scope(&rule, &cr)
            .unwrap()
            .with_existing(&rule, vec![Ok(secret.clone())])
    };
    let plan = ruleop::render::render_with(&rule, &scope(), &live).unwrap();
    assert!(plan.waiting.is_empty(), "{:?}", plan.waiting);
    let objects = plan.children.len() as u64;
    let mut g = c.benchmark_group("render");
    g.throughput(Throughput::Elements(objects));
    g.bench_function(
        format!("Microservice with a 100-item collection ({objects} objects, 100-entry lists)"),
        |b| b.iter(|| ruleop::render::render_with(&rule, black_box(&scope()), &live).unwrap()),
    );
    g.finish();
}

criterion_group!(benches, load, render, status, collection);
criterion_main!(benches);
