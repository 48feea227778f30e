//! The existing objects a resource reads, looked up in the caches, and the lookups kept in
//! its record, so that creating, changing or deleting a Secret reconciles exactly the
//! resources that use it.

use super::ctx::Ctx;
use super::record::ResourceId;
use crate::render::{self, RenderError, Scope};

/// Looks up the rule's existing objects for one resource in the caches, records the
/// lookups, and gives the scope with what was found. The lookups are recorded before the
/// caches are read, so an object that comes in between still wakes this resource; a kind
/// whose watch has not listed yet is not taken for empty: its readers wait.
pub fn resolve(ctx: &Ctx, r: &ResourceId, scope: Scope) -> Result<Scope, RenderError> {
    let rule = &ctx.rule;
    if rule.existing.is_empty() {
        return Ok(scope);
    }
    let lookups = render::lookups(rule, &scope)?;
    let existing = &ctx.kinds.existing;
    let indexed = lookups
        .iter()
        .enumerate()
        .filter_map(|(i, l)| Some((existing.of(i)?.0, l.clone())))
        .collect();
    ctx.records.set_lookups(r, indexed);
    let ns = scope.namespace.clone();
    let candidates = |i: usize, lookup: &render::Lookup| {
        let Some((k, kind)) = existing.of(i) else {
            return Ok(Vec::new());
        };
        if !ctx.kinds.listed.existing(k) {
            return Err(format!(
                "{} objects (their watch has not listed yet)",
                kind.resolved.resource.kind
            ));
        }
        Ok(kind.candidates(&ns, lookup))
    };
    Ok(render::with_found(rule, scope, &lookups, candidates))
}
