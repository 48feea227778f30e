//! Watches the rules paths for changes (files, directories, and a mounted ConfigMap's
//! symlink swaps) and signals the supervisor. Signals are coalesced: the supervisor
//! reloads everything once per burst.

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use std::path::{Path, PathBuf};
use tokio::sync::mpsc;

/// Keeps the OS watches alive; drop it to stop watching.
pub struct PathWatcher {
    _watcher: RecommendedWatcher,
}

/// Starts watching `paths`; each change sends `()` on the returned channel.
pub fn watch(paths: &[PathBuf]) -> notify::Result<(PathWatcher, mpsc::Receiver<()>)> {
    let (tx, rx) = mpsc::channel(1);
    let mut watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        if let Ok(ev) = res
            && !ev.kind.is_access()
        {
            // A full channel already holds a pending signal: this change is covered.
            let _ = tx.try_send(());
        }
    })?;
    for p in paths {
        if p.is_dir() {
            watcher.watch(p, RecursiveMode::Recursive)?;
        } else {
            // Watch the directory: editors and ConfigMaps replace files, not write them.
            let parent = p
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .unwrap_or(Path::new("."));
            watcher.watch(parent, RecursiveMode::NonRecursive)?;
        }
    }
    Ok((PathWatcher { _watcher: watcher }, rx))
}
