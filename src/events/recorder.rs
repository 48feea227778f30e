//! Publishes Events (`events.k8s.io/v1`) as kube's `Recorder` does: the first one is
//! created, and the same Event again within six minutes becomes a series on it (one merge
//! patch of its count and time). Unlike kube's `Recorder`, which keeps every Event whole
//! and scans all of them on each publish (memory and CPU that grow with the square of the
//! resources changing at once), this keeps only what a repeat needs (the Event's name, its
//! count, when it was last seen) and forgets expired entries once a minute.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Reporter};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a repeat joins the Event before it (kube's and client-go's figure).
const SERIES_TTL: Duration = Duration::from_secs(6 * 60);
/// How often expired entries are forgotten.
const GC_EVERY: Duration = Duration::from_secs(60);

/// What makes two Events the same: the object, the type, the reason, the action, the note,
/// and the related object (the child it is about), as kube's `Recorder` keys them, plus
/// the note. The Event queue folds by the same key.
pub(super) type Key = (String, bool, String, String, String, String);

fn reference_key(r: &ObjectReference) -> String {
    format!(
        "{}/{}/{}/{}",
        r.kind.as_deref().unwrap_or_default(),
        r.namespace.as_deref().unwrap_or_default(),
        r.name.as_deref().unwrap_or_default(),
        r.uid.as_deref().unwrap_or_default()
    )
}

pub(super) fn key(ev: &Event, r: &ObjectReference) -> Key {
    let warning = matches!(ev.type_, EventType::Warning);
    let note = ev.note.clone().unwrap_or_default();
    let related = ev.secondary.as_ref().map(reference_key).unwrap_or_default();
    let (reason, action) = (ev.reason.clone(), ev.action.clone());
    (reference_key(r), warning, reason, action, note, related)
}

/// A published Event, as much as a repeat needs.
struct Seen {
    name: String,
    namespace: String,
    count: i32,
    at: Instant,
}

#[derive(Default)]
struct Memory {
    seen: HashMap<Key, Seen>,
    gc_at: Option<Instant>,
}

impl Memory {
    /// The series entry of `k` if it is still current, its count raised.
    fn repeat(&mut self, k: &Key, now: Instant) -> Option<(String, String, i32)> {
        if self.gc_at.is_none_or(|t| now.duration_since(t) >= GC_EVERY) {
            self.seen
                .retain(|_, s| now.duration_since(s.at) < SERIES_TTL);
            self.gc_at = Some(now);
        }
        let s = self
            .seen
            .get_mut(k)
            .filter(|s| now.duration_since(s.at) < SERIES_TTL)?;
        s.count = s.count.saturating_add(1);
        s.at = now;
        Some((s.name.clone(), s.namespace.clone(), s.count))
    }

    fn first(&mut self, k: Key, name: String, namespace: String, now: Instant) {
        self.seen.insert(
            k,
            Seen {
                name,
                namespace,
                count: 1,
                at: now,
            },
        );
    }
}

/// Publishes Events for one reporter.
pub struct Publisher {
    client: kube::Client,
    reporter: Reporter,
    memory: Mutex<Memory>,
}

impl Publisher {
    pub fn new(client: kube::Client, reporter: Reporter) -> Publisher {
        Publisher {
            client,
            reporter,
            memory: Mutex::default(),
        }
    }

    /// Publishes `ev` about `reference`: a new Event, or the next of its series.
    pub async fn publish(
        &self,
        ev: &Event,
        reference: &ObjectReference,
    ) -> Result<(), kube::Error> {
        let k = key(ev, reference);
        let now = Instant::now();
        let repeat = self.memory.lock().ok().and_then(|mut m| m.repeat(&k, now));
        if let Some((name, namespace, count)) = repeat {
            let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
            let series = EventSeries {
                count,
                last_observed_time: MicroTime(Timestamp::now()),
            };
            let patch = serde_json::json!({"series": series});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            return Ok(());
        }
        let event = self.event(ev, reference);
        let namespace = event.metadata.namespace.clone().unwrap_or_default();
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
        let created = api.create(&PostParams::default(), &event).await?;
        if let (Ok(mut m), Some(name)) = (self.memory.lock(), created.metadata.name) {
            m.first(k, name, namespace, now);
        }
        Ok(())
    }

