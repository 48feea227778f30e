//! Traces on the real control plane: `ruleop run --otlp-endpoint` sends one trace per
//! reconcile to a local OTLP/HTTP receiver (JSON bodies): kube-runtime's `reconciling
//! object` at the root with the watch event that caused it, ruleop's `reconcile` under
//! it, and under that the `render`, one `child write` per child written, and the `status
//! write`, all of one trace. A refused child's write span carries the error.

mod common;

use axum::Router;
use axum::extract::State;
use axum::routing::post;
use common::{Operator, eventually, kubectl_ok, manifest_in};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const T: Duration = Duration::from_secs(120);

/// A span as received.
#[derive(Clone, Debug)]
struct Span {
    trace: String,
    id: String,
    parent: String,
    name: String,
    attributes: HashMap<String, String>,
    error: bool,
}

type Received = Arc<Mutex<Vec<Span>>>;

async fn receive(State(got): State<Received>, body: String) -> &'static str {
    let Ok(doc) = serde_json::from_str::<Value>(&body) else {
        return "{}";
    };
    let spans = doc["resourceSpans"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|r| r["scopeSpans"].as_array().into_iter().flatten())
        .flat_map(|s| s["spans"].as_array().into_iter().flatten());
    let mut got = got.lock().unwrap();
    for s in spans {
        let text = |k: &str| s[k].as_str().unwrap_or_default().to_string();
        let attributes = s["attributes"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|a| {
                let v = &a["value"];
                let v = v["stringValue"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| v.to_string());
                (a["key"].as_str().unwrap_or_default().to_string(), v)
            })
            .collect();
        got.push(Span {
            trace: text("traceId"),
            id: text("spanId"),
            parent: text("parentSpanId"),
            name: text("name"),
            attributes,
            // STATUS_CODE_ERROR is 2.
            error: s["status"]["code"] == 2 || s["status"]["code"] == "STATUS_CODE_ERROR",
        });
    }
    "{}"
}

/// A local OTLP/HTTP receiver; returns its base URL and what it received.
async fn receiver() -> (String, Received) {
    let got: Received = Arc::default();
    let app = Router::new()
        .route("/v1/traces", post(receive))
        .with_state(got.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), got)
}

/// The trace of a reconcile of WebSite `name` that wrote its children and its status:
/// its spans, once they have all come.
fn trace_of(got: &Received, ns: &str, name: &str, children: usize) -> Option<Vec<Span>> {
    let spans = got.lock().unwrap().clone();
    spans
        .iter()
        .filter(|s| s.name == "reconciling object")
        .filter(|s| {
            s.attributes
                .get("object.ref")
                .is_some_and(|r| r.contains(&format!("{name}.{ns}")))
        })
        .map(|root| {
            spans
                .iter()
                .filter(|s| s.trace == root.trace)
                .cloned()
                .collect::<Vec<_>>()
        })
        .find(|t| {
            t.iter().filter(|s| s.name == "child write").count() >= children
                && t.iter().any(|s| s.name == "status write")
        })
}

fn one<'a>(spans: &'a [Span], name: &str) -> &'a Span {
    let found: Vec<&Span> = spans.iter().filter(|s| s.name == name).collect();
    assert_eq!(found.len(), 1, "one `{name}` span in {spans:#?}");
    found[0]
}

#[tokio::test]
async fn a_reconcile_is_one_trace_of_render_child_writes_and_status_write() {
    let client = common::client().await;
    common::install_crds(&["deploy/crds/websites.sre.example.com.yaml"]);
    let ns = common::namespace(&client, "otlp").await;
    let (url, got) = receiver().await;
    let dir = tempfile::tempdir().unwrap();
    let (good, broken) = common::website_rule_and_refused();
    let file = dir.path().join("website.yaml");
    std::fs::write(&file, &good).unwrap();
    let rules = file.to_str().unwrap().to_string();
    let _op = Operator::start_with_env(
        &ns,
        &[&rules],
        &["--otlp-endpoint", &url, "--otlp-protocol", "http/json"],
        &[("OTEL_BSP_SCHEDULE_DELAY", "200")],
    );
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&manifest_in("examples/website.yaml", &ns)),
    );

    let spans = eventually(T, "the trace of the first reconcile", || async {
        trace_of(&got, &ns, "my-blog", 2)
    })
    .await;
    let root = one(&spans, "reconciling object");
    assert_eq!(
        root.parent, "",
        "the reconcile's trace has its own root: {root:?}"
    );
    assert!(
        root.attributes.contains_key("object.reason"),
        "the watch event that caused it: {root:?}"
    );
    let reconcile = one(&spans, "reconcile");
    assert_eq!(reconcile.parent, root.id, "{spans:#?}");
    assert_eq!(
        reconcile.attributes.get("rule").map(String::as_str),
        Some("website")
    );
    assert_eq!(
        reconcile.attributes.get("name").map(String::as_str),
        Some("my-blog")
    );
    assert_eq!(one(&spans, "render").parent, reconcile.id, "{spans:#?}");
    assert_eq!(
        one(&spans, "status write").parent,
        reconcile.id,
        "{spans:#?}"
    );
    let mut kinds: Vec<&str> = spans
        .iter()
        .filter(|s| s.name == "child write")
        .inspect(|s| assert_eq!(s.parent, reconcile.id, "{spans:#?}"))
        .filter_map(|s| s.attributes.get("kind").map(String::as_str))
        .collect();
    kinds.sort();
    assert_eq!(kinds, ["Deployment", "Service"], "{spans:#?}");
    // The process's own spans (the rule's) are not sent.
    assert!(
        got.lock().unwrap().iter().all(|s| s.name != "rule"),
        "only reconciles are traced"
    );

    // A refused write: its span says so, with the API server's message.
    std::fs::write(&file, &broken).unwrap();
    let failed = eventually(T, "a child write span with an error", || async {
        got.lock()
            .unwrap()
            .iter()
            .find(|s| s.name == "child write" && s.error)
            .cloned()
    })
    .await;
    assert_eq!(
        failed.attributes.get("kind").map(String::as_str),
        Some("Deployment")
    );
    assert!(
        failed
            .attributes
            .get("error")
            .is_some_and(|e| e.contains("restartPolicy")),
        "{failed:?}"
    );
}
