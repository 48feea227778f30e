use super::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

fn cr(name: &str, uid: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "WebSite",
        "metadata": {"name": name, "namespace": "n", "uid": uid}
    }))
    .unwrap()
}

fn child(name: &str, owner: &str, uid: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": "n", "ownerReferences": [
            {"apiVersion": "example.com/v1", "kind": "WebSite", "name": owner, "uid": uid, "controller": true}
        ]}
    }))
    .unwrap()
}

fn services() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&())
}

fn key(name: &str) -> ObjectKey {
    ObjectKey {
        api_version: "v1".into(),
        kind: "Service".into(),
        namespace: "n".into(),
        name: name.into(),
    }
}

fn res(name: &str, uid: &str) -> ResourceId {
    ResourceId::of(&cr(name, uid))
}

/// Records that have seen resources `names` (uid `u-<name>`).
fn seen<W>(names: &[&str]) -> Records<W> {
    let records = Records::new(8);
    for n in names {
        records.follow_resource(&Event::Apply(cr(n, &format!("u-{n}"))));
    }
    records
}

async fn after(ms: u64, answer: &'static str) -> &'static str {
    tokio::time::sleep(Duration::from_millis(ms)).await;
    answer
}

fn written(rv: &str) -> Written {
    Written::now("h".into(), rv.into(), String::new())
}

#[test]
fn a_record_is_made_when_the_watch_shows_the_resource_and_dropped_when_it_goes() {
    let records: Records<()> = seen(&["a", "b"]);
    assert_eq!(records.len(), 2);
    records.count_failure(&res("a", "u-a"));
    records.follow_resource(&Event::Delete(cr("a", "u-a")));
    assert_eq!(records.len(), 1);
    assert_eq!(records.failures(&res("a", "u-a")), 0);
    // A reconcile never makes one: what it books for a resource gone is not kept.
    records.wrote(&res("a", "u-a"), key("a-web"), written("1"));
    assert!(records.written(&res("a", "u-a"), &key("a-web")).is_none());
    assert_eq!(records.len(), 1);
}

#[test]
fn a_relist_drops_the_records_of_resources_gone_meanwhile() {
    let records: Records<()> = seen(&["kept", "vanished"]);
    for ev in [
        Event::Init,
        Event::InitApply(cr("kept", "u-kept")),
        Event::InitApply(cr("new", "u-new")),
        Event::InitDone,
    ] {
        records.follow_resource(&ev);
    }
    assert_eq!(records.len(), 2);
    assert_eq!(records.count_failure(&res("kept", "u-kept")), 1);
    assert_eq!(records.count_failure(&res("new", "u-new")), 1);
    assert_eq!(records.count_failure(&res("vanished", "u-vanished")), 1);
    assert_eq!(records.failures(&res("vanished", "u-vanished")), 0);
}

#[test]
fn another_resource_under_the_name_gets_a_new_record() {
    let records: Records<()> = seen(&["a"]);
    let old = res("a", "u-a");
    records.count_failure(&old);
    records.set_status(
        &old,
        Some(StatusMark {
            text: "{}".into(),
            resource_version: "3".into(),
            at: Instant::now(),
        }),
    );
    records.follow_resource(&Event::Apply(cr("a", "other")));
    let new = res("a", "other");
    assert_eq!(records.failures(&new), 0);
    assert!(records.status(&new).is_none());
    assert!(records.status(&old).is_none(), "the old uid finds nothing");
}

#[test]
fn a_deleted_child_loses_what_was_written_to_it_and_a_relist_the_children_gone() {
    let records: Records<()> = seen(&["a"]);
    let r = res("a", "u-a");
    let old = Written {
        at: Instant::now() - crate::apply::CACHE_LAG_GRACE - Duration::from_secs(1),
        ..written("1")
    };
    records.wrote(&r, key("deleted"), old.clone());
    records.wrote(&r, key("kept"), old.clone());
    records.wrote(&r, key("gone"), old);
    // Written a moment ago and not listed yet: the cache may simply lag.
    records.wrote(&r, key("just-made"), written("9"));
    records.follow_child(&services(), &Event::Delete(child("deleted", "a", "u-a")));
    assert!(records.written(&r, &key("deleted")).is_none());
    for ev in [
        Event::Init,
        Event::InitApply(child("kept", "a", "u-a")),
        Event::InitDone,
    ] {
        records.follow_child(&services(), &ev);
    }
    assert!(records.written(&r, &key("kept")).is_some());
    assert!(records.written(&r, &key("gone")).is_none());
    assert!(records.written(&r, &key("just-made")).is_some());
}

#[test]
fn a_relist_of_one_kind_leaves_what_was_written_to_another_kind() {
    let records: Records<()> = seen(&["a"]);
    let r = res("a", "u-a");
    let deployment = ObjectKey {
        api_version: "apps/v1".into(),
        kind: "Deployment".into(),
        ..key("a")
    };
    let old = Written {
        at: Instant::now() - crate::apply::CACHE_LAG_GRACE - Duration::from_secs(1),
        ..written("1")
    };
    records.wrote(&r, deployment.clone(), old);
    for ev in [Event::Init, Event::InitDone] {
        records.follow_child(&services(), &ev);
    }
    assert!(records.written(&r, &deployment).is_some());
}

#[test]
fn a_changed_object_reaches_exactly_the_resources_that_read_it() {
    let records: Records<()> = seen(&["a", "b"]);
    records.follow_resource(&Event::Apply(
        serde_json::from_value(json!({"apiVersion": "example.com/v1", "kind": "WebSite",
            "metadata": {"name": "c", "namespace": "m", "uid": "u-c"}}))
        .unwrap(),
    ));
    let c = ResourceId {
        key: ResourceKey {
            namespace: "m".into(),
            name: "c".into(),
        },
        uid: "u-c".into(),
    };
    let secret = |name: &str, labels: serde_json::Value| -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": "n", "labels": labels}}))
        .unwrap()
    };
    records.set_lookups(&res("a", "u-a"), vec![(0, Lookup::Name("db".into()))]);
    let team = Lookup::Labels([("team".to_string(), "x".to_string())].into());
    records.set_lookups(&res("b", "u-b"), vec![(0, team)]);
    records.set_lookups(&c, vec![(0, Lookup::Name("db".into()))]);
    assert_eq!(
        records.readers_of(0, &secret("db", json!({}))),
        vec!["a", "b"],
        "b may have listed db before"
    );
    assert_eq!(
        records.readers_of(0, &secret("other", json!({"team": "x"}))),
        vec!["b"]
    );
    assert!(records.readers_of(1, &secret("db", json!({}))).is_empty());
    // A new lookup replaces the old; a resource gone reads nothing.
    records.set_lookups(&res("a", "u-a"), vec![(0, Lookup::Name("db2".into()))]);
    assert_eq!(records.readers_of(0, &secret("db", json!({}))), vec!["b"]);
    records.follow_resource(&Event::Delete(cr("b", "u-b")));
    assert!(records.readers_of(0, &secret("db", json!({}))).is_empty());
}

