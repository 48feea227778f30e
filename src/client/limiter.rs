//! Client-side rate limiting of every request ruleop makes (`--qps`, `--burst`), as
//! client-go's token bucket does: `burst` requests may go at once, then `qps` per second.
//! It is a layer of the client's service stack; kube's client serves requests through one
//! buffer, so a request that finds the bucket empty holds the ones behind it too (first
//! come, first served). The time requests spent waiting is counted
//! (`ruleop_client_rate_limiter_wait_seconds_total`); the requests are counted at the gate
//! below ([`super::gate`]).

use crate::metrics::Metrics;
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use std::future::Future;
use std::num::NonZeroU32;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};
use tower::{Layer, Service};

/// A token bucket: work that is to go at a steady pace (Events), and the client's requests
/// (inside a [`Limiter`]).
pub struct Pace(DefaultDirectRateLimiter);

impl Pace {
    /// `burst` tokens refilled at `per_second`; None when that is 0 or less, or not a
    /// number (no limit). A burst of 0 is taken as 1.
    fn bucket(per_second: f64, burst: u32) -> Option<Pace> {
        if !per_second.is_finite() || per_second <= 0.0 {
            return None;
        }
        let period = Duration::try_from_secs_f64(1.0 / per_second).ok()?;
        let burst = NonZeroU32::new(burst.max(1))?;
        let quota = Quota::with_period(period.max(Duration::from_nanos(1)))?.allow_burst(burst);
        Some(Pace(RateLimiter::direct(quota)))
    }

    /// `per_second` on average, `burst` at once; None when `per_second` is 0 or less.
    pub fn new(per_second: f64, burst: u32) -> Option<Arc<Pace>> {
        Self::bucket(per_second, burst).map(Arc::new)
    }

    /// Takes a token if there is one now.
    pub fn take_now(&self) -> bool {
        self.0.check().is_ok()
    }

    /// Waits for the next turn.
    pub async fn wait(&self) {
        self.0.until_ready().await;
    }
}

/// The client's token bucket and where it reports.
pub struct Limiter {
    bucket: Pace,
    metrics: Arc<Metrics>,
}

impl Limiter {
    /// A bucket of `burst` tokens refilled at `qps` per second; None when `qps` is 0 or
    /// less (no limit), or not a number.
    pub fn new(qps: f64, burst: u32, metrics: Arc<Metrics>) -> Option<Arc<Limiter>> {
        let bucket = Pace::bucket(qps, burst)?;
        Some(Arc::new(Limiter { bucket, metrics }))
    }
}

/// The layer that puts a [`Limiter`] in front of a client's service.
#[derive(Clone)]
pub struct LimitLayer(pub Arc<Limiter>);

impl<S> Layer<S> for LimitLayer {
    type Service = Limited<S>;

    fn layer(&self, inner: S) -> Limited<S> {
        Limited {
            inner,
            limiter: self.0.clone(),
            wait: None,
            permitted: false,
        }
    }
}

type Wait = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A service that takes a token before each request.
pub struct Limited<S> {
    inner: S,
    limiter: Arc<Limiter>,
    /// The wait for a token, with when it began.
    wait: Option<(Wait, Instant)>,
    /// A token is taken for the next call.
    permitted: bool,
}

impl<S, R> Service<R> for Limited<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        if !self.permitted {
            if self.wait.is_none() {
                if self.limiter.bucket.take_now() {
                    self.permitted = true;
                } else {
                    let l = self.limiter.clone();
                    let wait: Wait = Box::pin(async move { l.bucket.wait().await });
                    self.wait = Some((wait, Instant::now()));
                }
            }
            if let Some((wait, since)) = &mut self.wait {
                ready!(wait.as_mut().poll(cx));
                let waited = since.elapsed().as_secs_f64();
                self.limiter.metrics.limiter_wait.inc_by(waited);
                self.wait = None;
                self.permitted = true;
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> S::Future {
        self.permitted = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;
    use tower::ServiceExt;

    /// A service that answers at once.
    #[derive(Clone)]
    struct Echo;

    impl Service<u32> for Echo {
        type Response = u32;
        type Error = Infallible;
        type Future = std::future::Ready<Result<u32, Infallible>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, req: u32) -> Self::Future {
            std::future::ready(Ok(req))
        }
    }

    #[tokio::test]
    async fn a_burst_goes_at_once_then_qps_per_second_and_the_wait_is_counted() {
        let metrics = Arc::new(Metrics::default());
        let limiter = Limiter::new(10.0, 5, metrics.clone()).unwrap();
        let mut svc = LimitLayer(limiter).layer(Echo);
        let start = Instant::now();
        let mut at = Vec::new();
        for i in 0..25 {
            svc.ready().await.unwrap();
            assert_eq!(svc.call(i).await.unwrap(), i);
            at.push(start.elapsed());
        }
        // 5 at once, then 20 at 10 per second.
        let total = at[24];
        assert!(at[4] < Duration::from_millis(50), "the burst: {:?}", at[4]);
        assert!(
            total >= Duration::from_millis(1900) && total < Duration::from_millis(2600),
            "20 more at 10/s take about 2 s: {total:?}"
        );
        let waited = metrics.limiter_wait.get();
        assert!((1.8..2.6).contains(&waited), "waited {waited} s");
    }

    #[tokio::test]
    async fn a_pace_lets_a_burst_go_then_keeps_its_rate() {
        let pace = Pace::new(20.0, 10).unwrap();
        let start = Instant::now();
        for _ in 0..10 {
            pace.wait().await;
        }
        assert!(start.elapsed() < Duration::from_millis(50), "the burst");
        for _ in 0..10 {
            pace.wait().await;
        }
        let t = start.elapsed();
        assert!(
            t >= Duration::from_millis(400) && t < Duration::from_millis(900),
            "10 more at 20/s: {t:?}"
        );
        assert!(Pace::new(0.0, 10).is_none());
    }

    #[test]
    fn no_limit_when_qps_is_zero_or_negative() {
        let m = Arc::new(Metrics::default());
        assert!(Limiter::new(0.0, 10, m.clone()).is_none());
        assert!(Limiter::new(-1.0, 10, m.clone()).is_none());
        assert!(Limiter::new(f64::NAN, 10, m.clone()).is_none());
        assert!(
            Limiter::new(0.5, 0, m).is_some(),
            "a burst of 0 is taken as 1"
        );
    }
}
