//! `ruleop check`: every rule loaded and compiled, checked against the given CRDs or the
//! cluster's schemas and CRDs; one line per rule, errors with file and line.

use super::args::CheckArgs;
use super::input::{print_errors, read_crds};
use crate::access::authority::{self, Requester};
use crate::rules::policy::Policy;
use crate::rules::{self, CompiledRule, LoadError};
use serde_json::Value;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// The rules loaded against what the cluster (current kubeconfig) serves: children of
/// kinds neither built in nor given with `--crd` are checked against the schemas of its
/// `/openapi/v3`, and each rule's CRD is compared with the one it serves (a breaking
/// change is an error). Each of `samples` is rendered by its rule, and the resource and
/// its children sent as dry-runs (what the API server refuses is an error of the rule).
pub(super) fn load_against_cluster(
    paths: &[PathBuf],
    given: &[Value],
    samples: &[(PathBuf, Value)],
    author: Option<&Requester>,
) -> anyhow::Result<(Vec<Arc<CompiledRule>>, Vec<LoadError>)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let client = crate::client::plain().await?;
        let (loaded, _) = super::input::load_rules_or_objects(paths);
        let unknown = unknown_child_kinds(&loaded);
        let served = crate::cache::openapi::schemas(&client, &unknown).await?;
        crate::schema::typed::use_crds(&[given, &served].concat());
        let (loaded, mut errors) = super::input::load_rules_or_objects(paths);
        for rule in &loaded {
            let Some(crd) = &rule.crd else { continue };
            for b in crate::operator::crds::against_cluster(&client, crd).await? {
                errors.push(LoadError::Rule(Box::new(rules::error::RuleProblem {
                    at: rule.at.clone(),
                    rule: rule.name.clone(),
                    child: None,
                    problem: format!("the CRD made from `schema` would break what the cluster stores: {b}"),
                    fix: "make the change additive (a new optional field, a default), or migrate the stored resources first".into(),
                })));
            }
        }
        // Samples only of rules with no error yet: those have their verdict already.
        let failed: std::collections::BTreeSet<String> = errors
            .iter()
            .filter_map(LoadError::rule)
            .map(str::to_string)
            .collect();
        if let Some(who) = author {
            errors.extend(author_problems(&client, who, &loaded).await?);
        }
        let found =
            super::server::sample_problems(&crate::apply::dryrun::DryRun::new(client.clone()), &loaded, samples, given, &failed).await?;
        errors.extend(found);
        Ok((loaded, errors))
    })
}

/// Each rule `who` may not write as a Rule, with what they lack.
async fn author_problems(
    client: &kube::Client,
    who: &Requester,
    loaded: &[Arc<CompiledRule>],
) -> anyhow::Result<Vec<LoadError>> {
    let mut out = Vec::new();
    for rule in loaded {
        for demand in authority::demands(rule) {
            let Some(why) = authority::denied(client, who, &demand).await? else {
                continue;
            };
            let (problem, fix) = why.split_once("\n  fix: ").unwrap_or((why.as_str(), ""));
            out.push(LoadError::Rule(Box::new(rules::error::RuleProblem {
                at: rule.at.clone(),
                rule: rule.name.clone(),
                child: None,
                problem: problem.to_string(),
                fix: fix.to_string(),
            })));
        }
    }
    Ok(out)
}

/// What the installation's policy refuses in `loaded` (errors), and, where it allows
/// them, the places a rule copies Secret data (warnings, printed).
fn policy_problems(loaded: &[Arc<CompiledRule>], policy: &Policy) -> Vec<LoadError> {
    let mut out = Vec::new();
    for r in loaded {
        out.extend(
            rules::policy::problems(r, policy)
                .into_iter()
                .map(|(_, e)| e),
        );
        if policy.allow_secret_reads {
            for f in rules::policy::secret_flows(r) {
                eprintln!("warning: {}: rule `{}`: {}", f.at, r.name, f.describe());
            }
        }
    }
    out
}

