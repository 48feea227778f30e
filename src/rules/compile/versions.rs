//! The kind's other versions (`schema.versions`) and how each converts to the watched one
//! (the hub): names, the storage version, and each conversion checked to cover every
//! field of both versions (a field with no counterpart only where `lossy` says so). The
//! result is a [`Conversion`], which `crate::convert` applies.

use super::compiler::Compiler;
use crate::rules::program::ExprRef;
use crate::schema::spec::{ConvertStep, SchemaSpec};
use serde_json::Value;
use std::collections::BTreeMap;

/// How the kind's versions convert: each through the hub, the version the rule watches.
#[derive(Debug, Clone)]
pub struct Conversion {
    pub group: String,
    pub hub: String,
    /// The hub's spec schema.
    pub hub_schema: Value,
    pub storage: String,
    pub spokes: Vec<Spoke>,
}

/// A version other than the hub, and its steps to the hub.
#[derive(Debug, Clone)]
pub struct Spoke {
    pub name: String,
    /// Its spec schema.
    pub schema: Value,
    pub steps: Vec<Step>,
}

/// A conversion step: paths are inside the spec, as segments.
#[derive(Debug, Clone)]
pub enum Step {
    Move {
        from: Vec<String>,
        to: Vec<String>,
    },
    Transform {
        from: Vec<String>,
        to: Vec<String>,
        to_hub: ExprRef,
        from_hub: ExprRef,
    },
    Default {
        field: Vec<String>,
        value: Value,
    },
    /// A list of objects (in the spoke) that is a map by each item's `key` (in the hub).
    Keyed {
        from: Vec<String>,
        to: Vec<String>,
        key: String,
    },
}

/// The leaf fields of a spec schema, by dotted path (`spec.service.type`), with their
/// type; a map, a list or a free-form object is one leaf.
fn leaves(schema: &Value, path: &str, out: &mut BTreeMap<String, String>) {
    match schema["properties"].as_object() {
        Some(props) if !props.is_empty() => {
            for (k, s) in props {
                leaves(s, &format!("{path}.{k}"), out);
            }
        }
        _ => {
            let ty = schema["type"].as_str().unwrap_or("any").to_string();
            out.insert(path.to_string(), ty);
        }
    }
}

fn under<'a>(all: &'a BTreeMap<String, String>, path: &'a str) -> impl Iterator<Item = &'a String> {
    all.keys()
        .filter(move |k| *k == path || k.starts_with(&format!("{path}.")))
}

/// Checks the versions and compiles their conversions; None when the rule has one
/// version (or an error, reported on `c`).
pub(super) fn compile(
    c: &mut Compiler<'_>,
    s: &SchemaSpec,
    group: &str,
    hub: &str,
    crd: &Value,
) -> Option<Conversion> {
    if s.versions.is_empty() {
        if let Some(st) = s.storage.as_deref().filter(|st| *st != hub) {
            c.error(
                "schema.storage",
                None,
                format!("`storage: {st}` names no version of the kind: it has only `{hub}`, the watched one"),
                format!("remove `storage`, or add `{st}` under `schema.versions`"),
            );
        }
        return None;
    }
    let names = check_names(c, s, hub)?;
    let storage = s.storage.clone().unwrap_or_else(|| hub.to_string());
    if !names.contains(&storage.as_str()) {
        c.error(
            "schema.storage",
            None,
            format!(
                "`storage: {storage}` names no version of the kind ({})",
                names.join(", ")
            ),
            "name one of the kind's versions: the watched one or one under `schema.versions`",
        );
    }
    let schema_of = |name: &str| {
        crate::schema::crd::version_schema(crd, name).map(|s| s["properties"]["spec"].clone())
    };
    let hub_schema = schema_of(hub)?;
    let mut spokes = Vec::new();
    for (i, v) in s.versions.iter().enumerate() {
        let schema = schema_of(&v.name)?;
        if let Some(steps) = spoke(
            c,
            i,
            &v.name,
            hub,
            &schema,
            &hub_schema,
            &v.convert,
            &v.lossy,
        ) {
            spokes.push(Spoke {
                name: v.name.clone(),
                schema,
                steps,
            });
        }
    }
    Some(Conversion {
        group: group.to_string(),
        hub: hub.to_string(),
        hub_schema,
        storage,
        spokes,
    })
}

