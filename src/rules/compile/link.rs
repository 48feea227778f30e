//! How the children of a rule refer to each other and to the existing objects: every
//! reference found and resolved to an id, `after` resolved, and the children ordered (see
//! [`crate::rules::graph`]); unknown ids and cycles are errors.

use super::compiler::{Compiler, INDEX_VARIABLE};
use super::model::{CompiledChild, CompiledExisting};
use crate::rules::graph::{self, Reference};
use crate::rules::program::Program;
use crate::rules::spec::RuleSpec;
use crate::suggest::edit_distance;
use std::collections::BTreeSet;

/// The index of the child an expression at `at` belongs to (`children[3].template...`).
fn child_at(at: &str) -> Option<usize> {
    at.strip_prefix("children[")?
        .split(']')
        .next()?
        .parse()
        .ok()
}

/// Finds what every child reads of the others and of the existing objects, resolves
/// `after`, and orders the children; unknown ids and cycles are errors.
pub(super) fn link(
    c: &mut Compiler<'_>,
    spec: &RuleSpec,
    program: &Program,
    children: &mut [CompiledChild],
    existing: &[CompiledExisting],
) -> (Vec<usize>, Vec<BTreeSet<usize>>) {
    let ids: Vec<&str> = spec.children.iter().map(|ch| ch.id.as_str()).collect();
    check_status_reads(c, program, existing);
    check_collection_names(c, program, children);
    let found: Vec<(usize, std::sync::Arc<str>, Vec<Reference>)> = c
        .expr_refs
        .iter()
        .filter_map(|(r, _, _)| {
            let refs = graph::references_in(&program.expression_paths(r), &r.source);
            Some((child_at(&r.at)?, r.at.clone(), refs))
        })
        .chain(c.text_refs.iter().filter_map(|(r, _, src, _)| {
            let refs = graph::references_in(&program.template_paths(r), src);
            Some((child_at(&r.at)?, r.at.clone(), refs))
        }))
        .collect();
    for (i, at, refs) in found {
        if at.ends_with(".when")
            && !refs.is_empty()
            && let Some(child) = children.get_mut(i)
        {
            child.when_reads_graph = true;
        }
        for r in refs {
            resolve(c, &ids, existing, children.get_mut(i), &at, r);
        }
    }
    for (i, ch) in spec.children.iter().enumerate() {
        for (k, name) in ch.after.iter().enumerate() {
            match ids.iter().position(|id| id == name) {
                Some(j) => {
                    if let Some(child) = children.get_mut(i) {
                        child.after.push(j);
                    }
                }
                None => unknown_id(
                    c,
                    &format!("children[{i}].after[{k}]"),
                    &ch.id,
                    "child",
                    name,
                    &ids,
                ),
            }
        }
    }
    let deps: Vec<BTreeSet<usize>> = children
        .iter()
        .map(|ch| {
            let mut d: BTreeSet<usize> = ch.after.iter().copied().collect();
            d.extend(&ch.reads.rendered);
            d.extend(&ch.reads.observed);
            d
        })
        .collect();
    let order = match graph::order(&deps) {
        Ok(o) => o,
        Err(cycle) => {
            let names: Vec<&str> = cycle
                .iter()
                .map(|&i| ids.get(i).copied().unwrap_or("?"))
                .collect();
            let first = cycle.first().copied().unwrap_or(0);
            c.error(
                &format!("children[{first}]"),
                ids.get(first).copied(),
                format!(
                    "children depend on each other in a cycle: {}",
                    names.join(" → ")
                ),
                "remove one of these references (rendered./observed.) or `after` entries",
            );
            Vec::new()
        }
    };
    (order, deps)
}

