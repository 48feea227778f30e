//! The deletion planner: every path that may delete or let go an object asks it, so one
//! rule decides them all — **an object is deleted (or let go) only when no revision in
//! force for its resource renders it, and ruleop is certain of that**:
//!
//! - a resource's prune ([`uncertain`], [`stale`]): the revision it is on no longer renders
//!   the object, every child kind's watch has listed, nothing of the resource is in doubt
//!   this round, and the rule's version may delete ([`super::newer`]);
//! - a kind's retirement ([`super::kinds::retired`]): no revision any resource is on makes
//!   the kind;
//! - a resource's deletion ([`deletion`]) and its finalizers ([`finalizers`]): the objects
//!   that ask to be orphaned, of every kind the rule has made, are let go before the
//!   resource's finalizer is released;
//! - a removed rule's release ([`release_kinds`]): the same, for every resource at once.
//!
//! What goes is deleted, or let go when it asks to be ([`removal`]).

use crate::apply::ownership::controller_ref;
use crate::render::group_of;
use crate::rules::graph;
use kube::api::DynamicObject;
use std::collections::BTreeSet;

/// The finalizer ruleop puts on resources of rules with ordered deletion.
pub const FINALIZER: &str = "ruleop.dev/ordered-deletion";

/// The finalizer ruleop puts on resources of rules with a child that orphans its objects
/// (`onRemove: Orphan`): the resource stays until those objects are no longer its own, so
/// the garbage collector does not delete them with it.
pub const ORPHAN_FINALIZER: &str = "ruleop.dev/orphan";

/// ruleop's finalizers.
pub const OURS: [&str; 2] = [FINALIZER, ORPHAN_FINALIZER];

/// What becomes of an object that leaves the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Removal {
    Delete,
    /// Left in place, no longer ruleop's (`onRemove: Orphan`).
    Orphan,
}

/// What becomes of `o` when it leaves the rule: it is let go when it asks to be (its
/// child said `onRemove: Orphan` when it was written), or when its child says so now (the
/// edit that removes it may be the one that asks for it); otherwise deleted. The object
/// decides, whatever version of the rule runs.
pub fn removal(o: &DynamicObject, child_orphans_now: bool) -> Removal {
    if crate::apply::orphans(o) || child_orphans_now {
        Removal::Orphan
    } else {
        Removal::Delete
    }
}

/// What may leave a resource's prune in doubt this round.
#[derive(Debug, Default, Clone, Copy)]
pub struct Doubts {
    /// Why the rule's version may not delete yet (see [`super::newer`]), if so.
    pub version: Option<&'static str>,
    /// Every child kind's watch has listed.
    pub listed: bool,
    /// A child waits.
    pub waiting: bool,
    /// A write of this round failed or is still on its way.
    pub unsettled: bool,
}

/// Why the children this round does not render may not be taken away now, if so: prune
/// only when certain. An object missing from a cache that has not listed may only be
/// missing from the cache; a renamed child that waits would have its object taken for
/// another's; and while a write failed or is on its way, what replaces what is not known.
pub fn uncertain(d: Doubts) -> Option<&'static str> {
    if let Some(why) = d.version {
        Some(why)
    } else if !d.listed {
        Some("a child kind's watch has not listed yet")
    } else if d.waiting {
        Some("a child waits")
    } else if d.unsettled {
        Some("a child's write failed or is on its way")
    } else {
        None
    }
}

/// Of a resource's own objects of one kind, those the revision it is on does not render
/// (`rendered`: the names it renders of that kind).
pub fn stale(owned: Vec<DynamicObject>, rendered: impl Fn(&str) -> bool) -> Vec<DynamicObject> {
    owned
        .into_iter()
        .filter(|o| !o.metadata.name.as_deref().is_some_and(&rendered))
        .collect()
}

/// Whether a listed object is one of the rule's: its controller is a resource of the
/// watched kind, one of `parents` (uids of the rule's resources) when given (a user
/// object that only copies the rule's label is not).
pub fn owned_by_rule(
    o: &DynamicObject,
    parent_group: &str,
    parent_kind: &str,
    parents: Option<&BTreeSet<String>>,
) -> bool {
    let Ok(v) = serde_json::to_value(o) else {
        return false;
    };
    controller_ref(&v).is_some_and(|r| {
        r.get("kind").and_then(|k| k.as_str()) == Some(parent_kind)
            && r.get("apiVersion")
                .and_then(|a| a.as_str())
                .is_some_and(|a| group_of(a) == parent_group)
            && parents.is_none_or(|p| {
                r.get("uid")
                    .and_then(|u| u.as_str())
                    .is_some_and(|u| p.contains(u))
            })
    })
}

/// What a resource's finalizers depend on.
#[derive(Debug, Clone, Copy)]
pub struct Holding {
    /// The rule asks for ordered deletion.
    pub ordered: bool,
    /// The rule has a child that orphans its objects.
    pub orphaning_child: bool,
    /// The resource carries the orphans' finalizer now.
    pub held: bool,
    /// The kinds recorded and no revision in force makes: unknown (None) until the
    /// inventory is read; whether there are any.
    pub unwatched: Option<bool>,
    /// An object of the resource (of a kind a watch sees) still asks to be orphaned.
    pub orphan_left: bool,
}

