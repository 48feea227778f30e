//! Converts an object of the kind between its versions, by the rule's conversion (see
//! `rules::compile::versions`): every version through the hub, the one the rule watches.
//! Pure. Each step runs forwards to the hub and backwards from it; the fields a version
//! has no place for are kept in the annotation `convert.ruleop.dev/<version>` of the
//! version they belong to, and put back when the object is converted to it again, so a
//! round trip A → B → A gives A back. Only the spec and those annotations change: the
//! status is the same in every version.

mod keyed;
pub mod paths;
pub mod review;

use crate::rules::compile::versions::{Conversion, Spoke, Step};
use crate::rules::program::{ExprRef, Program};
use paths::{get, merge, set, take};
use serde_json::{Map, Value, json};

/// The annotation prefix of the fields kept aside for a version.
pub const KEPT: &str = "convert.ruleop.dev/";

#[derive(Debug, thiserror::Error)]
pub enum ConvertError {
    #[error("the kind has no version {0:?}")]
    UnknownVersion(String),
    #[error("the object has no apiVersion of this kind's group: {0:?}")]
    NoVersion(String),
    #[error("converting {version}: `{path}` {reason}")]
    Keyed {
        version: String,
        path: String,
        reason: String,
    },
    #[error("converting {version}: the expression {source_text:?} failed: {error}")]
    Expression {
        version: String,
        source_text: String,
        error: String,
    },
}

/// `obj` (of any version of the kind) as version `to`.
pub fn convert(
    c: &Conversion,
    program: &Program,
    obj: &Value,
    to: &str,
) -> Result<Value, ConvertError> {
    let api_version = obj["apiVersion"].as_str().unwrap_or_default();
    let from = api_version
        .strip_prefix(&format!("{}/", c.group))
        .ok_or_else(|| ConvertError::NoVersion(api_version.to_string()))?;
    let spoke = |v: &str| -> Result<Option<&Spoke>, ConvertError> {
        if v == c.hub {
            return Ok(None);
        }
        c.spokes
            .iter()
            .find(|s| s.name == v)
            .map(Some)
            .ok_or_else(|| ConvertError::UnknownVersion(v.to_string()))
    };
    let (from_spoke, to_spoke) = (spoke(from)?, spoke(to)?);
    if from == to {
        return Ok(obj.clone());
    }
    let hub = match from_spoke {
        Some(s) => to_hub(c, s, program, obj)?,
        None => obj.clone(),
    };
    match to_spoke {
        Some(s) => from_hub(c, s, program, &hub),
        None => Ok(hub),
    }
}

fn to_hub(
    c: &Conversion,
    s: &Spoke,
    program: &Program,
    obj: &Value,
) -> Result<Value, ConvertError> {
    let mut out = obj.clone();
    out["apiVersion"] = json!(format!("{}/{}", c.group, c.hub));
    let had_spec = obj.get("spec").is_some();
    let mut rest = out.get_mut("spec").map(Value::take).unwrap_or(json!({}));
    let mut spec = json!({});
    let mut lost = Map::new();
    for step in &s.steps {
        forward(
            step,
            &mut rest,
            &mut spec,
            &mut lost,
            program,
            (&s.name, &c.hub_schema),
        )?;
    }
    let kept = paths::split(rest, &c.hub_schema, "spec", &mut lost);
    merge(&mut spec, kept);
    let absent = restore(&mut out, &mut spec, &c.hub, &[]);
    for step in &s.steps {
        if let Step::Default { field, value } = step
            && get(&spec, field).is_none()
            && !absent.contains(field)
        {
            set(&mut spec, field, value.clone());
        }
    }
    // A spec made only by the defaults: none when converted back.
    if !had_spec && spec.as_object().is_some_and(|o| !o.is_empty()) {
        lost.insert(format!("{ABSENT}spec"), json!(true));
    }
    keep_aside(&mut out, &s.name, lost);
    finish(&mut out, spec, had_spec);
    Ok(out)
}

