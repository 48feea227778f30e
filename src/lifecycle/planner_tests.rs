use super::*;

fn object(annotations: serde_json::Value, owners: serde_json::Value) -> DynamicObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "x", "namespace": "n", "annotations": annotations, "ownerReferences": owners}
    }))
    .unwrap()
}

#[test]
fn an_object_that_asked_to_be_orphaned_is_let_go_whatever_the_rule_says_now() {
    let asks = object(
        serde_json::json!({"ruleop.dev/on-remove": "Orphan"}),
        serde_json::json!([]),
    );
    let plain = object(serde_json::json!({}), serde_json::json!([]));
    assert_eq!(removal(&asks, false), Removal::Orphan);
    assert_eq!(removal(&plain, true), Removal::Orphan);
    assert_eq!(removal(&plain, false), Removal::Delete);
}

#[test]
fn a_prune_waits_for_every_doubt_and_says_the_first() {
    let certain = Doubts {
        listed: true,
        ..Doubts::default()
    };
    assert_eq!(uncertain(certain), None);
    let cases = [
        (
            Doubts {
                version: Some("old"),
                ..certain
            },
            "old",
        ),
        (
            Doubts {
                listed: false,
                ..certain
            },
            "a child kind's watch has not listed yet",
        ),
        (
            Doubts {
                waiting: true,
                ..certain
            },
            "a child waits",
        ),
        (
            Doubts {
                unsettled: true,
                ..certain
            },
            "a child's write failed or is on its way",
        ),
    ];
    for (d, why) in cases {
        assert_eq!(uncertain(d), Some(why));
    }
}

#[test]
fn only_what_the_revision_does_not_render_is_stale() {
    let named = |n: &str| -> DynamicObject {
        serde_json::from_value(
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": n}}),
        )
        .unwrap()
    };
    let left = stale(vec![named("a"), named("b")], |n| n == "a");
    let names: Vec<_> = left
        .iter()
        .filter_map(|o| o.metadata.name.clone())
        .collect();
    assert_eq!(names, ["b"]);
}

#[test]
fn only_objects_controlled_by_a_resource_of_the_watched_kind_are_the_rules() {
    let ours = object(
        serde_json::json!({}),
        serde_json::json!([{"apiVersion": "example.com/v2", "kind": "WebSite", "name": "w", "uid": "u", "controller": true}]),
    );
    assert!(owned_by_rule(&ours, "example.com", "WebSite", None));
    let uids: BTreeSet<String> = ["u".to_string()].into();
    assert!(owned_by_rule(&ours, "example.com", "WebSite", Some(&uids)));
    let others: BTreeSet<String> = ["v".to_string()].into();
    assert!(
        !owned_by_rule(&ours, "example.com", "WebSite", Some(&others)),
        "controlled by no resource of the rule"
    );
    let users = object(serde_json::json!({}), serde_json::json!([]));
    assert!(!owned_by_rule(&users, "example.com", "WebSite", None));
    let other = object(
        serde_json::json!({}),
        serde_json::json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "r", "uid": "u", "controller": true}]),
    );
    assert!(!owned_by_rule(&other, "example.com", "WebSite", None));
}

#[test]
fn the_orphans_finalizer_stays_while_an_object_may_still_ask_to_be_orphaned() {
    let h = Holding {
        ordered: false,
        orphaning_child: false,
        held: true,
        unwatched: Some(false),
        orphan_left: false,
    };
    assert!(finalizers(h).is_empty(), "nothing left to let go");
    for held in [
        Holding {
            unwatched: None,
            ..h
        },
        Holding {
            unwatched: Some(true),
            ..h
        },
        Holding {
            orphan_left: true,
            ..h
        },
        Holding {
            orphaning_child: true,
            held: false,
            ..h
        },
    ] {
        assert_eq!(finalizers(held), [ORPHAN_FINALIZER], "{held:?}");
    }
    let not_held = Holding {
        held: false,
        unwatched: None,
        orphan_left: true,
        ..h
    };
    assert!(
        finalizers(not_held).is_empty(),
        "never put on for a kind gone"
    );
    let ordered = Holding { ordered: true, ..h };
    assert_eq!(finalizers(ordered), [FINALIZER]);
}

