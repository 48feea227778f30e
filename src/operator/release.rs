//! A rule removed for good (its Rule deleted, or its file gone) lets its resources go:
//! its finalizers (`ruleop.dev/orphan`, `ruleop.dev/ordered-deletion`) would otherwise stay
//! with nothing to release them, and a resource's (or its namespace's) deletion would hang.
//! The children that ask to be orphaned (`onRemove: Orphan`) are let go first, as the rule
//! would have done, then each resource's finalizers are taken off. What cannot be done (its
//! RBAC) is said on the resource (a Warning Event `FinalizerNotReleased`) and in the log,
//! and tried again with backoff while this process leads. Children otherwise stay (a
//! removed rule deletes nothing).

use crate::cache::discovery;
use crate::cache::tolerant::Tolerant;
use crate::client::Fence;
use crate::lifecycle::kinds::kinds_of;
use crate::lifecycle::planner::{OURS, release_kinds};
use crate::reconcile::deletion::{LetGoError, let_go_found, to_let_go};
use crate::rules::CompiledRule;
use crate::rules::spec::WatchSpec;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Client, ResourceExt};
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

/// Why a release is not done yet.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    #[error("discovery of {what}: {message}")]
    Discovery { what: String, message: String },
    #[error("listing {what}: {source}")]
    List {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error("letting its children that ask to be orphaned go: {0}")]
    LetGo(#[from] LetGoError),
    #[error("taking ruleop's finalizers off {name}: {source}")]
    Finalizers {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("recording on {name} the children about to be let go: {source}")]
    Record {
        name: String,
        #[source]
        source: kube::Error,
    },
    #[error("not the leader: nothing written")]
    NotLeader,
}

/// The rule a release is of: its name (the children's label), the kind it watched and the
/// kinds it makes now. From the rule, or (`ruleop release` with no rule at hand) from what
/// its children carry.
#[derive(Debug, Clone)]
pub struct Subject {
    pub name: String,
    pub watch: WatchSpec,
    pub kinds: BTreeSet<crate::lifecycle::Made>,
}

impl Subject {
    pub fn of(rule: &CompiledRule) -> Subject {
        Subject {
            name: rule.name.clone(),
            watch: rule.watch.clone(),
            kinds: kinds_of(rule),
        }
    }
}

pub use crate::render::RELEASED_ANNOTATION;

/// Where the release acts, and as whom.
pub struct Release {
    pub client: Client,
    pub rule: Subject,
    /// The kinds the inventory records for the rule (those of earlier versions too).
    pub recorded: BTreeSet<crate::lifecycle::Made>,
    pub namespace: Option<String>,
    pub fence: Arc<Fence>,
    pub reporter: Reporter,
    /// Let every child go, not only those that ask to be orphaned, and take the finalizers
    /// off every resource (`ruleop release`, with ruleop stopped: its workloads stay, owned
    /// by nothing, unmarked).
    pub every: bool,
}

