//! Events are best-effort and never hold up a reconcile. Each rule's Events go through a
//! bounded queue to one publishing task (as client-go's event broadcaster does): a reconcile
//! only enqueues; under a storm the queue fills and further Events are dropped and
//! counted (`ruleop_events_dropped_total`), instead of piling up one task per Event and
//! competing with the writes that make resources converge.

use crate::metrics::Metrics;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, Recorder};
use std::future::Future;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Events waiting to be published, per rule.
pub const QUEUE_CAPACITY: usize = 1024;

/// The sending side; the publishing task ends when it is dropped.
pub struct EventQueue {
    tx: mpsc::Sender<(Event, ObjectReference)>,
    metrics: Arc<Metrics>,
    rule: String,
}

impl EventQueue {
    /// Starts the publishing task of `rule`, publishing with `recorder` while `fence`
    /// holds (an Event is a write too: a replica that lost leadership posts none).
    pub fn start(
        recorder: Recorder,
        metrics: Arc<Metrics>,
        rule: String,
        fence: Arc<super::leader::Fence>,
    ) -> EventQueue {
        let recorder = Arc::new(recorder);
        Self::start_with(QUEUE_CAPACITY, metrics, rule, move |ev, reference| {
            let recorder = recorder.clone();
            let fence = fence.clone();
            async move {
                if !fence.holds() {
                    return;
                }
                if let Err(e) = recorder.publish(&ev, &reference).await {
                    tracing::debug!(error = %e, reason = %ev.reason, "could not publish event");
                }
            }
        })
    }

    /// As [`EventQueue::start`], with any publishing function (tests use a slow one).
    pub fn start_with<F, Fut>(
        capacity: usize,
        metrics: Arc<Metrics>,
        rule: String,
        publish: F,
    ) -> EventQueue
    where
        F: Fn(Event, ObjectReference) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send,
    {
        let (tx, mut rx) = mpsc::channel::<(Event, ObjectReference)>(capacity.max(1));
        tokio::spawn(async move {
            while let Some((ev, reference)) = rx.recv().await {
                publish(ev, reference).await;
            }
        });
        EventQueue { tx, metrics, rule }
    }

    /// Queues an Event about `reference`; drops it (counted) when the queue is full.
    pub fn send(&self, ev: Event, reference: ObjectReference) {
        if let Err(e) = self.tx.try_send((ev, reference)) {
            self.metrics.event_dropped(&self.rule);
            let (ev, _) = e.into_inner();
            tracing::debug!(rule = %self.rule, reason = %ev.reason, "event queue full; event dropped");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::events::EventType;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::sync::Semaphore;

    fn ev(reason: &str) -> Event {
        Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: None,
            action: "Apply".into(),
            secondary: None,
        }
    }

    #[tokio::test]
    async fn a_full_queue_drops_and_counts_and_never_blocks_the_sender() {
        let metrics = Arc::new(Metrics::default());
        let published = Arc::new(AtomicUsize::new(0));
        // The publisher waits for a permit per Event: nothing drains until we allow it.
        let gate = Arc::new(Semaphore::new(0));
        let (p, g) = (published.clone(), gate.clone());
        let q = EventQueue::start_with(4, metrics.clone(), "website".into(), move |_, _| {
            let (p, g) = (p.clone(), g.clone());
            async move {
                if let Ok(permit) = g.acquire().await {
                    permit.forget();
                }
                p.fetch_add(1, Ordering::SeqCst);
            }
        });
        for i in 0..20 {
            q.send(ev(&format!("E{i}")), ObjectReference::default());
        }
        // One Event is held by the publisher, four wait in the queue, the rest are dropped.
        let dropped = |m: &Metrics| {
            m.render()
                .lines()
                .find(|l| l.starts_with("ruleop_events_dropped_total{rule=\"website\"}"))
                .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        };
        let d = dropped(&metrics).unwrap_or(0);
        assert!((15..=16).contains(&d), "dropped {d}");
        gate.add_permits(100);
        for _ in 0..100 {
            if published.load(Ordering::SeqCst) + d as usize == 20 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert_eq!(published.load(Ordering::SeqCst) + d as usize, 20);
    }
}
