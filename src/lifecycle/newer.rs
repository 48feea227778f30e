//! One scheme decides which of two versions of a rule is newer, for a rule from a file and
//! a Rule object alike. The inventory keeps, per rule, the versions that have been newest
//! (by fingerprint, with the time each became so, and for a Rule its object's uid and
//! generation), and a rule runs only while its version is the newest or newer than it.
//!
//! - **A Rule object** is ordered by the cluster: the same object (uid) with a higher
//!   generation is newer, a lower one older (a standby whose Rule watch lags behind does not
//!   run generation 4 after generation 5 ran); another object of that name is newer when it
//!   was created after the one recorded (the Rule deleted and made again), older when
//!   created before (a deleted one still in a lagging cache). A rule moved from a file to a
//!   Rule is newer. A revision read back from the cluster (generation 0: it stands in while
//!   no generation of the Rule loads) is the newest when it is the version the cluster last
//!   ran, and otherwise runs but deletes nothing until it has been the newest for the wait.
//! - **A rule from a file** reaches each replica on its own time (a mounted ConfigMap is
//!   updated by each kubelet up to a minute or two apart), so it is newer when the cluster
//!   has not seen it, when this replica itself loaded it after the newest (an edit, or a
//!   rollback, seen here), or once the newest has been in force longer than the patience
//!   (every replica's files have had time to arrive: what is older now is a rollback).
//!   Otherwise it waits, and says so. A version the cluster has not seen, on a replica that
//!   never loaded the newest, may be an old one that never ran: it runs, but deletes and
//!   retires nothing until it has been the newest for the whole wait.

use k8s_openapi::jiff::Timestamp;
use std::time::Duration;

/// How long a newer version recorded in the cluster is waited for before this replica's
/// files are taken to be a rollback.
pub const PATIENCE: Duration = Duration::from_secs(300);

/// How many versions the inventory keeps per rule.
pub const KEEP: usize = 16;

/// When a version may delete: now, after a wait, or never.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retire {
    Now,
    After(Duration),
    Never,
}

/// The Rule object a version came from: its uid, generation and creation time (the
/// cluster's order).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FromObject {
    pub uid: String,
    pub generation: i64,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub created: String,
}

/// A version of a rule that was the newest in force, since when, and why it was taken
/// for newer than the one before (`first`, `edit`: a replica loaded it after that one;
/// `unseen`: the cluster had not run it; `rollback`: the one before had been in force for
/// the whole wait; `generation`: a later generation of the same Rule; `object`: another
/// Rule object).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Version {
    pub fingerprint: String,
    pub since: String,
    #[serde(default)]
    pub why: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<FromObject>,
}

/// This replica's version of a rule: its fingerprint, and the Rule it came from (None: a
/// file).
#[derive(Debug, Clone, Copy)]
pub struct Mine<'a> {
    pub fingerprint: &'a str,
    pub object: Option<ObjectRef<'a>>,
}

/// A Rule object as [`Mine`] holds it.
#[derive(Debug, Clone, Copy)]
pub struct ObjectRef<'a> {
    pub uid: &'a str,
    pub generation: i64,
    pub created: &'a str,
}

/// How this replica's version of a rule stands to the versions the cluster has seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    /// It is the newest recorded (as `why`, since `since`): it runs.
    Newest { why: String, since: String },
    /// It is newer than the newest recorded, for `why`: recorded as the newest, then it
    /// runs.
    Newer { why: &'static str },
    /// The cluster has seen a newer one (`newest`, since `since`) that this replica has not
    /// loaded: it waits.
    Older { newest: String, since: String },
}

/// Where `mine` stands, given the versions recorded (oldest first), the fingerprints this
/// replica has loaded for the rule (in order), the time now and the wait for a newer
/// version's files.
pub fn standing(
    log: &[Version],
    mine: Mine,
    loaded: &[String],
    now: Timestamp,
    patience: Duration,
) -> Standing {
    let Some(newest) = log.last() else {
        return Standing::Newer { why: "first" };
    };
    if newest.fingerprint == mine.fingerprint {
        // The version the cluster last ran (a Rule's last good revision serving while its
        // generation does not load is that version too).
        return Standing::Newest {
            why: newest.why.clone(),
            since: newest.since.clone(),
        };
    }
    let older = || Standing::Older {
        newest: newest.fingerprint.clone(),
        since: newest.since.clone(),
    };
    if let Some(o) = mine.object {
        return match rule_order(o, newest.object.as_ref()) {
            Some(std::cmp::Ordering::Less) => older(),
            Some(std::cmp::Ordering::Greater) => Standing::Newer { why: "generation" },
            // A revision read back (generation 0) that is not the version last run: it
            // may be older, so it deletes nothing until the wait is over.
            _ if o.generation == 0 => Standing::Newer { why: "unseen" },
            // Another Rule object made later, a rule moved from a file, or the same
            // generation read with another fingerprint (as a new release of ruleop may
            // compute it): the cluster's word.
            _ => Standing::Newer { why: "object" },
        };
    }
    let seen_before = log.iter().any(|v| v.fingerprint == mine.fingerprint);
    if loaded.contains(&newest.fingerprint) {
        Standing::Newer { why: "edit" }
    } else if !seen_before {
        Standing::Newer { why: "unseen" }
    } else if waited(&newest.since, now, patience) {
        Standing::Newer { why: "rollback" }
    } else {
        older()
    }
}

