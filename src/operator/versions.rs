//! Which version of a rule is in force across replicas. Rules files reach each replica on
//! its own time (a mounted ConfigMap is updated by each kubelet up to a minute or two
//! apart), so after a failover the new leader may hold an older version than the one the
//! old leader ran; acting on it would undo the newer version's work, and retiring the
//! kinds the newer version added would delete, cluster-wide, everything made of them.
//!
//! So the inventory keeps, per rule, the versions that have been newest (by fingerprint,
//! with the time each became so), and a rule runs only while its version is the newest
//! or newer than it: a version the cluster has not seen, one this replica itself loaded
//! after the newest (an edit, or a rollback, seen here), or any version once the newest
//! has been in force longer than [`PATIENCE`] (every replica's files have had time to
//! arrive: what is older now is a rollback). Otherwise the rule waits, and says so. A
//! version the cluster has not seen, on a replica that never loaded the newest, may be an
//! old one that never ran: it runs, but deletes and retires nothing until it has been the
//! newest for the whole wait.

pub use super::inventory::Retire;
use super::inventory::{Inventory, InventoryError, key};
use crate::metrics::{Metrics, RuleLabels};
use crate::rules::CompiledRule;
use k8s_openapi::jiff::Timestamp;
use std::time::Duration;
use tokio::sync::watch;

/// How long a newer version recorded in the cluster is waited for before this replica's
/// files are taken to be a rollback.
pub const PATIENCE: Duration = Duration::from_secs(300);

/// How many versions the inventory keeps per rule.
const KEEP: usize = 16;

