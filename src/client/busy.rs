//! Whether ruleop has requests at the API server that make resources converge (every
//! request through the gate but watches and Events), so that Events can wait for a quiet
//! moment instead of competing with them. When a thousand resources are created at once,
//! each Normal Event is one more write at the moment the API server is busiest (at
//! N=1000 they were about one write in seven of the create wave: BENCHMARKS.md); posted
//! once ruleop's own writes are answered, the same Events cost the converging writes
//! nothing.

use prometheus_client::metrics::gauge::Gauge;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// The count of converging requests in flight (waiting for their slot included), kept in
/// the gauge that shows it (`ruleop_client_requests_in_flight`).
#[derive(Default)]
pub struct Busy {
    in_flight: Gauge,
    idle: Notify,
}

/// One request in flight; the count goes down when it is dropped (answered, failed or
/// abandoned).
pub struct InFlight(Arc<Busy>);

impl Drop for InFlight {
    fn drop(&mut self) {
        // `dec` gives the count before: 1 means this was the last one.
        if self.0.in_flight.dec() == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Busy {
    /// A count kept in `gauge`.
    pub fn with_gauge(gauge: Gauge) -> Busy {
        Busy {
            in_flight: gauge,
            idle: Notify::new(),
        }
    }

    /// Counts a request until the returned guard is dropped.
    pub fn enter(self: &Arc<Self>) -> InFlight {
        self.in_flight.inc();
        InFlight(self.clone())
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        usize::try_from(self.in_flight.get()).unwrap_or(0)
    }

    /// Returns once no request is in flight (now, or the moment the last one is answered,
    /// even if another starts right after), or after `at_most`: a steady stream of
    /// requests holds the waiter back at most that long.
    pub async fn quiet_or(&self, at_most: Duration) {
        let notified = self.idle.notified();
        let mut notified = std::pin::pin!(notified);
        // Registered before the count is read: a drop to zero in between still wakes it.
        notified.as_mut().enable();
        if self.in_flight() == 0 {
            return;
        }
        let _ = tokio::time::timeout(at_most, notified).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    #[tokio::test]
    async fn quiet_at_once_when_nothing_is_in_flight() {
        let busy = Arc::new(Busy::default());
        let t = Instant::now();
        busy.quiet_or(Duration::from_secs(5)).await;
        assert!(t.elapsed() < Duration::from_secs(2));
    }

    #[tokio::test]
    async fn waits_for_the_last_request_to_be_answered() {
        let busy = Arc::new(Busy::default());
        let (a, b) = (busy.enter(), busy.enter());
        assert_eq!(busy.in_flight(), 2);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            drop(a);
            tokio::time::sleep(Duration::from_millis(200)).await;
            drop(b);
        });
        let t = Instant::now();
        busy.quiet_or(Duration::from_secs(5)).await;
        let waited = t.elapsed();
        assert!(
            waited >= Duration::from_millis(290) && waited < Duration::from_secs(3),
            "quiet once both were answered, not after the first: {waited:?}"
        );
        assert_eq!(busy.in_flight(), 0);
    }

    #[tokio::test]
    async fn a_steady_stream_holds_the_waiter_back_at_most_the_bound() {
        let busy = Arc::new(Busy::default());
        let held = busy.enter();
        let t = Instant::now();
        busy.quiet_or(Duration::from_millis(300)).await;
        let waited = t.elapsed();
        assert!(
            waited >= Duration::from_millis(300) && waited < Duration::from_secs(3),
            "{waited:?}"
        );
        assert_eq!(busy.in_flight(), 1);
        drop(held);
        assert_eq!(busy.in_flight(), 0);
    }
}
