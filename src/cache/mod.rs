//! What ruleop knows of the cluster without asking it again: the watches and their caches.
//!
//! Owns: each rule's watches ([`watches`]: the watched kind, each child kind selected by
//! the rule's label, each existing kind), how a cache holds an object ([`cached`]: its
//! JSON text) and what it keeps of a child ([`keep`]), the children of each resource
//! ([`owners`]), a watch's re-list followed to its end ([`relist`]), what an existing
//! lookup finds ([`existing`]), a watched resource that does not decode kept apart from the
//! rest ([`tolerant`]), and the kinds the cluster serves ([`discovery`]; their
//! schemas from `/openapi/v3`: [`openapi`]).
//!
//! Uses: `rules` (what a rule reads), `render` (the rule's label, a lookup) and `apply`
//! (the trimming of managedFields). Used by: `reconcile` (reads the caches and follows
//! the watches' events into its records), `operator` (starts the watches) and the CLI
//! (`check --against-cluster`).

pub mod cached;
pub mod discovery;
pub mod existing;
pub mod held;
pub mod keep;
pub mod openapi;
pub mod owners;
pub mod relist;
pub mod tolerant;
pub mod watches;
