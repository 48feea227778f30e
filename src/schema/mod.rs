//! The watched kind's schema and the schemas of the kinds ruleop writes, offline and pure.
//!
//! Owns: the `schema:` section of a rule (field lines → OpenAPI, their defaults and
//! bounds: [`fields`]), the CRD made from it ([`crd`]), whether a new CRD breaks what the
//! cluster stores ([`evolve`]), objects checked against their kinds' OpenAPI schemas
//! ([`typed`], with the built-in kinds' schemas shipped in the binary) and what is known
//! of built-in kinds without a cluster ([`kinds`]), the names each kind's objects may
//! have ([`names`]), the paths a rule reads inside
//! objects checked against those schemas ([`path`]), the CEL validations of a schema
//! evaluated offline ([`cel`]), and what the API server refuses of built-in kinds beyond
//! their schemas ([`server`]).
//!
//! Uses: nothing of ruleop's but [`crate::suggest`]. Used by: `rules` (a rule's schema,
//! defaults and typed checks when it loads), `render --strict`, `ruleop test`, `ruleop
//! crd` and the CRD install.

pub mod cel;
pub mod cost;
pub mod crd;
pub mod evolve;
pub mod fields;
pub mod kinds;
pub mod names;
pub mod path;
pub mod server;
pub mod spec;
pub mod typed;
