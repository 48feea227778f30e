//! One identity per rule, on a control plane of its own with the API server's audit log:
//! three rules, each with its own ServiceAccount and the RBAC `ruleop rbac --per-rule`
//! generates for it. The MyApp rule converges, and the API server recorded every request
//! of it under its account; the WebSite rule's account lacks `create` on Services, so it
//! is not started (its status in /status says what is missing and the fix) until that is
//! granted, then it runs with no restart; a rule whose child binds `admin` is refused by
//! the API server's escalation check, reported on the resource, and nothing is created.
//! ruleop's own account makes no request for any of the rules' kinds.

mod common;

use common::{Operator, eventually, http_get};
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::Duration;

const GRANT: &str = r#"name: grant
watch: {group: id.example.com, version: v1, resource: grants}
schema:
  kind: Grant
  spec:
    role: string | default=admin
children:
  - id: binding
    template:
      apiVersion: rbac.authorization.k8s.io/v1
      kind: RoleBinding
      metadata:
        name: "{{ name }}"
      roleRef:
        apiGroup: rbac.authorization.k8s.io
        kind: ClusterRole
        name: "{{ spec.role }}"
      subjects:
        - kind: ServiceAccount
          name: default
          namespace: "{{ namespace }}"
  - id: settings
    template:
      apiVersion: v1
      kind: ConfigMap
      metadata:
        name: "{{ name }}-settings"
      data:
        role: "{{ spec.role }}"
"#;

/// The rules files, each naming its account in `ns`: website (web), myapp (app), grant
/// (granter).
fn rules(dir: &std::path::Path, ns: &str) -> Vec<String> {
    let root = env!("CARGO_MANIFEST_DIR");
    let read = |f: &str| std::fs::read_to_string(format!("{root}/{f}")).unwrap();
    [
        ("website", read("rules/website.yaml"), "web"),
        ("myapp", read("rules/myapp.yaml"), "app"),
        ("grant", GRANT.to_string(), "granter"),
    ]
    .into_iter()
    .map(|(name, text, sa)| {
        let f = dir.join(format!("{name}.yaml"));
        let text = format!("{text}\nserviceAccount: {{name: {sa}, namespace: {ns}}}\n");
        std::fs::write(&f, text).unwrap();
        f.to_str().unwrap().to_string()
    })
    .collect()
}

/// What `ruleop rbac --per-rule` prints for `files`, as objects.
fn per_rule_rbac(files: &[String], ns: &str) -> Vec<Value> {
    let mut args = vec!["rbac", "--per-rule", "--namespace", ns];
    args.extend(["--operator-namespace", ns, "--name", "idtest"]);
    for f in files {
        args.extend(["--rules", f]);
    }
    let (code, out, err) = common::ruleop_cli(&args, false);
    assert_eq!(code, 0, "{err}");
    serde_yaml::Deserializer::from_str(&out)
        .map(|d| Value::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// `objects` with `verb` taken from `resource` in the role `role`.
fn without(mut objects: Vec<Value>, role: &str, resource: &str, verb: &str) -> Vec<Value> {
    let r = objects
        .iter_mut()
        .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == role)
        .expect("the rule's Role");
    let rules = r["rules"].as_array_mut().unwrap();
    let mut split = Vec::new();
    for rule in rules.iter_mut() {
        let res = rule["resources"].as_array_mut().unwrap();
        if res.iter().any(|x| x == resource) {
            res.retain(|x| x != resource);
            let mut one = rule.clone();
            one["resources"] = json!([resource]);
            one["verbs"].as_array_mut().unwrap().retain(|v| v != verb);
            split.push(one);
        }
    }
    rules.retain(|r| !r["resources"].as_array().unwrap().is_empty());
    rules.extend(split);
    objects
}

fn yaml(objects: &[Value]) -> String {
    objects
        .iter()
        .map(|o| serde_yaml::to_string(o).unwrap())
        .collect::<Vec<_>>()
        .join("---\n")
}

/// The audit log's events of requests ruleop made (its user agent).
fn ruleop_requests(audit: &str) -> Vec<Value> {
    std::fs::read_to_string(audit)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| {
            e["userAgent"]
                .as_str()
                .is_some_and(|a| a.starts_with("ruleop/"))
        })
        .collect()
}