/// Releases the removed rule's resources, retried with backoff (1 s doubling to 5 min)
/// until done or this process no longer leads.
pub async fn run(r: Release) {
    let mut attempt = 0u32;
    loop {
        match release_once(&r).await {
            Ok(0) => return,
            Ok(n) => {
                tracing::info!(rule = %r.rule.name, resources = n, "rule removed: its resources' finalizers released (their children that ask to be orphaned let go first)");
                return;
            }
            Err(ReleaseError::NotLeader) => return,
            Err(e) => {
                let delay = Duration::from_secs((1u64 << attempt.min(9)).min(300));
                tracing::warn!(rule = %r.rule.name, error = %e, retry_in_s = delay.as_secs(), "rule removed: its resources' finalizers cannot be released yet");
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
        }
    }
}

fn api<K>(r: &Release, ar: &kube::discovery::ApiResource, ns: Option<&str>) -> Api<K>
where
    K: kube::Resource<
            DynamicType = kube::discovery::ApiResource,
            Scope = kube::core::DynamicResourceScope,
        >,
{
    match ns {
        Some(ns) => Api::namespaced_with(r.client.clone(), ns, ar),
        None => Api::all_with(r.client.clone(), ar),
    }
}

/// One pass; how many resources were released.
pub async fn release_once(r: &Release) -> Result<usize, ReleaseError> {
    let w = &r.rule.watch;
    let what = format!("{}/{} {}", w.group, w.version, w.resource);
    let parent = match discovery::watched(&r.client, w).await {
        Ok(Some(p)) => p,
        // The kind is gone: so are its resources.
        Ok(None) => return Ok(0),
        Err(e) => {
            return Err(ReleaseError::Discovery {
                what,
                message: e.to_string(),
            });
        }
    };
    let ar = &*parent.resource;
    // (Read tolerantly: a resource nested too deep to decode must not fail the list.)
    let resources: Api<Tolerant> = api(r, ar, r.namespace.as_deref());
    let held: Vec<DynamicObject> = resources
        .list(&ListParams::default())
        .await
        .map_err(|source| ReleaseError::List {
            what: what.clone(),
            source,
        })?
        .items
        .into_iter()
        .map(|t| t.0)
        .filter(|o| r.every || o.finalizers().iter().any(|f| OURS.contains(&f.as_str())))
        .collect();
    if held.is_empty() {
        return Ok(0);
    }
    let uids: BTreeSet<String> = held.iter().filter_map(|o| o.uid()).collect();
    // What `ruleop release` lets go is first written on each resource: a release that stops
    // half way has lost no uid a reinstall needs.
    let kinds = release_kinds(&r.rule.kinds, &r.recorded);
    let ns = r.namespace.as_deref();
    let found = to_let_go(&r.client, &r.rule.name, kinds, ns, &uids, r.every).await?;
    let held = match r.every {
        true => record_released(r, ar, held, &found).await?,
        false => held,
    };
    let gone = let_go_found(&r.client, &r.fence, &r.rule.name, &found, r.every).await?;
    let mut n = 0;
    for o in &held {
        if !r.fence.holds() {
            return Err(ReleaseError::NotLeader);
        }
        let uid = o.uid().unwrap_or_default();
        let let_go_some = gone.iter().any(|(owner, _)| *owner == uid);
        let Some(patch) = finalizers_patch(o) else {
            n += usize::from(let_go_some);
            continue;
        };
        let ns_api: Api<Tolerant> = api(r, ar, o.namespace().as_deref());
        if let Err(source) = ns_api
            .patch(
                &o.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            let e = ReleaseError::Finalizers {
                name: o.name_any(),
                source,
            };
            say(r, ar, o, &e).await;
            return Err(e);
        }
        n += 1;
    }
    Ok(n)
}

/// Writes on each resource of `held` the uids of its children about to be let go (with those
/// an earlier release wrote); the resources as they are after.
async fn record_released(
    r: &Release,
    ar: &kube::discovery::ApiResource,
    held: Vec<DynamicObject>,
    found: &[(kube::discovery::ApiResource, DynamicObject, String)],
) -> Result<Vec<DynamicObject>, ReleaseError> {
    let gone: Vec<(String, String)> = found
        .iter()
        .map(|(_, o, owner)| (owner.clone(), o.uid().unwrap_or_default()))
        .collect();
    let mut out = Vec::with_capacity(held.len());
    for o in held {
        let Some(annotations) = released_annotation(&o, &gone) else {
            out.push(o);
            continue;
        };
        let patch = json!({"metadata": {"annotations": annotations}});
        let ns_api: Api<Tolerant> = api(r, ar, o.namespace().as_deref());
        match ns_api
            .patch(
                &o.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(now) => out.push(now.0),
            Err(source) => {
                let e = ReleaseError::Record {
                    name: o.name_any(),
                    source,
                };
                say(r, ar, &o, &e).await;
                return Err(e);
            }
        }
    }
    Ok(out)
}

/// [`RELEASED_ANNOTATION`] of `o` with its children of `gone` added, if any is new.
fn released_annotation(o: &DynamicObject, gone: &[(String, String)]) -> Option<serde_json::Value> {
    let uid = o.uid().unwrap_or_default();
    let before = o
        .annotations()
        .get(RELEASED_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    let mut all: BTreeSet<&str> = crate::render::released_uids(&before).collect();
    let n = all.len();
    all.extend(
        gone.iter()
            .filter(|(owner, _)| *owner == uid)
            .map(|(_, c)| c.as_str()),
    );
    (all.len() > n).then(|| {
        let list: Vec<&str> = all.into_iter().collect();
        json!({RELEASED_ANNOTATION: list.join(",")})
    })
}

/// The patch that takes ruleop's finalizers off resource `o`; None when it holds none.
fn finalizers_patch(o: &DynamicObject) -> Option<serde_json::Value> {
    if !o.finalizers().iter().any(|f| OURS.contains(&f.as_str())) {
        return None;
    }
    let rest: Vec<&String> = o
        .finalizers()
        .iter()
        .filter(|f| !OURS.contains(&f.as_str()))
        .collect();
    Some(json!({"metadata": {"finalizers": rest, "resourceVersion": o.resource_version()}}))
}

/// A Warning Event on the resource: why its finalizers stay.
async fn say(r: &Release, ar: &kube::discovery::ApiResource, o: &DynamicObject, e: &ReleaseError) {
    let reference = ObjectReference {
        api_version: Some(ar.api_version.clone()),
        kind: Some(ar.kind.clone()),
        name: o.metadata.name.clone(),
        namespace: o.metadata.namespace.clone(),
        uid: o.metadata.uid.clone(),
        ..Default::default()
    };
    let ev = Event {
        type_: EventType::Warning,
        reason: "FinalizerNotReleased".into(),
        note: Some(format!(
            "rule `{}` was removed; ruleop cannot take its finalizers off this resource: {e}",
            r.rule.name
        )),
        action: "Release".into(),
        secondary: None,
    };
    let recorder = Recorder::new(r.client.clone(), r.reporter.clone());
    if let Err(e) = recorder.publish(&ev, &reference).await {
        tracing::debug!(error = %e, "Event not published");
    }
}
