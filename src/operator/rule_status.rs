//! The status of each Rule object, written by the leader: whether its generation was
//! accepted (or every problem, each at its path in the Rule, and which generation stays in
//! force), whether it serves (its watches listed), its kind and how many resources it has.
//! Written only when it differs from the status the cluster holds: nothing in steady state.

use crate::rules::book::ObjectVerdict;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

/// What the running rule of a Rule shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Running {
    /// The Rule generation it runs.
    pub generation: i64,
    pub synced: bool,
    pub kind: Option<String>,
    pub resources: Option<usize>,
    /// The revision in force, and the rollout's progress, once known.
    pub revision: Option<i64>,
    pub rollout: Option<Option<Value>>,
    /// The resource it serves, `group/resource`.
    pub watch: String,
    /// The ServiceAccount it runs as (`namespace/name`), and why it waits to start.
    pub identity: Option<String>,
    pub blocked: Option<super::runner::parts::Blocked>,
    /// Its kind's storage and migration (`status.storage`), for a kind in several versions.
    pub storage: Option<Value>,
}

/// One condition, without its time.
fn condition(type_: &str, ok: bool, reason: &str, message: String, generation: i64) -> Value {
    json!({"type": type_, "status": if ok { "True" } else { "False" }, "reason": reason,
           "message": crate::status::verdict::bounded([message.as_str()]), "observedGeneration": generation})
}

/// The status a Rule should have (conditions without their times).
pub fn desired(v: &ObjectVerdict, running: Option<&Running>) -> Value {
    let accepted = if v.accepted {
        condition(
            "Accepted",
            true,
            "Compiled",
            format!("generation {} is in force", v.generation),
            v.generation,
        )
    } else {
        let stays = match v.in_force {
            Some(0) => "; its last accepted revision stays in force".to_string(),
            Some(g) => format!("; generation {g} stays in force"),
            None => "; no generation of this Rule is in force".into(),
        };
        let problems: Vec<&str> = v.problems.iter().map(String::as_str).collect();
        condition(
            "Accepted",
            false,
            "Invalid",
            format!(
                "generation {} is not in force{stays}: {}",
                v.generation,
                problems.join("\n")
            ),
            v.generation,
        )
    };
    let ready = match running {
        None => condition(
            "Ready",
            false,
            "NotRunning",
            "no rule of this Rule runs (none is in force, or this replica is not the leader yet)"
                .into(),
            v.generation,
        ),
        Some(Running {
            identity: Some(who),
            blocked: Some(b),
            ..
        }) => condition(
            "Ready",
            false,
            "Forbidden",
            format!("not started: {}", b.describe(who)),
            v.generation,
        ),
        Some(r) if !r.synced => condition(
            "Ready",
            false,
            "Starting",
            format!(
                "waiting for {} to be served and for its watches to list",
                r.kind.as_deref().unwrap_or("its kind")
            ),
            v.generation,
        ),
        Some(r) => condition(
            "Ready",
            true,
            "Serving",
            format!(
                "serving {} ({} resource(s)) with generation {}",
                r.kind.as_deref().unwrap_or("its kind"),
                r.resources.unwrap_or(0),
                r.generation
            ),
            v.generation,
        ),
    };
    let [reconciling, stalled] = kstatus(&accepted, &ready, running, v.generation);
    let mut status = json!({
        "observedGeneration": v.generation,
        "conditions": [accepted, ready, reconciling, stalled],
        "problems": v.problems,
        // (Null: a merge patch removes what an earlier status said.)
        "warnings": if v.warnings.is_empty() { Value::Null } else { json!(v.warnings) },
        // (A Rule not in force serves nothing: null removes what an earlier status said.)
        "watch": null,
    });
    if let Some(r) = running {
        if let Some(k) = &r.kind {
            status["kind"] = json!(k);
        }
        // (Read back by every replica: the Rule serving a kind goes on serving it.)
        status["watch"] = json!(r.watch);
        status["resources"] = json!(r.resources.unwrap_or(0));
        if let Some(rev) = r.revision {
            status["revision"] = json!(rev);
        }
        // A rule with no rollout in progress has none in its status (null: removed). A
        // rollout in progress is written by its driver alone, each move before it acts on
        // it: a second writer could put an older step back.
        if r.rollout == Some(None) {
            status["rollout"] = Value::Null;
        }
        status["identity"] = identity(r);
        // (Null: a merge patch removes what an earlier status said.)
        status["storage"] = r.storage.clone().unwrap_or(Value::Null);
    }
    status
}

