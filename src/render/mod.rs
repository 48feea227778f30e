//! Step 2: render the children of one custom resource from a compiled rule. Pure: the
//! custom resource goes in as JSON, the child objects come out as JSON, ready to apply.
//!
//! Only string scalars of a template are evaluated, each on its own, and their results
//! are put into the tree as values: never parsed as YAML again. So a custom resource can
//! never change the shape of a child, whatever its strings hold. A lone `{{ expr }}` keeps
//! the type of its value (an integer stays an integer); text around it makes a string.
//!
//! Owns: the template variables ([`context`]), one object ([`object`]), the walk over the
//! children in graph order that says who waits ([`graph`]), what existing objects to look
//! up ([`existing`]), a live child's readiness ([`readiness`]), which children refer to
//! which ([`refers`]) and the rendered object's shape ([`model`]). Uses: `rules` and `schema` only. Used by: `apply`, `status`,
//! `reconcile`, the CLI.

mod budget;
mod context;
mod existing;
mod graph;
mod model;

mod normalize;
mod object;
pub mod readiness;
pub mod refers;

pub use context::{Scope, merge_defaults, scope};
pub use existing::{Lookup, find_existing, lookups, with_found};
pub use graph::{Plan, Waiting, render_applied, render_with};
pub use model::{
    CHILD_LABEL, FIELD_MANAGER, HASH_ANNOTATION, Item, ON_REMOVE_ANNOTATION, RELEASED_ANNOTATION,
    RULE_LABEL, RenderError, Rendered, group_of, released_uids,
};
pub use normalize::normalize;
pub use object::{hash_of, render_child};

use crate::rules::CompiledRule;
use serde_json::Value;

/// Renders every child of `rule` whose condition holds for `cr`, as if no child and no
/// existing object were in the cluster (children that must wait for them are left out).
pub fn render(rule: &CompiledRule, cr: &Value) -> Result<Vec<Rendered>, RenderError> {
    Ok(render_with(rule, &scope(rule, cr)?, &|_| None)?.children)
}

#[cfg(test)]
mod tests;
