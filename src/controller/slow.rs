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

/// How long a reconcile waits for a child write before letting it go on by itself: above
/// what a wave of creates costs (at 10,000 resources a Service's creation waits about 2 s
/// at the API server), so that a wave is not given one more status write per resource.
pub const PATIENCE: Duration = Duration::from_secs(5);

/// How soon a resource with a write on its way is looked at again.
pub const RECHECK: Duration = Duration::from_secs(1);

/// What became of a write: its answer, or still on its way.
#[derive(Debug)]
pub enum Step<T> {
    Done(Result<T, JoinError>),
    OnItsWay,
}

/// The writes on their way, by child. Dropping it stops them (a rule stopped or reloaded:
/// nobody is left to book their answers, and its next reconciles decide again).
pub struct Slow<T> {
    writes: Mutex<HashMap<ObjectKey, JoinHandle<T>>>,
}

impl<T> Default for Slow<T> {
    fn default() -> Self {
        Slow {
            writes: Mutex::new(HashMap::new()),
        }
    }
}

impl<T> Drop for Slow<T> {
    fn drop(&mut self) {
        if let Ok(w) = self.writes.get_mut() {
            for (_, h) in w.drain() {
                h.abort();
            }
        }
    }
}

impl<T: Send + 'static> Slow<T> {
    /// The write of `key` sent by an earlier reconcile: its answer if it came (taken: only
    /// once), OnItsWay if not; None if there is none.
    pub async fn take(&self, key: &ObjectKey) -> Option<Step<T>> {
        let handle = {
            let mut w = self.writes.lock().ok()?;
            if !w.get(key)?.is_finished() {
                return Some(Step::OnItsWay);
            }
            w.remove(key)?
        };
        // Finished: this does not wait.
        Some(Step::Done(handle.await))
    }

    /// Sends `write` and waits for its answer up to `patience`; after that it goes on by
    /// itself (see [`Slow::take`]).
    pub async fn send<F>(&self, key: ObjectKey, write: F, patience: Duration) -> Step<T>
    where
        F: Future<Output = T> + Send + 'static,
    {
        let mut handle = tokio::spawn(write);
        match tokio::time::timeout(patience, &mut handle).await {
            Ok(answer) => Step::Done(answer),
            Err(_) => {
                if let Ok(mut w) = self.writes.lock() {
                    w.insert(key, handle);
                }
                Step::OnItsWay
            }
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
        let slow = Slow::default();
        let step = slow
            .send(key("a"), after(5, "ok"), Duration::from_secs(5))
            .await;
        assert!(matches!(step, Step::Done(Ok("ok"))), "{step:?}");
        assert_eq!(slow.count(), 0);
        assert!(slow.take(&key("a")).await.is_none());
    }

    #[tokio::test]
    async fn a_slow_write_goes_on_and_its_answer_is_taken_once() {
        let slow = Slow::default();
        let step = slow
            .send(key("a"), after(200, "late"), Duration::from_millis(20))
            .await;
        assert!(matches!(step, Step::OnItsWay), "{step:?}");
        assert_eq!(slow.count(), 1);
        // Still on its way: no second write, no answer yet.
        assert!(matches!(slow.take(&key("a")).await, Some(Step::OnItsWay)));
        assert!(slow.take(&key("b")).await.is_none());
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(matches!(
            slow.take(&key("a")).await,
            Some(Step::Done(Ok("late")))
        ));
        assert!(slow.take(&key("a")).await.is_none(), "taken only once");
        assert_eq!(slow.count(), 0);
    }

    #[tokio::test]
    async fn dropping_it_stops_the_writes_on_their_way() {
        let slow = Slow::default();
        let sent = Arc::new(AtomicBool::new(false));
        let s = sent.clone();
        let write = async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            s.store(true, Ordering::SeqCst);
        };
        let step = slow.send(key("a"), write, Duration::from_millis(10)).await;
        assert!(matches!(step, Step::OnItsWay));
        drop(slow);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!sent.load(Ordering::SeqCst), "the write was stopped");
    }
}
