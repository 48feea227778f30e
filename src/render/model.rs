//! What rendering makes: one child object ready to apply ([`Rendered`]), the labels and
//! annotation ruleop puts on every child, and why a render fails ([`RenderError`]).

use serde_json::Value;

/// Label naming the rule that made a child; children watches select on it.
pub const RULE_LABEL: &str = "ruleop.dev/rule";
/// Label naming the child id within its rule.
pub const CHILD_LABEL: &str = "ruleop.dev/child";
/// Annotation on a child whose objects are orphaned, not deleted, when they leave the rule
/// (`onRemove: Orphan`): the object itself says so, whatever version of the rule runs.
pub const ON_REMOVE_ANNOTATION: &str = "ruleop.dev/on-remove";
/// Annotation holding a hash of everything ruleop sets on the child.
pub const HASH_ANNOTATION: &str = "ruleop.dev/applied-hash";
/// Annotation a resource keeps after `ruleop release`: the uids of the children let go
/// (comma-separated), which ruleop, serving it again, takes back as this resource's (and
/// then removes the annotation).
pub const RELEASED_ANNOTATION: &str = "ruleop.dev/released-children";

/// The uids a [`RELEASED_ANNOTATION`] value names.
pub fn released_uids(value: &str) -> impl Iterator<Item = &str> {
    value.split(',').map(str::trim).filter(|u| !u.is_empty())
}
/// The field manager of every write ruleop makes.
pub const FIELD_MANAGER: &str = "ruleop";

/// One rendered child, ready to apply.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    pub id: String,
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub namespace: String,
    pub object: Value,
    pub hash: String,
    /// The item it was made for, when its child is a collection.
    pub item: Option<Item>,
    /// Its size as JSON, in bytes (counted against the render's budget).
    pub size: usize,
}

/// The item of a collection one object was made for.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    pub index: usize,
    pub value: Value,
}

impl Rendered {
    /// `id`, or `id[index]` for an object of a collection: how status and errors name it.
    pub fn instance(&self) -> String {
        match &self.item {
            None => self.id.clone(),
            Some(i) => format!("{}[{}]", self.id, i.index),
        }
    }
}

/// Why a custom resource's children could not be rendered. These are the user's
/// mistakes (in the custom resource, or in the rule for this custom resource): they are
/// reported on the custom resource and wait for a change.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum RenderError {
    /// The custom resource has no name.
    #[error("the custom resource has no metadata.name")]
    NoName,
    /// The custom resource is not namespaced.
    #[error(
        "the custom resource has no namespace; ruleop makes children only for namespaced kinds"
    )]
    NoNamespace,
    /// `spec` is there but is not an object.
    #[error("spec is not an object")]
    SpecNotObject,
    /// A template or expression failed for this custom resource.
    #[error("{at}: child `{child}`, field `{field}`: {reason}")]
    Eval {
        /// `file:line` of the template or expression in the rules file.
        at: String,
        child: String,
        field: String,
        reason: String,
    },
    /// The rendered child names a namespace other than the custom resource's.
    #[error(
        "child `{child}` would go to namespace {found:?}; children always live in the custom resource's namespace {expected:?}; nothing was created"
    )]
    OtherNamespace {
        child: String,
        found: String,
        expected: String,
    },
    /// The rendered child has no usable name.
    #[error("child `{child}`: metadata.name rendered to {found}, not a non-empty string")]
    BadName { child: String, found: String },
    /// The rendered name is not a valid name for its kind (or would change the request's
    /// path): nothing of it is sent.
    #[error(
        "child `{child}`: metadata.name rendered to {name:?}, not a valid name: {why}; nothing was sent for it\n  fix: make the name from values that are valid names (`| lower`, `| replace`), or check the resource's field in the kind's schema (a `pattern`)"
    )]
    InvalidName {
        child: String,
        name: String,
        why: String,
    },
    /// A template read a field of another child's live object that it does not have yet.
    #[error("child `{child}` waits for `{what}` (not in the cluster yet)")]
    Unobserved { child: String, what: String },
    /// The render of this resource went past its budget (objects, bytes or evaluations):
    /// one resource may not take the process's memory or time from the others.
    #[error(
        "the render of this resource is past its budget: {what} (at most {limit}); nothing was applied: make fewer or smaller objects for one resource, or split it into several"
    )]
    Budget { what: String, limit: String },
    /// Two children rendered the same object (same group, kind and name).
    #[error(
        "`{first}` and `{second}` both render {kind} {name:?}; each apply would undo the other's: nothing was applied (give them names that differ for every resource, and for every item of a collection)"
    )]
    SameObject {
        first: String,
        second: String,
        kind: String,
        name: String,
    },
}

/// The API group of an `apiVersion` (empty for the core group).
pub fn group_of(api_version: &str) -> &str {
    crate::schema::kinds::group_version(api_version).0
}

/// Refuses two rendered children that are one object.
pub(crate) fn check_distinct(children: &[Rendered]) -> Result<(), RenderError> {
    for (i, b) in children.iter().enumerate() {
        let same = |a: &&Rendered| {
            a.name == b.name
                && a.kind == b.kind
                && group_of(&a.api_version) == group_of(&b.api_version)
        };
        if let Some(a) = children[..i].iter().find(same) {
            return Err(RenderError::SameObject {
                first: a.instance(),
                second: b.instance(),
                kind: b.kind.clone(),
                name: b.name.clone(),
            });
        }
    }
    Ok(())
}