/// The account a request was made as (by impersonation), or None: ruleop's own.
fn acting_as(e: &Value) -> Option<&str> {
    e["impersonatedUser"]["username"].as_str()
}

#[tokio::test]
async fn each_rule_runs_as_its_own_account_checked_before_it_starts() {
    let dir = tempfile::tempdir().unwrap();
    let ns = "identities";
    let (c, audit) = common::cluster_with_audit(ns, common::AUDIT_METADATA, dir.path(), &[]);
    let root = env!("CARGO_MANIFEST_DIR");
    c.kubectl(
        &[
            "apply",
            "-f",
            &format!("{root}/deploy/crds/myapps.myscheme.example.com.yaml"),
        ],
        None,
    );
    let files = rules(dir.path(), ns);
    let (code, crd, err) = common::ruleop_cli(&["crd", "--rules", &files[2]], false);
    assert_eq!(code, 0, "{err}");
    c.kubectl(&["apply", "-f", "-"], Some(&crd));
    c.wait_established(&["myapps.myscheme.example.com", "grants.id.example.com"]);
    // Each account gets what the rule needs, but the WebSite rule's may not create Services.
    let full = per_rule_rbac(&files, ns);
    c.kubectl(
        &["apply", "-f", "-"],
        Some(&yaml(&without(
            full.clone(),
            "idtest-rule-website",
            "services",
            "create",
        ))),
    );
    let kc = c.kubeconfig.clone();
    // `admin` is aggregated by the controller-manager: empty until then, and binding an
    // empty role escalates nothing.
    eventually(
        Duration::from_secs(60),
        "the admin ClusterRole aggregated",
        || async {
            let (_, out, _) =
                common::kubectl_at(&kc, &["get", "clusterrole", "admin", "-o", "json"], None);
            let role: Value = serde_json::from_str(&out).ok()?;
            (role["rules"].as_array()?.len() > 10).then_some(())
        },
    )
    .await;
    let mut op = Operator::start_with_env(
        ns,
        &files.iter().map(String::as_str).collect::<Vec<_>>(),
        &["--lease-namespace", ns],
        &[("KUBECONFIG", kc.as_str())],
    );
    let admin = op.admin_addr().await;
    c.kubectl(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: myscheme.example.com/v1\nkind: MyApp\nmetadata: {{name: a1, namespace: {ns}}}\nspec: {{image: \"nginx:1.27\", replicas: 1}}\n---\n\
             apiVersion: sre.example.com/v1alpha1\nkind: WebSite\nmetadata: {{name: w1, namespace: {ns}}}\nspec: {{image: \"nginx:1.27\", replicas: 1}}\n---\n\
             apiVersion: id.example.com/v1\nkind: Grant\nmetadata: {{name: g1, namespace: {ns}}}\nspec: {{}}\n"
        )),
    );
    let get = |kind: &str, name: &str| {
        let (ok, out, _) =
            common::kubectl_at(&kc, &["get", kind, name, "-n", ns, "-o", "json"], None);
        ok.then(|| serde_json::from_str::<Value>(&out).unwrap())
    };
    // The MyApp rule converges.
    eventually(Duration::from_secs(60), "MyApp a1's Deployment", || async {
        get("deployment", "a1").map(|_| ())
    })
    .await;
    // The WebSite rule is not started: /status says what its account lacks and the fix.
    let blocked = eventually(
        Duration::from_secs(60),
        "the website rule reported not started",
        || async {
            let (_, body) = http_get(&admin, "/status");
            let doc: Value = serde_json::from_str(&body).ok()?;
            let rule = doc["rules"]
                .as_array()?
                .iter()
                .find(|r| r["name"] == "website")?
                .clone();
            rule["not_started"].as_str().map(str::to_string)
        },
    )
    .await;
    assert!(
        blocked.contains(&format!(
            "{ns}/web may not create services (core) in namespace {ns}"
        )),
        "{blocked}"
    );
    assert!(
        blocked.contains(r#""resources":["services"],"verbs":["create"]"#),
        "{blocked}"
    );
    assert_eq!(
        common::admin_metric(&admin, "ruleop_rule_missing_permissions"),
        1.0
    );
    // The escalation is the API server's to refuse: reported on the resource, nothing made.
    let refused = eventually(
        Duration::from_secs(60),
        "Grant g1 reports the refusal",
        || async {
            let g = get("grant.id.example.com", "g1")?;
            let conds = g["status"]["conditions"].as_array()?.clone();
            conds
                .iter()
                .find(|c| c["reason"] == "Forbidden")
                .and_then(|c| c["message"].as_str().map(str::to_string))
        },
    )
    .await;
    assert!(refused.contains("RoleBinding g1"), "{refused}");
    assert!(
        get("rolebinding", "g1").is_none(),
        "no RoleBinding was created"
    );
    assert!(
        get("configmap", "g1-settings").is_none(),
        "nor the resource's other child: nothing half made"
    );
    assert!(
        get("deployment", "w1-web").is_none(),
        "the blocked rule touched nothing"
    );
    // Granting the permission starts the rule, with no restart.
    c.kubectl(&["apply", "-f", "-"], Some(&yaml(&full)));
    eventually(
        Duration::from_secs(60),
        "WebSite w1's Deployment and Service",
        || async {
            get("deployment", "w1-web")?;
            get("service", "w1-web").map(|_| ())
        },
    )
    .await;
    assert!(op.running(), "the same process");
    assert_eq!(
        common::admin_metric(&admin, "ruleop_rule_missing_permissions"),
        0.0
    );

    // The audit log: every request for the rules' kinds was made as the rule's account.
    let web = format!("system:serviceaccount:{ns}:web");
    let app = format!("system:serviceaccount:{ns}:app");
    let granter = format!("system:serviceaccount:{ns}:granter");
    let owner = |resource: &str| -> Option<Vec<&str>> {
        Some(match resource {
            "websites" | "services" => vec![web.as_str()],
            "myapps" => vec![app.as_str()],
            "grants" | "rolebindings" => vec![granter.as_str()],
            "deployments" => vec![web.as_str(), app.as_str()],
            _ => return None,
        })
    };
    let events = eventually(
        Duration::from_secs(30),
        "the Service's apply in the audit log",
        || async {
            let events = ruleop_requests(&audit);
            events
                .iter()
                .any(|e| {
                    e["verb"] == "patch"
                        && e["objectRef"]["resource"] == "services"
                        && acting_as(e) == Some(web.as_str())
                })
                .then_some(events)
        },
    )
    .await;
    let mut wrong = Vec::new();
    for e in &events {
        let resource = e["objectRef"]["resource"].as_str().unwrap_or_default();
        let in_ns = e["objectRef"]["namespace"] == ns;
        let write = ["create", "update", "patch", "delete"]
            .contains(&e["verb"].as_str().unwrap_or_default());
        match (owner(resource), acting_as(e)) {
            (Some(allowed), who) if !who.is_some_and(|w| allowed.contains(&w)) => wrong.push(e),
            // ruleop's own writes in the namespace: its inventory, nothing else.
            (None, None) if in_ns && write && e["objectRef"]["name"] != "ruleop-inventory" => {
                wrong.push(e)
            }
            _ => {}
        }
    }
    assert!(
        wrong.is_empty(),
        "requests not made as the rule's own account: {}",
        wrong
            .iter()
            .map(|e| format!(
                "{} {} {} as {:?}",
                e["verb"],
                e["objectRef"]["resource"],
                e["objectRef"]["name"],
                acting_as(e)
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );
    let made = |who: &str, resource: &str, name: &str| {
        events.iter().any(|e| {
            e["verb"] == "patch"
                && e["objectRef"]["resource"] == resource
                && e["objectRef"]["name"] == name
                && acting_as(e) == Some(who)
        })
    };
    assert!(
        made(&app, "deployments", "a1"),
        "MyApp's Deployment, as app"
    );
    assert!(
        made(&web, "deployments", "w1-web"),
        "WebSite's Deployment, as web"
    );
    // The refused RoleBinding: asked as granter, answered 403.
    assert!(
        events
            .iter()
            .any(|e| e["objectRef"]["resource"] == "rolebindings"
                && acting_as(e) == Some(granter.as_str())
                && e["responseStatus"]["code"] == 403)
    );
    // Events about the resources, as their rule's account.
    assert!(events.iter().any(|e| e["objectRef"]["resource"] == "events"
        && e["verb"] == "create"
        && acting_as(e) == Some(app.as_str())));
    op.kill();
}

#[test]
fn the_per_rule_form_of_deploy_is_generated_from_the_shipped_rules() {
    let root = env!("CARGO_MANIFEST_DIR");
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("rules");
    std::fs::create_dir(&rules).unwrap();
    for f in ["website", "myapp"] {
        let text = std::fs::read_to_string(format!("{root}/rules/{f}.yaml")).unwrap();
        std::fs::write(
            rules.join(format!("{f}.yaml")),
            format!("{text}serviceAccount: {{name: ruleop-{f}, namespace: ruleop-system}}\n"),
        )
        .unwrap();
    }
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_ruleop"))
            .args(args)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    assert_eq!(
        run(&["rule", "--rules", "rules/"]),
        std::fs::read_to_string(format!("{root}/examples/per-rule/rules.yaml")).unwrap(),
        "examples/per-rule/rules.yaml is stale: run deploy/generate.sh"
    );
    let website = format!("{root}/deploy/crds/websites.sre.example.com.yaml");
    let myapp = format!("{root}/deploy/crds/myapps.myscheme.example.com.yaml");
    let all = run(&[
        "rbac",
        "--per-rule",
        "--rules",
        "rules/",
        "--crd",
        &website,
        "--crd",
        &myapp,
    ]);
    let shipped = std::fs::read_to_string(format!("{root}/examples/per-rule/rbac.yaml")).unwrap();
    let names = |text: &str| -> Vec<(String, String)> {
        serde_yaml::Deserializer::from_str(text)
            .map(|d| Value::deserialize(d).unwrap())
            .filter(|v| !v.is_null())
            .map(|v| {
                (
                    v["kind"].as_str().unwrap().to_string(),
                    serde_json::to_string(&v).unwrap(),
                )
            })
            .collect()
    };
    let generated: Vec<(String, String)> = names(&all)
        .into_iter()
        .filter(|(kind, text)| {
            kind == "ServiceAccount"
                || text.contains("\"name\":\"ruleop-rule-")
                || text.contains("\"name\":\"ruleop-impersonate\"")
        })
        .collect();
    assert_eq!(
        generated,
        names(&shipped),
        "examples/per-rule/rbac.yaml is stale: run deploy/generate.sh"
    );
    // Installed as one: ruleop keeps only Events, the rules' needs are their accounts'.
    let (ok, out, err) =
        common::kubectl(&["kustomize", &format!("{root}/examples/per-rule")], None);
    assert!(ok, "{err}");
    let objects: Vec<Value> = serde_yaml::Deserializer::from_str(&out)
        .map(|d| Value::deserialize(d).unwrap())
        .collect();
    let own = objects
        .iter()
        .find(|o| o["kind"] == "ClusterRole" && o["metadata"]["name"] == "ruleop")
        .unwrap();
    assert_eq!(
        own["rules"],
        json!([{"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]}])
    );
    let impersonate = objects
        .iter()
        .find(|o| o["kind"] == "Role" && o["metadata"]["name"] == "ruleop-impersonate")
        .unwrap();
    assert_eq!(
        impersonate["rules"][0]["resourceNames"],
        json!(["ruleop-myapp", "ruleop-website"])
    );
    let deploy = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
    let args = deploy["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(!args.contains("--rules"), "{args}");
    assert!(args.contains("--require-identity"), "{args}");
    let rules: Vec<&Value> = objects.iter().filter(|o| o["kind"] == "Rule").collect();
    assert_eq!(rules.len(), 2);
    assert!(
        rules
            .iter()
            .all(|r| r["spec"]["serviceAccount"]["namespace"] == "ruleop-system")
    );
}
