use super::*;
use std::time::Duration;

fn rollout(on_failure: OnFailure) -> Rollout {
    Rollout {
        steps: vec![
            Step::Resources(1),
            Step::Percent(10),
            Step::Percent(50),
            Step::Percent(100),
        ],
        wait_ready: Duration::from_secs(120),
        on_failure,
    }
}

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

const T0: &str = "2026-12-02T10:00:00Z";

fn fleet(n: usize) -> Vec<Resource> {
    (0..n)
        .map(|i| Resource {
            key: format!("ns/site-{i}"),
            rank: rank(&format!("uid-{i}")),
            created: Some("2026-12-01T00:00:00Z".into()),
            revision: Some(1),
            pinned: None,
            ready: true,
            failed: None,
        })
        .collect()
}

/// Every resource the progress gives revision 2 is reconciled with it and Ready.
fn converge(p: &Progress, fleet: &mut [Resource]) -> usize {
    let mut on_new = 0;
    for r in fleet.iter_mut() {
        let rev = choose(Some(p), 2, r);
        r.revision = Some(rev);
        r.ready = true;
        on_new += usize::from(rev == 2);
    }
    on_new
}

#[test]
fn each_step_reaches_its_share_only_after_the_one_before_is_ready() {
    let r = rollout(OnFailure::Pause);
    let mut fleet = fleet(200);
    let mut p = start(None, 2, Some(1), Some(&r), t(T0)).unwrap();
    let mut seen = Vec::new();
    for _ in 0..10 {
        p = evaluate(&p, &r, &fleet, t(T0));
        let on_new = converge(&p, &mut fleet);
        seen.push((p.step, on_new, p.phase));
        if p.phase == Phase::Complete {
            break;
        }
    }
    // Each evaluation sees the step's resources Ready, and opens the next step.
    assert_eq!(
        seen,
        [
            (0, 1, Phase::Progressing),
            (1, 20, Phase::Progressing),
            (2, 100, Phase::Progressing),
            (3, 200, Phase::Progressing),
            (3, 200, Phase::Complete),
        ]
    );
    // The same canary every time: the lowest rank.
    let fleet = super::tests::fleet(200);
    let first = start(None, 2, Some(1), Some(&r), t(T0)).unwrap();
    let first = evaluate(&first, &r, &fleet, t(T0));
    let canary: Vec<&Resource> = fleet
        .iter()
        .filter(|x| choose(Some(&first), 2, x) == 2)
        .collect();
    assert_eq!(canary.len(), 1);
    assert_eq!(canary[0].rank, fleet.iter().map(|x| x.rank).min().unwrap());
}

#[test]
fn a_failed_canary_pauses_or_rolls_back_and_the_others_stay_on_the_previous_revision() {
    for (on_failure, phase) in [
        (OnFailure::Pause, Phase::Paused),
        (OnFailure::Rollback, Phase::RolledBack),
    ] {
        let r = rollout(on_failure);
        let mut fleet = fleet(200);
        let p = evaluate(
            &start(None, 2, Some(1), Some(&r), t(T0)).unwrap(),
            &r,
            &fleet,
            t(T0),
        );
        for x in fleet.iter_mut() {
            if choose(Some(&p), 2, x) == 2 {
                x.revision = Some(2);
                x.ready = false;
                x.failed = Some("RenderFailed: no such field".into());
            }
        }
        let failed = evaluate(&p, &r, &fleet, t(T0));
        assert_eq!(failed.phase, phase);
        assert_eq!(failed.failed.len(), 1, "{:?}", failed.failed);
        assert!(failed.failed[0].contains("RenderFailed"));
        let on_new = fleet
            .iter()
            .filter(|x| choose(Some(&failed), 2, x) == 2)
            .count();
        let expected = if phase == Phase::Paused { 1 } else { 0 };
        assert_eq!(on_new, expected, "{phase:?}: the canary only, or none");
    }
}

