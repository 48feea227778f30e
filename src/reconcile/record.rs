//! Everything ruleop keeps about one custom resource between its reconciles, as one
//! [`Record`]: what it last wrote to each child (or a write still on its way), the status
//! it last wrote, its consecutive failures, and the existing objects it read.
//!
//! A record is made when the rule's watch first shows the resource and dropped in exactly
//! one place, [`Inner::drop_record`], when the watch says the resource is gone: its delete
//! event, its absence after a re-list, or another resource under its name (a new uid).
//! Dropping a record stops its writes on their way. A reconcile only reads and updates the
//! record of its resource (and never makes one), so nothing outlives the resource.
//!
//! Writes on their way: kube-runtime runs one reconcile of a resource at a time, so a
//! reconcile waiting for one slow write (a Service's creation takes seconds with 10,000
//! Services in place: BENCHMARKS.md) would hold up everything else about that resource. A
//! reconcile waits for a write for at most its patience ([`PATIENCE`]); a write still
//! unanswered then goes on by itself, kept in the record, and the first reconcile to find
//! it answered books it as its own. While a write of a child is on its way no second one
//! is sent.

use crate::apply::{Lag, ObjectKey, Written};
use crate::cache::owners::controller_ref_of;
use crate::cache::relist::Relist;
use crate::render::Lookup;
use kube::ResourceExt;
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::watcher::Event;
use serde_json::json;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::task::{JoinError, JoinHandle};
use tracing::Instrument;

/// How long a reconcile waits for a child write before letting it go on by itself. Each
/// write that outlasts it gives its resource one more status write (`Applying`): in a
/// create wave at 1,000 resources a Service create takes about 1 s on average; at 10,000,
/// most outlast it (BENCHMARKS.md, "A slow child no longer holds up the status").
pub const PATIENCE: Duration = Duration::from_secs(5);

/// How soon a resource with a write on its way is looked at again.
pub const RECHECK: Duration = Duration::from_secs(1);

/// A custom resource by namespace and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceKey {
    pub namespace: String,
    pub name: String,
}

impl ResourceKey {
    pub fn of(o: &impl kube::Resource) -> ResourceKey {
        ResourceKey {
            namespace: o.namespace().unwrap_or_default(),
            name: o.name_any(),
        }
    }
}

impl std::fmt::Display for ResourceKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The resource a reconcile is about: its key and the uid it had when the reconcile read it
/// (a record of another uid under that name is another resource's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceId {
    pub key: ResourceKey,
    pub uid: String,
}

impl ResourceId {
    pub fn of(o: &impl kube::Resource) -> ResourceId {
        ResourceId {
            key: ResourceKey::of(o),
            uid: o.uid().unwrap_or_default(),
        }
    }
}

/// What became of a write: its answer, or still on its way.
#[derive(Debug)]
pub enum Step<W> {
    Done(Result<W, JoinError>),
    OnItsWay,
}

/// A write on its way; stopped when dropped (nobody is left to book its answer).
struct Pending<W>(JoinHandle<W>);

impl<W> Drop for Pending<W> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// What ruleop knows of its last write to one child.
enum ChildWrite<W> {
    /// Answered: what the cache must show before it is current.
    Done(Written),
    /// Sent by a reconcile that stopped waiting for it, for the child of this id; the last
    /// answered write is kept for when this one fails.
    OnItsWay(Pending<W>, Option<Written>, String),
}

impl<W> ChildWrite<W> {
    fn on_its_way(&self) -> bool {
        matches!(self, ChildWrite::OnItsWay(..))
    }
}

/// The status ruleop last wrote to a resource, as JSON text (a tree would cost kilobytes
/// per resource), and the resourceVersion and time of that write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusMark {
    pub text: Box<str>,
    pub resource_version: String,
    pub at: Instant,
}

