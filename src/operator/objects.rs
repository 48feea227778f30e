//! The Rule objects of the cluster, watched: every replica reads the same Rules, so they
//! never disagree about which rules are in force. Each change signals the main loop, which
//! loads them into the rule book beside the files.

use crate::cache::tolerant::Tolerant;
use crate::rules::object::{GROUP, KIND, PLURAL, VERSION, api_version};
use futures::{StreamExt, TryStreamExt};
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
    /// The Rules' API and selector, for a fresh list (see [`RuleObjects::caught_up`]).
    api: Api<Tolerant>,
    selector: Option<String>,
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

/// What a failed Rule watch means for whoever reads the log, or None for what is harmless:
/// an expired watch (410 Gone, as after a CRD update or an etcd compaction) or a dropped
/// connection, which the watcher mends by listing again.
fn watch_failure(e: &watcher::Error) -> Option<&'static str> {
    use watcher::Error as W;
    let code = match e {
        W::WatchError(s) => Some(s.code),
        W::InitialListFailed(kube::Error::Api(s)) | W::WatchStartFailed(kube::Error::Api(s)) => {
            Some(s.code)
        }
        W::WatchFailed(_) => return None,
        _ => None,
    };
    match code {
        Some(410) => None,
        Some(404) => Some(
            "Rule objects cannot be watched: the Rule kind is not installed (apply deploy/crds/rules.ruleop.dev.yaml, or run with --rule-objects=false)",
        ),
        Some(401 | 403) => Some(
            "Rule objects cannot be watched: ruleop may not list and watch rules.ruleop.dev (grant them to its ServiceAccount, as deploy/rbac.yaml does)",
        ),
        _ => {
            Some("Rule objects cannot be watched (the API server refused or could not be reached)")
        }
    }
}

