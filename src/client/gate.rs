//! The last gate of every request ruleop makes, below the token bucket: it counts the
//! requests (`ruleop_client_requests_total`), refuses a write once this replica may no
//! longer write (the leader fence, asked again here because a write may have waited for
//! its token or its slot since its sender asked), and, with `--max-in-flight N`, lets at
//! most N requests be at the API server at once, and at most half of them (rounded up)
//! of one kind; the others wait their turn, in the order asked within a kind.
//!
//! The bound (default 128) is well above what ruleop needs in steady work and binds in a
//! burst: each request at once is a connection of its own (HTTP/1.1, with its TLS state),
//! and 256 reconciles sending two children each would open 512 (BENCHMARKS.md: peak RSS
//! at N=1000 68.5 MiB with no bound, 58.6 with 128, 39.8 with 32 reconciles). It is not
//! lower because ruleop's requests are bound by the API server's latency, not its CPU
//! (BENCHMARKS.md, "Latency: what holds it"): 32 halved ruleop's rate, and a slow kind of
//! write (a Service create takes seconds at 10,000 Services) holds the slots the others
//! wait for. So no one kind of request (its API group, resource and subresource, whatever
//! the verb: every request about Services, say, or every status write) holds more than
//! half the slots: a slow kind leaves the other half to the rest, and a status write does
//! not queue behind a hundred Service creates that each take seconds. (Two kinds busy at
//! once can still hold all the slots between them; a request of a third kind then waits
//! for the first of them to be answered.) Watches hold no slot (they last minutes); a
//! slot is held from the request's turn until its answer's headers come (the client's own
//! retries of a refused request included). The time requests waited for a slot is counted
//! (`ruleop_client_in_flight_wait_seconds_total`).

use super::busy::Busy;
use super::fence::Fence;
use crate::metrics::Metrics;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tower::{BoxError, Layer, Service};

/// A write refused at the gate: this replica lost the leader Lease while it waited.
#[derive(Debug, thiserror::Error)]
#[error("not the leader any more: the write was not sent")]
pub struct Fenced;

/// The gate's state: the slots (if bounded), the fence, where it counts, and the count of
/// converging requests in flight (all but watches and Events) that Events wait on.
pub struct Gate {
    slots: Option<Slots>,
    fence: Arc<Fence>,
    metrics: Arc<Metrics>,
    busy: Arc<Busy>,
}

impl Gate {
    /// At most `max` requests at once (0: no bound), at most half of them (rounded up) of
    /// one kind; writes only while `fence` holds.
    pub fn new(max: u32, fence: Arc<Fence>, metrics: Arc<Metrics>) -> Arc<Gate> {
        let slots = usize::try_from(max).ok().filter(|m| *m > 0).map(Slots::new);
        Arc::new(Gate {
            slots,
            fence,
            busy: Arc::new(Busy::with_gauge(metrics.requests_in_flight.clone())),
            metrics,
        })
    }

    /// The converging requests in flight through this gate.
    pub fn busy(&self) -> Arc<Busy> {
        self.busy.clone()
    }
}

/// The slots of a bounded gate: all of them, and each kind's share.
struct Slots {
    all: Arc<Semaphore>,
    share: usize,
    by_kind: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl Slots {
    fn new(max: usize) -> Slots {
        Slots {
            all: Arc::new(Semaphore::new(max)),
            share: max.div_ceil(2),
            by_kind: Mutex::default(),
        }
    }

    /// A slot for a request of `kind`: first one of its kind's share (so a request that
    /// waits for its kind holds none of the others'), then one of all.
    async fn take(&self, kind: String) -> Option<(OwnedSemaphorePermit, OwnedSemaphorePermit)> {
        let mine = {
            let mut by_kind = self.by_kind.lock().unwrap_or_else(|p| p.into_inner());
            by_kind
                .entry(kind)
                .or_insert_with(|| Arc::new(Semaphore::new(self.share)))
                .clone()
        };
        // The semaphores are never closed.
        let mine = mine.acquire_owned().await.ok()?;
        let all = self.all.clone().acquire_owned().await.ok()?;
        Some((mine, all))
    }
}

/// What a request is about, for the share of slots: its API group, resource and
/// subresource, without namespace or name (`/api/v1/namespaces/n/services/s` →
/// `/services`, `/apis/g/v1/namespaces/n/sites/s/status` → `g/sites/status`); `other`
/// for the rest (discovery, `/version`), so that the kinds stay few.
fn kind_of(path: &str) -> String {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (group, rest) = match parts.as_slice() {
        ["api", _, rest @ ..] => ("", rest),
        ["apis", group, _, rest @ ..] => (*group, rest),
        _ => return "other".into(),
    };
    let rest = match rest {
        // A namespace's own subresources (its status, its finalizers).
        ["namespaces", _, "status" | "finalize"] => rest,
        ["namespaces", _, within @ ..] if !within.is_empty() => within,
        rest => rest,
    };
    match rest {
        [] => "other".into(),
        [resource] | [resource, _] => format!("{group}/{resource}"),
        [resource, _, sub, ..] => format!("{group}/{resource}/{sub}"),
    }
}

/// The layer that puts a [`Gate`] in front of a client's service.
#[derive(Clone)]
pub struct GateLayer(pub Arc<Gate>);

impl<S> Layer<S> for GateLayer {
    type Service = Gated<S>;

