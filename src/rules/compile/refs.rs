//! Typed references: every path a rule reads inside a child or an existing object
//! (`rendered.<id>.…`, `observed.<id>.…`, `children.<id>.…`, `existing.<id>.…`, `child.…`
//! in `readyWhen`, a status field's JSONPath) is resolved against the schema of that
//! object's kind: the built-in kinds' shipped schemas, or a CRD given with `--crd` (other
//! kinds are not checked). So is what a status expression or JSONPath reads of the
//! resource itself (`self.…`, `from: self`) when its kind's schema is known (the rule's
//! `schema`, or a `--crd` for it). A field the kind does not have is an error at the line
//! that reads it, with "did you mean"; a path into a free-form field passes.

use super::chains::{Chain, chains};
use super::compiler::Compiler;
use super::model::{CompiledField, FieldSource, Source};
use crate::rules::helpers::template_code;
use crate::rules::program::Program;
use crate::rules::spec::RuleSpec;
use crate::schema::path::{Seg, miss, type_at};
use crate::schema::typed;
use jsonpath_rust::parser::model::{JpQuery, Segment, Selector};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::HashSet;

/// The object a chain reads: the schema of its kind, the kind's name, and whether it is
/// a list of such objects (a collection's objects, or the objects a selector finds).
struct Target<'a> {
    schema: Cow<'a, Value>,
    kind: String,
    list: bool,
}

/// What the check knows of the rule: its children and existing objects, and the schema
/// of its own kind (with the kind's name), when known.
pub(super) struct Kinds<'a> {
    pub spec: &'a RuleSpec,
    pub own: Option<(String, &'a Value)>,
}

/// Where an expression or template stands, by its path in the rule.
enum Place {
    /// In a child's template, `when` or `forEach`; or in child `i`'s `readyWhen`.
    Child,
    Ready(usize),
    Status,
    Other,
}

fn place(at: &str) -> Place {
    if at.starts_with("status.") {
        return Place::Status;
    }
    let index = at
        .strip_prefix("children[")
        .and_then(|r| r.split(']').next())
        .and_then(|i| i.parse().ok());
    match index {
        Some(i) if at.ends_with("].readyWhen") => Place::Ready(i),
        Some(_) => Place::Child,
        None => Place::Other,
    }
}

/// The variables whose chains are checked there.
fn roots(p: &Place) -> &'static [&'static str] {
    match p {
        Place::Child => &["rendered", "observed", "existing"],
        Place::Ready(_) => &["child", "existing"],
        Place::Status => &["children", "existing", "self"],
        Place::Other => &["existing"],
    }
}

/// The schema of a kind: built in, or from a CRD given with `--crd`.
fn kind_schema<'a>(api_version: &str, kind: &str) -> Option<Cow<'a, Value>> {
    match typed::builtin(api_version, kind) {
        Some(s) => Some(Cow::Borrowed(s)),
        None => typed::from_crds(api_version, kind).map(Cow::Owned),
    }
}

impl<'a> Kinds<'a> {
    fn child(&self, i: usize) -> Option<Target<'a>> {
        let ch = self.spec.children.get(i)?;
        let kind = ch.template.get("kind")?.as_str()?;
        Some(Target {
            schema: kind_schema(ch.template.get("apiVersion")?.as_str()?, kind)?,
            kind: kind.to_string(),
            list: ch.for_each.is_some(),
        })
    }

    fn existing(&self, id: &str) -> Option<Target<'a>> {
        let e = self.spec.existing.iter().find(|e| e.id == id)?;
        Some(Target {
            schema: kind_schema(&e.api_version, &e.kind)?,
            kind: e.kind.clone(),
            list: e.selector.is_some(),
        })
    }

    fn own(&self) -> Option<Target<'a>> {
        let (kind, schema) = self.own.as_ref()?;
        Some(Target {
            schema: Cow::Borrowed(*schema),
            kind: kind.clone(),
            list: false,
        })
    }

    /// The object `chain` reads, and the steps inside it; None when it cannot be told.
    fn target<'c>(&self, p: &Place, chain: &'c Chain) -> Option<(Target<'a>, &'c [Seg])> {
        match (chain.root.as_str(), p) {
            // `child` is one live object, of a collection too.
            ("child", Place::Ready(i)) => {
                let t = self.child(*i)?;
                return Some((Target { list: false, ..t }, &chain.segs));
            }
            ("self", _) => return Some((self.own()?, &chain.segs)),
            _ => {}
        }
        let (Some(Seg::Field(id)), true) = (chain.segs.first(), chain.named) else {
            return None;
        };
        let t = match chain.root.as_str() {
            "existing" => self.existing(id)?,
            _ => self.child(self.spec.children.iter().position(|c| c.id == *id)?)?,
        };
        Some((t, &chain.segs[1..]))
    }
}

