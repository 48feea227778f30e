//! Reconciles take turns: at most `--concurrency` of one rule run at once, and the ones
//! waiting start in the order they became due.
//!
//! kube-runtime has a bound of its own (its runner's `concurrency`), but beyond it the due
//! objects are parked in a hash set and taken back in hash order, each time from the
//! start of the set. Under a backlog an unlucky resource then waits until the backlog is
//! gone while later ones go first: measured with 10,000 resources in place, new ones
//! created every 100 ms waited up to 53 s for their first reconcile while most waited a
//! few seconds. So the runner runs unbounded and each reconcile first waits for its turn
//! at a fair semaphore: first come, first served.

use std::future::Future;
use tokio::sync::{Semaphore, SemaphorePermit};

/// The turns of one rule's reconciles.
pub struct Turns {
    /// None: no bound.
    seats: Option<Semaphore>,
}

impl Turns {
    /// At most `concurrency` at once; 0 for no bound.
    pub fn new(concurrency: u16) -> Turns {
        Turns {
            seats: (concurrency > 0).then(|| Semaphore::new(usize::from(concurrency))),
        }
    }

    /// Waits for a turn; the turn ends when the permit is dropped.
    pub async fn take(&self) -> Option<SemaphorePermit<'_>> {
        match &self.seats {
            // The semaphore is never closed.
            Some(s) => s.acquire().await.ok(),
            None => None,
        }
    }

    /// Runs `work` in its turn. The work's future is made (and boxed) only once the turn
    /// has come, so the many that may wait cost little memory each.
    pub async fn run<F: Future>(&self, work: impl FnOnce() -> F) -> F::Output {
        let _turn = self.take().await;
        Box::pin(work()).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    #[tokio::test]
    async fn the_waiting_start_in_the_order_they_came() {
        let turns = Arc::new(Turns::new(1));
        let order = Arc::new(Mutex::new(Vec::new()));
        let first = turns.take().await;
        let mut waiting = Vec::new();
        for i in 0..50 {
            let (turns, order) = (turns.clone(), order.clone());
            waiting.push(tokio::spawn(async move {
                turns.run(|| async { order.lock().unwrap().push(i) }).await
            }));
            // Each is queued before the next comes.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        drop(first);
        for w in waiting {
            w.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), (0..50).collect::<Vec<_>>());
    }

    #[tokio::test]
    async fn no_bound_lets_everything_run() {
        let turns = Turns::new(0);
        let a = turns.take().await;
        let b = turns.take().await;
        assert!(a.is_none() && b.is_none());
        assert_eq!(turns.run(|| async { 7 }).await, 7);
    }
}