/// One step towards the hub: from the spoke's fields (`rest`) into the hub's (`spec`).
fn forward(
    step: &Step,
    rest: &mut Value,
    spec: &mut Value,
    lost: &mut Map<String, Value>,
    program: &Program,
    (version, hub_schema): (&str, &Value),
) -> Result<(), ConvertError> {
    match step {
        Step::Move { from, to } => {
            if let Some(v) = take(rest, from) {
                place(spec, (to, from), v, hub_schema, lost);
            }
        }
        Step::Transform {
            from, to, to_hub, ..
        } => {
            if let Some(v) = take(rest, from) {
                let out = eval(program, to_hub, v.clone(), version)?;
                if out.is_null() {
                    lost.insert(dotted(from), v);
                } else {
                    place(spec, (to, from), out, hub_schema, lost);
                }
            }
        }
        Step::Keyed { from, to, key } => {
            if let Some(v) = take(rest, from) {
                let (map, order) =
                    keyed::to_map(v, key).map_err(|r| keyed_error(version, from, r))?;
                set(spec, to, map);
                if let Some(order) = order {
                    lost.insert(format!("{ORDER}spec.{}", from.join(".")), order);
                }
            }
        }
        Step::Default { .. } => {}
    }
    Ok(())
}

fn from_hub(
    c: &Conversion,
    s: &Spoke,
    program: &Program,
    hub: &Value,
) -> Result<Value, ConvertError> {
    let mut out = hub.clone();
    out["apiVersion"] = json!(format!("{}/{}", c.group, s.name));
    let had_spec = hub.get("spec").is_some();
    let mut rest = out.get_mut("spec").map(Value::take).unwrap_or(json!({}));
    let mut spec = json!({});
    let mut lost = Map::new();
    // Undone in the reverse order, so that steps on nested paths undo as they were done.
    for step in s.steps.iter().rev() {
        backward(step, &mut rest, &mut spec, &mut lost, program, s)?;
    }
    let kept = paths::split(rest, &s.schema, "spec", &mut lost);
    merge(&mut spec, kept);
    let absent = restore(&mut out, &mut spec, &s.name, &s.steps);
    keep_aside(&mut out, &c.hub, lost);
    let had_spec = had_spec && !absent.iter().any(Vec::is_empty);
    finish(&mut out, spec, had_spec);
    Ok(out)
}

/// One step from the hub: from the hub's fields (`rest`) into the spoke's (`spec`).
fn backward(
    step: &Step,
    rest: &mut Value,
    spec: &mut Value,
    lost: &mut Map<String, Value>,
    program: &Program,
    s: &Spoke,
) -> Result<(), ConvertError> {
    match step {
        Step::Move { from, to } => {
            if let Some(v) = take(rest, to) {
                place(spec, (from, to), v, &s.schema, lost);
            }
        }
        Step::Transform {
            from, to, from_hub, ..
        } => {
            if let Some(v) = take(rest, to) {
                let out = eval(program, from_hub, v.clone(), &s.name)?;
                if out.is_null() {
                    lost.insert(dotted(to), v);
                } else {
                    place(spec, (from, to), out, &s.schema, lost);
                }
            }
        }
        Step::Keyed { from, to, key } => {
            if let Some(v) = take(rest, to) {
                let list = keyed::to_list(v, key).map_err(|r| keyed_error(&s.name, to, r))?;
                set(spec, from, list);
            }
        }
        // The hub's value comes back from the default, unless it was another, or none.
        Step::Default { field, value } => match take(rest, field) {
            Some(v) if &v != value => {
                lost.insert(dotted(field), v);
            }
            Some(_) => {}
            None => {
                lost.insert(format!("{ABSENT}{}", dotted(field)), json!(true));
            }
        },
    }
    Ok(())
}

/// `spec.` and the path, dotted.
fn dotted(path: &[String]) -> String {
    format!("spec.{}", path.join("."))
}

/// Sets `path` to `v`, but for what the target schema has no place for at that path:
/// kept aside, under the path it came from (`came_from`), for its own version.
fn place(
    spec: &mut Value,
    (path, came_from): (&[String], &[String]),
    v: Value,
    schema: &Value,
    lost: &mut Map<String, Value>,
) {
    let at = path
        .iter()
        .fold(schema, |s, k| &s["properties"][k.as_str()]);
    let v = paths::split(v, at, &dotted(came_from), lost);
    set(spec, path, v);
}

fn finish(out: &mut Value, spec: Value, had_spec: bool) {
    let empty = spec.as_object().is_some_and(Map::is_empty);
    if had_spec || !empty {
        out["spec"] = spec;
    } else if let Some(o) = out.as_object_mut() {
        o.remove("spec");
    }
}

