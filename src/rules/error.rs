//! Errors from loading and compiling rules files. Every one names the file and, where
//! there is one, the line, the rule and the child, and says what to do about it.

use std::fmt;
use std::path::PathBuf;

/// A place in a rules file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    pub file: PathBuf,
    pub line: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.file.display(), self.line)
    }
}

/// Why a rules file, or one rule in it, could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file or directory could not be read.
    #[error("{}: cannot read rules: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// The file is larger than a rules file may be.
    #[error("{}: {size} bytes is more than the {limit} bytes a rules file may have; split it into several files", path.display())]
    TooLarge {
        path: PathBuf,
        size: u64,
        limit: u64,
    },
    /// The YAML does not parse, or a document does not have the shape of a rule.
    #[error("{}:{line}:{column}: {}{message}\n  fix: {}", path.display(), rule_prefix(rule, child), fix_for(message))]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        rule: Option<String>,
        child: Option<String>,
        message: String,
    },
    /// A rule has the right shape but something in it is wrong.
    #[error("{0}")]
    Rule(Box<RuleProblem>),
    /// Two rules share a name.
    #[error(
        "{second}: rule `{rule}` is already defined at {first}\n  fix: give every rule a unique name"
    )]
    Duplicate {
        rule: String,
        first: Location,
        second: Location,
    },
    /// Two rules watch the same kind: each status write would undo the other's.
    #[error("{0}")]
    SameWatch(Box<SameWatch>),
    /// The paths given hold no rules files.
    #[error("{}: no rules files here (looked for *.yaml and *.yml)", path.display())]
    NoFiles { path: PathBuf },
    /// A sample resource (`check --sample`) no rule takes.
    #[error("{}: {message}\n  fix: {fix}", path.display())]
    Sample {
        path: PathBuf,
        message: String,
        fix: String,
    },
}

/// A second rule on an already watched resource.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{second}: rule `{rule}` watches {watch}, which rule `{other}` at {first} {}; {}\n  fix: one rule per kind (by its resource, its kind and its CRD alike): merge the two rules, or watch another kind",
    if *.serving { "serves" } else { "already watches" },
    if *.serving { format!("this rule is refused and `{other}` goes on serving") } else { "each would overwrite the other's status and children forever".to_string() }
)]
pub struct SameWatch {
    /// `other` serves the kind and goes on; only `rule` is refused.
    pub serving: bool,
    pub rule: String,
    pub other: String,
    pub watch: String,
    pub first: Location,
    pub second: Location,
}

/// What is wrong in a rule, where, and what to do about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleProblem {
    pub at: Location,
    pub rule: String,
    pub child: Option<String>,
    pub problem: String,
    pub fix: String,
}

impl fmt::Display for RuleProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: rule `{}`{}: {}\n  fix: {}",
            self.at,
            self.rule,
            child_suffix(&self.child),
            self.problem,
            self.fix
        )
    }
}

fn rule_prefix(rule: &Option<String>, child: &Option<String>) -> String {
    match rule {
        Some(r) => format!("rule `{r}`{}: ", child_suffix(child)),
        None => String::new(),
    }
}

fn fix_for(message: &str) -> &'static str {
    if message.contains("an unquoted `{{ ... }}`") {
        "quote the template: `name: \"{{ name }}\"`"
    } else if message.contains("unknown field") {
        "remove or correct the field; the rules reference (docs/reference/rules.md) lists every field"
    } else if message.contains("missing field") {
        "add the field; the rules reference (docs/reference/rules.md) lists what each part needs"
    } else if message.contains("unknown variant") {
        "write one of the values the message lists (they are case-sensitive)"
    } else if message.contains("invalid type") {
        "give the field a value of the type the rules reference (docs/reference/rules.md) names"
    } else if message.contains("recursion limit") || message.contains("repetition limit") {
        "the file nests or repeats too deeply (a YAML bomb?); write it out plainly"
    } else {
        "fix the YAML syntax at that line"
    }
}

fn child_suffix(child: &Option<String>) -> String {
    child
        .as_ref()
        .map(|c| format!(", child `{c}`"))
        .unwrap_or_default()
}

impl LoadError {
    /// The rule the error is about, when it names one.
    pub fn rule(&self) -> Option<&str> {
        match self {
            LoadError::Rule(p) => Some(&p.rule),
            LoadError::Syntax { rule, .. } => rule.as_deref(),
            LoadError::Duplicate { rule, .. } => Some(rule),
            LoadError::SameWatch(w) => Some(&w.rule),
            LoadError::Read { .. }
            | LoadError::TooLarge { .. }
            | LoadError::NoFiles { .. }
            | LoadError::Sample { .. } => None,
        }
    }

    /// The file the error is about.
    pub fn file(&self) -> &std::path::Path {
        match self {
            LoadError::Read { path, .. }
            | LoadError::TooLarge { path, .. }
            | LoadError::Syntax { path, .. }
            | LoadError::NoFiles { path }
            | LoadError::Sample { path, .. } => path,
            LoadError::Rule(p) => &p.at.file,
            LoadError::Duplicate { second, .. } => &second.file,
            LoadError::SameWatch(w) => &w.second.file,
        }
    }
}