/// The finalizers a resource needs: ordered deletion's when the rule asks for it; the
/// orphans' while the rule has such a child, or (once held) while any object of the
/// resource may still ask to be orphaned: one of a watched kind does, or kinds no watch
/// sees are recorded or not known yet (an edit that removed the last such child, or its
/// kind, leaves its objects protected until they are let go).
pub fn finalizers(h: Holding) -> Vec<&'static str> {
    let mut out = Vec::new();
    if h.ordered {
        out.push(FINALIZER);
    }
    let unwatched = h.unwatched != Some(false);
    if h.orphaning_child || (h.held && (unwatched || h.orphan_left)) {
        out.push(ORPHAN_FINALIZER);
    }
    out
}

/// One of a resource's objects, as its deletion sees it.
#[derive(Debug, Clone, Copy)]
pub struct Leaving {
    pub removal: Removal,
    /// Its child's place in the rule (None: a child the rule no longer has).
    pub child: Option<usize>,
    /// Its own deletion has begun.
    pub deleting: bool,
}

/// What a resource being deleted looks like.
#[derive(Debug, Clone, Copy)]
pub struct Deleting<'a> {
    /// Every child kind's watch has listed.
    pub listed: bool,
    pub objects: &'a [Leaving],
    /// The resource carries the orphans' finalizer.
    pub orphan_held: bool,
    /// The kinds recorded and no revision in force makes are known.
    pub unwatched_known: bool,
    /// The rule asks for ordered deletion and the resource carries its finalizer.
    pub ordered: bool,
    /// The deletion asked for the children to stay (`--cascade=orphan`).
    pub cascade_orphan: bool,
    /// The rule's dependencies between children (indexes).
    pub deps: &'a [BTreeSet<usize>],
}

/// One step of a resource's deletion.
#[derive(Debug, PartialEq, Eq)]
pub enum Deletion {
    /// Nothing is done yet, for this reason.
    Wait(&'static str),
    Act {
        /// The objects (indexes into `objects`) to let go first.
        let_go: Vec<usize>,
        /// Let go, too, the objects of the kinds no watch sees that ask to be orphaned.
        unwatched: bool,
        then: Then,
    },
}

/// After the orphans are let go.
#[derive(Debug, PartialEq, Eq)]
pub enum Then {
    /// Release the resource (take ruleop's finalizers off).
    Release,
    /// Delete these objects (indexes into `objects`) in the foreground, and look again.
    Delete(Vec<usize>),
}

/// The next step of a resource's deletion: nothing until every child kind's watch has
/// listed (what the caches lack would be taken for gone); the objects that ask to be
/// orphaned are let go first, of every kind (those no watch sees once known); then, with
/// ordered deletion, the objects nothing left depends on are deleted (a child the rule no
/// longer has goes first); the finalizers are released once that is done.
pub fn deletion(d: Deleting) -> Deletion {
    if !d.listed {
        return Deletion::Wait("a child kind's watch has not listed yet");
    }
    if d.orphan_held && !d.unwatched_known {
        return Deletion::Wait("the kinds the rule no longer makes are not known yet");
    }
    let (let_go, rest): (Vec<usize>, Vec<usize>) =
        (0..d.objects.len()).partition(|&i| d.objects[i].removal == Removal::Orphan);
    let then = if rest.is_empty() || d.cascade_orphan || !d.ordered {
        Then::Release
    } else {
        let present: BTreeSet<usize> = rest.iter().filter_map(|&i| d.objects[i].child).collect();
        let now = deletable(d.deps, &present);
        Then::Delete(
            rest.into_iter()
                .filter(|&i| {
                    let o = d.objects[i];
                    !o.deleting && o.child.is_none_or(|c| now.contains(&c))
                })
                .collect(),
        )
    };
    Deletion::Act {
        let_go,
        unwatched: d.orphan_held,
        then,
    }
}

/// Among the children with objects left (`present`, indexes into the rule's children),
/// those that may go now: nothing left depends on them.
pub fn deletable(deps: &[BTreeSet<usize>], present: &BTreeSet<usize>) -> BTreeSet<usize> {
    present
        .iter()
        .copied()
        .filter(|&i| graph::dependents(deps, i).is_disjoint(present))
        .collect()
}

/// The kinds whose objects a removed rule lets go before it releases its resources: the
/// kinds its last version makes and those its inventory records (earlier versions').
pub fn release_kinds(
    made: &BTreeSet<super::kinds::Made>,
    recorded: &BTreeSet<super::kinds::Made>,
) -> BTreeSet<(String, String)> {
    made.iter().chain(recorded).map(|m| m.pair()).collect()
}

#[cfg(test)]
#[path = "planner_tests.rs"]
mod tests;
