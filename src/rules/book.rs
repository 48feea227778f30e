//! The rule book: the rules loaded from the configured paths, reloaded on demand, with
//! a last-good fallback. A file that fails to load keeps its previous rules (those it
//! no longer yields are kept at their last good version) and reports its errors; other
//! files are untouched. A file that is gone takes its rules with it.

use super::compile::CompiledRule;
use super::error::LoadError;
use super::load::{collect_files, load_file};
use super::object::{ObjectLoad, load_object, source_path};
use super::policy::Policy;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

/// One problem from the last load, for logs, metrics and the status endpoint.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Problem {
    pub file: String,
    pub message: String,
}

/// The rules in force and the problems of the last load.
#[derive(Debug, Default)]
pub struct RuleBook {
    paths: Vec<PathBuf>,
    files: BTreeMap<PathBuf, Vec<Arc<CompiledRule>>>,
    /// The rules last put in force, by name: the fallback of a rule whose new version
    /// collides with another (same watched resource).
    in_force: BTreeMap<String, Arc<CompiledRule>>,
    /// The Rule objects, by name: the last load of each and its last good rule.
    objects: BTreeMap<String, ObjectEntry>,
    pub problems: Vec<Problem>,
    /// What the installation refuses (`--require-identity`, `--allow-secret-reads`).
    policy: Policy,
}

/// One Rule object: what its current generation gave, and the last rule it gave that
/// compiled (which stays in force while a later generation has errors).
#[derive(Debug, Clone)]
struct ObjectEntry {
    load: ObjectLoad,
    good: Option<Arc<CompiledRule>>,
}

/// Where a Rule object stands, for its status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectVerdict {
    /// The generation last loaded.
    pub generation: i64,
    /// Its generation compiled and is the rule in force under that name.
    pub accepted: bool,
    /// The generation of the rule in force under its name, if any.
    pub in_force: Option<i64>,
    /// Every problem, each with its path in the Rule (or its reason).
    pub problems: Vec<String>,
    /// What runs only because the installation allows it (`--allow-secret-reads`: each
    /// place the rule copies Secret data to), each with its path.
    pub warnings: Vec<String>,
}

impl RuleBook {
    pub fn new(paths: Vec<PathBuf>) -> RuleBook {
        RuleBook {
            paths,
            ..Default::default()
        }
    }

    /// The book refusing what `policy` refuses, as errors of the rules that break it.
    pub fn with_policy(mut self, policy: Policy) -> RuleBook {
        self.policy = policy;
        self
    }

    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    /// The Rule objects the cluster holds now (all of them): each loaded; a generation
    /// with errors keeps the last good one of the same object in force.
    pub fn set_objects(&mut self, objects: &[serde_json::Value]) {
        let mut next = BTreeMap::new();
        for o in objects {
            // A Rule whose spec is unchanged (same uid, same generation: its status or
            // labels moved, as each status write of ruleop's does) is not compiled again.
            let name = o["metadata"]["name"].as_str().unwrap_or_default();
            if let Some(mut e) = self.objects.get(name).cloned()
                && e.load.uid == o["metadata"]["uid"].as_str().unwrap_or_default()
                && e.load.generation == o["metadata"]["generation"].as_i64().unwrap_or_default()
                && e.load.generation != 0
            {
                e.load.revision = o["status"]["revision"].as_i64();
                e.load.serving = super::object::serving(o);
                next.insert(e.load.name.clone(), e);
                continue;
            }
            let mut load = load_object(o);
            Self::refuse_object_against_policy(&self.policy, &mut load);
            let prev = self
                .objects
                .get(&load.name)
                .filter(|e| e.load.uid == load.uid)
                .and_then(|e| e.good.clone());
            let good = load.rule.clone().or(prev);
            next.insert(load.name.clone(), ObjectEntry { load, good });
        }
        self.objects = next;
    }

    /// Where Rule object `name` stands, after [`RuleBook::rules`]; None if there is none.
    pub fn object_verdict(&self, name: &str) -> Option<ObjectVerdict> {
        let e = self.objects.get(name)?;
        let file = source_path(name).display().to_string();
        let mut problems: Vec<String> = e.load.problems.iter().map(ToString::to_string).collect();
        problems.extend(
            self.problems
                .iter()
                .filter(|p| p.file == file)
                .map(|p| p.message.clone()),
        );
        // (Generation 0: a revision read back from the cluster after a restart.)
        let in_force = self
            .in_force
            .get(name)
            .filter(|r| r.at.file == source_path(name))
            .and_then(|r| r.object.as_ref())
            .map(|o| o.generation);
        let warnings = match (&e.load.rule, self.policy.allow_secret_reads) {
            (Some(r), true) => super::policy::secret_flows(r)
                .iter()
                .map(|f| {
                    format!(
                        "{}: {} (run because of --allow-secret-reads)",
                        f.path(),
                        f.describe()
                    )
                })
                .collect(),
            _ => Vec::new(),
        };
        Some(ObjectVerdict {
            generation: e.load.generation,
            accepted: problems.is_empty() && in_force == Some(e.load.generation),
            in_force,
            problems,
            warnings,
        })
    }

