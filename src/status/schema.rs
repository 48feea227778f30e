//! What the custom resource's status schema keeps. A CRD whose status schema lacks a
//! field ruleop writes (the origin's MyApp CRD has no `conditions`; a kubebuilder CRD
//! often no `observedGeneration`) silently drops it; ruleop would then see a difference
//! on every reconcile and write again. So the top-level status fields the server dropped
//! from a write are learned, said once in the log, and left out of later statuses.

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
    fn a_schema_that_keeps_everything_drops_nothing() {
        let schema = StatusSchema::default();
        let sent = json!({"readyReplicas": 1, "url": "http://x"});
        assert!(!schema.learn(&sent, &sent));
        let mut s = sent.clone();
        schema.strip(&mut s);
        assert_eq!(s, sent);
    }
}
