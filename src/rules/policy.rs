//! What an installation allows a rule to be (pure, at load): `--require-identity` (every
//! rule runs as a ServiceAccount of its own, none with ruleop's rights) and
//! `--allow-secret-reads` (a rule that copies data read from a Secret anywhere but into a
//! Secret: a child of another kind, or its status, both of which people who may not read
//! the Secret can read). A rule that breaks the policy is refused like a rule with an
//! error: a file's keeps its last good version, a Rule's status says why.

use super::compile::{CompiledRule, FieldSource};
use super::error::{LoadError, Location, RuleProblem};

/// The installation's policy for rules (`ruleop run` flags).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Policy {
    /// Refuse a rule with no `serviceAccount`.
    pub require_identity: bool,
    /// Run a rule that copies Secret data out of Secrets.
    pub allow_secret_reads: bool,
}

/// Where a rule copies Secret data to: a child of another kind, or a status field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretFlow {
    pub at: Location,
    /// The child (`children[i]`, its id) or the status field (`status.<name>`).
    pub into: Into,
    /// The Secrets it comes from: `existing.<id>`, or the watched resource.
    pub from: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Into {
    Child {
        index: usize,
        id: String,
        kind: String,
    },
    Status {
        index: usize,
        name: String,
    },
}

impl SecretFlow {
    /// The path of its place in a Rule object (`spec.children[2]`, `spec.status.fields[0]`).
    pub fn path(&self) -> String {
        match &self.into {
            Into::Child { index, .. } => format!("spec.children[{index}]"),
            Into::Status { index, .. } => format!("spec.status.fields[{index}]"),
        }
    }

    pub fn describe(&self) -> String {
        let into = match &self.into {
            Into::Child { id, kind, .. } => format!("child `{id}` (a {kind}, not a Secret)"),
            Into::Status { name, .. } => format!("status field `{name}`"),
        };
        format!(
            "{into} is made from Secret data ({}): whoever may read it reads what the Secret holds",
            self.from.join(", ")
        )
    }
}

/// Whether the kind is Secret, however its apiVersion and kind are spelt (the one
/// normalizer of [`crate::schema::kinds`]: `/v1`, `core/v1` and `secret` are Secrets too).
fn is_secret(api_version: &str, kind: &str) -> bool {
    crate::schema::kinds::names_kind(api_version, kind, "v1", "Secret")
}

/// Every place `rule` copies Secret data out of a Secret. Secret data is what an
/// `existing` Secret holds past its `metadata` (its name is no secret), the watched
/// resource's when it watches Secrets, and what a Secret child made from either holds
/// (read back through `rendered.<id>`, `observed.<id>` or `children.<id>`).
pub fn secret_flows(rule: &CompiledRule) -> Vec<SecretFlow> {
    let mut sources: Vec<String> = rule
        .existing
        .iter()
        .filter(|e| is_secret(&e.api_version, &e.kind))
        .map(|e| format!("existing.{}", e.id))
        .collect();
    let watches_secrets = crate::schema::kinds::canonical_group(&rule.watch.group).is_empty()
        && rule.watch.resource.trim().eq_ignore_ascii_case("secrets");
    if sources.is_empty()
        && !watches_secrets
        && !rule
            .children
            .iter()
            .any(|c| is_secret(&c.api_version, &c.kind))
    {
        return Vec::new();
    }
    // A Secret child's live object is Secret data whoever filled it (a token the
    // controller writes into a `service-account-token` Secret).
    for c in rule
        .children
        .iter()
        .filter(|c| is_secret(&c.api_version, &c.kind))
    {
        sources.push(format!("observed.{}", c.id));
        sources.push(format!("children.{}", c.id));
    }
    let mut flows = Vec::new();
    for &i in &rule.order {
        let c = &rule.children[i];
        let mut paths = Vec::new();
        let mut loops = Vec::new();
        child_paths(rule, c, &mut paths, &mut loops);
        let from = secret_reads(&paths, &loops, &sources, watches_secrets);
        if from.is_empty() {
            continue;
        }
        if is_secret(&c.api_version, &c.kind) {
            // What it holds is Secret data in its turn.
            for via in ["rendered", "observed", "children"] {
                sources.push(format!("{via}.{}", c.id));
            }
            continue;
        }
        flows.push(SecretFlow {
            at: c.at.clone(),
            into: Into::Child {
                index: i,
                id: c.id.clone(),
                kind: c.kind.clone(),
            },
            from,
        });
    }
    for (index, f) in rule.fields.iter().enumerate() {
        let paths = match &f.source {
            FieldSource::Value(e) => rule.program.expression_paths(e),
            FieldSource::Path {
                from: super::compile::Source::Child(c),
                text,
                ..
            } => vec![format!(
                "children.{}.{}",
                rule.children[*c].id,
                text.trim_start_matches("$.")
            )],
            FieldSource::Path { text, .. } => {
                vec![format!("self.{}", text.trim_start_matches("$."))]
            }
        };
        let from = secret_reads(&paths, &[], &sources, watches_secrets);
        if !from.is_empty() {
            flows.push(SecretFlow {
                at: f.at.clone(),
                into: Into::Status {
                    index,
                    name: f.name.clone(),
                },
                from,
            });
        }
    }
    flows
}

