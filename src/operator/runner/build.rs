//! The rule's controller, built from its plan: one kube-runtime `Controller` over the
//! watched kind, owning each child kind through a label-selected, cached watch
//! ([`crate::cache::watches`]), each kind of existing objects watched and mapped to the
//! resources that read them; one reconcile context per revision, and the router that picks
//! each resource's.

use super::discover::stopped;
use super::parts::{Options, RuleInfo};
use super::plan::Plan;
use super::queue::Queue;
use super::rollout::RolloutChoose;
use crate::cache::cached::Cached;
use crate::cache::discovery::Resolved;
use crate::cache::existing::ExistingKind;
use crate::cache::held::HeldNames;
use crate::cache::watches::{ChildKind, SyncTracker, child_watch, existing_watch, parent_watch};
use crate::events::EventQueue;
use crate::reconcile::{Ctx, KindTable, Kinds, Listed, Process, Records, Router, Unwatched};
use crate::rules::CompiledRule;
use futures::StreamExt;
use kube::runtime::controller::{Config, Controller};
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, ResourceExt};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

/// What the controller is built from.
pub(super) struct Parts<'a> {
    pub rule: &'a Arc<CompiledRule>,
    pub opts: &'a Options,
    /// The rule's process parts and client (as its ServiceAccount when it names one).
    pub process: &'a Arc<Process>,
    pub client: &'a Client,
    pub parent: &'a Resolved,
    pub info: &'a RuleInfo,
    pub synced: &'a Arc<AtomicBool>,
    pub stop: &'a watch::Receiver<bool>,
}

/// The rule's controller, ready to run, and what its companions share with it.
pub(super) struct Built {
    pub controller: Controller<Cached>,
    pub router: Router,
    pub queue: Arc<Queue>,
    /// Asks the controller to reconcile every resource.
    pub reconcile_all: mpsc::Sender<()>,
    /// The watched resources' cache.
    pub resources: Store<Cached>,
    pub status_schema: Arc<crate::status::StatusSchema>,
    pub choose: Option<Arc<RolloutChoose>>,
    pub unwatched: Arc<Unwatched>,
    /// The rule counted in the census of resources, until it ends.
    pub _counted: crate::metrics::Counted,
}

/// What every watch shares: the records of the resources, the readiness tracker, the
/// queue's marks.
struct Shared {
    records: Arc<Records<crate::reconcile::outcome::Sent>>,
    sync: Arc<SyncTracker>,
    queue: Arc<Queue>,
    held: Arc<HeldNames>,
}

/// Builds the controller of `plan`; None (logged) on a bug in ruleop.
pub(super) fn build(p: &Parts<'_>, plan: &Plan) -> Option<Built> {
    let records = Arc::new(Records::new(usize::from(p.opts.concurrency)));
    let _ = p.info.records.set(records.clone());
    // Readiness: every watch (the parent's, one per child kind, one per existing kind)
    // has listed once.
    let watches = 1 + plan.kinds.len() + plan.existing_kinds.len();
    let (held, freed) = HeldNames::new(p.client.clone(), &p.rule.name, p.process.metrics.clone());
    let shared = Shared {
        records,
        sync: Arc::new(SyncTracker::new(watches, p.synced.clone())),
        queue: Arc::new(Queue::default()),
        held: Arc::new(held),
    };
    let writer = Writer::<Cached>::new(p.parent.resource.clone());
    let resources = writer.as_reader();
    let counted = super::census::of(resources.clone(), shared.queue.clone());
    let _counted = p.process.metrics.census.count(&p.rule.name, counted);
    let (reconcile_all, all) = mpsc::channel::<()>(1);
    let controller = parent_controller(p, &shared, writer, all).reconcile_on(freed_names(
        freed,
        p.parent.resource.clone(),
        shared.queue.clone(),
    ));
    let (controller, children) = own_children(p, plan, &shared, controller);
    let (controller, existing) = watch_existing(p, plan, &shared, controller);
    let unwatched = Arc::new(Unwatched::default());
    let status_schema = Arc::new(crate::status::StatusSchema::default());
    let tables = Tables {
        children: KindTable::new(children, Vec::new())?,
        existing: KindTable::new(existing, Vec::new())?,
        unwatched: unwatched.clone(),
        status_schema: status_schema.clone(),
    };
    let mut contexts = contexts(p, plan, &shared, tables)?;
    let newest = contexts.remove(0);
    let choose = plan.history.as_ref().map(|h| {
        Arc::new(RolloutChoose {
            newest: h.current,
            pins: p.rule.pins == crate::rules::spec::Pins::Allowed,
            progress: std::sync::RwLock::new(plan.progress.clone()),
            loaded: contexts.iter().filter_map(|c| c.revision).collect(),
        })
    });
    let router = Router {
        held: plan.held,
        newest,
        others: contexts
            .into_iter()
            .filter_map(|c| Some((c.revision?, c)))
            .collect(),
        choose: choose
            .clone()
            .map(|c| c as Arc<dyn crate::reconcile::Choose>),
    };
    Some(Built {
        controller,
        router,
        queue: shared.queue,
        reconcile_all,
        resources,
        status_schema,
        choose,
        unwatched,
        _counted,
    })
}

