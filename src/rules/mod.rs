//! Step 1 of the pipeline: load rules files and check them. Everything here is pure and
//! works without a cluster.

pub mod book;
pub mod compile;
pub mod error;
pub mod lines;
pub mod load;
pub mod program;
pub mod spec;

pub use compile::{CompiledChild, CompiledField, CompiledRule, FieldSource, Key, Node, Source};
pub use error::{LoadError, Location};
pub use load::{FileLoad, collect_files, load_file, load_paths, load_str};
pub use spec::{FieldType, RuleSpec, WatchSpec};