impl RuleObjects {
    /// Starts watching Rules. A cluster without the Rule kind (its CRD not installed) or
    /// a ServiceAccount not allowed to list them is logged once, and retried.
    /// `selector`: only the Rules with these labels.
    pub fn start(client: kube::Client, selector: Option<&str>) -> RuleObjects {
        let ar = resource();
        // (Read tolerantly: one Rule nested too deep to decode must not stop every Rule; it
        // loads as a Rule with no spec, refused.)
        let api: Api<Tolerant> = Api::all_with(client, &ar);
        let fresh = api.clone();
        let writer = reflector::store::Writer::new(ar);
        let store = writer.as_reader();
        let (tx, changes) = mpsc::channel(1);
        let failed = Arc::new(Notify::new());
        let fail = failed.clone();
        let mut config = watcher::Config::default();
        if let Some(s) = selector {
            config = config.labels(s);
        }
        let stream = watcher(api, config)
            .default_backoff()
            .map_ok(crate::cache::tolerant::dynamic)
            .reflect(writer);
        let task = tokio::spawn(async move {
            let mut told = false;
            let mut stream = std::pin::pin!(stream);
            while let Some(ev) = stream.next().await {
                match ev {
                    Ok(_) => {
                        told = false;
                        let _ = tx.try_send(());
                    }
                    Err(e) => match watch_failure(&e) {
                        Some(why) if !told => {
                            told = true;
                            fail.notify_one();
                            tracing::warn!(error = %e, "{why}; retrying");
                        }
                        _ => tracing::debug!(error = %e, "Rule watch (re-listing)"),
                    },
                }
            }
        });
        RuleObjects {
            store,
            api: fresh,
            selector: selector.map(str::to_string),
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

    /// Waits (at most `within`) until the watch's cache holds the Rules at least as the API
    /// server gives them now: every Rule listed is in it at its listed version or later, its
    /// status included (where a rollout stands, which Rule serves a kind), and none it no
    /// longer lists (deleted) is still cached.
    /// A new leader acts only on Rules it has seen after taking
    /// the Lease (a standby whose watch lags would run an older generation, and take what
    /// the newer one added for an edit to undo). False when it could not tell (the list
    /// failed) or the cache did not catch up in time (then it goes on, and says so).
    pub async fn caught_up(&self, within: Duration) -> bool {
        let mut lp = kube::api::ListParams::default();
        if let Some(s) = &self.selector {
            lp = lp.labels(s);
        }
        let (listed, list_version): (Vec<DynamicObject>, Option<u64>) = match self
            .api
            .list(&lp)
            .await
        {
            Ok(l) => (
                l.items.into_iter().map(|t| t.0).collect(),
                l.metadata.resource_version.and_then(|v| v.parse().ok()),
            ),
            Err(e) => {
                tracing::warn!(error = %e, "the Rules cannot be listed to check that this replica's view of them is current");
                return false;
            }
        };
        let start = tokio::time::Instant::now();
        loop {
            let cached = self.store.state();
            let behind = listed.iter().any(|l| {
                !cached.iter().any(|c| {
                    c.metadata.uid == l.metadata.uid && not_older(&c.metadata, &l.metadata)
                })
            });
            // A Rule the list no longer has (deleted since) is still in the cache: its
            // deletion has not reached the watch yet.
            // (One made since the list is newer than it: no sign of lag.)
            let made_since = |c: &DynamicObject| {
                let v = c
                    .metadata
                    .resource_version
                    .as_deref()?
                    .parse::<u64>()
                    .ok()?;
                Some(v > list_version?)
            };
            let gone_yet_cached = cached.iter().any(|c| {
                !listed.iter().any(|l| l.metadata.uid == c.metadata.uid)
                    && made_since(c) != Some(true)
            });
            let behind = behind || gone_yet_cached;
            if !behind {
                return true;
            }
            if start.elapsed() >= within {
                tracing::warn!(
                    "this replica's watch of Rules has not caught up with the API server's list: it goes on with what it has"
                );
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
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

/// Whether the cached Rule is the listed one or a later version of it: the same
/// resourceVersion, or a larger one (the API server's are etcd revisions; compared as
/// numbers only when both read as numbers, else by generation).
fn not_older(
    cached: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    listed: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> bool {
    let number = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        m.resource_version.as_deref()?.parse::<u64>().ok()
    };
    if cached.resource_version == listed.resource_version {
        return true;
    }
    match (number(cached), number(listed)) {
        (Some(c), Some(l)) => c >= l,
        _ => cached.generation >= listed.generation,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn meta(rv: &str, generation: i64) -> ObjectMeta {
        ObjectMeta {
            resource_version: Some(rv.into()),
            generation: Some(generation),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn a_cached_rule_is_caught_up_at_the_listed_version_or_a_later_one() {
        assert!(not_older(&meta("12", 3), &meta("12", 3)));
        assert!(not_older(&meta("15", 3), &meta("12", 3)));
        // Its status moved on (same generation): a cache at 10 has not seen it.
        assert!(!not_older(&meta("10", 3), &meta("12", 3)));
        // Versions that are not numbers: by generation.
        assert!(not_older(&meta("b", 4), &meta("a", 3)));
        assert!(!not_older(&meta("b", 2), &meta("a", 3)));
    }

    fn status(code: u16) -> Box<kube::core::Status> {
        Box::new(kube::core::Status {
            code,
            ..kube::core::Status::default()
        })
    }

    #[test]
    fn an_expired_watch_is_not_told_as_a_missing_kind() {
        use watcher::Error as W;
        assert_eq!(watch_failure(&W::WatchError(status(410))), None);
        let gone = W::InitialListFailed(kube::Error::Api(status(404)));
        assert!(watch_failure(&gone).unwrap().contains("not installed"));
        let denied = W::WatchStartFailed(kube::Error::Api(status(403)));
        assert!(watch_failure(&denied).unwrap().contains("may not list"));
        assert!(watch_failure(&W::WatchError(status(500))).is_some());
    }
}
