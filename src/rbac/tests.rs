//! The RBAC generator's tests.
use super::*;

/// The operator as `deploy/` runs it, cluster-wide.
fn target() -> Target {
    Target {
        name: "ruleop".into(),
        service_account: "ruleop".into(),
        operator_namespace: "ruleop-system".into(),
        namespace: None,
        without_status_subresource: BTreeSet::new(),
        install_crds: false,
        plurals: BTreeMap::new(),
    }
}

#[test]
fn ruleop_may_not_create_webhook_configurations_and_writes_its_own_by_name() {
    let rules = vec![crate::rules::testing::rule(
        "name: w\nwatch: {group: x.io, version: v1, resource: ws}\nchildren:\n  - id: c\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"{{ name }}\"}}\n",
    )];
    let all = manifests(&rules, &target());
    let hooks: Vec<&Value> = all
        .iter()
        .filter_map(|o| o["rules"].as_array())
        .flatten()
        .filter(|r| r["resources"].to_string().contains("webhookconfigurations"))
        .collect();
    assert_eq!(hooks.len(), 1, "{hooks:?}");
    assert_eq!(hooks[0]["verbs"], json!(["get", "patch"]));
    assert_eq!(hooks[0]["resourceNames"], json!(["ruleop"]));
}

#[test]
fn the_website_rule_needs_exactly_its_kinds() {
    let (rules, errors) = crate::rules::load_str(
        include_str!("../../rules/website.yaml"),
        std::path::Path::new("w.yaml"),
    );
    assert!(errors.is_empty());
    let t = target();
    let m = manifests(&rules, &t);
    let role = &m[0]["rules"];
    let has = |g: &str, r: &str, v: &str| {
        role.as_array().unwrap().iter().any(|x| {
            x["apiGroups"][0] == g
                && x["resources"].as_array().unwrap().iter().any(|y| y == r)
                && x["verbs"].as_array().unwrap().iter().any(|y| y == v)
        })
    };
    assert!(has("sre.example.com", "websites", "watch"));
    assert!(
        !has("sre.example.com", "websites", "update"),
        "the custom resource itself is read-only"
    );
    assert!(has("sre.example.com", "websites/status", "patch"));
    assert!(
        has("sre.example.com", "websites/finalizers", "update"),
        "blockOwnerDeletion under OwnerReferencesPermissionEnforcement"
    );
    assert!(has("apps", "deployments", "delete"));
    assert!(has("", "services", "create"));
    assert!(
        !has("", "configmaps", "get"),
        "nothing the rule does not make"
    );
    assert!(has("events.k8s.io", "events", "create"));
    assert_eq!(
        m[2]["kind"], "ClusterRole",
        "the Rule objects, cluster-scoped"
    );
    assert_eq!(m[2]["rules"][0]["resources"], json!(["rules"]));
    assert_eq!(m[2]["rules"][1]["verbs"], json!(["patch"]));
    // The watched kind's CRD read by name (followed for schema changes): no 403 at start.
    let crd = m[2]["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["resources"] == json!(["customresourcedefinitions"]));
    assert_eq!(
        crd.unwrap()["resourceNames"],
        json!(["websites.sre.example.com"])
    );
    assert_eq!(crd.unwrap()["verbs"], json!(["get", "list", "watch"]));
    assert_eq!(
        m[4]["kind"], "Role",
        "the Lease is only in the operator's namespace"
    );
}

#[test]
fn install_crds_grants_only_the_rules_crds_and_the_rule_kinds() {
    let load = |text: &str| crate::rules::load_str(text, std::path::Path::new("r.yaml")).0;
    let t = Target {
        install_crds: true,
        ..target()
    };
    let names = |rules| {
        let m = manifests(&load(rules), &t);
        m.iter()
            .find(|x| x["metadata"]["name"] == "ruleop-crds")
            .expect("a ClusterRole for CRDs")["rules"][0]["resourceNames"]
            .clone()
    };
    assert_eq!(
        names(include_str!("../../rules/website.yaml")),
        json!(["websites.sre.example.com", "rules.ruleop.dev"])
    );
    // No schema: no CRD of the rule to install, and never an unbounded grant.
    assert_eq!(
        names(include_str!("../../tests/fixtures/microservice/rules.yaml")),
        json!(["rules.ruleop.dev"])
    );
}

#[test]
fn existing_objects_are_only_read() {
    let (rules, errors) = crate::rules::load_str(
        include_str!("../../tests/fixtures/microservice/rules.yaml"),
        std::path::Path::new("m.yaml"),
    );
    assert!(errors.is_empty(), "{errors:?}");
    let t = target();
    let role = manifests(&rules, &t)[0]["rules"].clone();
    let secrets: Vec<&Value> = role
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| {
            x["apiGroups"][0] == ""
                && x["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|y| y == "secrets")
        })
        .collect();
    assert_eq!(secrets.len(), 1, "{role}");
    assert_eq!(secrets[0]["verbs"], json!(["get", "list", "watch"]));
}

#[test]
fn a_kind_without_a_status_subresource_gets_patch_on_the_resource_itself() {
    let (rules, _) = crate::rules::load_str(
        include_str!("../../rules/myapp.yaml"),
        std::path::Path::new("m.yaml"),
    );
    let crd: Value =
        serde_yaml::from_str(include_str!("../../tests/fixtures/origin/myapp-crd.yaml")).unwrap();
    let t = Target {
        without_status_subresource: without_status_subresource(&[crd]),
        ..target()
    };
    let role = manifests(&rules, &t)[0]["rules"].clone();
    let patch_myapps = role.as_array().unwrap().iter().any(|x| {
        x["apiGroups"][0] == "myscheme.example.com"
            && x["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|y| y == "myapps")
            && x["verbs"].as_array().unwrap().iter().any(|y| y == "patch")
    });
    assert!(patch_myapps, "{role}");
}

#[test]
fn every_watched_resource_gets_patch_so_finalizers_can_always_be_released() {
    // Neither rule asks for ordered deletion or orphaned children now; resources may
    // still carry a finalizer an earlier version of the rule put on.
    let (rules, _) = crate::rules::load_str(
        include_str!("../../rules/website.yaml"),
        std::path::Path::new("w.yaml"),
    );
    let role = manifests(&rules, &target())[0]["rules"].clone();
    let patch = role.as_array().unwrap().iter().any(|x| {
        x["apiGroups"][0] == "sre.example.com"
            && x["resources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|y| y == "websites")
            && x["verbs"].as_array().unwrap().iter().any(|y| y == "patch")
    });
    assert!(patch, "{role}");
}

#[test]
fn a_rule_with_an_account_gets_its_own_role_and_ruleop_only_impersonates_it() {
    let text = format!(
        "{}serviceAccount: {{name: web-rule, namespace: team-web}}\n",
        include_str!("../../rules/website.yaml")
    );
    let (rules, errors) = crate::rules::load_str(&text, std::path::Path::new("w.yaml"));
    assert!(errors.is_empty(), "{errors:?}");
    let m = manifests(&rules, &target());
    let grants = |name: &str, resource: &str| {
        m.iter()
            .filter(|o| o["metadata"]["name"] == name && o["rules"].is_array())
            .flat_map(|o| o["rules"].as_array().unwrap().iter())
            .any(|r| {
                r["resources"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|x| x == resource)
            })
    };
    assert!(!grants("ruleop", "deployments"), "not ruleop's own");
    assert!(!grants("ruleop", "websites"), "not ruleop's own");
    assert!(grants("ruleop", "events"), "Events on Rules stay ruleop's");
    assert!(grants("ruleop-rule-website", "deployments"));
    assert!(grants("ruleop-rule-website", "websites/status"));
    let binding = m
        .iter()
        .find(|o| {
            o["kind"] == "ClusterRoleBinding" && o["metadata"]["name"] == "ruleop-rule-website"
        })
        .unwrap();
    assert_eq!(
        binding["subjects"],
        json!([{"kind": "ServiceAccount", "name": "web-rule", "namespace": "team-web"}])
    );
    let imp = m
        .iter()
        .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == "ruleop-impersonate")
        .unwrap();
    assert_eq!(imp["metadata"]["namespace"], "team-web");
    assert_eq!(
        imp["rules"],
        json!([{"apiGroups": [""], "resources": ["serviceaccounts"], "resourceNames": ["web-rule"], "verbs": ["impersonate"]}])
    );
    assert!(
        m.iter()
            .any(|o| o["kind"] == "ServiceAccount" && o["metadata"]["name"] == "web-rule")
    );
}

#[test]
fn a_custom_kind_is_named_by_its_crds_plural() {
    let rule = r#"name: r
watch: {group: x.io, version: v1, resource: things}
children:
  - id: c
    template:
      apiVersion: x.io/v1
      kind: Cactus
      metadata: {name: "{{ name }}"}
"#;
    let (rules, errors) = crate::rules::load_str(rule, std::path::Path::new("r.yaml"));
    assert!(errors.is_empty(), "{errors:?}");
    let crd = json!({"kind": "CustomResourceDefinition", "spec": {"group": "x.io", "names": {"kind": "Cactus", "plural": "cacti"}}});
    let t = Target {
        plurals: plurals(&[crd]),
        ..target()
    };
    let role = manifests(&rules, &t)[0]["rules"].to_string();
    assert!(role.contains("\"cacti\""), "{role}");
    assert!(!role.contains("cactuses"), "{role}");
}