#[tokio::test]
async fn a_write_answered_in_time_is_the_reconciles_own() {
    let records = seen(&["a"]);
    let r = res("a", "u-a");
    let step = records
        .send(&r, ("c", key("a")), after(5, "ok"), Duration::from_secs(5))
        .await;
    assert!(matches!(step, Step::Done(Ok("ok"))), "{step:?}");
    assert_eq!(records.on_their_way(), 0);
    assert!(records.take(&r, &key("a")).await.is_none());
}

#[tokio::test]
async fn a_slow_write_goes_on_and_its_answer_is_taken_once() {
    let records = seen(&["a"]);
    let r = res("a", "u-a");
    let step = records
        .send(
            &r,
            ("c", key("a")),
            after(200, "late"),
            Duration::from_millis(20),
        )
        .await;
    assert!(matches!(step, Step::OnItsWay), "{step:?}");
    assert_eq!(records.on_their_way(), 1);
    // Still on its way: no second write, no answer yet.
    assert!(matches!(
        records.take(&r, &key("a")).await,
        Some(Step::OnItsWay)
    ));
    assert!(records.take(&r, &key("b")).await.is_none());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(matches!(
        records.take(&r, &key("a")).await,
        Some(Step::Done(Ok("late")))
    ));
    assert!(
        records.take(&r, &key("a")).await.is_none(),
        "taken only once"
    );
    assert_eq!(records.on_their_way(), 0);
}

#[tokio::test]
async fn dropping_the_records_stops_the_writes_on_their_way() {
    let records = seen(&["a"]);
    let sent = Arc::new(AtomicBool::new(false));
    let s = sent.clone();
    let write = async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        s.store(true, Ordering::SeqCst);
    };
    let step = records
        .send(
            &res("a", "u-a"),
            ("c", key("a")),
            write,
            Duration::from_millis(10),
        )
        .await;
    assert!(matches!(step, Step::OnItsWay));
    drop(records);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!sent.load(Ordering::SeqCst), "the write was stopped");
}

#[tokio::test]
async fn beyond_its_room_a_slow_write_is_waited_for() {
    let records = Records::new(1);
    for n in ["a", "b"] {
        records.follow_resource(&Event::Apply(cr(n, &format!("u-{n}"))));
    }
    let first = records
        .send(
            &res("a", "u-a"),
            ("c", key("a")),
            after(200, "a"),
            Duration::from_millis(10),
        )
        .await;
    assert!(matches!(first, Step::OnItsWay));
    let started = std::time::Instant::now();
    let second = records
        .send(
            &res("b", "u-b"),
            ("c", key("b")),
            after(100, "b"),
            Duration::from_millis(10),
        )
        .await;
    assert!(matches!(second, Step::Done(Ok("b"))), "{second:?}");
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert_eq!(records.on_their_way(), 1);
}