impl StatusMark {
    /// How the cached resource (at `cached_rv`) stands to this write.
    pub fn lag(&self, cached_rv: &str) -> Lag {
        crate::apply::lag(Some(cached_rv), &self.resource_version, self.at)
    }
}

/// Everything ruleop keeps about one custom resource between reconciles.
pub struct Record<W> {
    uid: String,
    children: HashMap<ObjectKey, ChildWrite<W>>,
    status: Option<StatusMark>,
    failures: u32,
    /// The existing objects its last render looked up: (existing kind, lookup).
    lookups: Vec<(usize, Lookup)>,
}

impl<W> Record<W> {
    fn new(uid: String) -> Record<W> {
        Record {
            uid,
            children: HashMap::new(),
            status: None,
            failures: 0,
            lookups: Vec::new(),
        }
    }

    fn on_their_way(&self) -> usize {
        self.children.values().filter(|w| w.on_its_way()).count()
    }
}

struct Inner<W> {
    records: HashMap<ResourceKey, Record<W>>,
    /// (existing kind, namespace) → the resources there that read objects of that kind:
    /// an index of the records' lookups, kept with them.
    readers: HashMap<(usize, String), BTreeSet<String>>,
    /// Writes on their way, all records together.
    on_their_way: usize,
}

impl<W> Inner<W> {
    /// The one place a record goes (besides all of them at once, when the rule stops).
    fn drop_record(&mut self, key: &ResourceKey) {
        if let Some(r) = self.records.remove(key) {
            self.stopped(r.on_their_way());
            self.unindex(key, &r.lookups);
        }
    }

    /// `n` writes are no longer on their way.
    fn stopped(&mut self, n: usize) {
        debug_assert!(n <= self.on_their_way, "writes on their way miscounted");
        self.on_their_way = self.on_their_way.saturating_sub(n);
    }

    fn ensure(&mut self, key: ResourceKey, uid: &str) {
        if self.records.get(&key).is_some_and(|r| r.uid != uid) {
            self.drop_record(&key);
        }
        self.records
            .entry(key)
            .or_insert_with(|| Record::new(uid.to_string()));
    }

    fn unindex(&mut self, key: &ResourceKey, lookups: &[(usize, Lookup)]) {
        for (kind, _) in lookups {
            let place = (*kind, key.namespace.clone());
            if let Some(names) = self.readers.get_mut(&place) {
                names.remove(&key.name);
                if names.is_empty() {
                    self.readers.remove(&place);
                }
            }
        }
    }

    fn get(&mut self, r: &ResourceId) -> Option<&mut Record<W>> {
        self.records.get_mut(&r.key).filter(|rec| rec.uid == r.uid)
    }

    fn remove_write(&mut self, r: &ResourceId, child: &ObjectKey) -> Option<ChildWrite<W>> {
        let w = self.get(r)?.children.remove(child)?;
        if w.on_its_way() {
            self.stopped(1);
        }
        Some(w)
    }

    /// The record that holds what was written to `child`: its owner's (by its controller
    /// reference), or, for a child that no longer names it, any record that has it.
    fn holder_of(
        &mut self,
        owner: Option<ResourceId>,
        child: &ObjectKey,
    ) -> Option<&mut Record<W>> {
        if let Some(r) = owner {
            return self.get(&r);
        }
        self.records
            .values_mut()
            .find(|rec| rec.children.contains_key(child))
    }
}

/// The records of one rule's resources.
pub struct Records<W> {
    inner: Mutex<Inner<W>>,
    /// At most this many writes on their way; beyond, a reconcile waits for its write as it
    /// would without them (what is outstanding stays bound by the reconciles at once).
    room: usize,
    /// The resources of a re-list of the watched kind in progress.
    relist: Relist<(ResourceKey, String)>,
    /// The children of a re-list of each child kind in progress, by kind.
    child_relists: Mutex<HashMap<(String, String), Vec<ObjectKey>>>,
}

