//! Whether one child is ready: its `readyWhen` expression (with the live child as `child`),
//! or a built-in check for the kinds whose readiness is well known. Pure.

use super::context::Scope;
use super::model::Item;
use crate::rules::compile::jinja_reason;
use crate::rules::{CompiledChild, CompiledRule};
use serde_json::Value;

fn int(v: &Value, path: &str) -> Option<i64> {
    v.pointer(path).and_then(Value::as_i64)
}

/// The controller has seen the object's latest spec.
fn observed_latest(live: &Value) -> Result<(), String> {
    match (
        int(live, "/metadata/generation"),
        int(live, "/status/observedGeneration"),
    ) {
        (Some(g), Some(o)) if o < g => Err(format!(
            "its controller has not seen generation {g} yet (at {o})"
        )),
        (Some(_), None) => Err("its controller has not reported on it yet".into()),
        _ => Ok(()),
    }
}

fn condition_true(live: &Value, type_: &str) -> bool {
    live.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == type_ && c["status"] == "True")
        })
}

/// Built-in readiness by kind; every other kind is ready once it exists.
pub fn builtin(kind: &str, live: &Value) -> Result<(), String> {
    let replicas = |want: &str, have: &str, what: &str| -> Result<(), String> {
        observed_latest(live)?;
        let want = int(live, want).unwrap_or(1);
        let have = int(live, have).unwrap_or(0);
        if have >= want {
            Ok(())
        } else {
            Err(format!("{have}/{want} {what}"))
        }
    };
    match kind {
        "Deployment" => {
            replicas(
                "/spec/replicas",
                "/status/updatedReplicas",
                "replicas updated",
            )?;
            replicas("/spec/replicas", "/status/readyReplicas", "replicas ready")?;
            // As `kubectl rollout status`: old pods still running are not the new ones.
            match (
                int(live, "/status/replicas"),
                int(live, "/status/updatedReplicas"),
            ) {
                (Some(all), Some(updated)) if all > updated => Err(format!(
                    "{} old replica(s) pending termination",
                    all - updated
                )),
                _ => Ok(()),
            }
        }
        "StatefulSet" => replicas("/spec/replicas", "/status/readyReplicas", "replicas ready"),
        "DaemonSet" => replicas(
            "/status/desiredNumberScheduled",
            "/status/numberReady",
            "pods ready",
        ),
        "Job" if condition_true(live, "Failed") => Err("the Job failed".into()),
        "Job" if condition_true(live, "Complete") || int(live, "/status/succeeded") >= Some(1) => {
            Ok(())
        }
        "Job" => Err("the Job has not completed".into()),
        "Service" if live.pointer("/spec/type").and_then(Value::as_str) == Some("LoadBalancer") => {
            let ingress = live
                .pointer("/status/loadBalancer/ingress")
                .and_then(Value::as_array);
            if ingress.is_some_and(|i| !i.is_empty()) {
                Ok(())
            } else {
                Err("the load balancer has no address yet".into())
            }
        }
        "PersistentVolumeClaim" => match live.pointer("/status/phase").and_then(Value::as_str) {
            Some("Bound") => Ok(()),
            other => Err(format!("the claim is {}", other.unwrap_or("not bound"))),
        },
        _ => Ok(()),
    }
}

/// What a ready child's readiness rested on, for the Ready condition's message: its
/// `readyWhen`, or what its kind's built-in check saw (`rolled out: its latest generation
/// seen, 3 updated and ready`).
pub fn basis(child: &CompiledChild, live: &Value) -> String {
    if let Some(e) = &child.ready_when {
        return format!("readyWhen `{}`", e.source);
    }
    // (Not the generation's number: a message that moves with every spec change would
    // be one more status write each time.)
    let seen = || {
        int(live, "/status/observedGeneration")
            .map(|_| "its latest generation seen, ".to_string())
            .unwrap_or_default()
    };
    // (The wanted count only, not the counts seen: those move while a ready child scales
    // down or a DaemonSet's nodes change.)
    let want = int(live, "/spec/replicas").unwrap_or(1);
    match child.kind.as_str() {
        "Deployment" => format!("rolled out: {}{want} updated and ready", seen()),
        "StatefulSet" => format!("{}{want} ready", seen()),
        "DaemonSet" => format!("{}every pod ready", seen()),
        "Job" => "complete".into(),
        "Service" if live.pointer("/spec/type").and_then(Value::as_str) == Some("LoadBalancer") => {
            "has a load balancer address".into()
        }
        "PersistentVolumeClaim" => "Bound".into(),
        _ => "exists".into(),
    }
}

