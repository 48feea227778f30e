//! Step 3: bring the cluster to the rendered children. Server-side apply with one field
//! manager, forced, only where something differs, and only on objects that are ruleop's
//! to write; and the delete of a child no longer rendered.
//!
//! "Differs" is decided without a request ([`needs_apply`]): the live object (from the
//! watch cache) must hold every rendered field with the same value, and carry the hash of
//! the last applied render, so a field dropped from the rule is still removed. Right after
//! a write the cache may lag: what ruleop last wrote ([`Written`], kept by the reconcile)
//! and how the cache stands to it ([`Lag`]) keep that from causing a second.
//!
//! Owns: the comparison ([`compare`]), whose an object is ([`ownership`]), the field
//! ownership moved on adoption ([`adopt`]), the writes ([`write_child`], [`prune`]) and how
//! the API server's answers are taken ([`ApplyError`], [`classify`]).
//! Uses: `render` (the rendered objects), `rules` (policies), `client` (the fence every
//! write asks). Used by: `reconcile`, `cache` (trimming), `operator` (the inventory).

pub mod adopt;
mod compare;
pub mod dryrun;
mod error;
mod memo;
pub mod ownership;
mod prune;
mod write;

pub use compare::{is_subset, project};
pub use error::{ApplyError, Refusal, classify};
pub use memo::{
    CACHE_LAG_GRACE, Lag, ObjectKey, Written, cache_behind, canonical_hash, lag, needs_apply,
    not_newer,
};
pub use ownership::{AdoptPolicy, Verdict, judge};
pub use prune::{orphan, orphans, prune};
pub use write::{
    Claim, Outcome, apply, create, has_create_entry, slim, slim_managed_fields, write_child,
};
