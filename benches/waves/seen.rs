//! What the benchmark sees of the namespace, from its own watches, and the wait for a wave
//! to converge.

use super::*;

pub(crate) fn website(i: usize, image: &str) -> Value {
    json!({"apiVersion": "sre.example.com/v1alpha1", "kind": "WebSite", "metadata": {"name": format!("s{i}"), "namespace": NS},
           "spec": {"image": image, "replicas": 1, "port": 80, "serviceType": "ClusterIP"}})
}

/// What the benchmark sees of the namespace, from its own watches (not polling: listing
/// 3N objects every few hundred milliseconds would load the API server more the longer a
/// system takes, and so penalize the slow ones twice).
#[derive(Default)]
pub(crate) struct Seen {
    /// WebSite → status.observedGeneration.
    pub(crate) sites: HashMap<String, Option<i64>>,
    /// Deployment → its first container's image.
    pub(crate) deps: HashMap<String, Option<String>>,
    pub(crate) services: HashMap<String, ()>,
}

impl Seen {
    /// Whether every WebSite is current and every child has `image`.
    pub(crate) fn converged(&self, n: usize, image: &str, generation: i64) -> bool {
        self.sites.len() == n
            && self.deps.len() == n
            && self.services.len() == n
            && self.sites.values().all(|g| *g == Some(generation))
            && self.deps.values().all(|i| i.as_deref() == Some(image))
    }
}

/// Follows one kind into one map of `Seen`: name → what `value` takes from the object.
pub(crate) fn follow<K, V>(
    api: Api<K>,
    seen: Arc<Mutex<Seen>>,
    map: fn(&mut Seen) -> &mut HashMap<String, V>,
    value: fn(&K) -> V,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    V: Send + 'static,
{
    use kube::runtime::WatchStreamExt;
    use kube::runtime::watcher::{self, Event};
    tokio::spawn(async move {
        let stream = watcher::watcher(api, watcher::Config::default()).default_backoff();
        let mut stream = std::pin::pin!(stream);
        while let Some(ev) = stream.next().await {
            let mut s = seen.lock().unwrap();
            match ev {
                Ok(Event::Apply(o) | Event::InitApply(o)) => {
                    map(&mut s).insert(o.meta().name.clone().unwrap_or_default(), value(&o));
                }
                Ok(Event::Delete(o)) => {
                    map(&mut s).remove(o.meta().name.as_deref().unwrap_or_default());
                }
                _ => {}
            }
        }
    })
}

/// Starts the watches that fill `Seen`; they stop with the returned handles.
pub(crate) fn watch_namespace(c: &Client) -> (Arc<Mutex<Seen>>, Vec<tokio::task::JoinHandle<()>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let tasks = vec![
        follow(
            Api::<DynamicObject>::namespaced_with(c.clone(), NS, &website_ar()),
            seen.clone(),
            |s| &mut s.sites,
            |o| o.data["status"]["observedGeneration"].as_i64(),
        ),
        follow(
            Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(c.clone(), NS),
            seen.clone(),
            |s| &mut s.deps,
            |o| {
                o.spec
                    .as_ref()
                    .and_then(|s| s.template.spec.as_ref())
                    .and_then(|p| p.containers.first())
                    .and_then(|c| c.image.clone())
            },
        ),
        follow(
            Api::<k8s_openapi::api::core::v1::Service>::namespaced(c.clone(), NS),
            seen.clone(),
            |s| &mut s.services,
            |_| (),
        ),
    ];
    (seen, tasks)
}

pub(crate) async fn wait_converged(
    seen: &Mutex<Seen>,
    n: usize,
    image: &str,
    generation: i64,
    start: Instant,
) -> Result<f64, String> {
    loop {
        if seen.lock().unwrap().converged(n, image, generation) {
            return Ok(start.elapsed().as_secs_f64());
        }
        if start.elapsed() > Duration::from_secs(900) {
            return Err("did not converge within 15 minutes".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