/// A Rule's `Reconciling` and `Stalled` (as kstatus reads them): Stalled while its
/// generation is refused, its account lacks permissions, or its rollout is paused (each
/// needs someone to act); else Reconciling until it serves and its rollout is complete.
fn kstatus(
    accepted: &Value,
    ready: &Value,
    running: Option<&Running>,
    generation: i64,
) -> [Value; 2] {
    let phase = running
        .and_then(|r| r.rollout.as_ref())
        .and_then(|p| p.as_ref())
        .and_then(|p| p["phase"].as_str().map(str::to_string));
    let text = |c: &Value, k: &str| c[k].as_str().unwrap_or_default().to_string();
    let stalled = if accepted["status"] != "True" {
        Some((text(accepted, "reason"), text(accepted, "message")))
    } else if ready["reason"] == "Forbidden" {
        Some(("Forbidden".to_string(), text(ready, "message")))
    } else if phase.as_deref() == Some("Paused") {
        Some((
            "RolloutPaused".to_string(),
            "its rollout is paused: `ruleop.dev/rollout=resume` or `abort` moves it".to_string(),
        ))
    } else {
        None
    };
    let reconciling = match (&stalled, ready["status"] == "True", phase.as_deref()) {
        (Some(_), ..) => None,
        (None, false, _) => Some((text(ready, "reason"), text(ready, "message"))),
        (None, true, Some("Progressing")) => Some((
            "RollingOut".to_string(),
            "its rollout is in progress".to_string(),
        )),
        (None, true, _) => None,
    };
    let one = |type_: &str, said: Option<(String, String)>, otherwise: &str| match said {
        Some((reason, message)) => condition(type_, true, &reason, message, generation),
        None => condition(type_, false, otherwise, String::new(), generation),
    };
    [
        one("Reconciling", reconciling, "Reconciled"),
        one("Stalled", stalled, "NotStalled"),
    ]
}

/// `status.identity`: the ServiceAccount, what it lacks and what would grant it (null
/// for a rule that runs as ruleop).
fn identity(r: &Running) -> Value {
    use super::runner::parts::Blocked;
    let Some(who) = &r.identity else {
        return Value::Null;
    };
    // (Nulls: a merge patch removes what an earlier status said.)
    let mut v =
        json!({"serviceAccount": who, "missing": null, "grant": null, "cannotImpersonate": null});
    match &r.blocked {
        Some(Blocked::Missing(m)) => {
            v["missing"] = json!(m);
            v["grant"] = json!(crate::access::review::grant(m));
        }
        Some(Blocked::CannotImpersonate(msg)) => v["cannotImpersonate"] = json!(msg),
        Some(Blocked::MayNotDefine(crd)) => {
            v["missing"] = json!([{"apiGroup": "apiextensions.k8s.io",
                "resource": "customresourcedefinitions", "verb": "update", "name": crd}]);
            v["grant"] = json!([{"apiGroups": ["apiextensions.k8s.io"],
                "resources": ["customresourcedefinitions"], "resourceNames": [crd], "verbs": ["update"]}]);
        }
        Some(Blocked::Unchecked(_)) => {}
        None => {}
    }
    v
}

/// Whether `current` already says all `desired` says (a key `desired` sets to null is
/// absent from it): a merge patch of `desired` would change nothing.
fn says(current: &Value, desired: &Value) -> bool {
    let (Some(d), Some(c)) = (desired.as_object(), current.as_object()) else {
        return current == desired;
    };
    d.iter().all(|(k, v)| match c.get(k) {
        None => v.is_null(),
        Some(c) => says(c, v),
    })
}