/// A Kubernetes version name, as kubectl ranks them.
static VERSION: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
    regex::Regex::new(r"^v[1-9][0-9]*((alpha|beta)[1-9][0-9]*)?$").expect("a valid pattern")
});

/// The version names: each a Kubernetes version name, once, and not the watched one.
fn check_names<'a>(c: &mut Compiler<'_>, s: &'a SchemaSpec, hub: &'a str) -> Option<Vec<&'a str>> {
    let mut names = vec![hub];
    let before = c.errors.len();
    for (i, v) in s.versions.iter().enumerate() {
        let at = format!("schema.versions[{i}].name");
        if names.contains(&v.name.as_str()) {
            c.error(
                &at,
                None,
                format!(
                    "version `{}` is there twice (the watched version counts: `{hub}`)",
                    v.name
                ),
                "give each version once; the watched one's fields are `schema.spec`",
            );
        } else if !VERSION.is_match(&v.name) {
            c.error(
                &at,
                None,
                format!("`{}` is not a Kubernetes version name", v.name),
                "write v<N>, v<N>alpha<M> or v<N>beta<M> (`v1alpha1`, `v2`): kubectl ranks versions by these names",
            );
        }
        if v.deprecation_warning.is_some() && !v.deprecated {
            c.error(
                &format!("schema.versions[{i}].deprecationWarning"),
                None,
                "a `deprecationWarning` on a version that is not `deprecated: true`",
                "add `deprecated: true`, or remove the warning",
            );
        }
        names.push(&v.name);
    }
    (c.errors.len() == before).then_some(names)
}

/// The fields of a version's spec (`of`) at or under `path`; an error at `at` when none
/// is (with the nearest path).
fn field_at(
    c: &mut Compiler<'_>,
    at: &str,
    path: &str,
    of: &BTreeMap<String, String>,
    version: &str,
) -> Vec<String> {
    let found: Vec<String> = under(of, path).cloned().collect();
    if found.is_empty() {
        let near = crate::suggest::closest(path, of.keys().map(String::as_str));
        let hint = near
            .map(|n| format!(" (did you mean `{n}`?)"))
            .unwrap_or_default();
        c.error(
            at,
            None,
            format!("`{path}` is no field of {version}{hint}"),
            format!(
                "write a path of {version}'s spec, from `spec.`: {}",
                of.keys().take(6).cloned().collect::<Vec<_>>().join(", ")
            ),
        );
    }
    found
}

