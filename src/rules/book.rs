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
mod tests {
    use super::*;

    const GOOD: &str = "name: web\nwatch: {group: x.io, version: v1, resource: webs}\nchildren:\n  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"{{ name }}\"}}\n";
    const OTHER: &str = "name: other\nwatch: {group: x.io, version: v1, resource: others}\n";

    #[test]
    fn a_broken_edit_keeps_the_last_good_rule_and_reports_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("web.yaml");
        std::fs::write(&f, GOOD).unwrap();
        std::fs::write(dir.path().join("other.yaml"), OTHER).unwrap();
        let mut book = RuleBook::new(vec![dir.path().to_path_buf()]);
        assert!(book.reload().is_empty());
        let before = book.rules();
        assert_eq!(before.len(), 2);
        let fp = before
            .iter()
            .find(|r| r.name == "web")
            .unwrap()
            .fingerprint
            .clone();

        std::fs::write(&f, GOOD.replace("{{ name }}", "{{ name ")).unwrap();
        let problems = book.reload().to_vec();
        assert_eq!(problems.len(), 1);
        assert!(problems[0].message.contains("web.yaml:5"), "{problems:?}");
        let during = book.rules();
        assert_eq!(during.len(), 2, "both rules still in force");
        assert_eq!(
            during.iter().find(|r| r.name == "web").unwrap().fingerprint,
            fp,
            "the last good version"
        );

