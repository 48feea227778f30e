//! The graph of a rule's children: which child reads which (`rendered.<id>`,
//! `observed.<id>`), which must come `after` which, and which existing objects each
//! reads. Built when the rule loads; a cycle is an error then, naming every child on it.
//! Pure.

use std::collections::BTreeSet;

/// What one child's templates and conditions read of the others.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reads {
    /// Children whose rendered objects it uses (`rendered.<id>`), by index.
    pub rendered: BTreeSet<usize>,
    /// Children whose live objects it uses (`observed.<id>`): it waits until they exist.
    pub observed: BTreeSet<usize>,
    /// Existing objects it uses (`existing.<id>`): it waits until they are found.
    pub existing: BTreeSet<usize>,
}

/// A reference found in a template: `rendered.web`, `observed.svc`, `existing.db`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reference {
    Rendered(String),
    Observed(String),
    Existing(String),
    /// `rendered`, `observed` or `existing` used without a static id after it
    /// (`rendered[x]`): the graph could not be known.
    Dynamic(&'static str),
}

/// The references among the dotted paths an expression or template reads.
pub fn references(paths: &[String]) -> Vec<Reference> {
    let mut out = Vec::new();
    for p in paths {
        let mut parts = p.split('.');
        let (Some(head), id) = (parts.next(), parts.next()) else {
            continue;
        };
        let (make, name): (fn(String) -> Reference, &'static str) = match head {
            "rendered" => (Reference::Rendered, "rendered"),
            "observed" => (Reference::Observed, "observed"),
            "existing" => (Reference::Existing, "existing"),
            _ => continue,
        };
        out.push(match id {
            Some(id) => make(id.to_string()),
            None => Reference::Dynamic(name),
        });
    }
    out
}

/// [`references`], with `rendered['my-config']` (an id with `-` in it, which cannot be
/// written after a dot) taken from the source: constant subscripts name their child too.
pub fn references_in(paths: &[String], source: &str) -> Vec<Reference> {
    let mut out = Vec::new();
    for r in references(paths) {
        let Reference::Dynamic(var) = r else {
            out.push(r);
            continue;
        };
        let named = constant_subscripts(source, var);
        if named.is_empty() {
            out.push(r);
        }
        for id in named {
            out.push(match var {
                "rendered" => Reference::Rendered(id),
                "observed" => Reference::Observed(id),
                _ => Reference::Existing(id),
            });
        }
    }
    out
}

/// The string constants in `var['…']` / `var["…"]` in `source`.
fn constant_subscripts(source: &str, var: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find(var) {
        let before_ok = source.len() - rest.len() + at == 0
            || !rest[..at]
                .chars()
                .last()
                .is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '.');
        rest = &rest[at + var.len()..];
        let after = rest.trim_start();
        let Some(open) = after.strip_prefix('[') else {
            continue;
        };
        let open = open.trim_start();
        let Some(quote) = open.chars().next().filter(|q| *q == '\'' || *q == '"') else {
            continue;
        };
        let body = &open[1..];
        if let (true, Some(end)) = (before_ok, body.find(quote))
            && body[end + 1..].trim_start().starts_with(']')
        {
            out.push(body[..end].to_string());
        }
    }
    out
}

/// The order to render children in: every child after the ones it depends on, otherwise
/// in the order the rule lists them. `deps[i]` are the children child `i` depends on.
/// On a cycle, gives the children on it, in order (the first repeated at the end).
pub fn order(deps: &[BTreeSet<usize>]) -> Result<Vec<usize>, Vec<usize>> {
    let n = deps.len();
    let mut done = vec![false; n];
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        // The first child (in rule order) whose dependencies are all placed.
        let next = (0..n).find(|&i| !done[i] && deps[i].iter().all(|&d| d < n && done[d]));
        match next {
            Some(i) => {
                done[i] = true;
                out.push(i);
            }
            None => return Err(find_cycle(deps, &done)),
        }
    }
    Ok(out)
}

/// A cycle among the children not yet placed (each of them waits on another).
fn find_cycle(deps: &[BTreeSet<usize>], done: &[bool]) -> Vec<usize> {
    let Some(start) = (0..deps.len()).find(|&i| !done[i]) else {
        return Vec::new();
    };
    let mut path = vec![start];
    let mut at = start;
    loop {
        let Some(&next) = deps[at].iter().find(|&&d| d < done.len() && !done[d]) else {
            return path;
        };
        if let Some(pos) = path.iter().position(|&p| p == next) {
            let mut cycle = path[pos..].to_vec();
            cycle.push(next);
            return cycle;
        }
        path.push(next);
        at = next;
    }
}

/// Every child that depends on `i`, directly or not (for reverse-order deletion and to
/// tell who waits on whom).
pub fn dependents(deps: &[BTreeSet<usize>], i: usize) -> BTreeSet<usize> {
    let mut out = BTreeSet::new();
    let mut todo = vec![i];
    while let Some(x) = todo.pop() {
        for (j, d) in deps.iter().enumerate() {
            if d.contains(&x) && out.insert(j) {
                todo.push(j);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deps(edges: &[&[usize]]) -> Vec<BTreeSet<usize>> {
        edges.iter().map(|e| e.iter().copied().collect()).collect()
    }

    #[test]
    fn children_come_after_what_they_read_and_otherwise_keep_rule_order() {
        // 0 reads 2, 1 reads nothing, 2 reads 1.
        assert_eq!(order(&deps(&[&[2], &[], &[1]])), Ok(vec![1, 2, 0]));
        assert_eq!(order(&deps(&[&[], &[], &[]])), Ok(vec![0, 1, 2]));
    }

    #[test]
    fn a_cycle_is_found_and_named_in_order() {
        // 0 → 1 → 2 → 0, and 3 is free.
        assert_eq!(
            order(&deps(&[&[1], &[2], &[0], &[]])),
            Err(vec![0, 1, 2, 0])
        );
        // A child reading itself.
        assert_eq!(order(&deps(&[&[0]])), Err(vec![0, 0]));
    }

    #[test]
    fn references_are_read_from_dotted_paths() {
        let paths = [
            "rendered.config.data".to_string(),
            "observed.svc.spec.clusterIP".to_string(),
            "existing.db".to_string(),
            "spec.port".to_string(),
            "rendered".to_string(),
        ];
        assert_eq!(
            references(&paths),
            vec![
                Reference::Rendered("config".into()),
                Reference::Observed("svc".into()),
                Reference::Existing("db".into()),
                Reference::Dynamic("rendered"),
            ]
        );
    }

    #[test]
    fn a_constant_subscript_names_its_child() {
        let paths = ["rendered".to_string(), "observed".to_string()];
        let src = "rendered['my-config'].data | sha256 ~ observed[\"web-svc\"].spec.clusterIP ~ xrendered['no']";
        assert_eq!(
            references_in(&paths, src),
            vec![
                Reference::Rendered("my-config".into()),
                Reference::Observed("web-svc".into()),
            ]
        );
        // A computed subscript stays unknown.
        assert_eq!(
            references_in(&["rendered".to_string()], "rendered[spec.x]"),
            vec![Reference::Dynamic("rendered")]
        );
    }

    #[test]
    fn dependents_are_found_through_the_graph() {
        // 1 reads 0, 2 reads 1, 3 reads nothing.
        let d = deps(&[&[], &[0], &[1], &[]]);
        assert_eq!(dependents(&d, 0), [1, 2].into_iter().collect());
        assert!(dependents(&d, 3).is_empty());
    }
}
