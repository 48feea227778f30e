//! Step 1 of the pipeline: load rules files and check them. Everything here is pure and
//! works without a cluster.
//!
//! Owns: the rules format ([`spec`]), loading files with their lines ([`load`],
//! [`lines`]), compiling a rule ([`compile`]: templates, children, links, status fields),
//! the children's graph ([`graph`]), the template engine's program and helpers
//! ([`program`], [`helpers`]), a rule checked against its kind's CRD ([`crd`]), errors
//! ([`error`]), which kind each rule serves by every name it goes by ([`claims`]) and the
//! rules in force with their last good versions ([`book`]).
//! Uses: `schema` and `suggest`. Used by: everything above it.

pub mod book;
pub mod claims;
pub mod compile;
pub mod crd;
pub mod error;
pub mod graph;
pub mod helpers;
pub mod lines;
pub mod load;
pub mod object;
pub mod policy;
pub mod program;
pub mod spec;

pub use compile::{
    CompiledChild, CompiledExisting, CompiledField, CompiledRule, Each, FieldSource, Find,
    Identity, Key, Node, Source,
};
pub use error::{LoadError, Location};
pub use load::{FileLoad, collect_files, load_file, load_paths, load_str};
pub use spec::{FieldType, RuleSpec, WatchSpec};

/// Rules for unit tests elsewhere in the crate.
#[cfg(test)]
pub(crate) mod testing {
    use super::{CompiledRule, load_str};
    use std::path::Path;
    use std::sync::Arc;

    /// The one rule of a rules file's text, which must load without errors.
    pub fn rule(text: &str) -> Arc<CompiledRule> {
        let (mut rules, errors) = load_str(text, Path::new("test.yaml"));
        assert!(errors.is_empty(), "{errors:?}");
        rules.remove(0)
    }

    /// The documents of a YAML stream, as JSON.
    pub fn yaml_docs(text: &str) -> Vec<serde_json::Value> {
        use serde::Deserialize;
        serde_yaml::Deserializer::from_str(text)
            .filter_map(|d| serde_json::Value::deserialize(d).ok())
            .filter(|v| !v.is_null())
            .collect()
    }

    /// The shipped WebSite rule.
    pub fn website() -> Arc<CompiledRule> {
        rule(include_str!("../../rules/website.yaml"))
    }
}