    /// The Rule objects with no rule in force (their generation does not compile, and
    /// this process never had a good one: it started since), with the revision their
    /// status says was: its spec, read back from its ControllerRevision, serves meanwhile.
    pub fn without_good(&self) -> Vec<(String, String, i64)> {
        self.objects
            .values()
            .filter(|e| e.good.is_none())
            .filter_map(|e| Some((e.load.name.clone(), e.load.uid.clone(), e.load.revision?)))
            .collect()
    }

    /// The spec of the revision last in force for Rule `name` (see
    /// [`RuleBook::without_good`]), put in force until a generation compiles.
    pub fn set_fallback(&mut self, name: &str, uid: &str, spec: &serde_json::Value) {
        let policy = self.policy;
        let Some(e) = self.objects.get_mut(name).filter(|e| e.load.uid == uid) else {
            return;
        };
        let created = e.load.created.clone();
        let obj = serde_json::json!({"metadata": {"name": name, "uid": uid, "generation": 0, "creationTimestamp": created}, "spec": spec});
        let mut load = load_object(&obj);
        Self::refuse_object_against_policy(&policy, &mut load);
        e.good = load.rule;
    }

    /// The file's rules that break the policy, refused with their problems.
    fn refuse_against_policy(&self, load: &mut super::load::FileLoad) {
        let policy = self.policy;
        let mut errors = Vec::new();
        load.rules.retain(|r| {
            let found = super::policy::problems(r, &policy);
            let keep = found.is_empty();
            errors.extend(found.into_iter().map(|(_, e)| e));
            keep
        });
        load.errors.extend(errors);
    }

    /// A Rule whose rule breaks the policy: refused, each problem at its path.
    fn refuse_object_against_policy(policy: &Policy, load: &mut ObjectLoad) {
        let Some(rule) = &load.rule else { return };
        let found = super::policy::object_problems(rule, policy);
        if found.is_empty() {
            return;
        }
        load.rule = None;
        load.problems.extend(found);
    }

    /// Every rule name a source holds now, in force or refused (a rule whose name is not
    /// here was removed for good).
    pub fn names(&self) -> std::collections::BTreeSet<String> {
        self.files
            .values()
            .flatten()
            .map(|r| r.name.clone())
            .chain(self.objects.keys().cloned())
            .collect()
    }

    /// The names of the Rule objects.
    pub fn object_names(&self) -> Vec<String> {
        self.objects.keys().cloned().collect()
    }

    /// Reads every file again. Returns the problems found by this load.
    pub fn reload(&mut self) -> &[Problem] {
        self.problems.clear();
        let files = match collect_files(&self.paths) {
            Ok(f) => f,
            Err(e) => {
                // The paths cannot be listed (a swap in progress?): keep everything.
                self.problems.push(Problem {
                    file: e.file().display().to_string(),
                    message: e.to_string(),
                });
                return &self.problems;
            }
        };
        let mut next = BTreeMap::new();
        for f in files {
            let mut load = load_file(&f);
            self.refuse_against_policy(&mut load);
            let mut rules = load.rules;
            if !load.errors.is_empty() {
                for e in &load.errors {
                    self.problems.push(Problem {
                        file: f.display().to_string(),
                        message: e.to_string(),
                    });
                }
                // Keep the last good version of every rule this file no longer yields.
                if let Some(old) = self.files.get(&f) {
                    for r in old {
                        if !rules.iter().any(|n| n.name == r.name) {
                            rules.push(r.clone());
                        }
                    }
                }
            }
            next.insert(f, rules);
        }
        self.files = next;
        &self.problems
    }