/// The problem and fix of `segs` read inside an object of `t` (`text` is the reference as
/// written, `head` how its object is read: `children.web`); None when it is fine.
fn problem(t: &Target<'_>, segs: &[Seg], text: &str, head: &str) -> Option<(String, String)> {
    let segs = match (t.list, segs.first()) {
        (false, _) => segs,
        (true, None) => return None,
        (true, Some(Seg::Item | Seg::Each)) => &segs[1..],
        (true, Some(Seg::Field(f))) => {
            let fix = if head == "$" {
                format!("read every object, `$[*].{f}`, or one, `$[0].{f}`")
            } else {
                format!(
                    "read one object, `{head}[0].{f}`, or the field of each, `{head} | map(attribute='{f}')`"
                )
            };
            let problem = format!(
                "`{text}`: `{head}` is a list of {} objects (one per item, or per object found), not one: it has no field `{f}`",
                t.kind
            );
            return Some((problem, fix));
        }
    };
    let m = miss(&t.schema, segs)?;
    Some((format!("`{text}`: {}", m.problem(&t.kind)), m.fix()))
}

/// The JSON type of a lone expression of a child's template that is exactly one
/// reference (`{{ observed.svc.spec.clusterIP }}`), when the kind's schema says it; so a
/// reference's type is checked where it is put, as a `spec.…` field's is.
pub(super) fn type_of(kinds: &Kinds<'_>, expr: &str) -> Option<&'static str> {
    let expr = expr.trim();
    let found = chains(expr, roots(&Place::Child));
    let [chain] = found.as_slice() else {
        return None;
    };
    if chain.text != expr {
        return None;
    }
    let (t, segs) = kinds.target(&Place::Child, chain)?;
    match (t.list, segs.first()) {
        (false, _) => type_at(&t.schema, segs),
        (true, None) => Some("array"),
        (true, Some(Seg::Item | Seg::Each)) => type_at(&t.schema, &segs[1..]),
        (true, Some(Seg::Field(_))) => None,
    }
}

/// One template or expression: where it stands, its child, its code, and the variables
/// it reads from its context (a name it binds itself is not among them).
struct Use {
    at: std::sync::Arc<str>,
    child: Option<String>,
    code: String,
    vars: Vec<String>,
}

/// Every template and expression of the rule.
fn uses(c: &Compiler<'_>, p: &Program) -> Vec<Use> {
    let exprs = c.expr_refs.iter().map(|(r, child, _)| Use {
        at: r.at.clone(),
        child: child.clone(),
        code: r.source.to_string(),
        vars: p.expression_variables(r),
    });
    let texts = c.text_refs.iter().map(|(r, child, src, _)| Use {
        at: r.at.clone(),
        child: child.clone(),
        code: template_code(src),
        vars: p.template_variables(r),
    });
    exprs.chain(texts).collect()
}

/// A problem found: the path in the rule, the child, the problem and the fix.
type Problem = (String, Option<String>, String, String);

/// Checks every reference of the rule into a child, an existing object or the resource.
pub(super) fn check_references(
    c: &mut Compiler<'_>,
    kinds: &Kinds<'_>,
    p: &Program,
    fields: &[CompiledField],
) {
    let mut problems: Vec<Problem> = Vec::new();
    let mut seen = HashSet::new();
    for u in uses(c, p) {
        let here = place(&u.at);
        for chain in chains(&u.code, roots(&here)) {
            if !u.vars.contains(&chain.root) || !seen.insert((u.at.clone(), chain.text.clone())) {
                continue;
            }
            let Some((t, segs)) = kinds.target(&here, &chain) else {
                continue;
            };
            if let Some((problem, fix)) = problem(&t, segs, &chain.text, chain.head(segs.len())) {
                problems.push((u.at.to_string(), u.child.clone(), problem, fix));
            }
        }
    }
    problems.extend(field_paths(kinds, fields));
    for (at, child, problem, fix) in problems {
        c.error(&at, child.as_deref(), problem, fix);
    }
}

/// The steps of a JSONPath, as far as they are plain (a descendant `..` or a union ends
/// them).
fn jsonpath_segs(q: &JpQuery) -> Vec<Seg> {
    let mut out = Vec::new();
    for s in &q.segments {
        let sel = match s {
            Segment::Selector(x) => x,
            Segment::Selectors(v) if v.len() == 1 => &v[0],
            _ => break,
        };
        out.push(match sel {
            Selector::Name(n) => Seg::Field(n.clone()),
            Selector::Index(_) => Seg::Item,
            _ => Seg::Each,
        });
    }
    out
}

/// The status fields whose JSONPath reads a field its object's kind does not have.
fn field_paths(kinds: &Kinds<'_>, fields: &[CompiledField]) -> Vec<Problem> {
    let mut out = Vec::new();
    for f in fields {
        let FieldSource::Path { from, query, text } = &f.source else {
            continue;
        };
        let Some(k) = kinds
            .spec
            .status
            .fields
            .iter()
            .position(|s| s.name == f.name)
        else {
            continue;
        };
        let (target, child) = match from {
            Source::Child(i) => (kinds.child(*i), Some(kinds.spec.children[*i].id.clone())),
            Source::Parent => (kinds.own(), None),
        };
        let Some(t) = target else { continue };
        let segs = jsonpath_segs(query);
        let at = format!("status.fields[{k}].path");
        if let Some((problem, fix)) = problem(&t, &segs, text, "$") {
            out.push((at, child, problem, fix));
        } else if segs.len() == query.segments.len()
            && let Some((problem, fix)) = mistyped(&t, &segs, text, f)
        {
            out.push((at, child, problem, fix));
        }
    }
    out
}

/// A status field whose JSONPath (each of its steps plain: `segs` is all of it) gives a
/// value of another type than the field's `type`
/// (`type: integer` fed `$.status.conditions`, a list): the field would never be set.
fn mistyped(t: &Target, segs: &[Seg], text: &str, f: &CompiledField) -> Option<(String, String)> {
    if t.list || segs.iter().any(|s| matches!(s, Seg::Each)) {
        return None;
    }
    let found = type_at(&t.schema, segs)?;
    let want = f.ty.name();
    // (An `array` field takes every match as a list; an integer may be read from a number
    // that holds a whole one.)
    let numbers = matches!((want, found), ("number", "integer") | ("integer", "number"));
    let fits = found == want || want == "array" || numbers;
    let a = |w: &str| {
        if w.starts_with(['a', 'e', 'i', 'o', 'u']) {
            "an"
        } else {
            "a"
        }
    };
    (!fits).then(|| {
        (
            format!(
                "`{text}` gives {} {found} in {}, and the status field `{}` is `type: {want}`",
                a(found),
                t.kind,
                f.name
            ),
            format!(
                "make the field `type: {found}`, or point the path at a field that is {} {want}",
                a(want)
            ),
        )
    })
}