        std::fs::write(&f, GOOD.replace("{{ name }}", "{{ name }}-v2")).unwrap();
        assert!(book.reload().is_empty());
        let after = book.rules();
        assert_ne!(
            after.iter().find(|r| r.name == "web").unwrap().fingerprint,
            fp,
            "the fix is picked up"
        );
    }

    #[test]
    fn a_second_rule_on_a_watched_resource_refuses_both_and_its_last_good_version_stays() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), GOOD).unwrap();
        std::fs::write(dir.path().join("b.yaml"), OTHER).unwrap();
        let mut book = RuleBook::new(vec![dir.path().to_path_buf()]);
        assert!(book.reload().is_empty());
        assert_eq!(book.rules().len(), 2);
        // `other` now watches what `web` watches (another version of it, even).
        std::fs::write(
            dir.path().join("b.yaml"),
            OTHER.replace(
                "version: v1, resource: others",
                "version: v2, resource: webs",
            ),
        )
        .unwrap();
        book.reload();
        let rules = book.rules();
        assert_eq!(book.problems.len(), 2, "{:?}", book.problems);
        assert!(
            book.problems
                .iter()
                .any(|p| p.message.contains("b.yaml:1") && p.message.contains("already watches")),
            "{:?}",
            book.problems
        );
        let other = rules
            .iter()
            .find(|r| r.name == "other")
            .expect("last good kept");
        assert_eq!(other.watch.resource, "others");
        assert_eq!(rules.len(), 1, "`web` is refused too: nobody writes webs");
    }

    #[test]
    fn rules_that_watch_one_resource_are_all_refused_whatever_ran_before() {
        let colliding = OTHER.replace("resource: others", "resource: webs");
        // One replica ran `web`, then `other` was edited to watch what `web` watches.
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), OTHER).unwrap();
        std::fs::write(dir.path().join("b.yaml"), GOOD).unwrap();
        let mut running = RuleBook::new(vec![dir.path().to_path_buf()]);
        running.reload();
        assert_eq!(running.rules().len(), 2);
        std::fs::write(dir.path().join("a.yaml"), &colliding).unwrap();
        running.reload();
        // Another replica starts with the files as they are now.
        let mut fresh = RuleBook::new(vec![dir.path().to_path_buf()]);
        fresh.reload();
        for book in [&mut running, &mut fresh] {
            let rules = book.rules();
            assert!(
                !rules.iter().any(|r| r.watch.resource == "webs"),
                "nobody writes webs: {:?}",
                rules.iter().map(|r| &r.name).collect::<Vec<_>>()
            );
            for f in ["a.yaml", "b.yaml"] {
                assert!(
                    book.problems.iter().any(|p| p.file.ends_with(f)),
                    "{f}: {:?}",
                    book.problems
                );
            }
        }
        // The replica that ran `other` before keeps that version (it watched others).
        let rules = running.rules();
        let other = rules.iter().find(|r| r.name == "other").expect("last good");
        assert_eq!(other.watch.resource, "others");
    }

    #[test]
    fn a_deleted_file_takes_its_rules_with_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("web.yaml"), GOOD).unwrap();
        std::fs::write(dir.path().join("other.yaml"), OTHER).unwrap();
        let mut book = RuleBook::new(vec![dir.path().to_path_buf()]);
        book.reload();
        assert_eq!(book.rules().len(), 2);
        std::fs::remove_file(dir.path().join("other.yaml")).unwrap();
        book.reload();
        let names: Vec<String> = book.rules().iter().map(|r| r.name.clone()).collect();
        assert_eq!(names, vec!["web".to_string()]);
    }

    fn rule_object(
        name: &str,
        generation: i64,
        resource: &str,
        template_name: &str,
    ) -> serde_json::Value {
        serde_json::json!({"apiVersion": "ruleop.dev/v1alpha1", "kind": "Rule",
            "metadata": {"name": name, "uid": format!("uid-{name}"), "generation": generation},
            "spec": {"watch": {"group": "x.io", "version": "v1", "resource": resource},
                     "children": [{"id": "cm", "template": {"apiVersion": "v1", "kind": "ConfigMap",
                                   "metadata": {"name": template_name}}}]}})
    }

    #[test]
    fn the_policy_refuses_a_files_rule_and_a_rule_object_each_saying_why() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), GOOD).unwrap();
        let policy = Policy {
            require_identity: true,
            ..Policy::default()
        };
        let mut book = RuleBook::new(vec![dir.path().to_path_buf()]).with_policy(policy);
        let problems = book.reload().to_vec();
        assert!(
            problems
                .iter()
                .any(|p| p.message.contains("--require-identity")),
            "{problems:?}"
        );
        book.set_objects(&[rule_object("obj", 1, "objs", "x")]);
        assert!(book.rules().is_empty(), "neither runs");
        let v = book.object_verdict("obj").unwrap();
        assert!(!v.accepted);
        assert!(
            v.problems
                .iter()
                .any(|p| p.starts_with("spec.serviceAccount: ") && p.contains("--require-identity")),
            "{:?}",
            v.problems
        );
        // Allowed to copy Secrets: it runs, and its status says where it copies them.
        let copies = "name: obj\nwatch: {group: x.io, version: v1, resource: objs}\nexisting:\n  - {id: s, apiVersion: v1, kind: Secret, name: creds}\nchildren:\n  - id: cm\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: x}, data: {t: \"{{ existing.s.data.t }}\"}}\n";
        let spec: serde_json::Value = serde_yaml::from_str(copies).unwrap();
        let obj = serde_json::json!({"metadata": {"name": "obj", "uid": "u", "generation": 1}, "spec": spec});
        let mut strict = RuleBook::new(Vec::new());
        strict.set_objects(std::slice::from_ref(&obj));
        assert!(strict.rules().is_empty(), "refused without the flag");
        let allowing = Policy {
            allow_secret_reads: true,
            ..Policy::default()
        };
        let mut allowed = RuleBook::new(Vec::new()).with_policy(allowing);
        allowed.set_objects(&[obj]);
        assert_eq!(allowed.rules().len(), 1);
        let v = allowed.object_verdict("obj").unwrap();
        assert!(
            v.warnings.len() == 1 && v.warnings[0].starts_with("spec.children[0]: child `cm`"),
            "{:?}",
            v.warnings
        );
        // Without the policy, both run.
        let mut open = RuleBook::new(vec![dir.path().to_path_buf()]);
        open.reload();
        open.set_objects(&[rule_object("obj", 1, "objs", "x")]);
        assert_eq!(open.rules().len(), 2);
    }

    #[test]
    fn a_rule_object_serves_beside_files_and_a_broken_generation_keeps_the_last_good() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("web.yaml"), GOOD).unwrap();
        let mut book = RuleBook::new(vec![dir.path().to_path_buf()]);
        book.reload();
        book.set_objects(&[rule_object("site", 1, "sites", "{{ name }}")]);
        let names: Vec<String> = book.rules().iter().map(|r| r.name.clone()).collect();
        assert_eq!(names, ["site", "web"]);
        let v = book.object_verdict("site").unwrap();
        assert!(v.accepted && v.problems.is_empty(), "{v:?}");
        assert_eq!(v.in_force, Some(1));

        // Generation 2 does not compile: generation 1 keeps serving, and the Rule says why.
        book.set_objects(&[rule_object("site", 2, "sites", "{{ name ")]);
        book.reload();
        let rules = book.rules();
        let site = rules
            .iter()
            .find(|r| r.name == "site")
            .expect("last good serves");
        assert_eq!(site.object.as_ref().unwrap().generation, 1);
        let v = book.object_verdict("site").unwrap();
        assert!(!v.accepted, "{v:?}");
        assert_eq!(v.in_force, Some(1));
        assert!(
            v.problems[0].starts_with("spec.children[0].template.metadata.name"),
            "{v:?}"
        );

        // Deleted: gone.
        book.set_objects(&[]);
        book.reload();
        assert_eq!(book.rules().len(), 1);
        assert!(book.object_verdict("site").is_none());
    }

    #[test]
    fn a_rule_object_named_as_a_files_rule_is_refused_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("web.yaml"), GOOD).unwrap();
        let mut book = RuleBook::new(vec![dir.path().to_path_buf()]);
        book.reload();
        book.set_objects(&[rule_object("web", 1, "others", "{{ name }}")]);
        let rules = book.rules();
        assert_eq!(rules.len(), 1);
        assert!(rules[0].object.is_none(), "the file's rule serves");
        let v = book.object_verdict("web").unwrap();
        assert!(!v.accepted);
        assert!(
            v.problems.iter().any(|p| p.contains("already defined")),
            "{v:?}"
        );
    }

    fn created(mut rule: serde_json::Value, at: &str) -> serde_json::Value {
        rule["metadata"]["creationTimestamp"] = serde_json::json!(at);
        rule
    }

    #[test]
    fn a_second_rule_object_on_a_served_kind_is_refused_and_the_serving_one_goes_on() {
        let first = created(
            rule_object("first", 1, "sites", "{{ name }}"),
            "2026-01-01T00:00:00Z",
        );
        // Created later, named to sort first.
        let second = created(
            rule_object("a-second", 1, "sites", "{{ name }}-b"),
            "2026-02-01T00:00:00Z",
        );
        let mut running = RuleBook::new(Vec::new());
        running.set_objects(std::slice::from_ref(&first));
        assert_eq!(running.rules().len(), 1);
        running.set_objects(&[first.clone(), second.clone()]);
        // A replica that starts now, with both stored, makes the same choice.
        let mut fresh = RuleBook::new(Vec::new());
        fresh.set_objects(&[second, first]);
        for book in [&mut running, &mut fresh] {
            let names: Vec<String> = book.rules().iter().map(|r| r.name.clone()).collect();
            assert_eq!(names, ["first"], "the serving Rule goes on");
            let v = book.object_verdict("first").unwrap();
            assert!(v.accepted, "{v:?}");
            let v = book.object_verdict("a-second").unwrap();
            assert!(!v.accepted && v.in_force.is_none(), "{v:?}");
            assert!(
                v.problems.iter().any(|p| p.contains("which rule `first` at Rule/first:1 serves; this rule is refused and `first` goes on serving")),
                "{v:?}"
            );
        }
    }

    #[test]
    fn the_rule_whose_status_says_it_serves_the_kind_goes_on_whatever_was_made_first() {
        // `old` was made first, watched another kind, and was edited onto what `serving`
        // serves (its status says so): on every replica, `serving` goes on.
        let old = created(
            rule_object("old", 2, "sites", "{{ name }}-b"),
            "2026-01-01T00:00:00Z",
        );
        let mut serving = created(
            rule_object("serving", 1, "sites", "{{ name }}"),
            "2026-02-01T00:00:00Z",
        );
        serving["status"] = serde_json::json!({"watch": "x.io/sites"});
        let mut book = RuleBook::new(Vec::new());
        book.set_objects(&[old, serving]);
        let names: Vec<String> = book.rules().iter().map(|r| r.name.clone()).collect();
        assert_eq!(names, ["serving"]);
        assert!(!book.object_verdict("old").unwrap().accepted);
    }

    #[test]
    fn a_rule_object_on_a_kind_a_file_serves_is_refused_and_the_file_goes_on() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("web.yaml"), GOOD).unwrap();
        let mut book = RuleBook::new(vec![dir.path().to_path_buf()]);
        book.reload();
        book.set_objects(&[rule_object("site", 1, "webs", "{{ name }}")]);
        let names: Vec<String> = book.rules().iter().map(|r| r.name.clone()).collect();
        assert_eq!(names, ["web"]);
        let v = book.object_verdict("site").unwrap();
        assert!(!v.accepted, "{v:?}");
        assert!(
            v.problems
                .iter()
                .any(|p| p.contains("`web`") && p.contains("goes on serving")),
            "{v:?}"
        );
    }

    #[test]
    fn a_status_write_does_not_compile_the_rule_again() {
        let mut book = RuleBook::new(Vec::new());
        let mut r = rule_object("site", 1, "sites", "{{ name }}");
        book.set_objects(std::slice::from_ref(&r));
        let before = book.rules().remove(0);
        r["status"] = serde_json::json!({"revision": 1, "conditions": []});
        book.set_objects(std::slice::from_ref(&r));
        let after = book.rules().remove(0);
        assert!(Arc::ptr_eq(&before, &after), "the same compiled rule");
        assert_eq!(book.without_good(), vec![]);
        // A new generation is compiled.
        r["metadata"]["generation"] = serde_json::json!(2);
        book.set_objects(std::slice::from_ref(&r));
        let next = book.rules().remove(0);
        assert!(!Arc::ptr_eq(&before, &next));
        assert_eq!(next.object.as_ref().unwrap().generation, 2);
    }
}
