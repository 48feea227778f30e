//! What a path in a template or an expression reads: `children.<id>.…`, `rendered.<id>.…`,
//! `observed.<id>.…` (a child, by its kind's schema), `existing.<id>.…` (an existing
//! object), `spec.…` and `status.…` (the watched kind, by the rule's `schema:`).

use super::document::Part;
use super::fields::{kind_schema, own_schema, segments};
use serde_json::Value;

/// The object a path starts at: its schema, and the segments after the object's name.
pub struct Target<'p> {
    pub schema: Value,
    pub rest: Vec<&'p str>,
}

/// The heads of paths that name a child by id.
pub const CHILD_HEADS: &[&str] = &["children", "rendered", "observed"];

/// The object `path` reads in `part`'s rule, if ruleop knows its schema.
pub fn target<'p>(part: &Part, path: &'p str) -> Option<Target<'p>> {
    let segs = segments(path);
    let (head, rest) = segs.split_first()?;
    if CHILD_HEADS.contains(head) || *head == "existing" {
        let (id, rest) = rest.split_first()?;
        let (api_version, kind) = if *head == "existing" {
            existing_kind(part, id)?
        } else {
            let c = part.child(id)?;
            (c.api_version, c.kind)
        };
        return Some(Target {
            schema: kind_schema(&api_version, &kind)?,
            rest: rest.to_vec(),
        });
    }
    if matches!(*head, "spec" | "status") {
        return Some(Target {
            schema: own_schema(part)?,
            rest: segs,
        });
    }
    None
}

fn existing_kind(part: &Part, id: &str) -> Option<(String, String)> {
    let e = part.value["existing"]
        .as_array()?
        .iter()
        .find(|e| e["id"] == id)?;
    Some((
        e["apiVersion"].as_str()?.to_string(),
        e["kind"].as_str()?.to_string(),
    ))
}
