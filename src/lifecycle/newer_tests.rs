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
            object: None,
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
    standing(l, file(mine), loaded, at(NOW), PATIENCE)
}

fn file(fingerprint: &str) -> Mine<'_> {
    Mine {
        fingerprint,
        object: None,
    }
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
    let l = pushed(l, file("v1"), at(NOW), "edit");
    let order: Vec<&str> = l.iter().map(|v| v.fingerprint.as_str()).collect();
    assert_eq!(order, ["v2", "v1"]);
    assert_eq!(l[1].since, NOW);
    let mut l = Vec::new();
    for i in 0..40 {
        l = pushed(l, file(&format!("v{i}")), at(NOW), "edit");
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

/// A Rule's version: fingerprint `f`, object `uid` at `generation` (every object made
/// at `CREATED` unless [`made_at`] says otherwise).
fn rule<'a>(f: &'a str, uid: &'a str, generation: i64) -> Mine<'a> {
    made_at(f, uid, generation, CREATED)
}

const CREATED: &str = "2026-12-01T10:00:00Z";

fn made_at<'a>(f: &'a str, uid: &'a str, generation: i64, created: &'a str) -> Mine<'a> {
    Mine {
        fingerprint: f,
        object: Some(ObjectRef {
            uid,
            generation,
            created,
        }),
    }
}

#[test]
fn a_rules_generation_orders_its_versions_whatever_this_replica_loaded() {
    let l = pushed(Vec::new(), rule("g5", "u1", 5), at(JUST_NOW), "generation");
    let stand = |mine: Mine, loaded: &[String]| standing(&l, mine, loaded, at(NOW), PATIENCE);
    // A standby whose Rule watch lags: generation 4 after 5 ran waits, even one that
    // loaded generation 5 before (its watch went back) and once the patience is over.
    let lagging = stand(rule("g4", "u1", 4), &["g5".into()]);
    assert!(matches!(lagging, Standing::Older { .. }), "{lagging:?}");
    let later = standing(
        &l,
        rule("g4", "u1", 4),
        &[],
        at("2026-12-03T12:00:00Z"),
        PATIENCE,
    );
    assert!(
        matches!(later, Standing::Older { .. }),
        "never a rollback by time"
    );
    assert_eq!(lagging.prune(at(NOW), PATIENCE), Retire::Never);
    assert_eq!(lagging.retire(at(NOW), PATIENCE), Retire::Never);
    // The next generation (an edit, or an older spec applied again) is newer and deletes.
    let next = stand(rule("g6", "u1", 6), &[]);
    assert_eq!(next, Standing::Newer { why: "generation" });
    assert_eq!(next.prune(at(NOW), PATIENCE), Retire::Now);
    assert_eq!(next.retire(at(NOW), PATIENCE), Retire::Now);
    assert!(matches!(
        stand(rule("g5", "u1", 5), &[]),
        Standing::Newest { .. }
    ));
    // The version the cluster last ran, whatever generation holds it (the last good
    // revision serving while a later generation does not load; the same spec applied
    // again).
    for generation in [0, 4, 7] {
        let same = stand(rule("g5", "u1", generation), &[]);
        assert!(matches!(same, Standing::Newest { .. }), "{same:?}");
    }
    // A revision read back (generation 0) that is not the one last run is not ordered: it
    // runs, but deletes nothing until it has been the newest for the wait.
    let read_back = stand(rule("g3", "u1", 0), &[]);
    assert_eq!(read_back, Standing::Newer { why: "unseen" });
    assert_eq!(read_back.prune(at(NOW), PATIENCE), Retire::After(PATIENCE));
}

#[test]
fn another_rule_object_is_newer_and_the_log_remembers_which() {
    let l = pushed(Vec::new(), rule("g5", "u1", 5), at(JUST_NOW), "generation");
    assert_eq!(
        l[0].object,
        Some(FromObject {
            uid: "u1".into(),
            generation: 5,
            created: CREATED.into(),
        })
    );
    // The Rule deleted and made again (a new uid, generation 1, made later).
    let later = "2026-12-02T10:00:00Z";
    let again = standing(&l, made_at("g1", "u2", 1, later), &[], at(NOW), PATIENCE);
    assert_eq!(again, Standing::Newer { why: "object" });
    assert_eq!(again.retire(at(NOW), PATIENCE), Retire::Now);
    // A deleted Rule of that name, made before the one recorded, still in a lagging cache.
    let before = "2026-11-30T10:00:00Z";
    let stale = standing(&l, made_at("g9", "u0", 9, before), &[], at(NOW), PATIENCE);
    assert!(matches!(stale, Standing::Older { .. }), "{stale:?}");
    // A rule moved from a Rule to a file: its files' version is unseen (it deletes only
    // after the wait).
    let moved = standing(&l, file("f1"), &[], at(NOW), PATIENCE);
    assert_eq!(moved, Standing::Newer { why: "unseen" });
    // A log written before Rules were recorded reads.
    let old: Vec<Version> =
        serde_json::from_str(r#"[{"fingerprint":"v1","since":"2026-12-02T11:00:00Z"}]"#).unwrap();
    assert_eq!(old[0].object, None);
}
