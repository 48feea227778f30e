//! What the custom resource's status schema keeps. A CRD whose status schema lacks a
//! field ruleop writes (the origin's MyApp CRD has no `conditions`; a kubebuilder CRD
//! often no `observedGeneration`) refuses a server-side apply that sets it ("field not
//! declared in schema"), or drops it from other writes; ruleop would then fail, or see a
//! difference, on every reconcile. So the top-level status fields the server refused or
//! dropped are learned, said once in the log, and left out of later statuses, until the
//! kind's CRD changes (see `operator::runner::crd_follow`).

use serde_json::Value;
use std::collections::BTreeSet;
use std::sync::Mutex;

/// The status fields a kind's schema drops, per rule.
#[derive(Debug, Default)]
pub struct StatusSchema {
    dropped: Mutex<BTreeSet<String>>,
}

impl StatusSchema {
    /// Learns from a write: `sent` is the status written, `kept` what the server returned.
    /// Returns whether something new was learned.
    pub fn learn(&self, sent: &Value, kept: &Value) -> bool {
        let Some(sent) = sent.as_object() else {
            return false;
        };
        let mut dropped = self.dropped.lock().unwrap_or_else(|p| p.into_inner());
        let mut learned = false;
        for k in sent.keys() {
            if kept.get(k).is_none() && dropped.insert(k.clone()) {
                tracing::warn!(field = %k, "the custom resource's status schema drops this field; ruleop stops writing it (add it to the CRD's status schema to see it)");
                learned = true;
            }
        }
        learned
    }

    /// Learns from a refusal of the API server; returns whether something new was learned
    /// (then the write is worth another try without those fields).
    pub fn learn_refusal(&self, message: &str) -> bool {
        if !message.contains("field not declared in schema") {
            return false;
        }
        let mut learned = false;
        for part in message.split(".status.").skip(1) {
            let key: String = part
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == '-')
                .collect();
            if !key.is_empty() {
                let sent = serde_json::json!({ key.clone(): true });
                learned |= self.learn(&sent, &Value::Null);
            }
        }
        learned
    }

    /// Forgets what was learned (the schema changed): the next writes try every field.
    /// Whether there was anything to forget.
    pub fn forget(&self) -> bool {
        let mut dropped = self.dropped.lock().unwrap_or_else(|p| p.into_inner());
        let had = !dropped.is_empty();
        dropped.clear();
        had
    }

    /// Removes the fields the schema drops.
    pub fn strip(&self, status: &mut Value) {
        let dropped = self.dropped.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(m) = status.as_object_mut() {
            m.retain(|k, _| !dropped.contains(k));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fields_the_server_dropped_are_left_out_from_then_on() {
        let schema = StatusSchema::default();
        let sent =
            json!({"replicas": 2, "conditions": [{"type": "Ready"}], "observedGeneration": 3});
        let kept = json!({"replicas": 2});
        assert!(schema.learn(&sent, &kept));
        assert!(!schema.learn(&sent, &kept), "learned once");
        let mut next = json!({"replicas": 3, "conditions": [], "observedGeneration": 4});
        schema.strip(&mut next);
        assert_eq!(next, json!({"replicas": 3}));
    }

    #[test]
    fn fields_a_server_side_apply_refuses_as_undeclared_are_learned() {
        let schema = StatusSchema::default();
        let msg = "failed to create typed patch object (/my-app; myscheme.example.com/v1, Kind=MyApp): .status.conditions: field not declared in schema, .status.observedGeneration: field not declared in schema";
        assert!(schema.learn_refusal(msg));
        assert!(!schema.learn_refusal(msg), "nothing new the second time");
        let mut s = json!({"replicas": 1, "conditions": [], "observedGeneration": 2});
        schema.strip(&mut s);
        assert_eq!(s, json!({"replicas": 1}));
        assert!(!schema.learn_refusal("etcdserver: request timed out"));
    }

    #[test]
    fn a_schema_that_keeps_everything_drops_nothing() {
        let schema = StatusSchema::default();
        let sent = json!({"readyReplicas": 1, "url": "http://x"});
        assert!(!schema.learn(&sent, &sent));
        let mut s = sent.clone();
        schema.strip(&mut s);
        assert_eq!(s, sent);
    }
}