/// Checks and compiles one version's steps; every field of both versions is covered.
#[allow(clippy::too_many_arguments)]
fn spoke(
    c: &mut Compiler<'_>,
    i: usize,
    name: &str,
    hub: &str,
    schema: &Value,
    hub_schema: &Value,
    convert: &[ConvertStep],
    lossy: &[String],
) -> Option<Vec<Step>> {
    let (mut mine, mut theirs) = (BTreeMap::new(), BTreeMap::new());
    leaves(schema, "spec", &mut mine);
    leaves(hub_schema, "spec", &mut theirs);
    let before = c.errors.len();
    let mut steps = Vec::new();
    let mut covered_mine: Vec<String> = Vec::new();
    let mut covered_theirs: Vec<String> = Vec::new();
    for (j, step) in convert.iter().enumerate() {
        let at = format!("schema.versions[{i}].convert[{j}]");
        let field = |c: &mut Compiler<'_>, key: &str, path: &str, of, version: &str| {
            field_at(c, &format!("{at}.{key}"), path, of, version)
        };
        let Some(kind) = one_kind(c, &at, step) else {
            continue;
        };
        match kind {
            Kind::Keyed(from, to, key) => {
                let a = field(c, "from", from, &mine, name);
                let b = field(c, "to", to, &theirs, hub);
                let list = mine.get(from).map(String::as_str);
                let map = theirs.get(to).map(String::as_str);
                if !a.is_empty()
                    && !b.is_empty()
                    && (list != Some("array") || map != Some("object"))
                {
                    c.error(
                        &at,
                        None,
                        format!("`keyed` turns a list of {name} into a map of {hub}, by each item's `{key}`; `{from}` is {} and `{to}` is {}", list.unwrap_or("an object"), map.unwrap_or("an object")),
                        "give `from` a list of objects (`[]object`) and `to` a map (`map[string]object`)",
                    );
                }
                covered_mine.extend(a);
                covered_theirs.extend(b);
            }
            Kind::Move(from, to) | Kind::Transform(from, to, ..) => {
                let a = field(c, "from", from, &mine, name);
                let b = field(c, "to", to, &theirs, hub);
                if let (Kind::Move(..), [x], [y]) = (&kind, a.as_slice(), b.as_slice())
                    && x == from
                    && y == to
                    && mine[x] != theirs[y]
                {
                    c.error(
                        &at,
                        None,
                        format!("`{from}` is {} in {name} but `{to}` is {} in {hub}: a move keeps the value as it is", mine[x], theirs[y]),
                        "convert the value with a `transform` (`toHub` and `fromHub` expressions of `value`)",
                    );
                }
                covered_mine.extend(a);
                covered_theirs.extend(b);
            }
            Kind::Default(f, value) => {
                covered_theirs.extend(field(c, "field", f, &theirs, hub));
                check_default(c, &at, hub, hub_schema, f, value);
            }
        }
        steps.push(compile_step(c, &at, &kind));
    }
    // A field at the same path with the same type in both versions is carried as it is.
    for (p, ty) in &mine {
        if theirs.get(p) == Some(ty) && !covered_mine.contains(p) && !covered_theirs.contains(p) {
            covered_mine.push(p.clone());
            covered_theirs.push(p.clone());
        }
    }
    for l in lossy {
        let n = under(&mine, l).chain(under(&theirs, l)).count();
        if n == 0 {
            c.error(
                &format!("schema.versions[{i}].lossy"),
                None,
                format!("`{l}` in `lossy` is no field of {name} or {hub}"),
                "list fields of either version's spec, from `spec.`",
            );
        }
        covered_mine.extend(under(&mine, l).cloned());
        covered_theirs.extend(under(&theirs, l).cloned());
    }
    uncovered(
        c,
        i,
        name,
        hub,
        &mine,
        &covered_mine,
        &theirs,
        &covered_theirs,
    );
    (c.errors.len() == before).then_some(steps)
}

#[allow(clippy::too_many_arguments)]
fn uncovered(
    c: &mut Compiler<'_>,
    i: usize,
    name: &str,
    hub: &str,
    mine: &BTreeMap<String, String>,
    covered_mine: &[String],
    theirs: &BTreeMap<String, String>,
    covered_theirs: &[String],
) {
    let left_mine: Vec<&String> = mine.keys().filter(|p| !covered_mine.contains(p)).collect();
    let left_theirs: Vec<&String> = theirs
        .keys()
        .filter(|p| !covered_theirs.contains(p))
        .collect();
    for p in &left_mine {
        let near = crate::suggest::closest(p, left_theirs.iter().map(|s| s.as_str()));
        let to = near.unwrap_or("spec.<field>");
        c.error(
            &format!("schema.versions[{i}]"),
            None,
            format!("`{p}` of {name} has no counterpart in {hub}: converted, its value would be kept aside (in an annotation) and not seen in {hub}"),
            format!("move it (`- move: {{from: {p}, to: {to}}}`), transform it, or list it under `lossy:` if {hub} has no place for it"),
        );
    }
    for p in &left_theirs {
        c.error(
            &format!("schema.versions[{i}]"),
            None,
            format!("`{p}` of {hub} has no counterpart in {name}: a {name} object would convert with it unset"),
            format!("give it a value (`- default: {{field: {p}, value: ...}}`), move a field of {name} to it, or list it under `lossy:`"),
        );
    }
}

