//! The existing objects a rule reads (`existing[]`): one cached watch per kind (every
//! object of it in scope: the rule reads them by name or labels, which are the resource's
//! to choose), and what a lookup finds in it.

use super::cached::Cached;
use super::discovery::Resolved;
use crate::render::Lookup;
use kube::ResourceExt;
use kube::runtime::reflector::{ObjectRef, Store};
use serde_json::Value;

/// A kind of existing object, with its cache.
pub struct ExistingKind {
    pub resolved: Resolved,
    pub store: Store<Cached>,
}

impl ExistingKind {
    /// The cached objects `lookup` may find in namespace `ns`: the one of its name, or
    /// every object there (a label lookup is matched by the caller, on the whole object).
    pub fn candidates(&self, ns: &str, lookup: &Lookup) -> Vec<Value> {
        let objects: Vec<_> = match lookup {
            Lookup::Name(n) => self
                .store
                .get(&ObjectRef::new_with(n, self.resolved.resource.clone()).within(ns))
                .into_iter()
                .collect(),
            Lookup::Labels(_) => self
                .store
                .state()
                .into_iter()
                .filter(|o| o.namespace().as_deref() == Some(ns))
                .collect(),
        };
        objects.iter().filter_map(|o| o.value()).collect()
    }
}
