//! ruleop: a generic Kubernetes operator driven by rules files.
//!
//! The pipeline, one module per step: [`rules`] (load and check) → [`render`] (pure) →
//! [`apply`] (server-side apply and prune) → [`status`] (pure computation of the status).
//! [`controller`] runs the pipeline for every custom resource of every rule.
#![forbid(unsafe_code)]

pub mod admin;
pub mod apply;
pub mod cli;
pub mod controller;
pub mod metrics;
pub mod rbac;
pub mod render;
pub mod rules;
pub mod schema;
pub mod status;
pub mod suggest;
