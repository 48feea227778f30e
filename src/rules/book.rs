//! The rule book: the rules loaded from the configured paths, reloaded on demand, with
//! a last-good fallback. A file that fails to load keeps its previous rules (those it
//! no longer yields are kept at their last good version) and reports its errors; other
//! files are untouched. A file that is gone takes its rules with it.

use super::compile::CompiledRule;
use super::error::LoadError;
use super::load::{collect_files, dedupe, load_file};
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
    pub problems: Vec<Problem>,
}

impl RuleBook {
    pub fn new(paths: Vec<PathBuf>) -> RuleBook {
        RuleBook {
            paths,
            ..Default::default()
        }
    }

    pub fn paths(&self) -> &[PathBuf] {
        &self.paths
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
            let load = load_file(&f);
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

    /// The rules in force, one per name and one per watched resource (the first file in
    /// path order wins). A rule refused for watching what another watches keeps its last
    /// version in force, if it had one that does not collide.
    pub fn rules(&mut self) -> Vec<Arc<CompiledRule>> {
        let mut all: Vec<Arc<CompiledRule>> = self.files.values().flatten().cloned().collect();
        // A rule already in force, unchanged, comes first: an edit of another rule that
        // now collides with it cannot push it out.
        all.sort_by_key(|r| {
            self.in_force
                .get(&r.name)
                .is_none_or(|f| f.fingerprint != r.fingerprint)
        });
        let (mut kept, dups) = dedupe(all);
        for d in dups {
            if let LoadError::SameWatch(w) = &d
                && let Some(prev) = self.in_force.get(&w.rule)
                && !kept.iter().any(|k| {
                    k.name == prev.name
                        || (k.watch.group == prev.watch.group
                            && k.watch.resource == prev.watch.resource)
                })
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
        self.in_force = kept.iter().map(|r| (r.name.clone(), r.clone())).collect();
        kept
    }
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
    fn a_second_rule_on_a_watched_resource_is_refused_and_its_last_good_version_stays() {
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
        assert_eq!(book.problems.len(), 1, "{:?}", book.problems);
        let msg = &book.problems[0].message;
        assert!(
            msg.contains("b.yaml:1") && msg.contains("already watches"),
            "{msg}"
        );
        let other = rules
            .iter()
            .find(|r| r.name == "other")
            .expect("last good kept");
        assert_eq!(other.watch.resource, "others");
        assert_eq!(rules.len(), 2);
    }

    #[test]
    fn an_edit_that_collides_with_a_running_rule_does_not_push_it_out() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), OTHER).unwrap();
        std::fs::write(dir.path().join("b.yaml"), GOOD).unwrap();
        let mut book = RuleBook::new(vec![dir.path().to_path_buf()]);
        book.reload();
        assert_eq!(book.rules().len(), 2);
        // a.yaml (first in path order) now watches what b.yaml's running rule watches.
        std::fs::write(
            dir.path().join("a.yaml"),
            OTHER.replace("resource: others", "resource: webs"),
        )
        .unwrap();
        book.reload();
        let rules = book.rules();
        let web = rules
            .iter()
            .find(|r| r.name == "web")
            .expect("web keeps running");
        assert_eq!(web.watch.resource, "webs");
        let other = rules.iter().find(|r| r.name == "other").expect("last good");
        assert_eq!(other.watch.resource, "others");
        assert!(
            book.problems.iter().any(|p| p.file.ends_with("a.yaml")),
            "{:?}",
            book.problems
        );
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
}
