//! The watched kind's CRD, followed for changes of its schema: the status fields the API
//! server refused or dropped ([`crate::status::StatusSchema`]) are tried again once the
//! CRD has a new generation (a CRD applied or fixed after its rule, in GitOps order), and
//! every resource is reconciled again to write them. One watch of one object's metadata:
//! nothing in steady state. Needs `list` and `watch` on that CRD (`ruleop rbac` grants
//! them with `--install-crds`); without them, a refused field stays left out until ruleop
//! restarts, and the log says so once.

use crate::status::StatusSchema;
use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use std::sync::Arc;
use tokio::sync::mpsc;

/// Follows CRD `name` until the rule stops.
pub(super) async fn follow(
    client: kube::Client,
    name: String,
    schema: Arc<StatusSchema>,
    again: mpsc::Sender<()>,
) {
    let api: Api<PartialObjectMeta<CustomResourceDefinition>> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = watcher(api, config)
        .default_backoff()
        .applied_objects()
        .boxed();
    let mut seen: Option<i64> = None;
    while let Some(ev) = events.next().await {
        let crd = match ev {
            Ok(crd) => crd,
            Err(e) if !forbidden(&e) => {
                tracing::debug!(crd = %name, error = %e, "the watch of the kind's CRD failed; retrying");
                continue;
            }
            Err(e) => {
                tracing::info!(crd = %name, error = %e, "the kind's CRD cannot be watched: a status field its schema refused stays left out until ruleop restarts (grant list and watch on the CRD)");
                return;
            }
        };
        let generation = crd.metadata.generation;
        if seen.is_some() && generation != seen {
            try_again(&name, &schema, &again).await;
        }
        seen = generation;
    }
}

/// After a CRD change, how long until each try of the refused fields: the API server takes
/// the new schema for its objects a moment after the CRD says so, and a try too early is
/// refused again.
const TRIES: [u64; 4] = [0, 3, 10, 30];

/// Tries the refused status fields again, a few times over half a minute, each time only
/// if they were refused again since (nothing is written once they are accepted).
async fn try_again(name: &str, schema: &StatusSchema, again: &mpsc::Sender<()>) {
    for wait in TRIES {
        tokio::time::sleep(std::time::Duration::from_secs(wait)).await;
        if schema.forget() {
            tracing::info!(crd = %name, "the kind's CRD changed: the status fields it refused are tried again");
            let _ = again.send(()).await;
        }
    }
}

/// Whether the watch was refused by the RBAC (then it is not tried again).
fn forbidden(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s)) => s.code == 403,
        watcher::Error::WatchError(s) => s.code == 403,
        _ => false,
    }
}

/// The companion: every rule's CRD followed (by its name, `<resource>.<group>`).
pub(super) const COMPANION: super::shape::Companion<super::shape::StartBeside> =
    super::shape::Companion {
        name: "CRD followed",
        runs: |_, _| true,
        start,
    };

fn start(b: &super::shape::Beside<'_>) -> Option<super::shape::AbortOnDrop> {
    let w = &b.early.rule.watch;
    Some(super::shape::spawn(follow(
        b.early.own.clone(),
        w.crd_name(),
        b.status_schema.clone(),
        b.reconcile_all.clone(),
    )))
}
