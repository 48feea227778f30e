//! A rule's resources counted by their conditions for `ruleop_resources`, from the cache of
//! the watched kind, and those waiting for a reconcile (read when /metrics is scraped).

use super::queue::Queue;
use crate::cache::cached::Cached;
use crate::metrics::{CONDITIONS, Count, Counts};
use kube::runtime::reflector::Store;
use serde::Deserialize;
use std::sync::Arc;

#[derive(Deserialize, Default)]
struct Object {
    #[serde(default)]
    status: Status,
}

#[derive(Deserialize, Default)]
struct Status {
    #[serde(default)]
    conditions: Vec<Condition>,
}

#[derive(Deserialize)]
struct Condition {
    #[serde(rename = "type", default)]
    type_: String,
    #[serde(default)]
    status: String,
}

/// Adds one resource (its JSON text) to `c`: a status that does not read as conditions
/// counts as none True.
fn add(c: &mut Counts, text: &str) {
    c.total += 1;
    let o: Object = serde_json::from_str(text).unwrap_or_default();
    for cond in o.status.conditions.iter().filter(|x| x.status == "True") {
        if let Some(i) = CONDITIONS.iter().position(|n| *n == cond.type_) {
            c.true_of[i] += 1;
        }
    }
}

/// Counts the resources `store` holds, and those of them `queue` says wait.
pub(super) fn of(store: Store<Cached>, queue: Arc<Queue>) -> Count {
    Box::new(move || {
        let mut c = Counts::default();
        for r in store.state() {
            add(&mut c, r.text());
        }
        c.queued = queue.depth(&store);
        c
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_true_condition_counts_and_anything_else_counts_as_false() {
        let mut c = Counts::default();
        add(
            &mut c,
            r#"{"status":{"conditions":[{"type":"Ready","status":"True"},{"type":"Synced","status":"True"}]}}"#,
        );
        add(
            &mut c,
            r#"{"status":{"conditions":[{"type":"Synced","status":"False"},{"type":"Stalled","status":"True"}]}}"#,
        );
        add(&mut c, r#"{"metadata":{"name":"new"}}"#);
        add(&mut c, r#"{"status":"hostile"}"#);
        assert_eq!(
            c,
            Counts {
                total: 4,
                true_of: [1, 1, 0, 1],
                queued: 0,
            }
        );
    }
}
