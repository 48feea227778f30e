//! A version that may prune only after a wait (see [`crate::operator::versions`]): every
//! resource reconciled again once it may.

use super::shape::{AbortOnDrop, Beside, Companion, StartBeside, spawn};
use crate::reconcile::PruneFrom;

pub(super) const COMPANION: Companion<StartBeside> = Companion {
    name: "prune wait",
    runs: |_, _| true,
    start,
};

fn start(b: &Beside<'_>) -> Option<AbortOnDrop> {
    let PruneFrom::At(t) = b.prune else {
        return None;
    };
    let again = b.reconcile_all.clone();
    Some(spawn(async move {
        tokio::time::sleep_until(t.into()).await;
        tracing::info!(
            "this version has been the newest for the whole wait: it now deletes what its render no longer makes"
        );
        let _ = again.send(()).await;
    }))
}
