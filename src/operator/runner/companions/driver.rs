//! A Rule's rollout moved on beside its rule (see [`super::super::rollout`]): for a Rule
//! object with a `rollout`, while a rollout stands.

use super::shape::{AbortOnDrop, Beside, Companion, StartBeside, spawn};
use crate::operator::runner::rollout::{Driver, drive};

pub(super) const COMPANION: Companion<StartBeside> = Companion {
    name: "rollout driver",
    runs: |rule, _| rule.rollout.is_some() && rule.object.is_some(),
    start,
};

fn start(b: &Beside<'_>) -> Option<AbortOnDrop> {
    let e = &b.early;
    let choose = b.choose?;
    if choose.progress.read().ok()?.is_none() {
        return None;
    }
    let driver = Driver {
        choose: choose.clone(),
        rollout: e.rule.rollout.clone()?,
        rule: e.rule.name.clone(),
        uid: e
            .rule
            .object
            .as_ref()
            .map(|o| o.uid.clone())
            .unwrap_or_default(),
        resources: b.resources.clone(),
        synced: b.synced.clone(),
        rules: e.opts.rules.clone(),
        info: e.info.clone(),
        reconcile_all: b.reconcile_all.clone(),
        client: e.own.clone(),
        reporter: e.opts.reporter.clone(),
        metrics: e.opts.process.metrics.clone(),
    };
    Some(spawn(drive(driver, b.stop.clone())))
}
