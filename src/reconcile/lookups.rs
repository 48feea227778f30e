//! The existing objects a resource reads, looked up in the caches, and the lookups kept in
//! its record, so that creating, changing or deleting a Secret reconciles exactly the
//! resources that use it.

use super::ctx::Ctx;
use super::record::ResourceId;
use crate::render::{self, RenderError, Scope};

/// Looks up the rule's existing objects for one resource in the caches, records the
/// lookups, and gives the scope with what was found.
pub fn resolve(ctx: &Ctx, r: &ResourceId, scope: Scope) -> Result<Scope, RenderError> {
    let rule = &ctx.rule;
    if rule.existing.is_empty() {
        return Ok(scope);
    }
    let ns = scope.namespace.clone();
    let existing = &ctx.kinds.existing;
    let candidates = |i: usize, lookup: &render::Lookup| {
        existing
            .of(i)
            .map(|(_, kind)| kind.candidates(&ns, lookup))
            .unwrap_or_default()
    };
    let (scope, lookups) = render::find_existing(rule, scope, candidates)?;
    let indexed = lookups
        .into_iter()
        .enumerate()
        .filter_map(|(i, l)| Some((existing.of(i)?.0, l)))
        .collect();
    ctx.records.set_lookups(r, indexed);
    Ok(scope)
}
