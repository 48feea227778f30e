//! The API server as the validator, for `check --against-cluster --sample` and
//! `test --server`: each rendered child (and the sample resource itself) sent as a
//! server-side dry-run apply; what the API server or an admission webhook refuses is a
//! problem of the rule, at the template's line of the field it names.

use crate::apply::dryrun::{DryRun, DryRunError, template_path};
use crate::render::{self, Rendered};
use crate::rules::error::{Location, RuleProblem};
use crate::rules::{self, CompiledRule, LoadError};
use crate::ruletest::run::Judge;
use crate::ruletest::simulate::existing_among;
use serde_json::Value;
use std::sync::Arc;

/// The field manager of the children's dry-run writes: the operator's, so the API server
/// takes them as it would take the operator's.
const MANAGER: &str = "ruleop";

/// The field manager of a sample resource's dry-run: a user writes a resource, not ruleop.
const SAMPLE_MANAGER: &str = "ruleop-check";

/// The problems the API server finds in one rule's rendered children.
pub(super) async fn child_problems(
    dr: &DryRun,
    rule: &CompiledRule,
    children: &[Rendered],
) -> Vec<RuleProblem> {
    let mut out = Vec::new();
    for c in children {
        let Err(e) = send(dr, &c.object, MANAGER).await else {
            continue;
        };
        let index = rule.children.iter().position(|ch| ch.id == c.id);
        let anchor = index.map_or(rule.at.clone(), |i| rule.children[i].at.clone());
        let prefix = index.map(|i| format!("children[{i}].template"));
        let what = format!("{} {:?}", c.kind, c.name);
        out.extend(problems(
            rule,
            Some(c.instance()),
            &anchor,
            prefix.as_deref(),
            &what,
            e,
        ));
    }
    out
}

/// A dry-run of `obj`; in the client's default namespace when its own does not exist here
/// (a test's or a sample's namespace is part of the example, not of what is checked).
async fn send(dr: &DryRun, obj: &Value, manager: &str) -> Result<(), DryRunError> {
    match dr.apply(obj, manager).await {
        Err(DryRunError::NoNamespace(ns)) if ns != dr.default_namespace() => {
            let mut moved = obj.clone();
            moved["metadata"]["namespace"] = Value::from(dr.default_namespace());
            tracing::debug!(%ns, "dry-run in the default namespace: its own does not exist");
            dr.apply(&moved, manager).await
        }
        other => other,
    }
}

/// One problem per cause the API server named (or one for its whole answer), each at the
/// line of the field it names.
fn problems(
    rule: &CompiledRule,
    child: Option<String>,
    anchor: &Location,
    prefix: Option<&str>,
    what: &str,
    e: DryRunError,
) -> Vec<RuleProblem> {
    let at = |field: &str| Location {
        file: anchor.file.clone(),
        line: match prefix {
            Some(p) => {
                rules::lines::line_in_file(&anchor.file, anchor.line, &template_path(p, field))
            }
            None => anchor.line,
        },
    };
    let problem = |at: Location, problem: String, fix: &str| RuleProblem {
        at,
        rule: rule.name.clone(),
        child: child.clone(),
        problem,
        fix: fix.to_string(),
    };
    match e {
        DryRunError::Refused {
            causes,
            code,
            reason,
            ..
        } if !causes.is_empty() => causes
            .into_iter()
            .map(|c| {
                problem(
                    at(&c.field),
                    format!("{what}: the API server refuses it ({code} {reason}): {}: {}", c.field, c.message),
                    "change the template (or the resource) so the API server takes the object: this is its own validation, which no schema shows",
                )
            })
            .collect(),
        DryRunError::Refused { message, .. } if message.contains("does not support dry run") => {
            vec![problem(
                at(""),
                format!("{what}: not checked: {message}"),
                "an admission webhook with side effects cannot take a dry-run (its `sideEffects` is not None or NoneOnDryRun): this object is checked only when it is written",
            )]
        }
        DryRunError::Refused { code: 403, message, .. } => vec![problem(
            at(""),
            format!("{what}: not allowed (403): {message}"),
            "a dry-run needs the RBAC of the write itself (patch on the kind); or an admission policy refused it: see its message",
        )],
        DryRunError::Refused { code, reason, message, .. } => vec![problem(
            at(""),
            format!("{what}: the API server refuses it ({code} {reason}): {message}"),
            "change the template (or the resource) so the object is valid",
        )],
        DryRunError::NotServed { .. } => vec![problem(
            at(""),
            format!("{what}: {e}"),
            "install the kind's CRD in the cluster (or check its apiVersion) first",
        )],
        other => vec![problem(at(""), format!("{what}: {other}"), "check the kubeconfig and that the API server answers")],
    }
}

