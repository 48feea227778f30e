//! The rule book's tests.

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
    let obj =
        serde_json::json!({"metadata": {"name": "obj", "uid": "u", "generation": 1}, "spec": spec});
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
