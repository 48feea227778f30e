//! Who may write a Rule, on a control plane of its own with the API server's audit log. A
//! tenant, `alice`, may write Rules and has rights in namespace `team-a` alone (with
//! `impersonate` on its account `builder`); she tries each escalation a Rule could give
//! her, and each is refused with its reason:
//!
//! - through ruleop's webhook: naming another team's account, naming none (ruleop's own
//!   rights), copying a Secret into a ConfigMap (its kind spelt any way), a Rule that
//!   watches Secrets, a cluster-scoped child, a `schema` for a kind whose CRD she may not
//!   update (GitOps' or a new one), relabelling an admin's Rule, a flood of Rules (none
//!   stored unchecked, the Lease kept);
//! - through the rule she may run: a child in namespace `team-b`, a name that would walk
//!   the request path;
//! - through the ValidatingAdmissionPolicies `deploy/` ships, with ruleop down: the
//!   accounts, the `schema`s and the relabelling again, and pinning her resource to a
//!   revision;
//! - through `ruleop check --against-cluster --as alice`;
//! - one table of writes (creates, spec, label-only, annotation-only and status-only
//!   updates) answered alike by the webhook alone and by the policy alone.
//!
//! And the audit log shows that ruleop made no request into `team-b`, none on Secrets but
//! its own certificate's, none on cluster-scoped RBAC, no path walking out of its name,
//! and that every request of alice's rule was made as her account.

mod common;

use common::{Operator, eventually, kubectl_at};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const NS: &str = "team-a";
const OPS: &str = "ruleop-sec";
const T: Duration = Duration::from_secs(90);

const SETUP: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: notes.sec.example.com}
spec:
  group: sec.example.com
  scope: Namespaced
  names: {plural: notes, singular: note, kind: Note}
  versions:
    - name: v1
      served: true
      storage: true
      subresources: {status: {}}
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
            status: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
# Another team's kind, its CRD applied by GitOps (no rule of ruleop's makes it).
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.sec.example.com}
spec:
  group: sec.example.com
  scope: Namespaced
  names: {plural: gadgets, singular: gadget, kind: Gadget}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec: {type: object, x-kubernetes-preserve-unknown-fields: true}
---
apiVersion: v1
kind: Namespace
metadata: {name: team-b}
---
apiVersion: v1
kind: Namespace
metadata: {name: ruleop-sec}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: builder, namespace: team-a}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: builder, namespace: team-b}
---
apiVersion: v1
kind: Secret
metadata: {name: token, namespace: team-a}
stringData: {token: s3cr3t}
---
# The rule's account: what the notes rule needs, in team-a.
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: builder, namespace: team-a}
rules:
  - {apiGroups: [sec.example.com], resources: [notes, notes/status, notes/finalizers], verbs: ["*"]}
  - {apiGroups: [""], resources: [configmaps], verbs: ["*"]}
  - {apiGroups: [events.k8s.io], resources: [events], verbs: [create, patch]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: builder, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: builder}
subjects: [{kind: ServiceAccount, name: builder, namespace: team-a}]
---
# The tenant: Rules, and team-a alone (with its account).
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: rule-author}
rules:
  - {apiGroups: [ruleop.dev], resources: [rules], verbs: [get, list, watch, create, update, patch, delete]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: alice-rule-author}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: rule-author}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: tenant, namespace: team-a}
rules:
  - {apiGroups: [sec.example.com], resources: [notes], verbs: ["*"]}
  - {apiGroups: [""], resources: [configmaps, secrets], verbs: ["*"]}
  - {apiGroups: [""], resources: [serviceaccounts], resourceNames: [builder], verbs: [impersonate]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: tenant, namespace: team-a}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: tenant}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: alice}]
"#;

