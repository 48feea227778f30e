//! A task of its own that ends with whoever holds it: the helpers beside a rule (its CRD
//! installer, the clean-up of kinds it no longer makes). Whoever holds the [`Spawned`] may
//! await it; dropping it aborts the task (at its next await), so a helper does not run on
//! after the rule that started it ends (stopped, or cancelled when leadership is lost).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::task::{JoinError, JoinHandle};

/// A spawned task, aborted when dropped. Awaiting it gives the task's output, or the
/// [`JoinError`] of a task that panicked.
pub struct Spawned<T>(JoinHandle<T>);

impl<T: Send + 'static> Spawned<T> {
    /// Starts `fut` on the runtime.
    pub fn start(fut: impl Future<Output = T> + Send + 'static) -> Self {
        Spawned(tokio::spawn(fut))
    }
}

impl<T> Drop for Spawned<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl<T> Future for Spawned<T> {
    type Output = Result<T, JoinError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0).poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    #[tokio::test]
    async fn gives_the_output_or_the_panic() {
        assert_eq!(Spawned::start(async { 7 }).await.unwrap(), 7);
        let failed = Spawned::start(async { panic!("a bug") }).await;
        let e: JoinError = failed.unwrap_err();
        assert!(e.is_panic());
    }

    #[tokio::test]
    async fn dropping_it_aborts_the_task() {
        let finished = Arc::new(AtomicBool::new(false));
        let flag = finished.clone();
        let task = Spawned::start(async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            flag.store(true, Ordering::SeqCst);
        });
        tokio::time::sleep(Duration::from_millis(5)).await;
        drop(task);
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(
            !finished.load(Ordering::SeqCst),
            "the task ran on after its holder was gone"
        );
    }
}
