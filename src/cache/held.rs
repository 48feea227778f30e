//! Names a child needs that another's object holds (`NotOwned`). Such an object carries no
//! label of the rule, so no child watch sees it go: without more, the resources waiting
//! for its name would try again only on their backoff (up to 5 minutes). Each held name is
//! watched by itself (a field selector on its name, in its namespace) while a resource waits
//! for it; when the object is deleted, or its owners or labels change (it may now be
//! adoptable, or ours), the waiting resources are reconciled at once and the watch ends (a
//! reconcile that finds the name still held watches it again). At most [`MOST`] names per
//! rule are watched; past that, and after [`LONGEST`] of waiting, the backoff alone remains.

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::watcher::{self, Event};
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::AbortHandle;

/// Most names watched at once for one rule.
pub const MOST: usize = 100;
/// Longest one name is watched; the waiting resources' backoff goes on meanwhile.
pub const LONGEST: Duration = Duration::from_secs(3600);

/// A held name: the kind (`apiVersion`, plural), namespace, name.
type Key = (String, String, String, String);

/// The names a rule's resources wait for, each watched.
pub struct HeldNames {
    inner: Arc<Inner>,
}

struct Inner {
    client: kube::Client,
    rule: String,
    metrics: Arc<crate::metrics::Metrics>,
    /// The resources to reconcile, as (namespace, name).
    wake: mpsc::Sender<(String, String)>,
    watching: Mutex<HashMap<Key, Waiting>>,
}

struct Waiting {
    /// The resources (names, in the key's namespace) that wait for the name.
    resources: BTreeSet<String>,
    task: AbortHandle,
}

impl HeldNames {
    /// The names of `rule`, and the resources to reconcile when one is freed.
    pub fn new(
        client: kube::Client,
        rule: &str,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> (HeldNames, mpsc::Receiver<(String, String)>) {
        let (wake, woken) = mpsc::channel(256);
        let inner = Arc::new(Inner {
            client,
            rule: rule.to_string(),
            metrics,
            wake,
            watching: Mutex::new(HashMap::new()),
        });
        (HeldNames { inner }, woken)
    }

    /// Resource `resource` (in `namespace`) waits for the object `name` of kind `ar` to be
    /// freed.
    pub fn wait_for(&self, ar: &ApiResource, namespace: &str, name: &str, resource: &str) {
        let key = (
            ar.api_version.clone(),
            ar.plural.clone(),
            namespace.to_string(),
            name.to_string(),
        );
        let mut watching = self.inner.lock();
        if let Some(w) = watching.get_mut(&key) {
            w.resources.insert(resource.to_string());
            return;
        }
        if watching.len() >= MOST {
            tracing::debug!(rule = %self.inner.rule, kind = %ar.kind, %namespace, %name, "too many held names watched; this one is retried on backoff");
            return;
        }
        let task = tokio::spawn(watch(self.inner.clone(), key.clone(), ar.clone()));
        watching.insert(
            key,
            Waiting {
                resources: BTreeSet::from([resource.to_string()]),
                task: task.abort_handle(),
            },
        );
    }

    /// How many names are watched now.
    pub fn watched(&self) -> usize {
        self.inner.lock().len()
    }
}

impl Drop for HeldNames {
    fn drop(&mut self) {
        for w in self.inner.lock().values() {
            w.task.abort();
        }
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Waiting>> {
        self.watching.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The name is freed (or changed): its resources reconcile, and it is watched no more.
    fn freed(&self, key: &Key) {
        let Some(w) = self.lock().remove(key) else {
            return;
        };
        self.metrics.held_name_freed(&self.rule);
        for r in w.resources {
            // A full channel: the controller has a burst to go through; the backoff retries.
            let _ = self.wake.try_send((key.2.clone(), r));
        }
    }

    fn forget(&self, key: &Key) {
        self.lock().remove(key);
    }
}

/// Watches one held name until it is freed or changed, the watch fails, or [`LONGEST`].
async fn watch(inner: Arc<Inner>, key: Key, ar: ApiResource) {
    let (_, _, ns, name) = &key;
    let api: Api<DynamicObject> = Api::namespaced_with(inner.client.clone(), ns, &ar);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let events = watcher::watcher(api, config);
    match tokio::time::timeout(LONGEST, until_freed(events)).await {
        Ok(Ok(())) => inner.freed(&key),
        Ok(Err(e)) => {
            tracing::debug!(rule = %inner.rule, kind = %ar.kind, namespace = %ns, %name, error = %e, "a held name's watch failed; its resources are retried on backoff");
            inner.forget(&key);
        }
        Err(_) => inner.forget(&key),
    }
}

/// Ends when the object is gone (deleted, or absent from a list) or its owners, labels or
/// annotations differ from the first seen.
async fn until_freed(
    events: impl futures::Stream<Item = Result<Event<DynamicObject>, watcher::Error>>,
) -> Result<(), watcher::Error> {
    let mut events = std::pin::pin!(events);
    let mut first: Option<Value> = None;
    let mut present = false;
    while let Some(ev) = events.next().await {
        match ev? {
            Event::Init => present = false,
            Event::InitApply(o) | Event::Apply(o) => {
                present = true;
                let now = holding(&o);
                if *first.get_or_insert_with(|| now.clone()) != now {
                    return Ok(());
                }
            }
            Event::InitDone if !present => return Ok(()),
            Event::InitDone => {}
            Event::Delete(_) => return Ok(()),
        }
    }
    // The stream ended (it does not, while the client lives): nothing to wait for.
    Ok(())
}

/// What of an object decides whose it is.
fn holding(o: &DynamicObject) -> Value {
    serde_json::json!([
        o.metadata.owner_references,
        o.metadata.labels,
        o.metadata.annotations,
        o.metadata.deletion_timestamp,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::watches::tests::cm;
    use futures::stream;

    fn run(events: Vec<Event<DynamicObject>>) -> Option<bool> {
        let s = stream::iter(events.into_iter().map(Ok)).chain(stream::pending());
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            tokio::time::timeout(Duration::from_millis(50), until_freed(s))
                .await
                .ok()
                .map(|r| r.is_ok())
        })
    }

    #[test]
    fn a_held_name_is_freed_when_its_object_goes_or_changes_hands() {
        let held = cm("victim-web");
        let mut adoptable = held.clone();
        adoptable.metadata.labels = Some([("team".to_string(), "web".to_string())].into());
        let mut status_only = held.clone();
        status_only.data = serde_json::json!({"status": {"replicas": 3}});
        // Still held: listed, then only its status changes.
        assert_eq!(
            run(vec![
                Event::Init,
                Event::InitApply(held.clone()),
                Event::InitDone,
                Event::Apply(status_only),
            ]),
            None
        );
        // Deleted.
        assert_eq!(
            run(vec![
                Event::Init,
                Event::InitApply(held.clone()),
                Event::InitDone,
                Event::Delete(held.clone()),
            ]),
            Some(true)
        );
        // Gone before the watch began, or gone from a later list.
        assert_eq!(run(vec![Event::Init, Event::InitDone]), Some(true));
        assert_eq!(
            run(vec![
                Event::Init,
                Event::InitApply(held.clone()),
                Event::InitDone,
                Event::Init,
                Event::InitDone,
            ]),
            Some(true)
        );
        // Its labels changed.
        assert_eq!(
            run(vec![
                Event::Init,
                Event::InitApply(held),
                Event::InitDone,
                Event::Apply(adoptable),
            ]),
            Some(true)
        );
    }
}