    fn layer(&self, inner: S) -> Gated<S> {
        Gated {
            inner,
            gate: self.0.clone(),
        }
    }
}

/// A service whose requests go through the [`Gate`].
pub struct Gated<S> {
    inner: S,
    gate: Arc<Gate>,
}

/// A watch lasts as long as the API server keeps it open: it holds no slot.
fn long_running<B>(req: &http::Request<B>) -> bool {
    req.uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

/// Whether a request of `kind` (see [`kind_of`]) is about Events (core or
/// `events.k8s.io`): they do not make a resource converge.
fn is_event(kind: &str) -> bool {
    matches!(kind, "/events" | "events.k8s.io/events")
}

/// A request that changes something (what the fence guards).
fn is_write<B>(req: &http::Request<B>) -> bool {
    !matches!(*req.method(), http::Method::GET | http::Method::HEAD)
}

type Answer<R> = Pin<Box<dyn Future<Output = Result<R, BoxError>> + Send>>;

impl<S, B> Service<http::Request<B>> for Gated<S>
where
    S: Service<http::Request<B>>,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Answer<S::Response>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let write = is_write(&req);
        // What it is about (watches aside: they hold no slot and are not counted).
        let about = (!long_running(&req)).then(|| kind_of(req.uri().path()));
        // Counted from when it is asked (its wait for a slot included) until its answer.
        let converging = about
            .as_deref()
            .filter(|k| !is_event(k))
            .map(|_| self.gate.busy.enter());
        // What it waits for a slot as (an unbounded gate has none to wait for).
        let kind = about.filter(|_| self.gate.slots.is_some());
        // The client's futures send nothing until polled: the request goes once it has
        // its turn, and not at all if the fence closed meanwhile.
        let answer = self.inner.call(req);
        let gate = self.gate.clone();
        Box::pin(async move {
            let _converging = converging;
            let _slot = match (&gate.slots, kind) {
                (Some(slots), Some(kind)) => {
                    let since = Instant::now();
                    let slot = slots.take(kind).await;
                    let waited = since.elapsed().as_secs_f64();
                    gate.metrics.in_flight_wait.inc_by(waited);
                    slot
                }
                _ => None,
            };
            if write && !gate.fence.holds() {
                return Err(Fenced.into());
            }
            gate.metrics.client_requests.inc();
            answer.await.map_err(Into::into)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use std::sync::Mutex;
    use std::time::Duration;
    use tower::ServiceExt;

    /// Answers after 20 ms, counting the requests it is serving at once (and the most
    /// ever) and the order they started in.
    #[derive(Clone, Default)]
    struct Slow(Arc<Mutex<(usize, usize, Vec<String>)>>);

    impl Service<http::Request<()>> for Slow {
        type Response = ();
        type Error = Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<(), Infallible>> + Send>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, req: http::Request<()>) -> Self::Future {
            let seen = self.0.clone();
            Box::pin(async move {
                {
                    let mut s = seen.lock().unwrap();
                    s.0 += 1;
                    s.1 = s.1.max(s.0);
                    s.2.push(req.uri().to_string());
                }
                let watch = long_running(&req);
                tokio::time::sleep(Duration::from_millis(if watch { 200 } else { 20 })).await;
                seen.lock().unwrap().0 -= 1;
                Ok(())
            })
        }
    }

    fn get(path: &str) -> http::Request<()> {
        http::Request::get(path).body(()).unwrap()
    }

    #[tokio::test]
    async fn no_more_requests_at_once_than_the_bound_in_the_order_asked() {
        let metrics = Arc::new(Metrics::default());
        let seen = Slow::default();
        let svc = GateLayer(Gate::new(3, Fence::open(), metrics.clone())).layer(seen.clone());
        let svc = Arc::new(tokio::sync::Mutex::new(svc));
        // Asked one after the other (of three kinds in turn), answered together.
        let path = |i: usize| format!("/api/v1/namespaces/n/r{}/x{i}", i % 3);
        let mut answers = Vec::new();
        for i in 0..12 {
            let mut s = svc.lock().await;
            s.ready().await.unwrap();
            answers.push(s.call(get(&path(i))));
        }
        futures::future::join_all(answers).await;
        let s = seen.0.lock().unwrap();
        assert_eq!(s.1, 3, "at most 3 at once, and the bound was reached");
        let order: Vec<String> = (0..12).map(path).collect();
        assert_eq!(s.2, order, "served in the order asked");
        assert!(
            metrics.in_flight_wait.get() > 0.1,
            "the waits are counted: {}",
            metrics.in_flight_wait.get()
        );
        assert_eq!(
            metrics.client_requests.get(),
            12,
            "every request is counted"
        );
    }

    #[tokio::test]
    async fn one_kind_holds_at_most_half_the_slots_and_the_others_go_by() {
        let seen = Slow::default();
        let gate = Gate::new(4, Fence::open(), Arc::new(Metrics::default()));
        let mut svc = GateLayer(gate).layer(seen.clone());
        // Six Service creates asked first, then two status writes.
        let mut answers = Vec::new();
        for _ in 0..6 {
            svc.ready().await.unwrap();
            let create = http::Request::post("/api/v1/namespaces/n/services");
            answers.push(svc.call(create.body(()).unwrap()));
        }
        for i in 0..2 {
            svc.ready().await.unwrap();
            let status = http::Request::patch(format!("/apis/g/v1/namespaces/n/sites/s{i}/status"));
            answers.push(svc.call(status.body(()).unwrap()));
        }
        futures::future::join_all(answers).await;
        let s = seen.0.lock().unwrap();
        assert_eq!(s.1, 4, "the bound was reached, not passed");
        let first: Vec<&str> = s.2[..4].iter().map(String::as_str).collect();
        assert_eq!(
            first,
            [
                "/api/v1/namespaces/n/services",
                "/api/v1/namespaces/n/services",
                "/apis/g/v1/namespaces/n/sites/s0/status",
                "/apis/g/v1/namespaces/n/sites/s1/status"
            ],
            "two creates (half the slots), and the status writes did not wait behind the rest"
        );
    }

    #[test]
    fn what_a_request_is_about() {
        for (path, kind) in [
            ("/api/v1/namespaces/n/services", "/services"),
            ("/api/v1/namespaces/n/services/s", "/services"),
            (
                "/apis/apps/v1/namespaces/n/deployments/d",
                "apps/deployments",
            ),
            ("/apis/g/v1/namespaces/n/sites/s/status", "g/sites/status"),
            ("/apis/g/v1/sites", "g/sites"),
            ("/api/v1/namespaces/n", "/namespaces"),
            ("/api/v1/namespaces/n/status", "/namespaces/status"),
            ("/api/v1/namespaces/n/finalize", "/namespaces/finalize"),
            ("/api/v1/namespaces/n/pods", "/pods"),
            ("/api/v1/nodes/x/status", "/nodes/status"),
            ("/apis/g/v1", "other"),
            ("/version", "other"),
            ("/", "other"),
        ] {
            assert_eq!(kind_of(path), kind, "{path}");
        }
    }

    #[tokio::test]
    async fn converging_requests_are_busy_until_answered_and_events_and_watches_are_not() {
        // One slot: the second of two requests waits for it, and is counted meanwhile.
        let gate = Gate::new(1, Fence::open(), Arc::new(Metrics::default()));
        let busy = gate.busy();
        let mut svc = GateLayer(gate).layer(Slow::default());
        for path in [
            "/apis/events.k8s.io/v1/namespaces/n/events",
            "/apis/events.k8s.io/v1/namespaces/n/events/e",
            "/api/v1/namespaces/n/events",
            "/api/v1/namespaces/n/events/e",
            "/api/v1/namespaces/n/services?watch=true",
        ] {
            svc.ready().await.unwrap();
            let answer = svc.call(get(path));
            assert_eq!(busy.in_flight(), 0, "{path} is not counted");
            answer.await.unwrap();
        }
        svc.ready().await.unwrap();
        let apply = svc.call(get("/apis/apps/v1/namespaces/n/deployments/d"));
        svc.ready().await.unwrap();
        let status = svc.call(get("/apis/g/v1/namespaces/n/sites/s/status"));
        assert_eq!(
            busy.in_flight(),
            2,
            "counted from when asked, the one waiting too"
        );
        let quiet = {
            let busy = busy.clone();
            tokio::spawn(async move { busy.quiet_or(Duration::from_secs(10)).await })
        };
        apply.await.unwrap();
        assert_eq!(busy.in_flight(), 1);
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(!quiet.is_finished(), "one is still in flight");
        status.await.unwrap();
        assert_eq!(busy.in_flight(), 0);
        tokio::time::timeout(Duration::from_secs(2), quiet)
            .await
            .expect("quiet once both were answered")
            .unwrap();
        // A request given up before its answer is not counted any more.
        svc.ready().await.unwrap();
        drop(svc.call(get("/api/v1/namespaces/n/services/s")));
        assert_eq!(busy.in_flight(), 0);
    }

    #[tokio::test]
    async fn watches_hold_no_slot() {
        let metrics = Arc::new(Metrics::default());
        let seen = Slow::default();
        let mut svc = GateLayer(Gate::new(1, Fence::open(), metrics)).layer(seen.clone());
        svc.ready().await.unwrap();
        let watch = svc.call(get("/api/v1/pods?watch=true&resourceVersion=1"));
        svc.ready().await.unwrap();
        let list = svc.call(get("/api/v1/pods"));
        let start = Instant::now();
        let (watch, list) = (tokio::spawn(watch), tokio::spawn(list));
        list.await.unwrap().unwrap();
        assert!(
            start.elapsed() < Duration::from_millis(150),
            "the list did not wait for the watch"
        );
        watch.await.unwrap().unwrap();
        assert_eq!(seen.0.lock().unwrap().1, 2);
    }

    #[tokio::test]
    async fn without_a_bound_nothing_waits_and_a_closed_fence_stops_writes_only() {
        let metrics = Arc::new(Metrics::default());
        let seen = Slow::default();
        let fence = Fence::elected();
        fence.set(Some(Instant::now() + Duration::from_secs(3600)));
        let mut svc = GateLayer(Gate::new(0, fence.clone(), metrics.clone())).layer(seen.clone());
        let start = Instant::now();
        let mut answers = Vec::new();
        for i in 0..8 {
            svc.ready().await.unwrap();
            answers.push(svc.call(get(&format!("/r/{i}"))));
        }
        futures::future::join_all(answers).await;
        assert!(
            start.elapsed() < Duration::from_millis(150),
            "no bound: all at once"
        );
        assert_eq!(seen.0.lock().unwrap().1, 8);
        fence.set(None);
        svc.ready().await.unwrap();
        let write = http::Request::patch("/r/x").body(()).unwrap();
        let refused = svc.call(write).await.unwrap_err();
        assert!(refused.is::<Fenced>(), "{refused}");
        svc.ready().await.unwrap();
        svc.call(get("/r/y")).await.expect("reads go on");
        assert_eq!(
            metrics.client_requests.get(),
            9,
            "the refused write was not sent"
        );
        assert!(!seen.0.lock().unwrap().2.contains(&"/r/x".to_string()));
    }

    #[test]
    fn what_holds_a_slot_and_what_the_fence_guards() {
        assert!(!long_running(&get("/api/v1/pods?watchful=true")));
        assert!(long_running(&get("/api/v1/pods?limit=1&watch=1")));
        assert!(!is_write(&get("/api/v1/pods")));
        assert!(is_write(
            &http::Request::post("/api/v1/pods").body(()).unwrap()
        ));
    }
}