/// How a Rule's version stands to the newest recorded one, where the cluster orders them:
/// the same object by generation (a revision read back, generation 0, is not ordered), or
/// another object of the name by creation time.
fn rule_order(mine: ObjectRef, newest: Option<&FromObject>) -> Option<std::cmp::Ordering> {
    let newest = newest?;
    if newest.uid == mine.uid {
        (mine.generation != 0).then(|| mine.generation.cmp(&newest.generation))
    } else if !mine.created.is_empty() && !newest.created.is_empty() {
        // (RFC 3339 times in UTC, as the API server writes them, order as text.)
        match mine.created.cmp(newest.created.as_str()) {
            std::cmp::Ordering::Less => Some(std::cmp::Ordering::Less),
            _ => None,
        }
    } else {
        None
    }
}

/// Whether `patience` has passed since `since` (an unreadable time counts as long ago).
fn waited(since: &str, now: Timestamp, patience: Duration) -> bool {
    since
        .parse::<Timestamp>()
        .map(|s| now.duration_since(s).as_secs() >= patience.as_secs() as i64)
        .unwrap_or(true)
}

impl Standing {
    /// When this version may retire the kinds the inventory records and it no longer
    /// makes: the removal must be known to be newer than the kind. A version that was the
    /// first, a later generation or another Rule, or one that a replica loaded after the
    /// one before, may at once; one the cluster had not seen could be an old one that never
    /// ran, so it may only once it has been the newest for the whole wait; one taken for a
    /// rollback by time never retires what a newer version added.
    pub fn retire(&self, now: Timestamp, patience: Duration) -> Retire {
        match self.why_since() {
            None | Some(("rollback", _)) => Retire::Never,
            Some(("unseen", since)) => settled(since, now, patience),
            // "first", "edit", "generation", "object", and versions recorded before
            // reasons were kept.
            Some(_) => Retire::Now,
        }
    }

    /// When this version may take away the objects its render no longer makes: a version
    /// known to be the newest at once; one the cluster had not run, loaded by a replica
    /// that never loaded the newest, could be an old one that never ran, so only once it
    /// has been the newest for the whole wait.
    pub fn prune(&self, now: Timestamp, patience: Duration) -> Retire {
        match self.why_since() {
            None => Retire::Never,
            Some(("unseen", since)) => settled(since, now, patience),
            Some(_) => Retire::Now,
        }
    }

    /// Why this version runs, and since when it has been the newest (None: it is newer
    /// only now); None for a version that does not run.
    fn why_since(&self) -> Option<(&str, Option<&str>)> {
        match self {
            Standing::Newest { why, since } => Some((why.as_str(), Some(since.as_str()))),
            Standing::Newer { why } => Some((why, None)),
            Standing::Older { .. } => None,
        }
    }
}

/// Now, once `patience` has passed since `since` (the time a version became the newest;
/// None: just now); otherwise after the rest of it.
fn settled(since: Option<&str>, now: Timestamp, patience: Duration) -> Retire {
    let left = since
        .and_then(|s| s.parse::<Timestamp>().ok())
        .map(|s| {
            let gone = now.duration_since(s).as_secs().max(0) as u64;
            patience.saturating_sub(Duration::from_secs(gone))
        })
        .unwrap_or(patience);
    if left.is_zero() {
        Retire::Now
    } else {
        Retire::After(left)
    }
}

/// The log with `mine` as the newest version, since `now`, for `why`.
pub fn pushed(mut log: Vec<Version>, mine: Mine, now: Timestamp, why: &str) -> Vec<Version> {
    log.retain(|v| v.fingerprint != mine.fingerprint);
    log.push(Version {
        fingerprint: mine.fingerprint.to_string(),
        since: now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        why: why.to_string(),
        object: mine.object.map(|o| FromObject {
            uid: o.uid.to_string(),
            generation: o.generation,
            created: o.created.to_string(),
        }),
    });
    let extra = log.len().saturating_sub(KEEP);
    log.drain(..extra);
    log
}

#[cfg(test)]
#[path = "newer_tests.rs"]
mod tests;