/// A Rule `name` on notes with `spec` (merged over a ConfigMap child named from the note).
fn rule(name: &str, extra: Value) -> Value {
    let mut spec = json!({
        "watch": {"group": "sec.example.com", "version": "v1", "resource": "notes"},
        "serviceAccount": {"name": "builder", "namespace": NS},
        "children": [{"id": "page", "template": {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "{{ name }}-{{ spec.suffix }}",
                         "namespace": "{{ spec.into | default(namespace) }}"},
            "data": {"text": "{{ spec.text }}"}}}],
    });
    for (k, v) in extra.as_object().unwrap() {
        if v.is_null() {
            spec.as_object_mut().unwrap().remove(k);
        } else {
            spec[k] = v.clone();
        }
    }
    json!({"apiVersion": "ruleop.dev/v1alpha1", "kind": "Rule", "metadata": {"name": name}, "spec": spec})
}

/// `kubectl apply` of `obj` as `user` (None: the admin): whether it was stored, and stderr.
fn apply_as(kc: &str, user: Option<&str>, obj: &Value) -> (bool, String) {
    let text = serde_json::to_string(obj).unwrap();
    let mut args = vec!["apply", "-f", "-"];
    if let Some(u) = user {
        args.extend(["--as", u]);
    }
    let (ok, _, err) = kubectl_at(kc, &args, Some(&text));
    (ok, err)
}

/// As [`apply_as`], a server-side dry run (admission runs, nothing is stored): whether it
/// would be stored, and stderr.
fn dry_run_as(kc: &str, user: &str, obj: &Value) -> (bool, String) {
    let text = serde_json::to_string(obj).unwrap();
    let args = ["apply", "--dry-run=server", "-f", "-", "--as", user];
    let (ok, _, err) = kubectl_at(kc, &args, Some(&text));
    (ok, err)
}