/// Every sample resource rendered by its rule, the resource and its children sent as
/// dry-runs (but not those of a rule in `failed`): the problems found, as load errors of
/// their rules (one verdict per rule).
pub(super) async fn sample_problems(
    dr: &DryRun,
    loaded: &[Arc<CompiledRule>],
    samples: &[(std::path::PathBuf, Value)],
    crds: &[Value],
    failed: &std::collections::BTreeSet<String>,
) -> anyhow::Result<Vec<LoadError>> {
    let mut out = Vec::new();
    let mut unmatched = Vec::new();
    for (file, sample) in samples {
        if !sample["metadata"].is_object() {
            unmatched.push(LoadError::Sample {
                path: file.clone(),
                message: "a sample has no `metadata` mapping".into(),
                fix: "give each sample `apiVersion`, `kind` and `metadata: {name: ...}`".into(),
            });
            continue;
        }
        let rule = match crate::ruletest::simulate::rule_for(loaded, None, sample) {
            Ok(r) => r,
            Err(e) => {
                let watched: Vec<String> = loaded
                    .iter()
                    .map(|r| format!("{} {}", r.watch.api_version(), r.watch.resource))
                    .collect();
                unmatched.push(LoadError::Sample {
                    path: file.clone(),
                    message: format!(
                        "sample {:?}: {}",
                        sample["metadata"]["name"].as_str().unwrap_or("?"),
                        e.split("; name one").next().unwrap_or(&e)
                    ),
                    fix: format!(
                        "give a resource of a kind the rules watch ({})",
                        watched.join(", ")
                    ),
                });
                continue;
            }
        };
        if failed.contains(&rule.name) {
            eprintln!(
                "note: rule `{}` has errors: its sample was not sent",
                rule.name
            );
            continue;
        }
        let mut cr = sample.clone();
        super::input::in_namespace(&mut cr, dr.default_namespace());
        if let Some(schema) = rules::crd::schema_of(rule, crds) {
            rules::crd::apply_defaults(&mut cr, schema);
        }
        let name = cr["metadata"]["name"].as_str().unwrap_or("?").to_string();
        // The resource itself: its CRD's validation (CEL rules included) and webhooks.
        match send(dr, &cr, SAMPLE_MANAGER).await {
            Ok(()) => {}
            Err(e @ DryRunError::NotServed { .. }) => {
                eprintln!("note: sample {name:?}: {e}: the resource itself was not sent");
            }
            Err(e) => {
                let what = format!("sample resource {name:?}");
                out.extend(problems(rule, None, &rule.at, None, &what, e));
            }
        }
        let plan = render::scope(rule, &cr)
            .and_then(|s| existing_among(rule, s, &[]))
            .and_then(|s| render::render_with(rule, &s, &|_| None));
        let plan = match plan {
            Ok(p) => p,
            Err(e) => {
                out.push(RuleProblem {
                    at: rule.at.clone(),
                    rule: rule.name.clone(),
                    child: None,
                    problem: format!("sample resource {name:?} does not render: {e}"),
                    fix: "fix the rule or the sample".into(),
                });
                continue;
            }
        };
        for w in &plan.waiting {
            eprintln!(
                "note: rule `{}`: sample {name:?}: child `{}` {}; not sent",
                rule.name, w.id, w.reason
            );
        }
        out.extend(child_problems(dr, rule, &plan.children).await);
    }
    Ok(out
        .into_iter()
        .map(|p| LoadError::Rule(Box::new(p)))
        .chain(unmatched)
        .collect())
}

/// The API server as a test's judge: each step's children sent as dry-runs.
pub(super) struct Server {
    rt: tokio::runtime::Runtime,
    dr: DryRun,
}

impl Server {
    /// A client of the current kubeconfig's cluster.
    pub(super) fn connect() -> anyhow::Result<Server> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let client = rt.block_on(crate::client::plain())?;
        // One request first: an unreachable cluster is one error, not one per child.
        rt.block_on(client.apiserver_version())
            .map_err(|e| anyhow::anyhow!("--server: cannot reach the cluster: {e}"))?;
        Ok(Server {
            rt,
            dr: DryRun::new(client),
        })
    }
}

impl Judge for Server {
    fn refusals(&self, rule: &CompiledRule, children: &[Rendered]) -> Vec<String> {
        self.rt
            .block_on(child_problems(&self.dr, rule, children))
            .iter()
            .map(ToString::to_string)
            .collect()
    }
}