/// The controller over the watched kind, reconciling every resource when `all` asks.
fn parent_controller(
    p: &Parts<'_>,
    shared: &Shared,
    writer: Writer<Cached>,
    all: mpsc::Receiver<()>,
) -> Controller<Cached> {
    let reader = writer.as_reader();
    let follow = shared.records.clone();
    let marks = shared.queue.clone();
    let stream = parent_watch(
        p.client,
        &p.opts.scope,
        p.parent,
        writer,
        &shared.sync,
        Box::new(move |ev| follow.follow_resource(ev)),
    )
    .inspect(move |ev| {
        if let Ok(o) = ev {
            marks.wanted(&o.namespace().unwrap_or_default(), &o.name_any());
        }
    });
    let (marks, every) = (shared.queue.clone(), reader.clone());
    let again = tokio_stream_of(all).inspect(move |_| marks.all_wanted(&every));
    Controller::for_stream_with(stream, reader, p.parent.resource.clone())
        .with_config(controller_config(p.opts.concurrency))
        .trigger_backoff(BriefPause)
        .graceful_shutdown_on(stopped(p.stop.clone()))
        .reconcile_all_on(again)
}

/// Each child kind's watch (its objects owned by the resources), and the kinds' caches.
fn own_children(
    p: &Parts<'_>,
    plan: &Plan,
    shared: &Shared,
    mut controller: Controller<Cached>,
) -> (Controller<Cached>, Vec<ChildKind>) {
    let rules = plan.revisions();
    let mut child_kinds = Vec::new();
    for (i, k) in plan.kinds.iter().enumerate() {
        let (follow, ar) = (shared.records.clone(), k.resource.clone());
        let follow = Box::new(move |ev: &_| follow.follow_child(&ar, ev));
        let sync = shared.sync.clone();
        let (stream, child) = child_watch(p.client, &p.opts.scope, &rules, k, sync, i + 1, follow);
        let (marks, owner) = (shared.queue.clone(), p.parent.resource.clone());
        let stream = stream.inspect(move |ev| {
            if let Ok(c) = ev {
                marks.child_event(c, &owner.api_version, &owner.kind);
            }
        });
        controller = controller.owns_stream_with(stream, k.resource.clone());
        child_kinds.push(child);
    }
    (controller, child_kinds)
}

/// Each existing kind's watch, an object mapped to the resources that read it.
fn watch_existing(
    p: &Parts<'_>,
    plan: &Plan,
    shared: &Shared,
    mut controller: Controller<Cached>,
) -> (Controller<Cached>, Vec<ExistingKind>) {
    let mut existing = Vec::new();
    for (i, k) in plan.existing_kinds.iter().enumerate() {
        let watch_index = 1 + plan.kinds.len() + i;
        let sync = shared.sync.clone();
        let (stream, kind) = existing_watch(p.client, &p.opts.scope, k, sync, watch_index);
        let readers = shared.records.clone();
        let parent_kind = p.parent.resource.clone();
        let marks = shared.queue.clone();
        let mapper = move |c: Cached| {
            // The labels a lookup matches are in the text only.
            let Some(o) = c.head() else {
                return Vec::new();
            };
            let ns = o.namespace().unwrap_or_default();
            let names = readers.readers_of(i, &o);
            names.iter().for_each(|name| marks.wanted(&ns, name));
            names
                .into_iter()
                .map(|name| ObjectRef::new_with(&name, parent_kind.clone()).within(&ns))
                .collect::<Vec<_>>()
        };
        controller = controller.watches_stream_with(stream, mapper, k.resource.clone());
        existing.push(kind);
    }
    (controller, existing)
}

/// What every revision's context shares.
struct Tables {
    children: KindTable<ChildKind>,
    existing: KindTable<ExistingKind>,
    unwatched: Arc<Unwatched>,
    status_schema: Arc<crate::status::StatusSchema>,
}

