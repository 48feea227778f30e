//! Shared helpers for the integration tests. They run against the real local control
//! plane that `make test` starts (tests/cluster/up.sh); KUBECONFIG points at it.
#![allow(dead_code)]

use kube::Client;
use std::future::Future;
use std::time::{Duration, Instant};

/// A client for the local control plane. Fails loudly when there is none.
pub async fn client() -> Client {
    if std::env::var_os("KUBECONFIG").is_none() {
        let local = concat!(env!("CARGO_MANIFEST_DIR"), "/target/cluster/kubeconfig");
        // SAFETY of intent: tests set this once, before any client reads it.
        unsafe { std::env::set_var("KUBECONFIG", local) };
    }
    Client::try_default()
        .await
        .expect("no cluster: run `make test` (or `make cluster` first)")
}

/// A fresh namespace for one test, named after it.
pub async fn namespace(client: &Client, prefix: &str) -> String {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{Api, PostParams};
    let name = format!("{prefix}-{}", std::process::id() % 100000);
    let api: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    let _ = api.create(&PostParams::default(), &ns).await;
    // The controller-manager creates the default ServiceAccount pods need.
    eventually(
        Duration::from_secs(30),
        "default ServiceAccount",
        || async {
            let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> =
                Api::namespaced(client.clone(), &name);
            sa.get_opt("default").await.ok().flatten().map(|_| ())
        },
    )
    .await;
    name
}

/// Polls `f` until it gives Some, or panics after `timeout` naming `what`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return v;
        }
        if start.elapsed() > timeout {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