/// The schema at `path` (`spec.a.b`) of a spec schema.
fn schema_at<'a>(spec: &'a Value, path: &str) -> Option<&'a Value> {
    segments(path)
        .iter()
        .try_fold(spec, |s, k| s["properties"].get(k.as_str()))
}

/// A `default` step's value must be one the hub's field takes (its type, its enum).
fn check_default(
    c: &mut Compiler<'_>,
    at: &str,
    hub: &str,
    hub_schema: &Value,
    f: &str,
    v: &Value,
) {
    let Some(s) = schema_at(hub_schema, f) else {
        return;
    };
    let in_enum = s["enum"].as_array().is_none_or(|e| e.contains(v));
    if crate::schema::fields::admits(s, v) && in_enum {
        return;
    }
    let ty = article(s["type"].as_str().unwrap_or("any value"));
    let allowed = s["enum"]
        .as_array()
        .map(|e| format!(" (one of {})", serde_json::to_string(e).unwrap_or_default()))
        .unwrap_or_default();
    c.error(
        &format!("{at}.default.value"),
        None,
        format!("`{v}` is no value of {hub}'s `{f}`, {ty}{allowed}: the API server would refuse every object converted"),
        format!("give {ty}{allowed} as the value"),
    );
}

/// A type with its article: "an object", "a string".
fn article(ty: &str) -> String {
    let an = ty.starts_with(['a', 'e', 'i', 'o', 'u']);
    format!("{} {ty}", if an { "an" } else { "a" })
}

fn segments(p: &str) -> Vec<String> {
    p.split('.').skip(1).map(str::to_string).collect()
}

/// A step, as the one thing it does.
enum Kind<'a> {
    Move(&'a str, &'a str),
    Transform(&'a str, &'a str, &'a str, &'a str),
    Default(&'a str, &'a Value),
    Keyed(&'a str, &'a str, &'a str),
}

fn one_kind<'a>(c: &mut Compiler<'_>, at: &str, step: &'a ConvertStep) -> Option<Kind<'a>> {
    let mut kinds = Vec::new();
    if let Some(m) = &step.moves {
        kinds.push(Kind::Move(&m.from, &m.to));
    }
    if let Some(t) = &step.transform {
        kinds.push(Kind::Transform(&t.from, &t.to, &t.to_hub, &t.from_hub));
    }
    if let Some(d) = &step.default {
        kinds.push(Kind::Default(&d.field, &d.value));
    }
    if let Some(k) = &step.keyed {
        kinds.push(Kind::Keyed(&k.from, &k.to, &k.key));
    }
    if kinds.len() != 1 {
        c.error(
            at,
            None,
            format!("a conversion step does one thing; this one has {}", kinds.len()),
            "write each step as one of `- move: {from, to}`, `- transform: {from, to, toHub, fromHub}`, `- default: {field, value}`, `- keyed: {from, to, key}`",
        );
        return None;
    }
    kinds.pop()
}

fn compile_step(c: &mut Compiler<'_>, at: &str, step: &Kind<'_>) -> Step {
    match *step {
        Kind::Move(from, to) => Step::Move {
            from: segments(from),
            to: segments(to),
        },
        Kind::Transform(from, to, to_hub, from_hub) => Step::Transform {
            from: segments(from),
            to: segments(to),
            to_hub: c.expr(&format!("{at}.transform.toHub"), None, to_hub, &["value"]),
            from_hub: c.expr(
                &format!("{at}.transform.fromHub"),
                None,
                from_hub,
                &["value"],
            ),
        },
        Kind::Default(field, value) => Step::Default {
            field: segments(field),
            value: value.clone(),
        },
        Kind::Keyed(from, to, key) => Step::Keyed {
            from: segments(from),
            to: segments(to),
            key: key.to_string(),
        },
    }
}
