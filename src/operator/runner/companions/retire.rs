//! The kinds no revision in force makes, cleaned up beside the controller until done (see
//! [`crate::operator::inventory::retire`]).

use super::shape::{AbortOnDrop, Beside, Companion, StartBeside, spawn};
use crate::operator::inventory::{Inventory, Retirement, retire};

pub(super) const COMPANION: Companion<StartBeside> = Companion {
    name: "retirement",
    runs: |_, _| true,
    start,
};

fn start(b: &Beside<'_>) -> Option<AbortOnDrop> {
    let e = &b.early;
    let inventory = Inventory {
        client: e.own.clone(),
        namespace: e.opts.state_namespace.clone(),
        fence: e.opts.process.fence.clone(),
    };
    Some(spawn(retire(Retirement {
        inventory,
        children: e.client.clone(),
        rule: e.rule.clone(),
        parent_kind: b.parent_kind.to_string(),
        namespace: e.opts.scope.namespace.clone(),
        also: b.retired.clone(),
        policy: b.retire,
        in_force: b.in_force.clone(),
        unwatched: b.unwatched.clone(),
        metrics: e.opts.process.metrics.clone(),
    })))
}