/// The paths a child's template and `forEach` read, and its loops (the paths each loop
/// runs over, and the name of its item).
fn child_paths(
    rule: &CompiledRule,
    c: &super::compile::CompiledChild,
    paths: &mut Vec<String>,
    loops: &mut Vec<(Vec<String>, String)>,
) {
    if let Some(e) = &c.each {
        loops.push((rule.program.expression_paths(&e.over), e.var.to_string()));
    }
    node_paths(rule, &c.template, paths, loops);
}

fn node_paths(
    rule: &CompiledRule,
    n: &super::compile::Node,
    paths: &mut Vec<String>,
    loops: &mut Vec<(Vec<String>, String)>,
) {
    use super::compile::{Key, Node};
    match n {
        Node::Literal(_) => {}
        Node::Expr(e) => paths.extend(rule.program.expression_paths(e)),
        Node::Text(t) => paths.extend(rule.program.template_paths(t)),
        Node::Map(entries) => {
            for (k, v) in entries {
                if let Key::Text(t) = k {
                    paths.extend(rule.program.template_paths(t));
                }
                node_paths(rule, v, paths, loops);
            }
        }
        Node::Seq(items) => items.iter().for_each(|i| node_paths(rule, i, paths, loops)),
        Node::Each(b) => {
            let (each, node) = b.as_ref();
            loops.push((
                rule.program.expression_paths(&each.over),
                each.var.to_string(),
            ));
            node_paths(rule, node, paths, loops);
        }
    }
}

/// Whether `path` reads past the metadata of `source` (`existing.db.data.p`, `existing.db`
/// whole; not `existing.db.metadata.name`).
/// What of an object's metadata is no secret (its annotations may hold its whole data:
/// `kubectl apply`'s last-applied configuration).
const PLAIN_METADATA: &[&str] = &["name", "namespace", "labels", "uid"];

fn reads_data(path: &str, source: &str) -> bool {
    // A path that stops above the source (`existing`, when the template reads
    // `existing['db-creds']`) may read it: the id is not known statically.
    if source.starts_with(path) && source[path.len()..].starts_with('.') {
        return true;
    }
    match path.strip_prefix(source) {
        Some("") => true,
        Some(rest) => {
            let Some(rest) = rest.strip_prefix('.') else {
                return false;
            };
            match rest.strip_prefix("metadata") {
                None => true,
                Some(meta) => {
                    let field = meta
                        .trim_start_matches('.')
                        .split('.')
                        .next()
                        .unwrap_or_default();
                    !PLAIN_METADATA.contains(&field)
                }
            }
        }
        None => false,
    }
}

/// The sources of Secret data among `paths` (and the items of `loops` over them).
fn secret_reads(
    paths: &[String],
    loops: &[(Vec<String>, String)],
    sources: &[String],
    watches_secrets: bool,
) -> Vec<String> {
    let mut from = Vec::new();
    for s in sources {
        let over = |p: &String| p == s || p.starts_with(&format!("{s}."));
        if paths.iter().any(|p| reads_data(p, s)) {
            from.push(s.clone());
        }
        for (over_paths, var) in loops {
            if over_paths.iter().any(over) && paths.iter().any(|p| reads_data(p, var)) {
                from.push(format!("{s} (as `{var}`)"));
            }
        }
    }
    if watches_secrets
        && paths.iter().any(|p| {
            ["data", "stringData", "spec"]
                .iter()
                .any(|h| reads_data(p, h) || p == h)
                || reads_data(p, "self")
        })
    {
        from.push("the watched Secret".into());
    }
    from.sort();
    from.dedup();
    from
}

