//! Whether this replica may write now: every request that changes the cluster asks first.
//! Leader election ([`super::lease`]) sets its deadline; without election it always holds.

use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Whether this replica may write now. Without leader election it always may.
#[derive(Debug, Default)]
pub struct Fence {
    elected: bool,
    valid_until: Mutex<Option<Instant>>,
}

impl Fence {
    /// A fence that always holds (no leader election).
    pub fn open() -> Arc<Fence> {
        Arc::new(Fence::default())
    }

    /// A fence that holds only once [`Fence::set`] gives it a deadline (leader election).
    pub fn elected() -> Arc<Fence> {
        Arc::new(Fence {
            elected: true,
            valid_until: Mutex::new(None),
        })
    }

    /// True while this replica may write.
    pub fn holds(&self) -> bool {
        !self.elected || self.until().is_some_and(|t| Instant::now() < t)
    }

    /// Until when it holds, if elected and set.
    pub fn until(&self) -> Option<Instant> {
        *self.valid_until.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Holds until `until` (None: not at all).
    pub fn set(&self, until: Option<Instant>) {
        *self.valid_until.lock().unwrap_or_else(|p| p.into_inner()) = until;
    }
}