fn eval(
    program: &Program,
    e: &ExprRef,
    value: Value,
    version: &str,
) -> Result<Value, ConvertError> {
    let ctx =
        minijinja::context! { value => minijinja::Value::from(minijinja::value::Serde(&value)) };
    let failed = |error: String| ConvertError::Expression {
        version: version.to_string(),
        source_text: e.source.to_string(),
        error,
    };
    let out = program
        .eval(e, &ctx)
        .map_err(|err| failed(err.to_string()))?;
    if out.is_undefined() || out.is_none() {
        return Ok(Value::Null);
    }
    serde_json::to_value(&out).map_err(|err| failed(err.to_string()))
}

fn keyed_error(version: &str, path: &[String], reason: String) -> ConvertError {
    ConvertError::Keyed {
        version: version.to_string(),
        path: format!("spec.{}", path.join(".")),
        reason,
    }
}

/// The prefix of a kept entry that is the order of a `keyed` list, not a field.
const ORDER: &str = "@order:";
/// The prefix of a kept entry for a field with a `default` step that was not there.
const ABSENT: &str = "@absent:";

/// Puts back the fields of `version` kept aside when the object left it (and the order
/// of its `keyed` lists), and drops the annotation that held them; gives the fields that
/// were not there (not to be defaulted). A kept field is put back only where the steps
/// gave nothing: what they give was written after it was kept.
fn restore(out: &mut Value, spec: &mut Value, version: &str, steps: &[Step]) -> Vec<Vec<String>> {
    let mut absent = Vec::new();
    let key = format!("{KEPT}{version}");
    let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) else {
        return absent;
    };
    let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut) else {
        return absent;
    };
    let Some(text) = annotations.remove(&key) else {
        return absent;
    };
    if annotations.is_empty() {
        meta.remove("annotations");
    }
    let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(text.as_str().unwrap_or(""))
    else {
        return absent;
    };
    let segments = |p: &str| -> Vec<String> { p.split('.').skip(1).map(str::to_string).collect() };
    for (path, v) in fields {
        if let Some(list) = path.strip_prefix(ORDER) {
            reorder(spec, list, &v, steps);
        } else if let Some(field) = path.strip_prefix(ABSENT) {
            absent.push(segments(field));
        } else if !segments(&path).is_empty() && get(spec, &segments(&path)).is_none() {
            // Kept when the object left this version, the field had no value in the other
            // one (the steps gave it none). If they give it one now, it was written
            // since, through the other version: the newer write wins, the kept value goes.
            set(spec, &segments(&path), v);
        }
    }
    absent
}

/// Puts the `keyed` list at `path` back in the order it had.
fn reorder(spec: &mut Value, path: &str, order: &Value, steps: &[Step]) {
    let segments: Vec<String> = path.split('.').skip(1).map(str::to_string).collect();
    let key = steps.iter().find_map(|s| match s {
        Step::Keyed { from, key, .. } if *from == segments => Some(key),
        _ => None,
    });
    let (Some(key), Some(order)) = (key, order.as_array()) else {
        return;
    };
    let list = segments
        .iter()
        .try_fold(&mut *spec, |v, k| v.as_object_mut()?.get_mut(k));
    if let Some(list) = list {
        keyed::reorder(list, key, order);
    }
}

/// Keeps the fields of `version` that the converted object has no place for.
fn keep_aside(out: &mut Value, version: &str, lost: Map<String, Value>) {
    let key = format!("{KEPT}{version}");
    if lost.is_empty() {
        let meta = out.get_mut("metadata").and_then(Value::as_object_mut);
        if let Some(meta) = meta
            && let Some(a) = meta.get_mut("annotations").and_then(Value::as_object_mut)
        {
            a.remove(&key);
            if a.is_empty() {
                meta.remove("annotations");
            }
        }
        return;
    }
    if !out["metadata"].is_object() {
        out["metadata"] = json!({});
    }
    if !out["metadata"]["annotations"].is_object() {
        out["metadata"]["annotations"] = json!({});
    }
    out["metadata"]["annotations"][key] = json!(Value::Object(lost).to_string());
}

#[cfg(test)]
mod tests;
