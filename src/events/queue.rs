//! Events are best-effort and never hold up a reconcile. Each rule's Events go through one
//! queue to one publishing task (as client-go's event broadcaster does): a reconcile only
//! enqueues. When thousands of resources change at once, every resource still gets its
//! Events, late rather than never: the queue holds up to [`QUEUE_CAPACITY`] distinct
//! Events per rule, and an Event identical to one still waiting (same object, type,
//! reason, action, note and child) is folded into it instead of queued twice (the
//! publisher then counts a repeat as a series, one write). Only beyond that capacity are Events dropped, and
//! counted (`ruleop_events_dropped_total`). One publisher per rule sends one Event at a
//! time, and all of them together at most `--event-qps` per second; and before each (once
//! it has its turn in that pace), it waits (at most [`QUIET_WAIT`]) for a moment when none
//! of ruleop's other requests is in flight ([`crate::client::busy`]). So when thousands of resources change at once their Events
//! trail behind the writes that make them converge instead of competing with them.

use crate::client::busy::Busy;
use crate::metrics::Metrics;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::Event;
// Two Events are the same as the publisher tells them apart (it makes a repeat a series).
use super::recorder::{Key, key};
use std::collections::{HashSet, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// The longest an Event waits for ruleop's converging requests to be answered: while they
/// never stop (a burst of thousands of changes), Events go out one a second per rule.
pub const QUIET_WAIT: Duration = Duration::from_secs(1);

/// Distinct Events waiting to be published, per rule (room for every resource of a large
/// kind to have one or two waiting: about 0.5 KiB each).
pub const QUEUE_CAPACITY: usize = 32768;

#[derive(Default)]
struct Pending {
    queue: VecDeque<(Key, Event, ObjectReference)>,
    keys: HashSet<Key>,
    closed: bool,
}

struct Shared {
    pending: Mutex<Pending>,
    wake: Notify,
    capacity: usize,
}

/// The sending side; the publishing task ends when it is dropped.
pub struct EventQueue {
    shared: Arc<Shared>,
    metrics: Arc<Metrics>,
    rule: String,
}

impl Drop for EventQueue {
    fn drop(&mut self) {
        if let Ok(mut p) = self.shared.pending.lock() {
            p.closed = true;
        }
        self.shared.wake.notify_one();
    }
}

impl EventQueue {
    /// Starts the publishing task of `rule`, publishing with `recorder` while `fence`
    /// holds (an Event is a write too: a replica that lost leadership posts none).
    pub fn start(
        recorder: super::recorder::Publisher,
        metrics: Arc<Metrics>,
        rule: String,
        fence: Arc<crate::client::Fence>,
        pace: Option<Arc<crate::client::limiter::Pace>>,
        quiet: Option<Arc<Busy>>,
    ) -> EventQueue {
        let recorder = Arc::new(recorder);
        Self::start_with(QUEUE_CAPACITY, metrics, rule, move |ev, reference| {
            let recorder = recorder.clone();
            let fence = fence.clone();
            let (pace, quiet) = (pace.clone(), quiet.clone());
            async move {
                // Events trail behind the writes that make resources converge: each waits
                // for its turn in the pace, then for a moment with none of those writes
                // in flight (at most QUIET_WAIT).
                if let Some(p) = pace {
                    p.wait().await;
                }
                if let Some(q) = quiet {
                    q.quiet_or(QUIET_WAIT).await;
                }
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
        let shared = Arc::new(Shared {
            pending: Mutex::new(Pending::default()),
            wake: Notify::new(),
            capacity: capacity.max(1),
        });
        let s = shared.clone();
        tokio::spawn(async move {
            while let Some((ev, reference)) = next(&s).await {
                publish(ev, reference).await;
            }
        });
        EventQueue {
            shared,
            metrics,
            rule,
        }
    }

    /// Queues an Event about `reference`: folded into an identical one still waiting, or
    /// dropped (counted) when the queue is full.
    pub fn send(&self, ev: Event, reference: ObjectReference) {
        let k = key(&ev, &reference);
        let Ok(mut p) = self.shared.pending.lock() else {
            return;
        };
        if p.keys.contains(&k) {
            return;
        }
        if p.queue.len() >= self.shared.capacity {
            drop(p);
            self.metrics.event_dropped(&self.rule);
            tracing::debug!(rule = %self.rule, reason = %ev.reason, "event queue full; event dropped");
            return;
        }
        p.keys.insert(k.clone());
        p.queue.push_back((k, ev, reference));
        drop(p);
        self.shared.wake.notify_one();
    }
}

/// The next Event to publish, waiting for one; None once the queue is dropped and empty.
async fn next(s: &Shared) -> Option<(Event, ObjectReference)> {
    loop {
        {
            let mut p = s.pending.lock().ok()?;
            if let Some((k, ev, reference)) = p.queue.pop_front() {
                p.keys.remove(&k);
                return Some((ev, reference));
            }
            if p.closed {
                return None;
            }
        }
        s.wake.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::events::EventType;
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

    fn on(name: &str) -> ObjectReference {
        ObjectReference {
            name: Some(name.into()),
            ..Default::default()
        }
    }

    /// A queue whose publisher waits for a permit per Event; (queue, published, gate).
    fn gated(
        capacity: usize,
        metrics: Arc<Metrics>,
    ) -> (EventQueue, Arc<Mutex<Vec<String>>>, Arc<Semaphore>) {
        let published = Arc::new(Mutex::new(Vec::new()));
        let gate = Arc::new(Semaphore::new(0));
        let (p, g) = (published.clone(), gate.clone());
        let q = EventQueue::start_with(capacity, metrics, "website".into(), move |ev, r| {
            let (p, g) = (p.clone(), g.clone());
            async move {
                if let Ok(permit) = g.acquire().await {
                    permit.forget();
                }
                p.lock()
                    .unwrap()
                    .push(format!("{} {}", r.name.unwrap_or_default(), ev.reason));
            }
        });
        (q, published, gate)
    }

    fn dropped(m: &Metrics) -> u64 {
        m.render()
            .lines()
            .find(|l| l.starts_with("ruleop_events_dropped_total{rule=\"website\"}"))
            .and_then(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    }

    async fn until(published: &Mutex<Vec<String>>, n: usize) {
        for _ in 0..200 {
            if published.lock().unwrap().len() >= n {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn every_resource_gets_its_events_late_and_repeats_are_folded() {
        let metrics = Arc::new(Metrics::default());
        let (q, published, gate) = gated(100, metrics.clone());
        // A storm: 40 resources, each with the same Event three times and one other.
        for round in 0..3 {
            for i in 0..40 {
                q.send(ev("Applied"), on(&format!("r{i}")));
                if round == 0 {
                    q.send(ev("Ready"), on(&format!("r{i}")));
                }
            }
        }
        gate.add_permits(1000);
        until(&published, 80).await;
        let got = published.lock().unwrap().clone();
        // The first was taken before its repeats came; the rest folded: 80 or 81.
        assert!((80..=81).contains(&got.len()), "{}", got.len());
        for i in 0..40 {
            for reason in ["Applied", "Ready"] {
                assert!(got.contains(&format!("r{i} {reason}")), "r{i} {reason}");
            }
        }
        assert_eq!(dropped(&metrics), 0);
        // Once published, the same Event again is published again.
        q.send(ev("Ready"), on("r0"));
        until(&published, got.len() + 1).await;
        assert_eq!(published.lock().unwrap().len(), got.len() + 1);
    }

    #[tokio::test]
    async fn beyond_its_capacity_the_queue_drops_and_counts_and_never_blocks_the_sender() {
        let metrics = Arc::new(Metrics::default());
        let (q, published, gate) = gated(4, metrics.clone());
        for i in 0..20 {
            q.send(ev(&format!("E{i}")), ObjectReference::default());
        }
        // One Event may be held by the publisher, four wait, the rest are dropped.
        let d = dropped(&metrics);
        assert!((15..=16).contains(&d), "dropped {d}");
        gate.add_permits(100);
        until(&published, 20 - d as usize).await;
        assert_eq!(published.lock().unwrap().len() + d as usize, 20);
    }
}