/// Whether `child` is ready, given its live object: its `readyWhen` (the author's own
/// definition, for a kind whose built-in check does not fit: a PVC of a
/// WaitForFirstConsumer class, a LoadBalancer with no provider), else its kind's built-in
/// check; Err says why not.
pub fn child_ready(
    rule: &CompiledRule,
    child: &CompiledChild,
    scope: &Scope,
    live: &Value,
    item: Option<&Item>,
) -> Result<(), String> {
    let Some(e) = &child.ready_when else {
        return builtin(&child.kind, live);
    };
    let mut vars: std::collections::BTreeMap<String, minijinja::Value> = scope.vars();
    if let (Some(each), Some(item)) = (&child.each, item) {
        vars.insert(
            each.var.to_string(),
            minijinja::Value::from(minijinja::value::Serde(&item.value)),
        );
        vars.insert(
            crate::rules::compile::INDEX_VARIABLE.into(),
            minijinja::Value::from(item.index),
        );
    }
    vars.insert(
        "child".into(),
        minijinja::Value::from(minijinja::value::Serde(live)),
    );
    match rule.program.eval(e, &minijinja::Value::from(vars)) {
        Ok(v) if v.is_true() => Ok(()),
        Ok(_) => Err(format!("readyWhen `{}` is false", e.source)),
        Err(x) => Err(format!("readyWhen: {}", jinja_reason(&x))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_deployment_is_ready_when_its_controller_saw_it_and_every_replica_is_ready() {
        let d = |generation: i64, seen: i64, updated: i64, ready: i64| {
            json!({"metadata": {"generation": generation}, "spec": {"replicas": 3},
                "status": {"observedGeneration": seen, "updatedReplicas": updated, "readyReplicas": ready}})
        };
        assert_eq!(builtin("Deployment", &d(2, 2, 3, 3)), Ok(()));
        assert_eq!(
            builtin("Deployment", &d(2, 2, 3, 1)),
            Err("1/3 replicas ready".into())
        );
        assert!(
            builtin("Deployment", &d(3, 2, 3, 3))
                .unwrap_err()
                .contains("generation 3")
        );
        assert_eq!(
            builtin("Deployment", &d(2, 2, 1, 3)),
            Err("1/3 replicas updated".into())
        );
        // Three updated and three ready, one of the ready an old pod still running.
        let mut rolling = d(2, 2, 3, 3);
        rolling["status"]["replicas"] = json!(4);
        assert_eq!(
            builtin("Deployment", &rolling),
            Err("1 old replica(s) pending termination".into())
        );
    }

    #[test]
    fn jobs_load_balancers_and_claims_have_their_own_readiness() {
        let job =
            |cond: &str| json!({"status": {"conditions": [{"type": cond, "status": "True"}]}});
        assert_eq!(builtin("Job", &job("Complete")), Ok(()));
        assert_eq!(builtin("Job", &job("Failed")), Err("the Job failed".into()));
        assert!(builtin("Job", &json!({"status": {}})).is_err());
        let lb = json!({"spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {}}});
        assert!(builtin("Service", &lb).is_err());
        let lb = json!({"spec": {"type": "LoadBalancer"}, "status": {"loadBalancer": {"ingress": [{"ip": "1.2.3.4"}]}}});
        assert_eq!(builtin("Service", &lb), Ok(()));
        assert_eq!(
            builtin("Service", &json!({"spec": {"type": "ClusterIP"}})),
            Ok(())
        );
        assert_eq!(
            builtin(
                "PersistentVolumeClaim",
                &json!({"status": {"phase": "Pending"}})
            ),
            Err("the claim is Pending".into())
        );
        assert_eq!(builtin("ConfigMap", &json!({})), Ok(()));
    }
}
