//! Child writes the API server is slow to answer. kube-runtime runs one reconcile of a
//! resource at a time, so a reconcile waiting for one slow write (a Service's creation
//! takes seconds with 10,000 Services in place: BENCHMARKS.md) holds up everything else
//! about that resource: its Deployment becomes ready and the status says so only once
//! the Service is there. So a reconcile waits for its writes for at most [`PATIENCE`]; a
//! write still unanswered then goes on by itself, and the reconcile writes the status
//! meanwhile (`Synced=False`, reason `Applying`) and looks again every [`RECHECK`].
//! While a write of a child is on its way no second one is sent; the first reconcile to
//! find it answered books its outcome as its own.

use crate::apply::ObjectKey;
use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;
use tokio::task::{JoinError, JoinHandle};
use tracing::Instrument;

/// How long a reconcile waits for a child write before letting it go on by itself. Each
/// write that outlasts it gives its resource one more status write (`Applying`): in a
/// create wave at 1,000 resources a Service create takes about 1 s on average; at 10,000,
/// most outlast it (BENCHMARKS.md, "A slow child no longer holds up the status").
pub const PATIENCE: Duration = Duration::from_secs(5);

/// How soon a resource with a write on its way is looked at again.
pub const RECHECK: Duration = Duration::from_secs(1);

/// What became of a write: its answer, or still on its way.
#[derive(Debug)]
pub enum Step<T> {
    Done(Result<T, JoinError>),
    OnItsWay,
}

/// The writes on their way, by child, with the uid of the resource that sent each.
/// Dropping it stops them (a rule stopped or reloaded: nobody is left to book their
/// answers, and its next reconciles decide again).
pub struct Slow<T> {
    writes: Mutex<HashMap<ObjectKey, (String, JoinHandle<T>)>>,
    /// At most this many on their way; beyond, a reconcile waits for its write as it
    /// would without them (the writes outstanding stay bound by the reconciles at once,
    /// and their memory with them).
    room: usize,
}

impl<T> Slow<T> {
    /// Room for `room` writes on their way (the rule's reconciles at once is the measure).
    pub fn new(room: usize) -> Self {
        Slow {
            writes: Mutex::new(HashMap::new()),
            room,
        }
    }
}

impl<T> Drop for Slow<T> {
    fn drop(&mut self) {
        if let Ok(w) = self.writes.get_mut() {
            for (_, (_, h)) in w.drain() {
                h.abort();
            }
        }
    }
}