/// `desired` with each condition's `lastTransitionTime`: kept from `current` when its
/// status did not change, `now` when it did.
pub fn with_times(mut desired: Value, current: &Value, now: &str) -> Value {
    let old = current["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if let Some(conds) = desired["conditions"].as_array_mut() {
        for c in conds {
            let kept = old
                .iter()
                .find(|o| o["type"] == c["type"] && o["status"] == c["status"])
                .and_then(|o| o.get("lastTransitionTime").cloned());
            c["lastTransitionTime"] = kept.unwrap_or_else(|| json!(now));
        }
    }
    desired
}

/// Writes the status of every Rule that needs it: what the rule book says of each, and
/// what its running rule shows (only a rule that came from the Rule object counts).
pub async fn write_all(
    book: &crate::rules::book::RuleBook,
    sup: &super::supervisor::Supervisor,
    objects: &super::objects::RuleObjects,
    api: &Api<DynamicObject>,
) {
    for name in book.object_names() {
        let Some(v) = book.object_verdict(&name) else {
            continue;
        };
        let running = sup.task(&name).and_then(|t| {
            let o = t.rule.object.as_ref()?;
            Some(Running {
                generation: o.generation,
                synced: t.synced.load(std::sync::atomic::Ordering::SeqCst),
                kind: t.info.kind.get().cloned(),
                resources: t.info.resources(),
                revision: t.info.revision.get().copied(),
                rollout: t.info.rollout(),
                watch: format!("{}/{}", t.rule.watch.group, t.rule.watch.resource),
                identity: t.rule.identity.as_ref().map(|i| i.to_string()),
                blocked: t.info.blocked(),
                storage: t.info.storage.status(),
            })
        });
        let key = kube::runtime::reflector::ObjectRef::new_with(&name, super::objects::resource());
        let current = objects
            .store
            .get(&key)
            .and_then(|o| o.data.get("status").cloned())
            .unwrap_or(Value::Null);
        if let Err(e) = write(api, &name, &current, desired(&v, running.as_ref())).await {
            tracing::warn!(rule = %name, error = %e, "the Rule's status could not be written; retrying");
        }
    }
}

