//! Following a watch's re-list (`Init` … `InitApply`… `InitDone`): what the re-list
//! brought, collected as it comes and handed over at `InitDone`, so what was kept about
//! objects gone while the watch was down (no `Delete` came for them) can be dropped.

use kube::api::DynamicObject;
use kube::runtime::watcher::Event;
use std::sync::Mutex;

/// The items of a re-list in progress.
pub struct Relist<T>(Mutex<Option<Vec<T>>>);

impl<T> Default for Relist<T> {
    fn default() -> Self {
        Relist(Mutex::new(None))
    }
}

impl<T> Relist<T> {
    /// Follows one event, keeping what `item` makes of each listed object; at `InitDone`,
    /// gives everything the re-list brought.
    pub fn observe(
        &self,
        ev: &Event<DynamicObject>,
        item: impl FnOnce(&DynamicObject) -> Option<T>,
    ) -> Option<Vec<T>> {
        let mut cur = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match ev {
            Event::Init => *cur = Some(Vec::new()),
            Event::InitApply(o) => {
                if let Some(t) = item(o) {
                    cur.get_or_insert_with(Vec::new).push(t);
                }
            }
            Event::InitDone => return Some(cur.take().unwrap_or_default()),
            Event::Apply(_) | Event::Delete(_) => {}
        }
        None
    }
}
