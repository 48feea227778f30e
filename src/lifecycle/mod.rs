//! The one authority over what a rule's revisions may write and delete.
//!
//! **What is in force** is kept in the cluster, for a rule from a file and a Rule alike,
//! and read fresh by each leader:
//!
//! | what | where |
//! |---|---|
//! | which versions have been the newest, and which is newer ([`newer`]) | the inventory ConfigMap, `_versions.<rule>` |
//! | which kinds the rule's versions have made ([`kinds`]) | the inventory ConfigMap, `<rule>` |
//! | which revisions of a Rule exist | its ControllerRevisions |
//! | where a rollout stands (from, step, reached) | the Rule's `status.rollout` |
//! | which revision a resource is on | its `status.ruleRevision` (a pin: its annotation `ruleop.dev/revision`) |
//!
//! A new leader acts only on Rules it has listed after it took the Lease, and a version
//! runs only once [`newer`] says it is the newest the cluster has run. From that record
//! the [`planner`] decides every delete: a resource's prune, a kind's retirement, a
//! resource's deletion and its finalizers, a removed rule's release.

pub mod kinds;
pub mod newer;
pub mod planner;

pub use kinds::Made;
pub use newer::Retire;