#[test]
fn a_step_not_ready_in_time_pauses_and_resume_tries_it_again() {
    let r = rollout(OnFailure::Pause);
    let mut fleet = fleet(10);
    let p = evaluate(
        &start(None, 2, Some(1), Some(&r), t(T0)).unwrap(),
        &r,
        &fleet,
        t(T0),
    );
    for x in fleet.iter_mut() {
        if choose(Some(&p), 2, x) == 2 {
            x.revision = Some(2);
            x.ready = false;
        }
    }
    let early = evaluate(&p, &r, &fleet, t("2026-12-02T10:01:00Z"));
    assert_eq!(early.phase, Phase::Progressing);
    let late = evaluate(&p, &r, &fleet, t("2026-12-02T10:02:01Z"));
    assert_eq!(late.phase, Phase::Paused);
    assert!(late.failed[0].contains("not Ready on revision 2 in time"));
    let resumed = act(&late, "resume", t("2026-12-02T10:05:00Z")).unwrap();
    assert_eq!(resumed.phase, Phase::Progressing);
    assert_eq!(resumed.step, 0);
    assert_eq!(
        act(&resumed, "abort", t(T0)).map(|p| p.phase),
        Some(Phase::RolledBack)
    );
    assert_eq!(act(&resumed, "resume", t(T0)), None, "not paused");
}

#[test]
fn a_restart_goes_on_where_the_status_says_and_a_new_revision_starts_from_the_stable_one() {
    let r = rollout(OnFailure::Pause);
    let mut p = start(None, 2, Some(1), Some(&r), t(T0)).unwrap();
    p.step = 2;
    assert_eq!(
        start(Some(p.clone()), 2, Some(1), Some(&r), t(T0)),
        Some(p.clone())
    );
    // Revision 3 while 2 was half way: the resources not reached are on 1.
    let next = start(Some(p.clone()), 3, Some(2), Some(&r), t(T0)).unwrap();
    assert_eq!((next.from, next.step), (1, 0));
    // After a complete rollout, from the one before.
    p.phase = Phase::Complete;
    assert_eq!(start(Some(p), 3, Some(2), Some(&r), t(T0)).unwrap().from, 2);
    assert_eq!(
        start(None, 1, None, Some(&r), t(T0)),
        None,
        "nothing to roll from"
    );
    assert_eq!(
        start(None, 2, Some(1), None, t(T0)),
        None,
        "no rollout: all at once"
    );
}

#[test]
fn a_rollout_replaced_half_way_leaves_what_it_reached_where_it_is_until_reached_again() {
    let r = rollout(OnFailure::Pause);
    let mut fleet = fleet(20);
    // Revision 2 reaches its first steps.
    let mut p = start(None, 2, Some(1), Some(&r), t(T0)).unwrap();
    for _ in 0..3 {
        p = evaluate(&p, &r, &fleet, t(T0));
        converge(&p, &mut fleet);
    }
    let on_2: Vec<usize> = (0..fleet.len())
        .filter(|&i| fleet[i].revision == Some(2))
        .collect();
    assert!(!on_2.is_empty() && on_2.len() < fleet.len(), "{on_2:?}");
    // Revision 3 replaces it: from 1, and what 2 reached stays on 2, not back on 1.
    let q = start(Some(p.clone()), 3, Some(2), Some(&r), t(T0)).unwrap();
    assert_eq!((q.from, q.superseded.clone()), (1, vec![2]));
    for (i, res) in fleet.iter().enumerate() {
        let want = if on_2.contains(&i) { 2 } else { 1 };
        assert_eq!(choose(Some(&q), 3, res), want, "{}", res.key);
    }
    // Its first step reaches the same ranks first: they go from 2 to 3.
    let q = evaluate(&q, &r, &fleet, t(T0));
    let reached: Vec<usize> = (0..fleet.len())
        .filter(|&i| choose(Some(&q), 3, &fleet[i]) == 3)
        .collect();
    assert!(
        !reached.is_empty() && reached.iter().all(|i| on_2.contains(i)),
        "{reached:?} {on_2:?}"
    );
    // A third revision remembers both; an abort puts every resource on `from`.
    let z = start(Some(q.clone()), 4, Some(3), Some(&r), t(T0)).unwrap();
    assert_eq!((z.from, z.superseded.clone()), (1, vec![2, 3]));
    let aborted = act(&z, "abort", t(T0)).unwrap();
    assert!(fleet.iter().all(|res| choose(Some(&aborted), 4, res) == 1));
    assert!(aborted.superseded.is_empty(), "an abort forgets them");
    // A rolled-back rollout left every resource on `from`, and a paused one's revision
    // failed somewhere: neither is remembered.
    let mut back = q.clone();
    back.phase = Phase::RolledBack;
    assert!(
        start(Some(back), 4, Some(3), Some(&r), t(T0))
            .unwrap()
            .superseded
            .is_empty()
    );
    let mut paused = q.clone();
    paused.phase = Phase::Paused;
    assert!(
        start(Some(paused), 4, Some(3), Some(&r), t(T0))
            .unwrap()
            .superseded
            .is_empty()
    );
    // Written always, so that a merge patch of the status empties it; empty once complete.
    assert_eq!(
        serde_json::to_value(&aborted).unwrap()["superseded"],
        serde_json::json!([])
    );
    let mut done = z;
    done.step = r.steps.len() - 1;
    done.threshold = Some(u64::MAX);
    let all_new: Vec<Resource> = fleet
        .iter()
        .map(|x| Resource {
            revision: Some(4),
            ..x.clone()
        })
        .collect();
    let done = evaluate(&done, &r, &all_new, t(T0));
    assert_eq!((done.phase, done.superseded.len()), (Phase::Complete, 0));
}

