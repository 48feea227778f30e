//! A fleet of WebSites in one namespace: made from a list of names, and checked to have
//! converged exactly (status current, their two children with the image, nothing else).

use super::list_at;
use serde_json::json;
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

pub fn websites(ns: &str, names: impl Iterator<Item = String>, image: &str) -> String {
    names
        .map(|n| {
            let doc = json!({"apiVersion": "sre.example.com/v1alpha1", "kind": "WebSite", "metadata": {"name": n, "namespace": ns}, "spec": {"image": image, "replicas": 1}});
            format!("---\n{}", serde_yaml::to_string(&doc).unwrap())
        })
        .collect::<String>()
}

/// Every WebSite in `ns` has its status current and exactly its two children with `image`;
/// no child without a WebSite. Returns a description of what is missing.
pub fn converged(kc: &str, ns: &str, n: usize, image: &str) -> Result<(), String> {
    let sites = list_at(kc, "websites", ns, None);
    if sites.len() != n {
        return Err(format!("{} websites of {n}", sites.len()));
    }
    let stale = sites
        .iter()
        .filter(|w| w["status"]["observedGeneration"] != w["metadata"]["generation"])
        .count();
    if stale > 0 {
        return Err(format!("{stale} statuses not current"));
    }
    let names: BTreeSet<String> = sites
        .iter()
        .map(|w| format!("{}-web", w["metadata"]["name"].as_str().unwrap()))
        .collect();
    let deps = list_at(kc, "deployments", ns, Some("ruleop.dev/rule=website"));
    let svcs = list_at(kc, "services", ns, Some("ruleop.dev/rule=website"));
    let dep_names: BTreeSet<String> = deps
        .iter()
        .map(|d| d["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    let svc_names: BTreeSet<String> = svcs
        .iter()
        .map(|d| d["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    if dep_names != names || svc_names != names || deps.len() != n || svcs.len() != n {
        return Err(format!(
            "{} deployments, {} services for {n} websites",
            deps.len(),
            svcs.len()
        ));
    }
    let wrong = deps
        .iter()
        .filter(|d| d["spec"]["template"]["spec"]["containers"][0]["image"] != image)
        .count();
    if wrong > 0 {
        return Err(format!("{wrong} deployments without image {image}"));
    }
    Ok(())
}

pub async fn wait_converged(
    kc: &str,
    ns: &str,
    n: usize,
    image: &str,
    timeout: Duration,
) -> Duration {
    let start = Instant::now();
    let mut last = String::new();
    while start.elapsed() < timeout {
        match converged(kc, ns, n, image) {
            Ok(()) => return start.elapsed(),
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    panic!("not converged after {timeout:?}: {last}");
}
