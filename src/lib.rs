//! ruleop: a generic Kubernetes operator driven by rules files.
//!
//! The pipeline, one module per step: [`rules`] (load and check) → [`render`] (pure) →
//! [`apply`] (server-side apply and prune) → [`status`] (pure computation of the status)
//! → [`reconcile`] (one custom resource, through the steps) → [`operator`] (a controller
//! per rule, leadership, reload) → [`cli`]. Beside it, each a folder of its own: the kind's
//! schema ([`schema`], below the rules), every request's path ([`client`]), the watch
//! caches ([`cache`]), [`events`], and what a rule may do ([`access`]: the permissions it
//! needs, checked as its identity). A module uses only those before it in this order
//! (`tests/layout.rs` checks it): suggest, metrics, client, schema, rules, access, render,
//! apply, status, rollout, ruletest, cache, events, reconcile, operator, rbac, cli.
#![forbid(unsafe_code)]

pub mod access;
pub mod apply;
pub mod cache;
pub mod cli;
pub mod client;
pub mod convert;
pub mod events;
pub mod lifecycle;
pub mod lsp;
pub mod metrics;
pub mod operator;
pub mod rbac;
pub mod reconcile;
pub mod render;
pub mod rollout;
pub mod rules;
pub mod ruletest;
pub mod schema;
pub mod status;
pub mod suggest;
