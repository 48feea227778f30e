//! `ruleop test`: tests of rules, with no cluster. A test file (`*_test.yaml`) names its
//! rules and holds tests: a custom resource and a sequence of steps, each changing what the
//! cluster holds (objects applied, patched, deleted; the children of the step before made)
//! and saying what the rule must make of it (children, who waits and why, the status, the
//! conditions). The steps run as ruleop's reconcile would, offline.
//!
//! Owns: the file format ([`spec`]), the field paths it names ([`paths`]), the reconcile
//! simulated ([`simulate`], also behind `ruleop render --observed`), expectations checked
//! ([`expect`]), files run, children checked as the API server would, and snapshots kept
//! ([`run`]), and the reports ([`report`]).
//!
//! Uses: `rules`, `render`, `status`, `schema` (kinds' schemas and the API server's own
//! checks), `apply` (the projection of an object onto the fields expected). Used by: the CLI.

pub mod cluster;
pub mod diff;
pub mod expect;
pub mod paths;
pub mod report;
pub mod run;
pub mod simulate;
pub mod spec;
pub mod versions;