fn leaving(removal: Removal, child: Option<usize>) -> Leaving {
    Leaving {
        removal,
        child,
        deleting: false,
    }
}

#[test]
fn a_deletion_lets_orphans_go_before_anything_else_and_waits_when_unsure() {
    let objects = [
        leaving(Removal::Orphan, Some(0)),
        leaving(Removal::Delete, Some(1)),
    ];
    let deps = [BTreeSet::new(), BTreeSet::new()];
    let d = Deleting {
        listed: true,
        objects: &objects,
        orphan_held: true,
        unwatched_known: true,
        ordered: false,
        cascade_orphan: false,
        deps: &deps,
    };
    assert_eq!(
        deletion(d),
        Deletion::Act {
            let_go: vec![0],
            unwatched: true,
            then: Then::Release
        }
    );
    let unknown = Deleting {
        unwatched_known: false,
        ..d
    };
    assert!(matches!(deletion(unknown), Deletion::Wait(_)));
    let unlisted = Deleting { listed: false, ..d };
    assert!(matches!(deletion(unlisted), Deletion::Wait(_)));
}

#[test]
fn an_ordered_deletion_deletes_what_nothing_left_depends_on_then_releases() {
    // 0: config; 1: app (reads config); an object of a child the rule no longer has.
    let deps = [BTreeSet::new(), [0].into()];
    let objects = [
        leaving(Removal::Delete, Some(0)),
        leaving(Removal::Delete, Some(1)),
        leaving(Removal::Delete, None),
    ];
    let d = Deleting {
        listed: true,
        objects: &objects,
        orphan_held: false,
        unwatched_known: false,
        ordered: true,
        cascade_orphan: false,
        deps: &deps,
    };
    let Deletion::Act { let_go, then, .. } = deletion(d) else {
        panic!("acts")
    };
    assert!(let_go.is_empty());
    assert_eq!(then, Then::Delete(vec![1, 2]));
    let only_config = [leaving(Removal::Delete, Some(0))];
    let d = Deleting {
        objects: &only_config,
        ..d
    };
    assert!(matches!(
        deletion(d),
        Deletion::Act {
            then: Then::Delete(v),
            ..
        } if v == [0]
    ));
    assert!(matches!(
        deletion(Deleting { objects: &[], ..d }),
        Deletion::Act {
            then: Then::Release,
            ..
        }
    ));
    let cascade = Deleting {
        cascade_orphan: true,
        ..d
    };
    assert!(matches!(
        deletion(cascade),
        Deletion::Act {
            then: Then::Release,
            ..
        }
    ));
}

#[test]
fn dependents_go_before_what_they_depend_on() {
    // 0: config; 1: job (reads config); 2: app (after job, reads config); 3: hpa (reads app).
    let deps: Vec<BTreeSet<usize>> = vec![
        BTreeSet::new(),
        [0].into_iter().collect(),
        [0, 1].into_iter().collect(),
        [2].into_iter().collect(),
    ];
    let all: BTreeSet<usize> = (0..4).collect();
    assert_eq!(deletable(&deps, &all), [3].into_iter().collect());
    let rest: BTreeSet<usize> = [0, 1, 2].into_iter().collect();
    assert_eq!(deletable(&deps, &rest), [2].into_iter().collect());
    let rest: BTreeSet<usize> = [0, 1].into_iter().collect();
    assert_eq!(deletable(&deps, &rest), [1].into_iter().collect());
    let rest: BTreeSet<usize> = [0, 3].into_iter().collect();
    assert_eq!(deletable(&deps, &rest), [3].into_iter().collect());
}
