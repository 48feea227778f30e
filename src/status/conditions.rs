//! Status conditions in the Kubernetes convention, merged so that `lastTransitionTime`
//! moves only when a condition's status does: a status computed twice from the same
//! state is the same status, and so needs no write.

use serde_json::{Value, json};

/// A condition as ruleop sets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub type_: &'static str,
    pub status: bool,
    pub reason: String,
    pub message: String,
}

/// The condition `type_` of an object's `status.conditions`, if it has one.
pub fn condition_of<'a>(object: &'a Value, type_: &str) -> Option<&'a Value> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// Builds the `conditions` array from `wanted`, keeping each one's lastTransitionTime
/// from `existing` when its status did not change. `now` is an RFC 3339 time.
pub fn merge_conditions(
    existing: Option<&Value>,
    wanted: &[Condition],
    generation: Option<i64>,
    now: &str,
) -> Value {
    let old = |t: &str| {
        existing.and_then(Value::as_array).and_then(|a| {
            a.iter()
                .find(|c| c.get("type").and_then(Value::as_str) == Some(t))
        })
    };
    let out: Vec<Value> = wanted
        .iter()
        .map(|c| {
            let status = if c.status { "True" } else { "False" };
            let since = old(c.type_)
                .filter(|o| o.get("status").and_then(Value::as_str) == Some(status))
                .and_then(|o| o.get("lastTransitionTime").cloned())
                .unwrap_or_else(|| Value::String(now.to_string()));
            let mut v = json!({
                "type": c.type_,
                "status": status,
                "reason": c.reason,
                "message": c.message,
                "lastTransitionTime": since,
            });
            if let Some(g) = generation {
                v["observedGeneration"] = json!(g);
            }
            v
        })
        .collect();
    Value::Array(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(status: bool) -> Condition {
        Condition {
            type_: "Ready",
            status,
            reason: "R".into(),
            message: "m".into(),
        }
    }

    #[test]
    fn transition_time_is_kept_while_the_status_holds_and_moves_when_it_flips() {
        let first = merge_conditions(None, &[ready(false)], Some(1), "t1");
        assert_eq!(first[0]["lastTransitionTime"], "t1");
        let same = merge_conditions(Some(&first), &[ready(false)], Some(1), "t2");
        assert_eq!(
            same, first,
            "recomputing the same state must not change the conditions"
        );
        let flipped = merge_conditions(Some(&first), &[ready(true)], Some(2), "t3");
        assert_eq!(flipped[0]["lastTransitionTime"], "t3");
        assert_eq!(flipped[0]["status"], "True");
        assert_eq!(flipped[0]["observedGeneration"], 2);
    }
}