/// One context per revision: its rule, and its children's places among the kinds.
fn contexts(p: &Parts<'_>, plan: &Plan, shared: &Shared, t: Tables) -> Option<Vec<Arc<Ctx>>> {
    let events = Arc::new(EventQueue::start(
        crate::events::recorder::Publisher::new(p.client.clone(), p.opts.reporter.clone()),
        p.process.metrics.clone(),
        p.rule.name.clone(),
        p.process.fence.clone(),
        p.opts.event_pace.clone(),
        p.opts.event_quiet.clone(),
    ));
    let mut contexts = Vec::new();
    let (mut c_at, mut e_at) = (0, 0);
    for l in &plan.loaded {
        let (nc, ne) = (l.rule.children.len(), l.rule.existing.len());
        let tables = (
            t.children
                .with_children(plan.child_kind[c_at..c_at + nc].to_vec()),
            t.existing
                .with_children(plan.existing_kind[e_at..e_at + ne].to_vec()),
        );
        (c_at, e_at) = (c_at + nc, e_at + ne);
        let (Some(children), Some(existing)) = tables else {
            tracing::error!(
                "a child's kind is missing from the rule's kinds (a bug in ruleop); rule not started"
            );
            return None;
        };
        contexts.push(Arc::new(Ctx {
            process: p.process.clone(),
            rule: l.rule.clone(),
            kinds: Kinds {
                parent: p.parent.clone(),
                children,
                existing,
                listed: Listed::new(shared.sync.clone(), plan.kinds.len()),
                prune: plan.prune,
                unwatched: t.unwatched.clone(),
            },
            records: shared.records.clone(),
            events: events.clone(),
            status_schema: t.status_schema.clone(),
            revision: l.number,
            held: shared.held.clone(),
        }));
    }
    Some(contexts)
}

/// The controller's pause on its merged trigger stream after an error: each watch
/// already backs off on its own, so this only keeps a burst of errors from spinning.
struct BriefPause;

impl Iterator for BriefPause {
    type Item = Duration;
    fn next(&mut self) -> Option<Duration> {
        Some(Duration::from_millis(100))
    }
}

impl kube::runtime::utils::Backoff for BriefPause {
    fn reset(&mut self) {}
}

/// The resources a freed name wakes, as the controller's triggers.
fn freed_names(
    mut rx: mpsc::Receiver<(String, String)>,
    parent: crate::cache::cached::Kind,
    marks: Arc<Queue>,
) -> impl futures::Stream<Item = ObjectRef<Cached>> + Send + 'static {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx)).map(move |(ns, name)| {
        marks.wanted(&ns, &name);
        ObjectRef::new_with(&name, parent.clone()).within(&ns)
    })
}

/// A channel's receiving end as a stream (each `()` asks to reconcile every resource).
fn tokio_stream_of(mut rx: mpsc::Receiver<()>) -> impl futures::Stream<Item = ()> + Send + 'static {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// The controller's settings: at most `concurrency` reconciles of the rule at once (and
/// never two of one resource).
fn controller_config(concurrency: u16) -> Config {
    Config::default().concurrency(concurrency)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::watches::tests::cm;
    use kube::api::DynamicObject;
    use kube::discovery::ApiResource;
    use kube::runtime::controller::Action;
    use kube::runtime::watcher;
    use std::sync::Mutex;
    use std::time::Duration;

    #[tokio::test]
    async fn no_more_reconciles_run_at_once_than_the_bound() {
        let ar = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let mut writer = Writer::<DynamicObject>::new(ar.clone());
        let objects: Vec<DynamicObject> = (0..24).map(|i| cm(&format!("c{i}"))).collect();
        writer.apply_watcher_event(&watcher::Event::Init);
        for o in &objects {
            writer.apply_watcher_event(&watcher::Event::InitApply(o.clone()));
        }
        writer.apply_watcher_event(&watcher::Event::InitDone);
        // A trigger stream that stays open, as a watch does (the controller ends with it).
        let trigger = futures::stream::iter(objects.into_iter().map(Ok::<_, watcher::Error>))
            .chain(futures::stream::pending());
        // (running now, most at once)
        let counts = Arc::new(Mutex::new((0usize, 0usize)));
        let reconcile = |_: Arc<DynamicObject>, c: Arc<Mutex<(usize, usize)>>| async move {
            {
                let mut c = c.lock().unwrap();
                c.0 += 1;
                c.1 = c.1.max(c.0);
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
            c.lock().unwrap().0 -= 1;
            Ok::<_, std::convert::Infallible>(Action::await_change())
        };
        let done = Controller::for_stream_with(trigger, writer.as_reader(), ar)
            .with_config(controller_config(5))
            .run(
                reconcile,
                |_, _: &std::convert::Infallible, _| Action::await_change(),
                counts.clone(),
            )
            .take(24)
            .count()
            .await;
        assert_eq!(done, 24);
        assert_eq!(
            counts.lock().unwrap().1,
            5,
            "at most 5 at once, and the bound was reached"
        );
    }
}