impl<W> Records<W> {
    /// Records with room for `room` writes on their way (the rule's reconciles at once is
    /// the measure).
    pub fn new(room: usize) -> Records<W> {
        Records {
            inner: Mutex::new(Inner {
                records: HashMap::new(),
                readers: HashMap::new(),
                on_their_way: 0,
            }),
            room,
            relist: Relist::default(),
            child_relists: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<W>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies `f` to the record of `r`, if it has one.
    fn with<T>(&self, r: &ResourceId, f: impl FnOnce(&mut Record<W>) -> T) -> Option<T> {
        self.lock().get(r).map(f)
    }

    /// Follows one event of the watched kind's watch: a resource seen gets its record
    /// (a new one if another resource had its name), and one gone loses it.
    pub fn follow_resource(&self, ev: &Event<DynamicObject>) {
        let seen = |o: &DynamicObject| (ResourceKey::of(o), o.uid().unwrap_or_default());
        let listed = self.relist.observe(ev, |o| Some(seen(o)));
        let mut inner = self.lock();
        match ev {
            Event::Apply(o) | Event::InitApply(o) => {
                let (key, uid) = seen(o);
                inner.ensure(key, &uid);
            }
            Event::Delete(o) => inner.drop_record(&ResourceKey::of(o)),
            Event::Init | Event::InitDone => {}
        }
        if let Some(listed) = listed {
            let present: HashSet<ResourceKey> = listed.into_iter().map(|(k, _)| k).collect();
            let gone: Vec<ResourceKey> = inner
                .records
                .keys()
                .filter(|k| !present.contains(*k))
                .cloned()
                .collect();
            for key in gone {
                inner.drop_record(&key);
            }
        }
    }

    /// Follows one event of a child kind's watch: a deleted child must be recreated, not
    /// taken for a lagging cache, so what its resource's record says of its last write
    /// goes (and, after a re-list, what it says of children gone meanwhile, unless just
    /// written or on their way).
    pub fn follow_child(&self, ar: &ApiResource, ev: &Event<DynamicObject>) {
        if matches!(ev, Event::Apply(_)) {
            return;
        }
        let kind = (ar.api_version.clone(), ar.kind.clone());
        let listed = {
            let mut relists = self.child_relists.lock().unwrap_or_else(|p| p.into_inner());
            match ev {
                Event::Init => {
                    relists.insert(kind.clone(), Vec::new());
                    None
                }
                Event::InitApply(o) => {
                    relists
                        .entry(kind.clone())
                        .or_default()
                        .push(ObjectKey::of_object(ar, o));
                    None
                }
                Event::InitDone => Some(relists.remove(&kind).unwrap_or_default()),
                Event::Apply(_) | Event::Delete(_) => None,
            }
        };
        let mut inner = self.lock();
        if let Event::Delete(o) = ev {
            let owner = controller_ref_of(o).map(|(uid, name)| ResourceId {
                key: ResourceKey {
                    namespace: o.namespace().unwrap_or_default(),
                    name: name.to_string(),
                },
                uid: uid.to_string(),
            });
            let key = ObjectKey::of_object(ar, o);
            if let Some(rec) = inner.holder_of(owner, &key)
                && matches!(rec.children.get(&key), Some(ChildWrite::Done(_)))
            {
                rec.children.remove(&key);
            }
        }
        if let Some(listed) = listed {
            let listed: HashSet<ObjectKey> = listed.into_iter().collect();
            for rec in inner.records.values_mut() {
                rec.children.retain(|k, w| match w {
                    ChildWrite::OnItsWay(..) => true,
                    ChildWrite::Done(d) => {
                        !(k.api_version == kind.0 && k.kind == kind.1)
                            || listed.contains(k)
                            || d.at.elapsed() < crate::apply::CACHE_LAG_GRACE
                    }
                });
            }
        }
    }

    /// What ruleop last wrote to `child` of `r`, once answered.
    pub fn written(&self, r: &ResourceId, child: &ObjectKey) -> Option<Written> {
        self.with(r, |rec| match rec.children.get(child)? {
            ChildWrite::Done(w) => Some(w.clone()),
            ChildWrite::OnItsWay(_, last, _) => last.clone(),
        })
        .flatten()
    }

    /// Books an answered write of `child`.
    pub fn wrote(&self, r: &ResourceId, child: ObjectKey, w: Written) {
        let mut inner = self.lock();
        inner.remove_write(r, &child);
        if let Some(rec) = inner.get(r) {
            rec.children.insert(child, ChildWrite::Done(w));
        }
    }

    /// Forgets what was written to `child` (it is another's now).
    pub fn forget_child(&self, r: &ResourceId, child: &ObjectKey) {
        self.lock().remove_write(r, child);
    }

    /// Stops the writes on their way of `r` (it is being deleted).
    pub fn abandon_writes(&self, r: &ResourceId) {
        self.stop_writes(r, |_, _| true);
    }

    /// Stops the writes on their way of `r` to objects it no longer renders (but those of
    /// the children that wait, whose objects are kept as they are): a write without its
    /// reason could land after a newer one and undo it.
    pub fn stop_writes_except(
        &self,
        r: &ResourceId,
        rendered: &HashSet<ObjectKey>,
        waiting: &HashSet<&str>,
    ) {
        self.stop_writes(r, |k, id| !rendered.contains(k) && !waiting.contains(id));
    }

    fn stop_writes(&self, r: &ResourceId, which: impl Fn(&ObjectKey, &str) -> bool) {
        let mut inner = self.lock();
        let Some(rec) = inner.get(r) else { return };
        let mut stopped = 0;
        let mut gone = Vec::new();
        for (k, w) in rec.children.iter_mut() {
            let ChildWrite::OnItsWay(_, last, id) = w else {
                continue;
            };
            if !which(k, id) {
                continue;
            }
            stopped += 1;
            match last.take() {
                Some(last) => *w = ChildWrite::Done(last),
                None => gone.push(k.clone()),
            }
        }
        for k in gone {
            rec.children.remove(&k);
        }
        inner.stopped(stopped);
    }

    /// The status ruleop last wrote to `r`.
    pub fn status(&self, r: &ResourceId) -> Option<StatusMark> {
        self.with(r, |rec| rec.status.clone()).flatten()
    }

    /// Books a status write of `r` (None: forget the last one, the cache is past it).
    pub fn set_status(&self, r: &ResourceId, mark: Option<StatusMark>) {
        self.with(r, |rec| rec.status = mark);
    }

    /// The consecutive failures of `r` so far.
    pub fn failures(&self, r: &ResourceId) -> u32 {
        self.with(r, |rec| rec.failures).unwrap_or(0)
    }

    /// Counts one more failure of `r`; gives how many in a row (at least 1).
    pub fn count_failure(&self, r: &ResourceId) -> u32 {
        self.with(r, |rec| {
            rec.failures = rec.failures.saturating_add(1);
            rec.failures
        })
        .unwrap_or(1)
    }

    /// `r` went through: its failures are forgotten.
    pub fn reset_failures(&self, r: &ResourceId) {
        self.with(r, |rec| rec.failures = 0);
    }

    /// Records the existing objects `r` looked up (replacing its earlier lookups).
    pub fn set_lookups(&self, r: &ResourceId, lookups: Vec<(usize, Lookup)>) {
        let mut inner = self.lock();
        let Some(rec) = inner.get(r) else { return };
        let old = std::mem::replace(&mut rec.lookups, lookups.clone());
        inner.unindex(&r.key, &old);
        for (kind, _) in &lookups {
            inner
                .readers
                .entry((*kind, r.key.namespace.clone()))
                .or_default()
                .insert(r.key.name.clone());
        }
    }

    /// The resources (names in the object's namespace) whose lookups find `o` of existing
    /// kind `kind`, or may have found it before: a label lookup reads every object of the
    /// kind in its namespace (a label removed is a change to the list, though `o` no
    /// longer matches).
    pub fn readers_of(&self, kind: usize, o: &DynamicObject) -> Vec<String> {
        let ns = o.namespace().unwrap_or_default();
        let meta = json!({"metadata": {"name": o.name_any(), "labels": o.labels()}});
        let inner = self.lock();
        let Some(names) = inner.readers.get(&(kind, ns.clone())) else {
            return Vec::new();
        };
        names
            .iter()
            .filter(|name| {
                let key = ResourceKey {
                    namespace: ns.clone(),
                    name: (*name).clone(),
                };
                inner.records.get(&key).is_some_and(|rec| {
                    rec.lookups.iter().any(|(k, l)| {
                        *k == kind && (matches!(l, Lookup::Labels(_)) || l.matches(&meta))
                    })
                })
            })
            .cloned()
            .collect()
    }

    /// How many resources have a record.
    pub fn len(&self) -> usize {
        self.lock().records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many writes are on their way.
    pub fn on_their_way(&self) -> usize {
        self.lock().on_their_way
    }
}

impl<W: Send + 'static> Records<W> {
    /// The write of `child` an earlier reconcile of `r` let go on: its answer if it came
    /// (taken: only once), OnItsWay if not; None if there is none.
    pub async fn take(&self, r: &ResourceId, child: &ObjectKey) -> Option<Step<W>> {
        let pending = {
            let mut inner = self.lock();
            let rec = inner.get(r)?;
            let finished = match rec.children.get(child)? {
                ChildWrite::Done(_) => return None,
                ChildWrite::OnItsWay(p, ..) => p.0.is_finished(),
            };
            if !finished {
                return Some(Step::OnItsWay);
            }
            let Some(ChildWrite::OnItsWay(p, last, _)) = inner.remove_write(r, child) else {
                return None;
            };
            // What was answered before stays known until this answer is booked.
            if let (Some(last), Some(rec)) = (last, inner.get(r)) {
                rec.children.insert(child.clone(), ChildWrite::Done(last));
            }
            p
        };
        // Finished: this does not wait.
        Some(Step::Done(take_answer(pending).await))
    }

    /// Sends `write` for `child` of `r` and waits for its answer up to `patience`; after
    /// that it goes on by itself, kept in `r`'s record (see [`Records::take`]), and is
    /// stopped if the record goes. Without room for it, or with the record gone, it is
    /// waited for here.
    pub async fn send<F>(
        &self,
        r: &ResourceId,
        (id, child): (&str, ObjectKey),
        write: F,
        patience: Duration,
    ) -> Step<W>
    where
        F: Future<Output = W> + Send + 'static,
    {
        let mut handle = tokio::spawn(write.instrument(tracing::Span::current()));
        if let Ok(answer) = tokio::time::timeout(patience, &mut handle).await {
            return Step::Done(answer);
        }
        {
            let mut guard = self.lock();
            let inner = &mut *guard;
            let room = inner.on_their_way < self.room;
            let rec = inner.records.get_mut(&r.key).filter(|rec| rec.uid == r.uid);
            if let (true, Some(rec)) = (room, rec) {
                // (None is on its way already: no second write is sent while one is.)
                let (last, out) = match rec.children.remove(&child) {
                    Some(ChildWrite::Done(w)) => (Some(w), false),
                    Some(ChildWrite::OnItsWay(_, last, _)) => (last, true),
                    None => (None, false),
                };
                let pending = ChildWrite::OnItsWay(Pending(handle), last, id.to_string());
                rec.children.insert(child, pending);
                if !out {
                    inner.on_their_way += 1;
                }
                return Step::OnItsWay;
            }
        }
        // No room, or the resource is gone: its end, here.
        Step::Done(handle.await)
    }
}

async fn take_answer<W>(mut p: Pending<W>) -> Result<W, JoinError> {
    (&mut p.0).await
}

#[cfg(test)]
mod tests;