impl<T: Send + 'static> Slow<T> {
    /// The write of `key` an earlier reconcile of the resource `uid` sent: its answer if it
    /// came (taken: only once), OnItsWay if not; None if there is none. One another
    /// resource of that name sent (deleted and made again since) is stopped and forgotten.
    pub async fn take(&self, key: &ObjectKey, uid: &str) -> Option<Step<T>> {
        let handle = {
            let mut w = self.writes.lock().ok()?;
            let (sender, handle) = w.get(key)?;
            if sender != uid {
                handle.abort();
                w.remove(key);
                return None;
            }
            if !handle.is_finished() {
                return Some(Step::OnItsWay);
            }
            w.remove(key)?.1
        };
        // Finished: this does not wait.
        Some(Step::Done(handle.await))
    }

    /// Sends `write` for the resource `uid` and waits for its answer up to `patience`;
    /// after that it goes on by itself (see [`Slow::take`]).
    pub async fn send<F>(&self, key: ObjectKey, uid: &str, write: F, patience: Duration) -> Step<T>
    where
        F: Future<Output = T> + Send + 'static,
    {
        let mut handle = tokio::spawn(write.instrument(tracing::Span::current()));
        if let Ok(answer) = tokio::time::timeout(patience, &mut handle).await {
            return Step::Done(answer);
        }
        if let Ok(mut w) = self.writes.lock()
            && w.len() < self.room
        {
            w.insert(key, (uid.to_string(), handle));
            return Step::OnItsWay;
        }
        // No room: wait for it here.
        Step::Done(handle.await)
    }

    /// Stops and forgets the writes the resource `uid` sent (it is going away).
    pub fn forget(&self, uid: &str) {
        if let Ok(mut w) = self.writes.lock() {
            w.retain(|_, (sender, handle)| {
                let keep = sender != uid;
                if !keep {
                    handle.abort();
                }
                keep
            });
        }
    }

    /// How many writes are on their way.
    #[cfg(test)]
    fn count(&self) -> usize {
        self.writes.lock().map(|w| w.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            api_version: "v1".into(),
            kind: "Service".into(),
            namespace: "default".into(),
            name: name.into(),
        }
    }

    async fn after(ms: u64, answer: &'static str) -> &'static str {
        tokio::time::sleep(Duration::from_millis(ms)).await;
        answer
    }

    #[tokio::test]
    async fn a_write_answered_in_time_is_the_reconciles_own() {
        let slow = Slow::new(8);
        let step = slow
            .send(key("a"), "u1", after(5, "ok"), Duration::from_secs(5))
            .await;
        assert!(matches!(step, Step::Done(Ok("ok"))), "{step:?}");
        assert_eq!(slow.count(), 0);
        assert!(slow.take(&key("a"), "u1").await.is_none());
    }

    #[tokio::test]
    async fn a_slow_write_goes_on_and_its_answer_is_taken_once() {
        let slow = Slow::new(8);
        let step = slow
            .send(
                key("a"),
                "u1",
                after(200, "late"),
                Duration::from_millis(20),
            )
            .await;
        assert!(matches!(step, Step::OnItsWay), "{step:?}");
        assert_eq!(slow.count(), 1);
        // Still on its way: no second write, no answer yet.
        assert!(matches!(
            slow.take(&key("a"), "u1").await,
            Some(Step::OnItsWay)
        ));
        assert!(slow.take(&key("b"), "u1").await.is_none());
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(matches!(
            slow.take(&key("a"), "u1").await,
            Some(Step::Done(Ok("late")))
        ));
        assert!(
            slow.take(&key("a"), "u1").await.is_none(),
            "taken only once"
        );
        assert_eq!(slow.count(), 0);
    }

    #[tokio::test]
    async fn dropping_it_stops_the_writes_on_their_way() {
        let slow = Slow::new(8);
        let sent = Arc::new(AtomicBool::new(false));
        let s = sent.clone();
        let write = async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            s.store(true, Ordering::SeqCst);
        };
        let step = slow
            .send(key("a"), "u1", write, Duration::from_millis(10))
            .await;
        assert!(matches!(step, Step::OnItsWay));
        drop(slow);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!sent.load(Ordering::SeqCst), "the write was stopped");
    }

    #[tokio::test]
    async fn beyond_its_room_a_slow_write_is_waited_for() {
        let slow = Slow::new(1);
        let first = slow
            .send(key("a"), "u1", after(200, "a"), Duration::from_millis(10))
            .await;
        assert!(matches!(first, Step::OnItsWay));
        let started = std::time::Instant::now();
        let second = slow
            .send(key("b"), "u2", after(100, "b"), Duration::from_millis(10))
            .await;
        assert!(matches!(second, Step::Done(Ok("b"))), "{second:?}");
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert_eq!(slow.count(), 1);
    }

    #[tokio::test]
    async fn the_writes_of_a_resource_gone_or_made_again_are_stopped_and_forgotten() {
        let slow = Slow::new(8);
        for (name, uid) in [("a", "old"), ("b", "old"), ("c", "other")] {
            let step = slow
                .send(
                    key(name),
                    uid,
                    after(300, "late"),
                    Duration::from_millis(10),
                )
                .await;
            assert!(matches!(step, Step::OnItsWay));
        }
        // The resource made again under its name (another uid) does not get `a`'s answer.
        assert!(slow.take(&key("a"), "new").await.is_none());
        assert_eq!(slow.count(), 2);
        slow.forget("old");
        assert_eq!(slow.count(), 1, "only the other resource's write is left");
        assert!(matches!(
            slow.take(&key("c"), "other").await,
            Some(Step::OnItsWay)
        ));
    }
}