    /// The Event object, as kube's `Recorder` makes it.
    fn event(&self, ev: &Event, reference: &ObjectReference) -> K8sEvent {
        let now = Timestamp::now();
        let controller = &self.reporter.controller;
        K8sEvent {
            action: Some(ev.action.clone()),
            reason: Some(ev.reason.clone()),
            event_time: Some(MicroTime(now)),
            regarding: Some(reference.clone()),
            note: ev.note.clone(),
            metadata: ObjectMeta {
                namespace: Some(
                    reference
                        .namespace
                        .clone()
                        .unwrap_or_else(|| "default".into()),
                ),
                name: Some(format!(
                    "{}.{:x}",
                    reference.name.as_ref().unwrap_or(controller),
                    now.as_nanosecond()
                )),
                ..Default::default()
            },
            reporting_controller: Some(controller.clone()),
            reporting_instance: Some(
                self.reporter
                    .instance
                    .clone()
                    .unwrap_or_else(|| controller.clone()),
            ),
            type_: Some(
                match ev.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .into(),
            ),
            related: ev.secondary.clone(),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(name: &str) -> Key {
        (
            name.into(),
            false,
            "Applied".into(),
            "Apply".into(),
            String::new(),
            String::new(),
        )
    }

    #[test]
    fn a_repeat_within_six_minutes_is_a_series_and_expired_entries_are_forgotten() {
        let mut m = Memory::default();
        let t0 = Instant::now();
        assert_eq!(m.repeat(&k("a"), t0), None);
        m.first(k("a"), "a.1".into(), "ns".into(), t0);
        let t1 = t0 + Duration::from_secs(10);
        assert_eq!(m.repeat(&k("a"), t1), Some(("a.1".into(), "ns".into(), 2)));
        assert_eq!(m.repeat(&k("a"), t1), Some(("a.1".into(), "ns".into(), 3)));
        assert_eq!(
            m.repeat(&k("b"), t1),
            None,
            "another object is another Event"
        );
        // Seven minutes after its last repeat: a new Event, and the entry is gone.
        let late = t1 + Duration::from_secs(7 * 60);
        assert_eq!(m.repeat(&k("a"), late), None);
        assert!(m.seen.is_empty());
    }

    #[test]
    fn entries_are_kept_for_their_series_and_dropped_at_the_minutely_scan_after_it() {
        let mut m = Memory::default();
        let t0 = Instant::now();
        for i in 0..10_000 {
            m.first(k(&format!("r{i}")), format!("r{i}.1"), "ns".into(), t0);
        }
        m.gc_at = Some(t0);
        let t1 = t0 + Duration::from_secs(59);
        assert_eq!(m.repeat(&k("new"), t1), None);
        assert_eq!(m.seen.len(), 10_000);
        let t2 = t0 + SERIES_TTL + Duration::from_secs(1);
        assert_eq!(m.repeat(&k("new"), t2), None);
        assert!(m.seen.is_empty());
    }

    #[test]
    fn events_about_different_children_are_different_events() {
        let on = |name: &str| ObjectReference {
            name: Some(name.into()),
            ..Default::default()
        };
        let ev = |child: &str| Event {
            type_: EventType::Normal,
            reason: "Pruned".into(),
            note: Some("pruned".into()),
            action: "Prune".into(),
            secondary: Some(on(child)),
        };
        assert_eq!(key(&ev("a"), &on("site")), key(&ev("a"), &on("site")));
        assert_ne!(key(&ev("a"), &on("site")), key(&ev("b"), &on("site")));
    }
}
