//! A bound on the requests ruleop has at the API server at once (`--max-in-flight`),
//! first come, first served.
//!
//! The reconciles of a rule may run many at once (`--concurrency`), and most of them send
//! nothing (the children and the status already match); the ones that write wait here,
//! in the order they asked, for one of the bound's slots. So a burst of work reaches the
//! API server as a steady queue it can serve, instead of hundreds of requests competing
//! for its CPU, and no resource waits behind later ones. Watches hold no slot (they last
//! minutes). The time requests waited for a slot is counted
//! (`ruleop_client_in_flight_wait_seconds_total`).

use crate::metrics::Metrics;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;
use tokio::sync::Semaphore;
use tower::{Layer, Service};

/// The slots, and where the waits are counted.
pub struct InFlight {
    slots: Arc<Semaphore>,
    metrics: Arc<Metrics>,
}

impl InFlight {
    /// At most `max` requests at once; None for 0 (no bound).
    pub fn new(max: u32, metrics: Arc<Metrics>) -> Option<Arc<InFlight>> {
        let max = usize::try_from(max).ok().filter(|m| *m > 0)?;
        Some(Arc::new(InFlight {
            slots: Arc::new(Semaphore::new(max)),
            metrics,
        }))
    }
}

/// The layer that puts an [`InFlight`] bound in front of a client's service.
#[derive(Clone)]
pub struct InFlightLayer(pub Arc<InFlight>);

impl<S> Layer<S> for InFlightLayer {
    type Service = Bounded<S>;

    fn layer(&self, inner: S) -> Bounded<S> {
        Bounded {
            inner,
            bound: self.0.clone(),
        }
    }
}

/// A service whose requests (watches aside) each hold a slot until their answer comes.
pub struct Bounded<S> {
    inner: S,
    bound: Arc<InFlight>,
}

/// A watch lasts as long as the API server keeps it open: it holds no slot.
fn long_running<B>(req: &http::Request<B>) -> bool {
    req.uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"))
}

type Answer<R, E> = Pin<Box<dyn Future<Output = Result<R, E>> + Send>>;

impl<S, B> Service<http::Request<B>> for Bounded<S>
where
    S: Service<http::Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Answer<S::Response, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let long = long_running(&req);
        // The client's futures send nothing until polled: the request goes once it holds
        // a slot.
        let answer = self.inner.call(req);
        if long {
            return Box::pin(answer);
        }
        let bound = self.bound.clone();
        Box::pin(async move {
            let since = Instant::now();
            // The semaphore is never closed.
            let _slot = bound.slots.clone().acquire_owned().await.ok();
            bound
                .metrics
                .in_flight_wait
                .inc_by(since.elapsed().as_secs_f64());
            answer.await
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
        let svc = InFlightLayer(InFlight::new(3, metrics.clone()).unwrap()).layer(seen.clone());
        let svc = Arc::new(tokio::sync::Mutex::new(svc));
        // Asked one after the other, answered together.
        let mut answers = Vec::new();
        for i in 0..12 {
            let mut s = svc.lock().await;
            s.ready().await.unwrap();
            answers.push(s.call(get(&format!("/r/{i}"))));
        }
        futures::future::join_all(answers).await;
        let s = seen.0.lock().unwrap();
        assert_eq!(s.1, 3, "at most 3 at once, and the bound was reached");
        let order: Vec<String> = (0..12).map(|i| format!("/r/{i}")).collect();
        assert_eq!(s.2, order, "served in the order asked");
        assert!(
            metrics.in_flight_wait.get() > 0.1,
            "the waits are counted: {}",
            metrics.in_flight_wait.get()
        );
    }

    #[tokio::test]
    async fn watches_hold_no_slot() {
        let metrics = Arc::new(Metrics::default());
        let seen = Slow::default();
        let mut svc = InFlightLayer(InFlight::new(1, metrics).unwrap()).layer(seen.clone());
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

    #[test]
    fn no_bound_for_zero() {
        assert!(InFlight::new(0, Arc::new(Metrics::default())).is_none());
        assert!(!long_running(&get("/api/v1/pods?watchful=true")));
        assert!(long_running(&get("/api/v1/pods?limit=1&watch=1")));
    }
}