/// A version of a rule that was the newest in force, since when, and why it was taken
/// for newer than the one before (`first`, `edit`: a replica loaded it after that one;
/// `unseen`: the cluster had not run it; `rollback`: the one before had been in force for
/// the whole wait).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Version {
    pub fingerprint: String,
    pub since: String,
    #[serde(default)]
    pub why: String,
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
    mine: &str,
    loaded: &[String],
    now: Timestamp,
    patience: Duration,
) -> Standing {
    let Some(newest) = log.last() else {
        return Standing::Newer { why: "first" };
    };
    if newest.fingerprint == mine {
        return Standing::Newest {
            why: newest.why.clone(),
            since: newest.since.clone(),
        };
    }
    let seen_before = log.iter().any(|v| v.fingerprint == mine);
    let loaded_newest_here = loaded.contains(&newest.fingerprint);
    let waited = waited(&newest.since, now, patience);
    if loaded_newest_here {
        Standing::Newer { why: "edit" }
    } else if !seen_before {
        Standing::Newer { why: "unseen" }
    } else if waited {
        Standing::Newer { why: "rollback" }
    } else {
        Standing::Older {
            newest: newest.fingerprint.clone(),
            since: newest.since.clone(),
        }
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
    /// first, or that a replica loaded after the one before, may at once; one the cluster
    /// had not seen could be an old one that never ran, so it may only once it has been
    /// the newest for the whole wait; one taken for a rollback by time never retires what
    /// a newer version added.
    pub fn retire(&self, now: Timestamp, patience: Duration) -> Retire {
        match self.why_since() {
            None | Some(("rollback", _)) => Retire::Never,
            Some(("unseen", since)) => settled(since, now, patience),
            // "first", "edit", and versions recorded before reasons were kept.
            Some(_) => Retire::Now,
        }
    }

    /// When this version may take away the objects its render no longer makes: a version
    /// known to be the newest (the first, one loaded here after the newest, or one taken
    /// for a rollback once the newest had been in force for the whole wait) at once; one
    /// the cluster had not run, loaded by a replica that never loaded the newest, could be
    /// an old one that never ran, so only once it has been the newest for the whole wait.
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
fn pushed(mut log: Vec<Version>, mine: &str, now: Timestamp, why: &str) -> Vec<Version> {
    log.retain(|v| v.fingerprint != mine);
    log.push(Version {
        fingerprint: mine.to_string(),
        since: now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
        why: why.to_string(),
    });
    let extra = log.len().saturating_sub(KEEP);
    log.drain(..extra);
    log
}

/// The inventory key of a rule's versions (rule names cannot start with `_`).
fn versions_key(rule: &str, scope: Option<&str>) -> String {
    format!("_versions.{}", key(rule, scope))
}

async fn claim(
    inventory: &Inventory,
    rule: &CompiledRule,
    scope: Option<&str>,
    loaded: &[String],
    patience: Duration,
) -> Result<Standing, InventoryError> {
    let k = versions_key(&rule.name, scope);
    let log: Vec<Version> = inventory
        .get(&k)
        .await?
        .and_then(|v| serde_json::from_str(&v).ok())
        .unwrap_or_default();
    let now = Timestamp::now();
    let standing = standing(&log, &rule.fingerprint, loaded, now, patience);
    if let Standing::Newer { why } = standing {
        let log = pushed(log, &rule.fingerprint, now, why);
        inventory
            .set(&k, serde_json::to_string(&log).unwrap_or_default())
            .await?;
    }
    Ok(standing)
}

/// What a rule may do once it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allowed {
    /// Delete (or orphan) the objects its render no longer makes: now, after a wait (its
    /// version may be an old one that never ran), or never (it could not be checked).
    pub prune: Retire,
    /// Retire the kinds the inventory records and it no longer makes.
    pub retire: Retire,
}

/// How many failed reads of the inventory a rule waits through before it runs anyway,
/// deleting nothing.
const TRIES: u32 = 3;

/// Waits until `rule`'s version may run here (recording it as the newest when it is
/// newer), and says what it may delete; None when the rule is stopped meanwhile. When the
/// inventory cannot be read, the rule runs after a few tries but deletes nothing (its
/// version could not be checked).
pub async fn wait_until_newest(
    inventory: &Inventory,
    rule: &CompiledRule,
    scope: Option<&str>,
    loaded: &[String],
    patience: Duration,
    metrics: &Metrics,
    stop: &watch::Receiver<bool>,
) -> Option<Allowed> {
    let older = metrics
        .rule_older
        .get_or_create(&RuleLabels {
            rule: rule.name.clone(),
        })
        .clone();
    let mut told = None;
    let mut failures = 0;
    loop {
        let retry = match claim(inventory, rule, scope, loaded, patience).await {
            Ok(Standing::Older { newest, since }) => {
                older.set(1);
                if told.as_ref() != Some(&newest) {
                    tracing::warn!(fingerprint = %rule.fingerprint, newest = %newest, since = %since, waits_up_to_s = patience.as_secs(), "this replica's version of the rule is older than one the cluster has run: it does not run (nothing is written or deleted) until its files catch up, or the newer version has been in force for the whole wait (then this one is taken for a rollback)");
                    told = Some(newest);
                }
                Duration::from_secs(5)
            }
            Ok(standing) => {
                older.set(0);
                if told.is_some() {
                    tracing::info!(fingerprint = %rule.fingerprint, "this replica's rule is now the newest in the cluster; starting it");
                }
                let now = Timestamp::now();
                let prune = standing.prune(now, patience);
                if let Retire::After(wait) = prune {
                    tracing::warn!(fingerprint = %rule.fingerprint, wait_s = wait.as_secs(), "this replica's version of the rule is one the cluster has not run, and this replica did not load the newest one: it may be an old version that never ran, so it deletes nothing until it has been the newest for the whole wait");
                }
                return Some(Allowed {
                    prune,
                    retire: standing.retire(now, patience),
                });
            }
            Err(e) if failures + 1 >= TRIES => {
                tracing::error!(error = %e, "the versions of the rule in the inventory cannot be read or written: the rule runs, but deletes nothing and retires no kind, until ruleop can read its inventory (check the RBAC of --lease-namespace) and restarts the rule");
                return Some(Allowed {
                    prune: Retire::Never,
                    retire: Retire::Never,
                });
            }
            Err(e) => {
                failures += 1;
                tracing::warn!(error = %e, "the versions of the rule in the inventory cannot be read or written; retrying");
                Duration::from_secs(2)
            }
        };
        let mut stop = stop.clone();
        tokio::select! {
            _ = tokio::time::sleep(retry) => {}
            _ = stop.wait_for(|s| *s) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn log(entries: &[(&str, &str)]) -> Vec<Version> {
        entries
            .iter()
            .map(|(f, s)| Version {
                fingerprint: f.to_string(),
                since: s.to_string(),
                why: "edit".into(),
            })
            .collect()
    }

    /// The standing of the newest version recorded, as `why`, since `since`.
    fn newest(why: &str, since: &str) -> Standing {
        Standing::Newest {
            why: why.into(),
            since: since.into(),
        }
    }

    fn stand(l: &[Version], mine: &str, loaded: &[String]) -> Standing {
        standing(l, mine, loaded, at(NOW), PATIENCE)
    }

    const NOW: &str = "2026-12-02T12:00:00Z";
    const JUST_NOW: &str = "2026-12-02T11:59:00Z";
    const LONG_AGO: &str = "2026-12-02T11:00:00Z";

    #[test]
    fn a_first_version_and_an_unseen_one_are_newer() {
        assert_eq!(stand(&[], "v1", &[]), Standing::Newer { why: "first" });
        let l = log(&[("v1", LONG_AGO)]);
        assert_eq!(
            stand(&l, "v1", &[]),
            Standing::Newest {
                why: "edit".into(),
                since: LONG_AGO.into()
            }
        );
        assert_eq!(stand(&l, "v2", &[]), Standing::Newer { why: "unseen" });
    }

    #[test]
    fn a_replica_whose_files_lag_behind_waits() {
        let l = log(&[("v1", LONG_AGO), ("v2", JUST_NOW)]);
        assert_eq!(
            stand(&l, "v1", &["v1".into()]),
            Standing::Older {
                newest: "v2".into(),
                since: JUST_NOW.into()
            }
        );
    }

    #[test]
    fn an_unseen_version_is_an_edit_only_where_the_newest_was_loaded_before_it() {
        let l = log(&[("v1", LONG_AGO), ("v3", JUST_NOW)]);
        // Loaded v3, then v4: an edit after the newest.
        assert_eq!(
            stand(&l, "v4", &["v1".into(), "v3".into(), "v4".into()]),
            Standing::Newer { why: "edit" }
        );
        // Loaded v1, then v2, never v3: v2 may be an old version that never ran.
        let v2 = stand(&l, "v2", &["v1".into(), "v2".into()]);
        assert_eq!(v2, Standing::Newer { why: "unseen" });
        assert_eq!(v2.prune(at(NOW), PATIENCE), Retire::After(PATIENCE));
        assert_eq!(v2.retire(at(NOW), PATIENCE), Retire::After(PATIENCE));
    }

    #[test]
    fn only_a_version_known_to_be_the_newest_prunes_at_once() {
        let prune = |s: Standing| s.prune(at(NOW), PATIENCE);
        assert_eq!(prune(Standing::Newer { why: "first" }), Retire::Now);
        assert_eq!(prune(Standing::Newer { why: "edit" }), Retire::Now);
        assert_eq!(
            prune(Standing::Newer { why: "rollback" }),
            Retire::Now,
            "the newest had been in force for the whole wait"
        );
        assert_eq!(prune(newest("unseen", LONG_AGO)), Retire::Now);
        assert_eq!(
            prune(newest("unseen", JUST_NOW)),
            Retire::After(PATIENCE - Duration::from_secs(60))
        );
        let older = Standing::Older {
            newest: "v2".into(),
            since: JUST_NOW.into(),
        };
        assert_eq!(prune(older), Retire::Never);
    }

    #[test]
    fn a_rollback_seen_here_or_after_the_wait_runs() {
        let l = log(&[("v1", LONG_AGO), ("v2", JUST_NOW)]);
        // This replica loaded v2, then its files went back to v1: an edit.
        assert_eq!(
            stand(&l, "v1", &["v1".into(), "v2".into(), "v1".into()]),
            Standing::Newer { why: "edit" }
        );
        // v2 has been the newest for longer than the wait: every replica had time.
        let l = log(&[("v1", LONG_AGO), ("v2", "2026-12-02T11:54:59Z")]);
        assert_eq!(
            stand(&l, "v1", &["v1".into()]),
            Standing::Newer { why: "rollback" }
        );
    }

    #[test]
    fn the_log_keeps_each_version_once_and_the_newest_last() {
        let l = log(&[("v1", LONG_AGO), ("v2", JUST_NOW)]);
        let l = pushed(l, "v1", at(NOW), "edit");
        let order: Vec<&str> = l.iter().map(|v| v.fingerprint.as_str()).collect();
        assert_eq!(order, ["v2", "v1"]);
        assert_eq!(l[1].since, NOW);
        let mut l = Vec::new();
        for i in 0..40 {
            l = pushed(l, &format!("v{i}"), at(NOW), "edit");
        }
        assert_eq!(l.len(), KEEP);
        assert_eq!(l.last().unwrap().fingerprint, "v39");
    }

    #[test]
    fn only_a_version_known_to_be_newer_retires_the_kinds_another_recorded() {
        let retire = |s: Standing| s.retire(at(NOW), PATIENCE);
        assert_eq!(retire(Standing::Newer { why: "first" }), Retire::Now);
        assert_eq!(retire(Standing::Newer { why: "edit" }), Retire::Now);
        assert_eq!(retire(Standing::Newer { why: "rollback" }), Retire::Never);
        assert_eq!(
            retire(Standing::Newer { why: "unseen" }),
            Retire::After(PATIENCE),
            "unseen: it may be an old version that never ran"
        );
        assert_eq!(retire(newest("unseen", LONG_AGO)), Retire::Now);
        assert_eq!(
            retire(newest("unseen", JUST_NOW)),
            Retire::After(PATIENCE - Duration::from_secs(60))
        );
        assert_eq!(retire(newest("rollback", LONG_AGO)), Retire::Never);
        assert_eq!(
            retire(newest("", LONG_AGO)),
            Retire::Now,
            "recorded before reasons were"
        );
    }
}