    /// Which of the rules that watch one kind serves it: the first by this key. A Rule
    /// whose status says it serves that kind (`Accepted`, `status.watch`: the cluster's
    /// word, the same on every replica and after a failover); then a file's rule; then the
    /// Rule created first, then by name.
    fn precedence(&self, r: &CompiledRule) -> (bool, bool, String, String) {
        let watch = format!("{}/{}", r.watch.group, r.watch.resource);
        let entry = r.object.as_ref().and_then(|_| self.objects.get(&r.name));
        let serving = entry.is_some_and(|e| e.load.serving.as_deref() == Some(watch.as_str()));
        let created = entry.map(|e| e.load.created.clone()).unwrap_or_default();
        (!serving, r.object.is_some(), created, r.name.clone())
    }

    /// The rules in force: one per name (the first file in path order wins), and one per
    /// watched resource. When a Rule object watches what another rule serves (a Rule that
    /// serves it, a file's, an older Rule's), only the newcomer is refused: the serving one
    /// goes on (see
    /// [`RuleBook::precedence`]). Two files' rules on one resource are both refused, on
    /// every replica alike (which one a replica loaded first is no ground for a choice). A
    /// refused rule keeps its last version in force if that one watched something else.
    pub fn rules(&mut self) -> Vec<Arc<CompiledRule>> {
        // Files first: a Rule object named as a file's rule is the one refused.
        let all: Vec<Arc<CompiledRule>> = self
            .files
            .values()
            .flatten()
            .cloned()
            .chain(self.objects.values().filter_map(|e| e.good.clone()))
            .collect();
        let (named, dups) = dedupe_names(all.clone());
        // Rules that name one kind any way (its resource, its kind, its CRD) are one group.
        let mut kept = Vec::new();
        let mut problems: Vec<LoadError> = dups;
        for mut rules in super::claims::groups(&named) {
            if let [only] = rules.as_slice() {
                kept.push(only.clone());
                continue;
            }
            rules.sort_by_key(|r| self.precedence(r));
            let both_files = rules[0].object.is_none() && rules[1].object.is_none();
            if !both_files {
                // One serves (the Rule serving it, a file's, the oldest Rule): the others
                // are refused, and it goes on.
                let serving = rules[0].clone();
                for r in &rules[1..] {
                    problems.push(same_watch(r, &serving, true));
                }
                kept.push(serving);
                continue;
            }
            for (i, r) in rules.iter().enumerate() {
                let other = &rules[if i == 0 { 1 } else { 0 }];
                problems.push(same_watch(r, other, false));
            }
        }
        let overlap = |a: &CompiledRule, b: &CompiledRule| {
            super::claims::shared(&super::claims::claims(a), &super::claims::claims(b)).is_some()
        };
        for d in problems {
            if let LoadError::SameWatch(w) = &d
                && let Some(prev) = self.in_force.get(&w.rule)
                && !kept.iter().any(|k| k.name == prev.name || overlap(k, prev))
                && !all.iter().any(|r| r.name != prev.name && overlap(r, prev))
            {
                kept.push(prev.clone());
            }
            let p = Problem {
                file: d.file().display().to_string(),
                message: d.to_string(),
            };
            if !self.problems.contains(&p) {
                self.problems.push(p);
            }
        }
        kept.sort_by(|a, b| a.name.cmp(&b.name));
        self.in_force = kept.iter().map(|r| (r.name.clone(), r.clone())).collect();
        kept
    }
}

/// The problem of `rule`, which watches what `other` watches (and serves, if `serving`).
fn same_watch(rule: &CompiledRule, other: &CompiledRule, serving: bool) -> LoadError {
    use super::claims::{claims, describe, shared};
    let (mine, theirs) = (claims(rule), claims(other));
    LoadError::SameWatch(Box::new(super::error::SameWatch {
        serving,
        rule: rule.name.clone(),
        other: other.name.clone(),
        watch: describe(rule, shared(&mine, &theirs)),
        first: other.at.clone(),
        second: rule.at.clone(),
    }))
}

/// Rules with distinct names (the first of a name, in path order, wins), and an error for
/// each other one.
fn dedupe_names(rules: Vec<Arc<CompiledRule>>) -> (Vec<Arc<CompiledRule>>, Vec<LoadError>) {
    let mut first: BTreeMap<String, super::error::Location> = BTreeMap::new();
    let mut kept = Vec::new();
    let mut errors = Vec::new();
    for r in rules {
        match first.get(&r.name) {
            Some(at) => errors.push(LoadError::Duplicate {
                rule: r.name.clone(),
                first: at.clone(),
                second: r.at.clone(),
            }),
            None => {
                first.insert(r.name.clone(), r.at.clone());
                kept.push(r);
            }
        }
    }
    (kept, errors)
}

#[cfg(test)]
#[path = "book_tests.rs"]
mod tests;
