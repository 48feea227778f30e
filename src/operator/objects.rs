//! The Rule objects of the cluster, watched: every replica reads the same Rules, so they
//! never disagree about which rules are in force. Each change signals the main loop, which
//! loads them into the rule book beside the files.

use crate::rules::object::{GROUP, KIND, PLURAL, VERSION, api_version};
use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, mpsc};

/// The Rule kind, as the watch and the status writes name it.
pub fn resource() -> ApiResource {
    ApiResource {
        group: GROUP.into(),
        version: VERSION.into(),
        api_version: api_version(),
        kind: KIND.into(),
        plural: PLURAL.into(),
    }
}

/// The watch of Rule objects and its cache.
pub struct RuleObjects {
    pub store: Store<DynamicObject>,
    /// One signal per burst of changes (a full channel already holds one).
    pub changes: mpsc::Receiver<()>,
    /// Set when a list or watch of Rules failed (the kind not served, not allowed).
    failed: Arc<Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RuleObjects {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RuleObjects {
    /// Starts watching Rules. A cluster without the Rule kind (its CRD not installed) or
    /// a ServiceAccount not allowed to list them is logged once, and retried.
    /// `selector`: only the Rules with these labels.
    pub fn start(client: kube::Client, selector: Option<&str>) -> RuleObjects {
        let ar = resource();
        let api: Api<DynamicObject> = Api::all_with(client, &ar);
        let writer = reflector::store::Writer::new(ar);
        let store = writer.as_reader();
        let (tx, changes) = mpsc::channel(1);
        let failed = Arc::new(Notify::new());
        let fail = failed.clone();
        let mut config = watcher::Config::default();
        if let Some(s) = selector {
            config = config.labels(s);
        }
        let stream = watcher(api, config).default_backoff().reflect(writer);
        let task = tokio::spawn(async move {
            let mut told = false;
            let mut stream = std::pin::pin!(stream);
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(_) => {
                        told = false;
                        let _ = tx.try_send(());
                    }
                    Err(e) if !told => {
                        told = true;
                        fail.notify_one();
                        tracing::warn!(error = %e, "Rule objects cannot be watched (is the Rule CRD, deploy/crds/rules.ruleop.dev.yaml, installed, and may ruleop list rules.ruleop.dev?); retrying");
                    }
                    Err(e) => tracing::debug!(error = %e, "Rule watch"),
                }
            }
        });
        RuleObjects {
            store,
            changes,
            failed,
            task,
        }
    }

    /// Waits until the first list is in: false at once when it failed (a cluster without
    /// the kind never lists), or after `within`.
    pub async fn ready(&self, within: Duration) -> bool {
        tokio::select! {
            r = tokio::time::timeout(within, self.store.wait_until_ready()) => r.is_ok_and(|r| r.is_ok()),
            _ = self.failed.notified() => false,
        }
    }

    /// Every Rule, as JSON.
    pub fn list(&self) -> Vec<Value> {
        self.store
            .state()
            .iter()
            .filter_map(|o| serde_json::to_value(o.as_ref()).ok())
            .collect()
    }
}