/// The (apiVersion, kind) of children and existing objects whose schema is neither
/// shipped nor given (the paths a rule reads inside an existing object are checked too).
pub(super) fn unknown_child_kinds(loaded: &[Arc<CompiledRule>]) -> Vec<(String, String)> {
    let kinds = loaded.iter().flat_map(|r| {
        let children = r.children.iter().map(|c| (&c.api_version, &c.kind));
        children.chain(r.existing.iter().map(|e| (&e.api_version, &e.kind)))
    });
    let mut out: Vec<(String, String)> = kinds
        .filter(|(av, k)| crate::schema::typed::builtin(av, k).is_none())
        .filter(|(av, k)| crate::schema::typed::from_crds(av, k).is_none())
        .map(|(av, k)| (av.clone(), k.clone()))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// A note for each orphaned child that could not take its object back: an object it let
/// go has no controller, so only `adopt: IfOrphan` adopts it when it comes back.
pub(super) fn orphan_notes(r: &CompiledRule) {
    use crate::rules::spec::{AdoptPolicy, OnRemove};
    for c in &r.children {
        if c.on_remove == OnRemove::Orphan && c.adopt != AdoptPolicy::IfOrphan {
            eprintln!(
                "note: {}: rule `{}`, child `{}`: `onRemove: Orphan` with `adopt: {:?}`: an object it let go that comes back into the rule (its `when` true again, its item back) has no controller and is `NotOwned`; set `adopt: IfOrphan` to take it back",
                c.at, r.name, c.id, c.adopt
            );
        }
    }
}

pub(super) fn check(args: CheckArgs) -> anyhow::Result<ExitCode> {
    // Children of the CRDs' kinds are checked against their schemas too.
    let crds = read_crds(&args.crd)?;
    crate::schema::typed::use_crds(&crds);
    let mut samples = Vec::new();
    for p in &args.sample {
        samples.extend(
            super::input::read_objects(p)?
                .into_iter()
                .map(|o| (p.clone(), o)),
        );
    }
    let author = args.as_user.as_ref().map(|user| Requester {
        user: user.clone(),
        groups: args.as_group.clone(),
        ..Requester::default()
    });
    let (loaded, mut errors) = match args.against_cluster {
        true => load_against_cluster(&args.rules, &crds, &samples, author.as_ref())?,
        false => super::input::load_rules_or_objects(&args.rules),
    };
    let policy = Policy {
        require_identity: args.require_identity,
        allow_secret_reads: args.allow_secret_reads,
    };
    errors.extend(policy_problems(&loaded, &policy));
    for r in &loaded {
        match rules::crd::schema_of(r, &crds) {
            Some(schema) => errors.extend(rules::crd::check_spec_fields(r, schema)),
            None if crds.is_empty() => {}
            None => eprintln!(
                "note: rule `{}`: no CRD given serves {} {}; its spec fields were not checked",
                r.name,
                r.watch.api_version(),
                r.watch.resource
            ),
        }
    }
    for r in &loaded {
        orphan_notes(r);
    }
    for f in rules::load::manifests_skipped(&args.rules) {
        eprintln!(
            "note: {}: skipped: its documents are Kubernetes objects (apiVersion and kind), not rules",
            f.display()
        );
    }
    // One verdict per rule: a rule with an error is not also said to be ok.
    let failed: std::collections::BTreeSet<&str> =
        errors.iter().filter_map(LoadError::rule).collect();
    let ok: Vec<&Arc<CompiledRule>> = loaded
        .iter()
        .filter(|r| !failed.contains(r.name.as_str()))
        .collect();
    let empty = ok.is_empty() && errors.is_empty();
    if empty {
        eprintln!("warning: no rule in {:?}", args.rules);
    }
    if args.output.document() {
        args.output.print(&verdicts(&ok, &errors))?;
    } else {
        print_text(&ok, &errors)?;
    }
    Ok(match errors.is_empty() && !(empty && args.strict) {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    })
}

/// What a rule is, in a line and in a document.
fn summary(r: &CompiledRule) -> (String, Value) {
    let w = &r.watch;
    let kinds: Vec<String> = r
        .children
        .iter()
        .map(|c| format!("{}:{}", c.id, c.kind))
        .collect();
    let line = format!(
        "{} ({}): watches {} {}, children [{}], {} status field(s)",
        r.name,
        r.at,
        w.api_version(),
        w.resource,
        kinds.join(", "),
        r.fields.len()
    );
    let doc = serde_json::json!({
        "name": r.name, "at": r.at.to_string(),
        "watches": {"apiVersion": w.api_version(), "resource": w.resource},
        "children": kinds, "statusFields": r.fields.len(),
    });
    (line, doc)
}

fn print_text(ok: &[&Arc<CompiledRule>], errors: &[LoadError]) -> anyhow::Result<()> {
    print_errors(errors);
    for r in ok {
        out!("ok   {}\n", summary(r).0);
    }
    if errors.is_empty() {
        out!("{} rule(s) ok\n", ok.len());
    } else {
        out!("{} rule(s) ok, {} error(s)\n", ok.len(), errors.len());
    }
    Ok(())
}

/// `check -o json|yaml`: the rules that are ok and every error, with its rule.
fn verdicts(ok: &[&Arc<CompiledRule>], errors: &[LoadError]) -> Value {
    serde_json::json!({
        "ok": errors.is_empty(),
        "rules": ok.iter().map(|r| summary(r).1).collect::<Vec<_>>(),
        "errors": errors.iter().map(|e| serde_json::json!({"rule": e.rule(), "message": e.to_string()})).collect::<Vec<_>>(),
    })
}
