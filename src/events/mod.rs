//! Events on custom resources: published off the reconcile path, late rather than never.
//!
//! Owns: each rule's queue of Events and its publishing task ([`queue`]), the way an
//! Event and its repeats are written ([`recorder`], as a series), and which Events are
//! published at all ([`EventLevel`]).
//!
//! Uses: [`crate::client`] (the pace, the fence, the quiet moment) and
//! [`crate::metrics`]. Used by: `reconcile` (it enqueues) and `operator` (it starts
//! each rule's queue).

pub mod queue;
pub mod recorder;

pub use queue::EventQueue;

/// Which Events ruleop publishes.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventLevel {
    All,
    Warnings,
    None,
}