/// Writes `status` on Rule `name` when it differs from `current`.
pub async fn write(
    api: &Api<DynamicObject>,
    name: &str,
    current: &Value,
    desired: Value,
) -> Result<bool, kube::Error> {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = with_times(desired, current, &now);
    if says(current, &status) {
        return Ok(false);
    }
    // A merge patch replaces what it names: the whole status, lists included.
    let patch = json!({"status": status});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdict(accepted: bool) -> ObjectVerdict {
        ObjectVerdict {
            generation: 3,
            accepted,
            in_force: Some(if accepted { 3 } else { 2 }),
            problems: if accepted {
                vec![]
            } else {
                vec!["spec.children[0].template.spec.replicas: \"3\" is a string".into()]
            },
            warnings: vec![],
        }
    }

    #[test]
    fn a_rule_with_problems_says_which_generation_stays_in_force() {
        let s = desired(&verdict(false), None);
        let accepted = &s["conditions"][0];
        assert_eq!(accepted["status"], "False");
        let m = accepted["message"].as_str().unwrap();
        assert!(
            m.contains("generation 3 is not in force; generation 2 stays in force"),
            "{m}"
        );
        assert!(m.contains("spec.children[0].template.spec.replicas"), "{m}");
        assert_eq!(s["conditions"][1]["reason"], "NotRunning");
    }

    #[test]
    fn a_rule_is_stalled_when_refused_or_paused_and_reconciling_while_it_rolls_out() {
        let kind = |s: &Value, i: usize| {
            (
                s["conditions"][i]["status"].as_str().unwrap().to_string(),
                s["conditions"][i]["reason"].as_str().unwrap().to_string(),
            )
        };
        let refused = desired(&verdict(false), None);
        assert_eq!(kind(&refused, 3), ("True".into(), "Invalid".into()));
        assert_eq!(kind(&refused, 2), ("False".into(), "Reconciled".into()));
        let mut running = Running {
            generation: 3,
            synced: true,
            kind: Some("WebSite".into()),
            resources: Some(2),
            revision: Some(2),
            rollout: Some(Some(json!({"phase": "Progressing"}))),
            watch: "x.io/webs".into(),
            identity: None,
            blocked: None,
            storage: None,
        };
        let rolling = desired(&verdict(true), Some(&running));
        assert_eq!(kind(&rolling, 2), ("True".into(), "RollingOut".into()));
        assert_eq!(kind(&rolling, 3), ("False".into(), "NotStalled".into()));
        running.rollout = Some(Some(json!({"phase": "Paused"})));
        let paused = desired(&verdict(true), Some(&running));
        assert_eq!(kind(&paused, 3), ("True".into(), "RolloutPaused".into()));
        running.rollout = Some(Some(json!({"phase": "Complete"})));
        let serving = desired(&verdict(true), Some(&running));
        assert_eq!(kind(&serving, 2).0, "False");
        assert_eq!(kind(&serving, 3).0, "False");
    }

    #[test]
    fn times_move_only_when_a_condition_changes() {
        let running = Running {
            generation: 3,
            synced: true,
            kind: Some("WebSite".into()),
            resources: Some(2),
            revision: None,
            rollout: Some(None),
            watch: "x.io/webs".into(),
            identity: None,
            blocked: None,
            storage: None,
        };
        let first = with_times(desired(&verdict(true), Some(&running)), &json!({}), "T1");
        assert_eq!(first["kind"], "WebSite");
        assert_eq!(first["conditions"][1]["status"], "True");
        let again = with_times(desired(&verdict(true), Some(&running)), &first, "T2");
        assert_eq!(again, first, "nothing changed: nothing to write");
        // What the server keeps of it (no null keys) says the same.
        let mut kept = first.clone();
        kept.as_object_mut().unwrap().remove("rollout");
        assert!(says(&kept, &again));
        assert!(!says(
            &kept,
            &with_times(desired(&verdict(false), Some(&running)), &kept, "T4")
        ));
        let broken = with_times(desired(&verdict(false), Some(&running)), &first, "T3");
        assert_eq!(broken["conditions"][0]["lastTransitionTime"], "T3");
        assert_eq!(broken["conditions"][1]["lastTransitionTime"], "T1");
    }

    #[test]
    fn a_rule_whose_account_lacks_permissions_says_which_and_the_fix_then_forgets_them() {
        use crate::access::review::Missing;
        use crate::operator::runner::parts::Blocked;
        let missing = vec![Missing {
            api_group: "".into(),
            resource: "services".into(),
            verb: "create".into(),
            namespace: Some("shop".into()),
        }];
        let mut running = Running {
            generation: 3,
            synced: false,
            kind: Some("WebSite".into()),
            resources: None,
            revision: None,
            rollout: Some(None),
            watch: "x.io/webs".into(),
            identity: Some("team-a/web".into()),
            blocked: Some(Blocked::Missing(missing)),
            storage: None,
        };
        let blocked = with_times(desired(&verdict(true), Some(&running)), &json!({}), "T1");
        let ready = &blocked["conditions"][1];
        assert_eq!(ready["reason"], "Forbidden");
        let m = ready["message"].as_str().unwrap();
        assert!(
            m.contains("team-a/web may not create services (core) in namespace shop"),
            "{m}"
        );
        assert_eq!(blocked["identity"]["missing"][0]["verb"], "create");
        assert_eq!(
            blocked["identity"]["grant"][0]["resources"],
            json!(["services"])
        );
        // Granted: the status written before no longer says it (the merge patch's nulls
        // remove the list), and once it is written, it does.
        running.blocked = None;
        running.synced = true;
        let granted = with_times(desired(&verdict(true), Some(&running)), &blocked, "T2");
        assert!(!says(&blocked, &granted));
        let mut stored = blocked.clone();
        json_patch::merge(&mut stored, &granted);
        assert!(stored["identity"].get("missing").is_none(), "{stored}");
        assert!(says(&stored, &granted));
    }
}