/// Books one reference of a child's template.
fn resolve(
    c: &mut Compiler<'_>,
    ids: &[&str],
    existing: &[CompiledExisting],
    child: Option<&mut CompiledChild>,
    at: &str,
    r: Reference,
) {
    let Some(child) = child else { return };
    let id = child.id.clone();
    let of_child = |name: &str| ids.iter().position(|i| *i == name);
    match r {
        Reference::Rendered(name) => match of_child(&name) {
            Some(j) => {
                child.reads.rendered.insert(j);
            }
            None => unknown_id(c, at, &id, "child", &name, ids),
        },
        Reference::Observed(name) => match of_child(&name) {
            Some(j) => {
                child.reads.observed.insert(j);
            }
            None => unknown_id(c, at, &id, "child", &name, ids),
        },
        Reference::Existing(name) => match existing.iter().position(|e| e.id == name) {
            Some(j) => {
                child.reads.existing.insert(j);
            }
            None => {
                let known: Vec<&str> = existing.iter().map(|e| e.id.as_str()).collect();
                unknown_id(c, at, &id, "existing object", &name, &known)
            }
        },
        Reference::Dynamic(var) => c.error(
            at,
            Some(&id),
            format!("`{var}` is read without naming which one"),
            format!("write `{var}.<id>` (or `{var}['<id>']` for an id with '-') with the id itself (ruleop orders children by what they read, so it must know)"),
        ),
    }
}

/// The objects of a collection must have a name per item: its template must read the
/// item (or `index`), or every item after the first would render the same object.
fn check_collection_names(c: &mut Compiler<'_>, program: &Program, children: &[CompiledChild]) {
    for (i, ch) in children.iter().enumerate() {
        let Some(each) = &ch.each else { continue };
        let at = format!("children[{i}].template.metadata.name");
        let vars: Vec<String> = c
            .expr_refs
            .iter()
            .filter(|(r, ..)| *r.at == *at)
            .flat_map(|(r, ..)| program.expression_variables(r))
            .chain(
                c.text_refs
                    .iter()
                    .filter(|(r, ..)| *r.at == *at)
                    .flat_map(|(r, ..)| program.template_variables(r)),
            )
            .collect();
        if !vars.iter().any(|v| **v == *each.var || v == INDEX_VARIABLE) {
            c.error(
                &at,
                Some(&ch.id),
                format!("the objects of collection `{}` all get one name: metadata.name does not read `{}`", ch.id, each.var),
                format!("name each object by its item, e.g. `name: \"{{{{ name }}}}-{{{{ {} }}}}\"` (by the item rather than `index`: removing an item then touches only its object)", each.var),
            );
        }
    }
}

/// Status expressions may read existing objects: the ids they name must exist.
fn check_status_reads(c: &mut Compiler<'_>, program: &Program, existing: &[CompiledExisting]) {
    let known: Vec<&str> = existing.iter().map(|e| e.id.as_str()).collect();
    let reads: Vec<(std::sync::Arc<str>, Reference)> = c
        .expr_refs
        .iter()
        .filter(|(r, ..)| r.at.starts_with("status."))
        .flat_map(|(r, ..)| {
            graph::references_in(&program.expression_paths(r), &r.source)
                .into_iter()
                .map(|x| (r.at.clone(), x))
        })
        .collect();
    for (at, r) in reads {
        if let Reference::Existing(name) = r
            && !known.contains(&name.as_str())
        {
            unknown_id(c, &at, "", "existing object", &name, &known);
        }
    }
}

fn unknown_id(c: &mut Compiler<'_>, at: &str, child: &str, what: &str, name: &str, known: &[&str]) {
    let dashed = known.iter().find(|k| k.starts_with(&format!("{name}-")));
    let close = known.iter().find(|k| edit_distance(k, name) <= 2);
    let fix = if let Some(d) = dashed {
        format!("an id with '-' is read with a subscript: `rendered['{d}']`")
    } else if let Some(k) = close {
        format!("did you mean `{k}`?")
    } else if known.is_empty() {
        format!("the rule has no {what} to refer to")
    } else {
        format!("use one of: {}", known.join(", "))
    };
    let child = Some(child).filter(|c| !c.is_empty());
    c.error(
        at,
        child,
        format!("`{name}` names no {what} of this rule"),
        fix,
    );
}
