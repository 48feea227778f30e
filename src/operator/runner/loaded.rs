//! The revisions of a rule that render its resources: the newest (the rule in force) and,
//! for a Rule object, the other revisions it keeps (compiled again from their
//! ControllerRevisions): a rollout's previous one, and any a resource pins. They share the
//! rule's kinds (their union), so each has its own table of them. A pinned revision is in
//! force with its kinds, even those the newest dropped: they are not retired while a
//! resource pins it (read when the rule starts: see [`pinned`]).

use crate::operator::revisions::History;
use crate::rollout::{Phase, Progress};
use crate::rules::CompiledRule;
use serde_json::json;
use std::collections::BTreeSet;
use std::sync::Arc;

/// One revision that renders resources.
pub(super) struct Loaded {
    /// Its number; None for a rule from a file.
    pub number: Option<i64>,
    pub rule: Arc<CompiledRule>,
}

/// The (apiVersion, kind) of a rule's children and existing objects.
fn kinds(rule: &CompiledRule) -> BTreeSet<(String, String)> {
    rule.children
        .iter()
        .map(|c| (c.api_version.clone(), c.kind.clone()))
        .chain(
            rule.existing
                .iter()
                .map(|e| (e.api_version.clone(), e.kind.clone())),
        )
        .collect()
}

/// A kept revision compiled again; None (logged) when it no longer compiles.
fn compile(
    rule: &CompiledRule,
    number: i64,
    spec: &serde_json::Value,
    policy: &crate::rules::policy::Policy,
) -> Option<Arc<CompiledRule>> {
    let uid = rule
        .object
        .as_ref()
        .map(|o| o.uid.clone())
        .unwrap_or_default();
    let obj = json!({"metadata": {"name": rule.name, "uid": uid, "generation": 0}, "spec": spec});
    let load = crate::rules::object::load_object(&obj);
    if load.rule.is_none() {
        let problems: Vec<String> = load.problems.iter().map(ToString::to_string).collect();
        tracing::warn!(revision = number, problems = %problems.join("; "), "a kept revision no longer compiles (a kind's schema changed?): resources that would take it take the newest");
    }
    let rule = load.rule?;
    let refused = crate::rules::policy::problems(&rule, policy);
    if !refused.is_empty() {
        let problems: Vec<String> = refused.iter().map(|(_, e)| e.to_string()).collect();
        tracing::warn!(revision = number, problems = %problems.join("; "), "a kept revision breaks the installation's policy: resources that would take it take the newest");
        return None;
    }
    Some(rule)
}

/// The newest revision first, then the others a Rule keeps: the rollout's previous one
/// and those of the rollouts it replaced always; those a resource pins (`pinned`) always;
/// another only when its kinds are among theirs (a revision of other kinds, pinned by no
/// resource, would make the rule wait for them to be served and keep them from retiring).
pub(super) fn revisions(
    rule: &Arc<CompiledRule>,
    history: Option<&History>,
    progress: Option<&Progress>,
    policy: &crate::rules::policy::Policy,
    pinned: &BTreeSet<i64>,
) -> Vec<Loaded> {
    let mut out = vec![Loaded {
        number: history.map(|h| h.current),
        rule: rule.clone(),
    }];
    let Some(h) = history else {
        return out;
    };
    // The rollout's previous revision, and those of the rollouts it replaced (the
    // resources they reached stay on them): always, their kinds are served already.
    let mut always: Vec<i64> = progress
        .into_iter()
        .flat_map(|p| {
            let unfinished = matches!(p.phase, Phase::Progressing | Phase::Paused);
            let superseded = if unfinished { &p.superseded[..] } else { &[] };
            std::iter::once(p.from).chain(superseded.iter().copied())
        })
        .filter(|n| *n != h.current)
        .collect();
    // A pinned revision holds its resources, its kinds included.
    let pins: Vec<i64> = pinned
        .iter()
        .filter(|n| **n != h.current && !always.contains(n) && h.kept.contains_key(n))
        .copied()
        .collect();
    always.extend(pins);
    for &f in &always {
        if let Some(r) = h
            .kept
            .get(&f)
            .and_then(|rev| compile(rule, f, &rev.spec, policy))
        {
            out.push(Loaded {
                number: Some(f),
                rule: r,
            });
        }
    }
    let allowed: BTreeSet<(String, String)> = out.iter().flat_map(|l| kinds(&l.rule)).collect();
    for (n, rev) in &h.kept {
        if *n == h.current || always.contains(n) {
            continue;
        }
        match compile(rule, *n, &rev.spec, policy) {
            Some(r) if kinds(&r).is_subset(&allowed) => out.push(Loaded {
                number: Some(*n),
                rule: r,
            }),
            Some(_) => tracing::info!(
                revision = n,
                "a kept revision makes kinds the newest does not and no resource pins it: not loaded (a resource pinned to it later takes the newest until the rule starts again)"
            ),
            None => {}
        }
    }
    out
}

/// The revisions the rule's resources pin (`ruleop.dev/revision`), read once from a list
/// of their metadata when the rule starts: kept whatever the history limit, and loaded.
/// Empty for a rule from a file (no revisions) or with pins disabled. Retried until read,
/// or the rule is stopped (None).
pub(super) async fn pinned(
    client: &kube::Client,
    parent: &crate::cache::discovery::Resolved,
    namespace: Option<&str>,
    rule: &CompiledRule,
    stop: &tokio::sync::watch::Receiver<bool>,
) -> Option<BTreeSet<i64>> {
    if rule.object.is_none() || rule.pins != crate::rules::spec::Pins::Allowed {
        return Some(BTreeSet::new());
    }
    let api: kube::Api<kube::api::DynamicObject> = match namespace {
        Some(ns) => kube::Api::namespaced_with(client.clone(), ns, &*parent.resource),
        None => kube::Api::all_with(client.clone(), &*parent.resource),
    };
    loop {
        match api.list_metadata(&kube::api::ListParams::default()).await {
            Ok(list) => return Some(pins_of(list.items.iter().map(|o| &o.metadata))),
            Err(e) => {
                tracing::warn!(error = %e, "the resources' pins cannot be read (a list of their metadata); retrying")
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(std::time::Duration::from_secs(2)) => {}
            _ = super::discover::stopped(stop.clone()) => return None,
        }
    }
}

/// The revisions pinned by the `ruleop.dev/revision` annotation of these objects.
fn pins_of<'a>(metas: impl Iterator<Item = &'a kube::api::ObjectMeta>) -> BTreeSet<i64> {
    metas
        .filter_map(|m| m.annotations.as_ref()?.get(crate::rollout::PIN))
        .filter_map(|p| p.trim().parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_are_read_from_the_annotation_and_a_bad_one_is_ignored() {
        let meta = |pin: Option<&str>| kube::api::ObjectMeta {
            annotations: pin.map(|p| [(crate::rollout::PIN.to_string(), p.to_string())].into()),
            ..Default::default()
        };
        let metas = [
            meta(Some("3")),
            meta(None),
            meta(Some(" 1 ")),
            meta(Some("x")),
            meta(Some("3")),
        ];
        assert_eq!(pins_of(metas.iter()), BTreeSet::from([1, 3]));
    }
}