#[test]
fn a_pin_wins_and_a_resource_made_during_the_rollout_starts_new() {
    let r = rollout(OnFailure::Pause);
    let fleet = fleet(10);
    let p = evaluate(
        &start(None, 2, Some(1), Some(&r), t(T0)).unwrap(),
        &r,
        &fleet,
        t(T0),
    );
    let mut newcomer = fleet[0].clone();
    newcomer.rank = u64::MAX;
    newcomer.created = Some("2026-12-02T10:00:30Z".into());
    newcomer.revision = None;
    assert_eq!(choose(Some(&p), 2, &newcomer), 2);
    let mut pinned = fleet[0].clone();
    pinned.pinned = Some(1);
    assert_eq!(choose(Some(&p), 2, &pinned), 1);
    assert_eq!(choose(None, 2, &pinned), 1);
}

#[test]
fn resources_made_during_the_rollout_never_displace_the_canaries() {
    let r = rollout(OnFailure::Pause);
    let mut fleet = fleet(10);
    let p = evaluate(
        &start(None, 2, Some(1), Some(&r), t(T0)).unwrap(),
        &r,
        &fleet,
        t(T0),
    );
    let canary = fleet
        .iter()
        .find(|x| choose(Some(&p), 2, x) == 2)
        .unwrap()
        .key
        .clone();
    // Made after the start, ranked below every one: they start new, and the step still
    // reaches the same canary.
    for i in 0..5 {
        let mut newcomer = fleet[0].clone();
        newcomer.key = format!("ns/new-{i}");
        newcomer.rank = i;
        newcomer.created = Some("2026-12-02T10:00:30Z".into());
        newcomer.revision = None;
        fleet.push(newcomer);
    }
    let again = evaluate(&p, &r, &fleet, t("2026-12-02T10:00:40Z"));
    assert_eq!(again.threshold, p.threshold, "the bound never moves down");
    let reached: Vec<&str> = fleet
        .iter()
        .filter(|x| !x.key.starts_with("ns/new-") && choose(Some(&again), 2, x) == 2)
        .map(|x| x.key.as_str())
        .collect();
    assert_eq!(reached, [canary.as_str()]);
}

#[test]
fn a_resource_reads_its_revision_readiness_failure_and_pin() {
    let o = serde_json::json!({
        "metadata": {"name": "a", "namespace": "n", "uid": "u", "generation": 3,
                     "annotations": {PIN: "4"}, "creationTimestamp": T0},
        "status": {"ruleRevision": 5, "conditions": [
            {"type": "Ready", "status": "True", "observedGeneration": 3},
            {"type": "Synced", "status": "False", "reason": "ApplyRefused", "message": "422", "observedGeneration": 3}]}
    });
    let r = Resource::of(&o);
    assert_eq!(r.key, "n/a");
    assert_eq!((r.revision, r.pinned, r.ready), (Some(5), Some(4), true));
    assert_eq!(r.failed.as_deref(), Some("ApplyRefused: 422"));
    let mut stale = o.clone();
    stale["metadata"]["generation"] = 4.into();
    assert!(!Resource::of(&stale).ready, "Ready for an older generation");
}

#[test]
fn pinned_resources_are_counted_and_left_out_of_the_steps() {
    let r = rollout(OnFailure::Pause);
    let mut fleet = fleet(10);
    fleet[0].pinned = Some(1);
    fleet[1].pinned = Some(1);
    let p = evaluate(
        &start(None, 2, Some(1), Some(&r), t(T0)).unwrap(),
        &r,
        &fleet,
        t(T0),
    );
    assert_eq!((p.pinned, p.total), (2, 10));
    assert!(
        fleet[..2].iter().all(|f| choose(Some(&p), 2, f) == 1),
        "a pinned resource stays on its revision"
    );
}
