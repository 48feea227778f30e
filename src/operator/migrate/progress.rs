//! Where a kind's storage stands, as a Rule's `status.storage` shows it: the storage
//! version, the versions objects are stored in, and the last migration this replica ran
//! (how, from which versions, how far).

use serde::Serialize;
use serde_json::Value;
use std::sync::Mutex;

/// A kind's storage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Storage {
    /// The version the API server stores new writes in.
    pub version: String,
    /// The CRD's `status.storedVersions`.
    pub stored_versions: Vec<String>,
    pub migration: Option<Migration>,
}

/// One migration of the stored objects to the storage version. (A field it lacks is
/// written as null: the Rule's status is merge-patched, and an earlier migration's value
/// must go.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Migration {
    pub phase: Phase,
    /// `ruleop` (it writes each object again itself), or
    /// `StorageVersionMigration/<name>` (the API server's migrator does).
    pub by: String,
    /// The versions migrated from.
    pub from: Vec<String>,
    /// The objects migrated so far (ruleop's own migration only)...
    pub objects: Option<usize>,
    /// ...of which ruleop wrote this many again (the others were written meanwhile by
    /// someone else, which stored them anew, or deleted).
    pub rewritten: Option<usize>,
    /// Why a migration by the API failed or was not taken up (then ruleop migrates).
    pub message: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Phase {
    Migrating,
    Done,
}

/// The storage of a running rule's kind, shared with the status writer.
#[derive(Default)]
pub struct Shared(Mutex<Option<Storage>>);

impl Shared {
    /// The CRD as read: its storage version and `storedVersions` (the last migration
    /// stays).
    pub fn observe(&self, version: &str, stored: &[String]) {
        if let Ok(mut x) = self.0.lock() {
            let migration = x.take().and_then(|s| s.migration);
            *x = Some(Storage {
                version: version.to_string(),
                stored_versions: stored.to_vec(),
                migration,
            });
        }
    }

    /// A migration starts (its storage observed first).
    pub fn start(&self, m: Migration) {
        if let Ok(mut x) = self.0.lock()
            && let Some(s) = x.as_mut()
        {
            s.migration = Some(m);
        }
    }

    /// Changes the migration in progress, if one is.
    pub fn update(&self, f: impl FnOnce(&mut Migration)) {
        if let Ok(mut x) = self.0.lock()
            && let Some(m) = x.as_mut().and_then(|s| s.migration.as_mut())
        {
            f(m);
        }
    }

    /// As `status.storage` (None: nothing known yet).
    pub fn status(&self) -> Option<Value> {
        let s = self.0.lock().ok()?.clone()?;
        serde_json::to_value(s).ok()
    }
}
