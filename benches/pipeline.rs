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
    let mut g = c.benchmark_group("status");
    g.throughput(Throughput::Elements(1));
    g.bench_function("WebSite status from its children", |b| {
        b.iter(|| ruleop::status::compute(&rule, &scope, black_box(&cr), &observed))
    });
    g.finish();
}

criterion_group!(benches, load, render, status);
criterion_main!(benches);