/// The leak a review found: a resource deleted in the background (no reconcile sees it
/// go) kept its writes on their way, and their room, until the rule stopped.
#[tokio::test]
async fn a_resource_deleted_in_the_background_takes_its_writes_on_their_way_along() {
    let records = seen(&["gone", "other"]);
    let sent = Arc::new(AtomicBool::new(false));
    let s = sent.clone();
    let write = async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        s.store(true, Ordering::SeqCst);
    };
    let gone = res("gone", "u-gone");
    let step = records
        .send(
            &gone,
            ("c", key("gone-web")),
            write,
            Duration::from_millis(10),
        )
        .await;
    assert!(matches!(step, Step::OnItsWay));
    let other = records
        .send(
            &res("other", "u-other"),
            ("c", key("other-web")),
            async {},
            Duration::from_millis(10),
        )
        .await;
    assert!(matches!(other, Step::Done(Ok(()))));
    assert_eq!(records.on_their_way(), 1);
    records.follow_resource(&Event::Delete(cr("gone", "u-gone")));
    assert_eq!(records.on_their_way(), 0, "its room is free again");
    assert_eq!(records.len(), 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!sent.load(Ordering::SeqCst), "its write was stopped");
}

#[tokio::test]
async fn the_writes_of_a_resource_made_again_under_its_name_are_stopped() {
    let records = seen(&["a", "c"]);
    let old = res("a", "u-a");
    for (r, name) in [(&old, "a"), (&old, "b"), (&res("c", "u-c"), "c")] {
        let step = records
            .send(
                r,
                ("c", key(name)),
                after(300, "late"),
                Duration::from_millis(10),
            )
            .await;
        assert!(matches!(step, Step::OnItsWay));
    }
    assert_eq!(records.on_their_way(), 3);
    records.follow_resource(&Event::Apply(cr("a", "new")));
    // The resource made again under its name does not get `a`'s answer.
    assert!(records.take(&res("a", "new"), &key("a")).await.is_none());
    assert_eq!(
        records.on_their_way(),
        1,
        "only the other resource's write is left"
    );
    assert!(matches!(
        records.take(&res("c", "u-c"), &key("c")).await,
        Some(Step::OnItsWay)
    ));
}

#[tokio::test]
async fn abandoned_writes_are_stopped_and_the_record_stays() {
    let records = seen(&["a"]);
    let r = res("a", "u-a");
    records.wrote(&r, key("done"), written("1"));
    let step = records
        .send(
            &r,
            ("c", key("slow")),
            after(300, "late"),
            Duration::from_millis(10),
        )
        .await;
    assert!(matches!(step, Step::OnItsWay));
    records.abandon_writes(&r);
    assert_eq!(records.on_their_way(), 0);
    assert!(records.take(&r, &key("slow")).await.is_none());
    assert!(records.written(&r, &key("done")).is_some());
    assert_eq!(records.len(), 1);
}

#[tokio::test]
async fn a_write_on_its_way_to_a_child_no_longer_rendered_is_stopped() {
    let records = seen(&["a"]);
    let r = res("a", "u-a");
    let sent = Arc::new(AtomicBool::new(false));
    let s = sent.clone();
    let write = async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        s.store(true, Ordering::SeqCst);
    };
    let step = records
        .send(&r, ("c", key("gone")), write, Duration::from_millis(10))
        .await;
    assert!(matches!(step, Step::OnItsWay));
    let kept = records
        .send(&r, ("c", key("kept")), async {}, Duration::from_millis(10))
        .await;
    assert!(matches!(kept, Step::Done(Ok(()))));
    records.stop_writes_except(
        &r,
        &[key("kept")].into_iter().collect(),
        &Default::default(),
    );
    assert_eq!(records.on_their_way(), 0);
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!sent.load(Ordering::SeqCst), "its write was stopped");
}

#[tokio::test]
async fn the_write_of_a_child_that_waits_goes_on() {
    let records = seen(&["a"]);
    let r = res("a", "u-a");
    let step = records
        .send(
            &r,
            ("app", key("a-app")),
            after(200, "late"),
            Duration::from_millis(10),
        )
        .await;
    assert!(matches!(step, Step::OnItsWay));
    // `app` now waits (not rendered this round): its object is kept as it is.
    records.stop_writes_except(&r, &HashSet::new(), &["app"].into_iter().collect());
    assert_eq!(records.on_their_way(), 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(matches!(
        records.take(&r, &key("a-app")).await,
        Some(Step::Done(Ok("late")))
    ));
}
