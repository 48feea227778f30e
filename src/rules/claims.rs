//! The one record of which kind a rule serves (pure): every name the kind goes by — its
//! group and resource, its group and kind, its CRD — so that two rules naming one kind any
//! of these ways conflict, with the same answer at load ([`super::load::dedupe`], `ruleop
//! check`), in the rules in force ([`super::book`]) and in the webhook's review. The
//! conversion webhook keys a kind's conversion by its group and kind: a rule that could
//! claim a kind by another resource name would convert another team's objects.

use super::compile::CompiledRule;
use std::collections::HashMap;
use std::fmt;

/// One name of a kind a rule serves.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Claim {
    /// The watched resource of a group (the version is a view of the same objects).
    Resource { group: String, resource: String },
    /// The kind, as the rule's `schema` names it in its CRD (what conversion reviews say).
    Kind { group: String, kind: String },
    /// The CRD the rule makes.
    Crd(String),
}

impl fmt::Display for Claim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let core = |g: &str| if g.is_empty() { "core" } else { g }.to_string();
        match self {
            Claim::Resource { group, resource } => write!(f, "{resource} of {}", core(group)),
            Claim::Kind { group, kind } => write!(f, "the kind {kind} of {}", core(group)),
            Claim::Crd(name) => write!(f, "the CRD {name}"),
        }
    }
}

/// Every name of the kind `rule` serves (kinds compared without regard to case, as the API
/// server refuses a second CRD whose kind differs only by case from one it serves).
pub fn claims(rule: &CompiledRule) -> Vec<Claim> {
    let group = rule.watch.group.trim().to_ascii_lowercase();
    let mut out = vec![Claim::Resource {
        group: group.clone(),
        resource: rule.watch.resource.trim().to_ascii_lowercase(),
    }];
    if let Some(kind) = rule.crd_kind() {
        out.push(Claim::Kind {
            group,
            kind: kind.to_ascii_lowercase(),
        });
    }
    if let Some(name) = rule.crd_name() {
        out.push(Claim::Crd(name.to_ascii_lowercase()));
    }
    out
}

/// The first name of a kind that both sets of claims hold.
pub fn shared<'a>(a: &'a [Claim], b: &[Claim]) -> Option<&'a Claim> {
    a.iter().find(|c| b.contains(c))
}

/// `rules` grouped by the kinds they serve: rules that share a claim, directly or through
/// another rule, are in one group (in the order of their first rule in `rules`).
pub fn groups<R: AsRef<CompiledRule> + Clone>(rules: &[R]) -> Vec<Vec<R>> {
    let mut parent: Vec<usize> = (0..rules.len()).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let mut first: HashMap<Claim, usize> = HashMap::new();
    for (i, r) in rules.iter().enumerate() {
        for c in claims(r.as_ref()) {
            match first.get(&c) {
                Some(&j) => {
                    let (a, b) = (root(&mut parent, i), root(&mut parent, j));
                    parent[a.max(b)] = a.min(b);
                }
                None => {
                    first.insert(c, i);
                }
            }
        }
    }
    let mut out: Vec<Vec<R>> = Vec::new();
    let mut at: HashMap<usize, usize> = HashMap::new();
    for (i, r) in rules.iter().enumerate() {
        let g = root(&mut parent, i);
        let slot = *at.entry(g).or_insert_with(|| {
            out.push(Vec::new());
            out.len() - 1
        });
        out[slot].push(r.clone());
    }
    out
}

/// How a rule's claim reads in a conflict: its watch as written, and the kind's name when
/// the two rules meet on another name than the resource.
pub fn describe(rule: &CompiledRule, on: Option<&Claim>) -> String {
    let w = &rule.watch;
    let watch = format!("{}/{} {}", w.group, w.version, w.resource);
    match on {
        None | Some(Claim::Resource { .. }) => watch,
        Some(other) => format!("{watch} ({other})"),
    }
}