fn audit_events(audit: &str) -> Vec<Value> {
    std::fs::read_to_string(audit)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

fn by_ruleop(e: &Value) -> bool {
    e["userAgent"]
        .as_str()
        .is_some_and(|a| a.starts_with("ruleop/"))
}

/// One table of writes of alice's, each a server-side dry run (admission answers, nothing
/// is stored): creates, spec edits, label-only, annotation-only and status-only updates.
/// Whether each would be stored, by name: the webhook alone and the policy alone must give
/// the same answers.
fn writes_table(kc: &str) -> Vec<(&'static str, bool)> {
    let create = |obj: &Value| dry_run_as(kc, "alice", obj).0;
    let run = |args: &[&str]| {
        let mut args = args.to_vec();
        args.extend(["--dry-run=server", "--as", "alice"]);
        kubectl_at(kc, &args, None).0
    };
    let patch =
        |name: &str, body: &str| run(&["patch", "rule", name, "--type", "merge", "-p", body]);
    let other_account = json!({"serviceAccount": {"name": "builder", "namespace": "team-b"}});
    vec![
        (
            "create: another team's account",
            create(&rule("table-other", other_account)),
        ),
        (
            "create: no account",
            create(&rule("table-none", json!({"serviceAccount": null}))),
        ),
        (
            "create: her own account",
            create(&rule(
                "table-own",
                json!({"watch": {"group": "sec.example.com", "version": "v1", "resource": "tables"}}),
            )),
        ),
        (
            "create: a schema for GitOps' kind",
            create(&rule(
                "table-gadgets",
                json!({"watch": {"group": "sec.example.com", "version": "v1", "resource": "gadgets"},
                       "schema": {"kind": "Gadget", "spec": {"text": "string"}}}),
            )),
        ),
        (
            "spec: her rule",
            patch("notes", r#"{"spec":{"revisionHistoryLimit":3}}"#),
        ),
        (
            "spec: her rule onto team-b's account",
            patch(
                "notes",
                r#"{"spec":{"serviceAccount":{"namespace":"team-b"}}}"#,
            ),
        ),
        (
            "spec: an admin's rule",
            patch("admins-rule", r#"{"spec":{"revisionHistoryLimit":3}}"#),
        ),
        (
            "labels: an admin's rule",
            run(&["label", "rule", "admins-rule", "table=yes", "--overwrite"]),
        ),
        (
            "labels: her rule",
            run(&["label", "rule", "notes", "table=yes", "--overwrite"]),
        ),
        (
            "annotations: an admin's rule",
            run(&[
                "annotate",
                "rule",
                "admins-rule",
                "table=yes",
                "--overwrite",
            ]),
        ),
        (
            "status: an admin's rule",
            run(&[
                "patch",
                "rule",
                "admins-rule",
                "--subresource=status",
                "--type",
                "merge",
                "-p",
                r#"{"status":{"observedGeneration":1}}"#,
            ]),
        ),
    ]
}

/// The answers every write of [`writes_table`] must get (alice may not write `rules/status`).
const TABLE_ANSWERS: [bool; 11] = [
    false, false, true, false, true, false, false, false, true, true, false,
];

/// A client of the cluster at `kc` acting as `user`.
async fn client_as(kc: &str, user: &str) -> kube::Client {
    let config = kube::config::Kubeconfig::read_from(kc).unwrap();
    let mut c = kube::Config::from_custom_kubeconfig(config, &Default::default())
        .await
        .unwrap();
    c.auth_info.impersonate = Some(user.to_string());
    kube::Client::try_from(c).unwrap()
}

/// Runs `n` requests at once: each one's result and seconds.
async fn burst<F, Fut>(n: usize, f: F) -> Vec<(Result<(), String>, f64)>
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>> + Send + 'static,
{
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let fut = f(i);
            tokio::spawn(async move {
                let start = Instant::now();
                let r = fut.await;
                (r, start.elapsed().as_secs_f64())
            })
        })
        .collect();
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

#[tokio::test]
async fn a_tenant_cannot_escalate_through_a_rule() {
    let dir = tempfile::tempdir().unwrap();
    let (c, audit) = common::cluster_with_audit(NS, common::AUDIT_METADATA, dir.path(), &[]);
    let kc = c.kubeconfig.clone();
    let root = env!("CARGO_MANIFEST_DIR");
    c.kubectl(
        &[
            "apply",
            "-f",
            &format!("{root}/deploy/crds/rules.ruleop.dev.yaml"),
        ],
        None,
    );
    c.kubectl(&["apply", "-f", "-"], Some(SETUP));
    c.wait_established(&["notes.sec.example.com", "rules.ruleop.dev"]);
    let port = common::free_port();
    let addr = format!("127.0.0.1:{port}");
    let url = format!("https://127.0.0.1:{port}/validate-rules");
    let args = [
        "--rule-objects=true",
        "--leader-elect",
        "--lease-namespace",
        OPS,
        "--webhook-addr",
        &addr,
        "--webhook-url",
        &url,
    ];
    let mut op = Operator::start_with_env(NS, &[], &args, &[("KUBECONFIG", kc.as_str())]);
    let admin = op.admin_addr().await;
    let alice = Some("alice");

    // The webhook serves once its configuration is written: a Rule naming another
    // team's account is refused, naming what alice lacks.
    let other = rule(
        "other-account",
        json!({"serviceAccount": {"name": "builder", "namespace": "team-b"}}),
    );
    eventually(T, "the webhook refuses another team's account", || async {
        let (ok, err) = dry_run_as(&kc, "alice", &other);
        (!ok && err.contains("refused by ruleop")).then_some(())
    })
    .await;
    let (ok, refusal) = apply_as(&kc, alice, &other);
    assert!(!ok, "{refusal}");
    assert!(
        refusal.contains(
            "spec.serviceAccount: alice may not impersonate ServiceAccount team-b/builder"
        ),
        "{refusal}"
    );
    // None: it would run with ruleop's own rights.
    let (ok, err) = apply_as(
        &kc,
        alice,
        &rule("no-account", json!({"serviceAccount": null})),
    );
    assert!(
        !ok && err.contains("may not `escalate` on rules.ruleop.dev/no-account"),
        "{err}"
    );
    // A Secret copied into a ConfigMap.
    let copies = rule(
        "copies-secret",
        json!({"existing": [{"id": "creds", "apiVersion": "v1", "kind": "Secret", "name": "token"}],
               "children": [{"id": "leak", "template": {"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "{{ name }}-leak"},
                   "data": {"token": "{{ existing.creds.data.token }}"}}}]}),
    );
    let (ok, err) = apply_as(&kc, alice, &copies);
    assert!(
        !ok && err.contains("spec.children[0]")
            && err.contains("is made from Secret data (existing.creds)")
            && err.contains("--allow-secret-reads"),
        "{err}"
    );
    // The same copy with the Secret's kind spelt another way: refused all the same.
    for (api_version, kind) in [("/v1", "Secret"), ("core/v1", "Secret"), ("v1", "secret")] {
        let mut spelt = copies.clone();
        spelt["metadata"]["name"] = json!("copies-spelt");
        spelt["spec"]["existing"][0]["apiVersion"] = json!(api_version);
        spelt["spec"]["existing"][0]["kind"] = json!(kind);
        let (ok, err) = apply_as(&kc, alice, &spelt);
        assert!(
            !ok && err.contains("spec.existing[0]")
                && (err.contains("write `v1`") || err.contains("did you mean `Secret`")),
            "{api_version:?} {kind:?}: {err}"
        );
    }
    // A Rule that watches Secrets and copies them into its status.
    let watches = rule(
        "watches-secrets",
        json!({"watch": {"group": "", "version": "v1", "resource": "secrets"},
               "children": null,
               "status": {"fields": [{"name": "copied", "type": "string", "value": "self.data.token"}]}}),
    );
    let (ok, err) = apply_as(&kc, alice, &watches);
    assert!(
        !ok && err.contains("status field `copied`") && err.contains("the watched Secret"),
        "{err}"
    );
    // A cluster-scoped child.
    let cluster = rule(
        "cluster-child",
        json!({"children": [{"id": "crb", "template": {"apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding", "metadata": {"name": "{{ name }}"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "User", "name": "alice"}]}}]}),
    );
    let (ok, err) = apply_as(&kc, alice, &cluster);
    assert!(!ok && err.contains("cluster-scoped"), "{err}");
    // Another team's Rule, running as its account: she may not take it over (its spec
    // edited to run as her account).
    let theirs = rule(
        "team-b-rule",
        json!({"serviceAccount": {"name": "builder", "namespace": "team-b"},
               "watch": {"group": "sec.example.com", "version": "v1", "resource": "others"}}),
    );
    let (ok, err) = apply_as(&kc, None, &theirs);
    assert!(ok, "{err}");
    let mut taken = theirs.clone();
    taken["spec"]["serviceAccount"] = json!({"name": "builder", "namespace": NS});
    let (ok, err) = apply_as(&kc, alice, &taken);
    assert!(
        !ok && err.contains("alice may not impersonate ServiceAccount team-b/builder"),
        "{err}"
    );
    // A `schema` has ruleop apply the kind's CRD (and convert its versions): it takes
    // `update` on that CRD, for a kind whose CRD GitOps applied and for a new one alike.
    for (resource, kind) in [("gadgets", "Gadget"), ("widgets", "Widget")] {
        let serving = rule(
            &format!("serves-{resource}"),
            json!({"watch": {"group": "sec.example.com", "version": "v1", "resource": resource},
                   "schema": {"kind": kind, "spec": {"text": "string"}}}),
        );
        let (ok, err) = apply_as(&kc, alice, &serving);
        assert!(
            !ok && err.contains(&format!(
                "alice may not `update` customresourcedefinitions/{resource}.sec.example.com"
            )),
            "the webhook, {resource}: {err}"
        );
        let (ok, err) = dry_run_as(&kc, "alice", &serving);
        assert!(!ok, "{err}");
    }
    // Her own rule, as her own account: admitted, and it runs.
    let (ok, err) = apply_as(&kc, alice, &rule("notes", json!({})));
    assert!(ok, "alice's own rule: {err}");
    let note = |name: &str, spec: Value| {
        json!({"apiVersion": "sec.example.com/v1", "kind": "Note",
               "metadata": {"name": name, "namespace": NS}, "spec": spec})
    };
    let (ok, err) = apply_as(
        &kc,
        alice,
        &note("hello", json!({"suffix": "page", "text": "hi"})),
    );
    assert!(ok, "{err}");
    let kc2 = kc.clone();
    eventually(T, "alice's rule makes her ConfigMap", || async {
        kubectl_at(&kc2, &["get", "configmap", "hello-page", "-n", NS], None)
            .0
            .then_some(())
    })
    .await;
    // Through her rule: a child in team-b, and a name that walks the request path, each
    // fail their resource alone, naming the field.
    let (ok, err) = apply_as(
        &kc,
        alice,
        &note(
            "escape",
            json!({"suffix": "x", "text": "t", "into": "team-b"}),
        ),
    );
    assert!(ok, "{err}");
    let (ok, err) = apply_as(
        &kc,
        alice,
        &note(
            "walk",
            json!({"suffix": "x/../../../../api/v1/namespaces/team-b/secrets", "text": "t"}),
        ),
    );
    assert!(ok, "{err}");
    for (name, says) in [("escape", "team-b"), ("walk", "not a valid name")] {
        let kc = kc.clone();
        let synced = eventually(T, "the resource fails alone", || async {
            let (_, out, _) = kubectl_at(&kc, &["get", "note", name, "-n", NS, "-o", "json"], None);
            let n: Value = serde_json::from_str(&out).ok()?;
            let c = n["status"]["conditions"]
                .as_array()?
                .iter()
                .find(|c| c["type"] == "Synced" && c["status"] == "False")?
                .clone();
            Some(c)
        })
        .await;
        let message = synced["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{name}: {synced}");
    }

    // A flood of Rules (each naming no account): every one answered and refused, none
    // stored unchecked, and the Lease kept meanwhile.
    let holder = |kc: &str| {
        let (_, out, _) = kubectl_at(
            kc,
            &["get", "lease", "ruleop-leader", "-n", OPS, "-o", "json"],
            None,
        );
        let l: Value = serde_json::from_str(&out).unwrap_or_default();
        (
            l["spec"]["holderIdentity"]
                .as_str()
                .unwrap_or_default()
                .to_string(),
            l["spec"]["leaseTransitions"].as_i64().unwrap_or_default(),
        )
    };
    let before = holder(&kc);
    assert!(!before.0.is_empty(), "ruleop holds the Lease");
    let as_alice = client_as(&kc, "alice").await;
    let flood_rule = |i: usize| {
        rule(
            &format!("flood-{i}"),
            json!({"serviceAccount": null,
                   "watch": {"group": "sec.example.com", "version": "v1", "resource": format!("floods{i}")}}),
        )
    };
    let rules_api: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(
        as_alice.clone(),
        &kube::discovery::ApiResource {
            group: "ruleop.dev".into(),
            version: "v1alpha1".into(),
            api_version: "ruleop.dev/v1alpha1".into(),
            kind: "Rule".into(),
            plural: "rules".into(),
        },
    );
    // Beside it, the same burst of ConfigMaps in her namespace (no webhook on them).
    let cms: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(as_alice.clone(), NS);
    let cm_burst = burst(50, |i| {
        let cms = cms.clone();
        async move {
            let cm = serde_json::from_value(json!({"metadata": {"name": format!("burst-{i}")}}))
                .unwrap();
            cms.create(&Default::default(), &cm)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    })
    .await;
    assert!(cm_burst.iter().all(|(r, _)| r.is_ok()), "{cm_burst:?}");
    let rule_burst = burst(50, |i| {
        let api = rules_api.clone();
        let obj: kube::api::DynamicObject = serde_json::from_value(flood_rule(i)).unwrap();
        async move {
            api.create(&Default::default(), &obj)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    })
    .await;
    for (r, _) in &rule_burst {
        let err = r.as_ref().expect_err("a flood Rule was stored");
        assert!(
            err.contains("escalate") || err.contains("as many Rules as it takes at once"),
            "{err}"
        );
    }
    let secs = |b: &[(Result<(), String>, f64)]| {
        let mut l: Vec<f64> = b.iter().map(|(_, s)| *s).collect();
        l.sort_by(f64::total_cmp);
        l
    };
    let (rl, cl) = (secs(&rule_burst), secs(&cm_burst));
    println!(
        "webhook: 50 Rules created at once by a tenant, each refused by the webhook: p50 {:.3}s p99 {:.3}s; 50 ConfigMaps beside (no webhook): p50 {:.3}s p99 {:.3}s; p99 ratio {:.1}",
        percentile(&rl, 0.5),
        percentile(&rl, 0.99),
        percentile(&cl, 0.5),
        percentile(&cl, 0.99),
        percentile(&rl, 0.99) / percentile(&cl, 0.99).max(0.001)
    );
    let (_, out, _) = kubectl_at(&kc, &["get", "rules", "-o", "name"], None);
    assert!(!out.contains("flood-"), "a flood Rule was stored: {out}");
    assert_eq!(
        holder(&kc),
        before,
        "the Lease changed hands during the flood"
    );
    assert_eq!(common::admin_metric(&admin, "ruleop_leader"), 1.0);

    // An admin's Rule that runs as ruleop: alice may not relabel it (a label can bring it
    // into another installation's `--rule-selector`), though she may annotate it.
    let admins = rule(
        "admins-rule",
        json!({"serviceAccount": null,
               "watch": {"group": "sec.example.com", "version": "v1", "resource": "admins"}}),
    );
    let (ok, err) = apply_as(&kc, None, &admins);
    assert!(ok, "{err}");
    let relabel = |user: &str, what: &str| {
        kubectl_at(
            &kc,
            &[
                "label",
                "rule",
                "admins-rule",
                what,
                "--overwrite",
                "--as",
                user,
            ],
            None,
        )
    };
    let annotate = |user: &str| {
        kubectl_at(
            &kc,
            &[
                "annotate",
                "rule",
                "admins-rule",
                "seen=yes",
                "--overwrite",
                "--as",
                user,
            ],
            None,
        )
    };
    let (ok, _, err) = relabel("alice", "ruleop.dev/installation=other");
    assert!(
        !ok && err.contains("may not `escalate` on rules.ruleop.dev/admins-rule"),
        "the webhook: {err}"
    );
    let (ok, _, err) = annotate("alice");
    assert!(ok, "the webhook: {err}");
    // The table of writes, through the webhook alone.
    let through_webhook = writes_table(&kc);
    let answers: Vec<bool> = through_webhook.iter().map(|(_, a)| *a).collect();
    assert_eq!(answers, TABLE_ANSWERS, "the webhook: {through_webhook:?}");

    // `ruleop check --as`: the same answer, from a rules file.
    let file = dir.path().join("other.yaml");
    std::fs::write(
        &file,
        "name: other\nwatch: {group: sec.example.com, version: v1, resource: notes}\nserviceAccount: {name: builder, namespace: team-b}\nchildren:\n  - id: c\n    template: {apiVersion: v1, kind: ConfigMap, metadata: {name: \"{{ name }}\"}}\n",
    )
    .unwrap();
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_ruleop"))
        .args(["check", "--against-cluster", "--as", "alice", "--rules"])
        .arg(&file)
        .env("KUBECONFIG", &kc)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&check.stderr).to_string()
        + &String::from_utf8_lossy(&check.stdout);
    assert_eq!(check.status.code(), Some(1), "{said}");
    assert!(
        said.contains("other.yaml:1: rule `other`")
            && said.contains("alice may not impersonate ServiceAccount team-b/builder"),
        "{said}"
    );

    // ruleop down: the policies deploy/ ships hold in the API server.
    op.kill();
    c.kubectl(
        &[
            "apply",
            "-f",
            &format!("{root}/deploy/admission-policy.yaml"),
        ],
        None,
    );
    let kc3 = kc.clone();
    eventually(T, "the policy refuses another team's account", || async {
        let (ok, err) = dry_run_as(&kc3, "alice", &other);
        (!ok && err.contains("ruleop-rule-authors")).then_some(())
    })
    .await;
    let (ok, err) = apply_as(&kc, alice, &other);
    assert!(!ok, "{err}");
    assert!(
        err.contains("alice may not impersonate ServiceAccount team-b/builder"),
        "{err}"
    );
    let (ok, err) = apply_as(
        &kc,
        alice,
        &rule("no-account", json!({"serviceAccount": null})),
    );
    assert!(
        !ok && err.contains("may not escalate on rules.ruleop.dev/no-account"),
        "{err}"
    );
    let (ok, _) = apply_as(
        &kc,
        None,
        &rule("by-admin", json!({"serviceAccount": null})),
    );
    assert!(ok, "a cluster admin may write a Rule that runs as ruleop");
    let (ok, err) = apply_as(&kc, alice, &taken);
    assert!(
        !ok && err.contains("ruleop-rule-authors")
            && err.contains("the Rule as it is runs as an account alice may not act as"),
        "{err}"
    );
    // And on a `schema` she may not define the CRD of.
    for resource in ["gadgets", "widgets"] {
        let serving = rule(
            &format!("serves-{resource}"),
            json!({"watch": {"group": "sec.example.com", "version": "v1", "resource": resource},
                   "schema": {"kind": "Thing", "spec": {"text": "string"}}}),
        );
        let (ok, err) = apply_as(&kc, alice, &serving);
        assert!(
            !ok && err.contains("ruleop-rule-authors")
                && err.contains(&format!(
                    "alice may not update customresourcedefinitions/{resource}.sec.example.com"
                )),
            "the policy, {resource}: {err}"
        );
    }
    // The policy gives the webhook's answer on the label and the annotation.
    let (ok, _, err) = relabel("alice", "ruleop.dev/installation=other");
    assert!(
        !ok && err.contains("ruleop-rule-authors")
            && err.contains("may not escalate on rules.ruleop.dev/admins-rule"),
        "the policy: {err}"
    );
    let (ok, _, err) = annotate("alice");
    assert!(ok, "the policy: {err}");
    // The same table through the policy alone: the same answer on every write.
    assert_eq!(
        writes_table(&kc),
        through_webhook,
        "the policy and the webhook answer the table of writes alike"
    );
    // Pinning her resource to a revision takes a right she does not have; an admin has it.
    let pin = |user: Option<&str>| {
        let mut args = vec![
            "annotate",
            "note",
            "hello",
            "-n",
            NS,
            "ruleop.dev/revision=1",
            "--overwrite",
        ];
        if let Some(u) = user {
            args.extend(["--as", u]);
        }
        kubectl_at(&kc, &args, None)
    };
    let (ok, _, err) = pin(alice);
    assert!(
        !ok && err.contains("may not pin a resource to a revision"),
        "{err}"
    );
    let (ok, _, err) = pin(None);
    assert!(ok, "{err}");
    // Her resource's other edits are hers.
    let (ok, _, err) = kubectl_at(
        &kc,
        &[
            "annotate",
            "note",
            "hello",
            "-n",
            NS,
            "note=mine",
            "--as",
            "alice",
        ],
        None,
    );
    assert!(ok, "{err}");

    // The audit log: what ruleop asked for.
    let events = audit_events(&audit);
    let ours: Vec<&Value> = events.iter().filter(|e| by_ruleop(e)).collect();
    assert!(!ours.is_empty(), "the audit log has ruleop's requests");
    for e in &ours {
        let uri = e["requestURI"].as_str().unwrap_or_default();
        let r = &e["objectRef"];
        let what = format!(
            "{} {uri} as {}",
            e["verb"], e["impersonatedUser"]["username"]
        );
        assert_ne!(r["namespace"], "team-b", "a request into team-b: {what}");
        assert!(!uri.contains("/namespaces/team-b"), "{what}");
        assert!(!uri.contains(".."), "{what}");
        if r["resource"] == "secrets" {
            assert!(
                r["namespace"] == OPS && r["name"] == "ruleop-webhook-tls",
                "a Secret other than its certificate's: {what}"
            );
        }
        assert!(
            !["clusterrolebindings", "clusterroles"]
                .contains(&r["resource"].as_str().unwrap_or_default()),
            "{what}"
        );
        let rules_kinds =
            ["notes", "configmaps"].contains(&r["resource"].as_str().unwrap_or_default());
        if rules_kinds && r["namespace"] == NS {
            assert_eq!(
                e["impersonatedUser"]["username"], "system:serviceaccount:team-a:builder",
                "alice's rule's request made with more than her account's rights: {what}"
            );
        }
    }
    assert!(
        ours.iter()
            .any(|e| e["objectRef"]["resource"] == "configmaps"
                && e["verb"] == "patch"
                && e["impersonatedUser"]["username"] == "system:serviceaccount:team-a:builder"),
        "alice's rule wrote as her account"
    );
}