/// What `policy` refuses in a Rule object's `rule`, each at its path in the Rule (the
/// message without the pseudo-file's location: the path says where).
pub fn object_problems(rule: &CompiledRule, policy: &Policy) -> Vec<super::object::ObjectProblem> {
    problems(rule, policy)
        .into_iter()
        .map(|(path, e)| {
            let text = e.to_string();
            let message = text
                .split_once(": ")
                .map_or(text.as_str(), |(_, m)| m)
                .to_string();
            super::object::ObjectProblem { path, message }
        })
        .collect()
}

/// What `policy` refuses in `rule`, each as a problem with its fix.
pub fn problems(rule: &CompiledRule, policy: &Policy) -> Vec<(String, LoadError)> {
    let mut out = Vec::new();
    let problem = |at: &Location, child: Option<String>, problem: String, fix: String| {
        LoadError::Rule(Box::new(RuleProblem {
            at: at.clone(),
            rule: rule.name.clone(),
            child,
            problem,
            fix,
        }))
    };
    if policy.require_identity && rule.identity.is_none() {
        out.push((
            "spec.serviceAccount".to_string(),
            problem(
                &rule.at,
                None,
                "this installation runs no rule with ruleop's own rights (--require-identity), and the rule names no `serviceAccount`".into(),
                "add `serviceAccount: {name: <account>, namespace: <namespace>}` naming an account that holds what the rule needs (`ruleop rbac --per-rule` prints its RBAC)".into(),
            ),
        ));
    }
    if !policy.allow_secret_reads {
        for f in secret_flows(rule) {
            let child = match &f.into {
                Into::Child { id, .. } => Some(id.clone()),
                Into::Status { .. } => None,
            };
            out.push((
                f.path(),
                problem(
                    &f.at,
                    child,
                    f.describe(),
                    "copy Secret data only into Secret children; or, if every reader of this child or status may read those Secrets, run ruleop with --allow-secret-reads".into(),
                ),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> std::sync::Arc<CompiledRule> {
        let (rules, errors) = crate::rules::load::load_str(text, std::path::Path::new("r.yaml"));
        assert!(errors.is_empty(), "{errors:?}");
        rules.into_iter().next().unwrap()
    }

    const HEAD: &str = "name: db\nwatch: {group: x.io, version: v1, resource: dbs}\n";

    fn existing_secret() -> String {
        format!(
            "{HEAD}existing:\n  - id: creds\n    apiVersion: v1\n    kind: Secret\n    name: \"{{{{ spec.secret }}}}\"\n"
        )
    }

    #[test]
    fn a_secret_copied_into_a_config_map_or_the_status_is_a_flow_into_a_secret_is_not() {
        let text = format!(
            "{}children:\n  - id: copy\n    template:\n      apiVersion: v1\n      kind: Secret\n      metadata: {{name: \"{{{{ name }}}}\"}}\n      data: {{p: \"{{{{ existing.creds.data.p }}}}\"}}\n  - id: leak\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {{name: \"{{{{ name }}}}\"}}\n      data: {{p: \"{{{{ rendered.copy.data.p }}}}\"}}\nstatus:\n  fields:\n    - name: password\n      type: string\n      value: existing.creds.data.p\n    - name: plain\n      type: string\n      value: name\n",
            existing_secret()
        );
        let r = rule(&text);
        let flows = secret_flows(&r);
        assert_eq!(flows.len(), 2, "{flows:?}");
        assert!(
            matches!(&flows[0].into, Into::Child { id, .. } if id == "leak"),
            "{flows:?}"
        );
        assert_eq!(
            flows[0].from,
            vec!["rendered.copy".to_string()],
            "{flows:?}"
        );
        assert!(matches!(&flows[1].into, Into::Status { name, .. } if name == "password"));
        assert_eq!(flows[1].path(), "spec.status.fields[0]");
        let refused = problems(&r, &Policy::default());
        assert_eq!(refused.len(), 2);
        assert!(refused[0].1.to_string().contains("--allow-secret-reads"));
        let allowed = Policy {
            allow_secret_reads: true,
            ..Policy::default()
        };
        assert!(problems(&r, &allowed).is_empty());
    }

    /// Every spelling of a Secret's apiVersion and kind is refused: at load (not the API
    /// server's spelling, with the one to write) or by the policy, never let through.
    #[test]
    fn a_secret_copied_out_is_refused_however_its_kind_is_spelt() {
        for (api_version, kind) in [
            ("v1", "Secret"),
            ("/v1", "Secret"),
            (" v1", "Secret"),
            ("core/v1", "Secret"),
            ("V1", "Secret"),
            ("v1", "secret"),
            ("v1", "SECRET"),
            ("v1", " Secret"),
        ] {
            let text = format!(
                "{HEAD}existing:\n  - id: creds\n    apiVersion: \"{api_version}\"\n    kind: \"{kind}\"\n    name: token\nchildren:\n  - id: cm\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {{name: \"{{{{ name }}}}\"}}\n      data: {{t: \"{{{{ existing.creds.data.token }}}}\"}}\n"
            );
            let (rules, errors) =
                crate::rules::load::load_str(&text, std::path::Path::new("r.yaml"));
            let refused_at_load = errors.iter().any(|e| {
                let m = e.to_string();
                m.starts_with("r.yaml:")
                    && (m.contains("write `") || m.contains("did you mean `Secret`"))
            });
            let refused_by_policy = rules
                .first()
                .is_some_and(|r| !problems(r, &Policy::default()).is_empty());
            assert!(
                refused_at_load || refused_by_policy,
                "{api_version:?} {kind:?} passed: {errors:?}"
            );
            if (api_version, kind) == ("v1", "Secret") {
                assert!(errors.is_empty() && refused_by_policy, "{errors:?}");
            } else {
                assert!(refused_at_load, "{api_version:?} {kind:?}: {errors:?}");
            }
        }
        // The flow itself is found for any spelling a compiled rule could hold.
        assert!(is_secret("/v1", "Secret") && is_secret("core/v1", "secret"));
    }

    #[test]
    fn a_rule_that_reads_no_secret_has_no_flow_and_one_without_an_account_is_refused_only_when_required()
     {
        let text = format!(
            "{HEAD}children:\n  - id: cm\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {{name: \"{{{{ name }}}}\"}}\n"
        );
        let r = rule(&text);
        assert!(secret_flows(&r).is_empty());
        assert!(problems(&r, &Policy::default()).is_empty());
        let strict = Policy {
            require_identity: true,
            ..Policy::default()
        };
        let p = problems(&r, &strict);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].0, "spec.serviceAccount");
        assert!(p[0].1.to_string().contains("serviceAccount"), "{}", p[0].1);
        let with = format!("{text}serviceAccount: {{name: db, namespace: team-a}}\n");
        assert!(problems(&rule(&with), &strict).is_empty());
    }

    #[test]
    fn a_rule_watching_secrets_copies_them_where_it_reads_past_their_metadata() {
        let text = "name: s\nwatch: {group: '', version: v1, resource: secrets}\nchildren:\n  - id: cm\n    template:\n      apiVersion: v1\n      kind: ConfigMap\n      metadata: {name: \"{{ name }}\"}\nstatus:\n  fields:\n    - name: copied\n      type: string\n      value: self.data.x\n";
        let flows = secret_flows(&rule(text));
        assert_eq!(
            flows.len(),
            1,
            "only the status reads past the name: {flows:?}"
        );
        assert_eq!(flows[0].from, vec!["the watched Secret".to_string()]);
    }

    #[test]
    fn a_subscripted_id_an_annotation_and_a_secret_filled_by_others_are_reads_the_name_is_not() {
        assert!(reads_data("existing", "existing.creds"));
        assert!(reads_data(
            "existing.creds.metadata.annotations",
            "existing.creds"
        ));
        assert!(reads_data("existing.creds.metadata", "existing.creds"));
        assert!(!reads_data(
            "existing.creds.metadata.name",
            "existing.creds"
        ));
        assert!(!reads_data("existing.credsx.data", "existing.creds"));
        let text = format!(
            "{HEAD}children:\n  - id: token\n    template: {{apiVersion: v1, kind: Secret, metadata: {{name: \"{{{{ name }}}}\"}}, type: kubernetes.io/service-account-token}}\nstatus:\n  fields:\n    - name: token\n      type: string\n      value: children.token.data.token\n"
        );
        let flows = secret_flows(&rule(&text));
        assert_eq!(flows.len(), 1, "{flows:?}");
        assert_eq!(flows[0].from, vec!["children.token".to_string()]);
    }
}
