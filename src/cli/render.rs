//! `ruleop render`: the children (and, with observed objects, the status) a custom
//! resource gets, with no cluster.

use super::args::RenderArgs;
use super::input::{load_all_or_report, pick_rule, read_crds, read_objects};
use crate::render::{self, Rendered};
use crate::rules::{self, CompiledRule};
use crate::ruletest::simulate::{existing_among, find_live, match_observed};
use crate::status;
use serde_json::Value;
use std::process::ExitCode;

pub(super) fn render_cmd(args: RenderArgs) -> anyhow::Result<ExitCode> {
    let Some(loaded) = load_all_or_report(&args.rules) else {
        return Ok(ExitCode::FAILURE);
    };
    let crs = read_objects(&args.cr)?;
    let observed = match &args.observed {
        Some(p) => Some(read_objects(p)?),
        None => None,
    };
    let crds = read_crds(&args.crd)?;
    // With --strict, children of the CRDs' kinds are checked against their schemas too.
    crate::schema::typed::use_crds(&crds);
    let mut status_out = match &args.status {
        Some(p) => Some(
            std::fs::File::create(p)
                .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", p.display()))?,
        ),
        None => None,
    };
    let mut failed = false;
    for cr in &crs {
        let rule = pick_rule(&loaded, args.rule.as_deref(), cr)?;
        // The CRD's defaults first, as the API server applies them when it stores the
        // resource; one written in another version of the kind is converted to the
        // watched one first (its own version's defaults applied), as ruleop's webhook would.
        let mut defaulted = cr.clone();
        super::input::in_namespace(&mut defaulted, &args.namespace);
        let watched = &rule.watch.version;
        if let Some(v) = crate::ruletest::versions::written_in(rule, cr).filter(|v| v != watched) {
            if let Some(schema) = crate::ruletest::versions::schema_of(rule, v) {
                rules::crd::apply_defaults(&mut defaulted, schema);
            }
            defaulted = crate::ruletest::versions::to_watched(rule, &defaulted)
                .map_err(|e| anyhow::anyhow!("rule `{}`: {e}", rule.name))?;
        }
        if let Some(schema) = rules::crd::schema_of(rule, &crds) {
            rules::crd::apply_defaults(&mut defaulted, schema);
        }
        let cr = &defaulted;
        let live_objects = observed.as_deref().unwrap_or_default();
        let plan = render::scope(rule, cr)
            .and_then(|s| existing_among(rule, s, live_objects))
            .and_then(|s| {
                let live = |r: &Rendered| find_live(r, live_objects);
                Ok((render::render_with(rule, &s, &live)?, s))
            });
        let (plan, scope) = match plan {
            Ok(p) => p,
            Err(e) => {
                eprintln!("error: {}: rule `{}`: {e}", rule.at, rule.name);
                failed = true;
                continue;
            }
        };
        // The resource as the API server would take it, always (a render of a resource it
        // refuses shows what no cluster makes); the children with --strict.
        if !(resource_ok(rule, cr, &crds) & (!args.strict || strict_ok(rule, &plan.children))) {
            failed = true;
            continue;
        }
        for c in &plan.children {
            out!("---\n{}", serde_yaml::to_string(&c.object)?);
        }
        for w in &plan.waiting {
            eprintln!("note: {}: child `{}` {}", scope.name, w.id, w.reason);
        }
        if let Some(live) = &observed {
            let by_id = match_observed(&plan.children, live);
            let report = status::compute(rule, &scope, cr, Some(&plan), &by_id);
            let doc = serde_json::json!({
                "resource": scope.name,
                "status": report.fields,
                "ready": report.ready,
                "notes": report.notes,
                "problems": report.problems,
            });
            // Never in the children's stream: `render | kubectl apply -f -` stays whole.
            let text = format!("---\n{}", serde_yaml::to_string(&doc)?);
            match &mut status_out {
                Some(file) => {
                    use std::io::Write as _;
                    file.write_all(text.as_bytes())?;
                }
                None => eprint!("{text}"),
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// Checks the custom resource (with its defaults) against its kind's schema, as the API
/// server would when it is created; prints what is wrong.
pub(super) fn resource_ok(rule: &CompiledRule, cr: &Value, crds: &[Value]) -> bool {
    let Some(schema) = rules::crd::schema_of(rule, crds) else {
        return true;
    };
    let name = cr["metadata"]["name"].as_str().unwrap_or("?");
    let what = format!("resource `{name}` ({})", cr["kind"].as_str().unwrap_or("?"));
    let typed = report_findings(&what, crate::schema::typed::check_object(cr, schema));
    // The kind's CEL validations, as the API server would evaluate them on create.
    let cel = crate::schema::cel::validate(schema, cr, "");
    for v in &cel.violations {
        eprintln!(
            "error: {what}: {}: {}\n  rule: {}\n  fix: make the resource meet the kind's validation",
            v.path, v.message, v.rule
        );
    }
    for n in &cel.notes {
        eprintln!("note: {what}: {n}");
    }
    typed && cel.violations.is_empty()
}

/// Checks rendered objects as the API server would (`ruletest::run::child_problems`: their
/// kinds' schemas, its own checks of built-in kinds, a CRD's CEL rules); prints what is
/// wrong.
pub(super) fn strict_ok(rule: &CompiledRule, children: &[Rendered]) -> bool {
    let mut ok = true;
    for c in children {
        let what = format!("child `{}` ({} {})", c.instance(), c.kind, c.name);
        for p in crate::ruletest::run::child_problems(c) {
            let field = if p.field.is_empty() {
                "object"
            } else {
                &p.field
            };
            // The file and line of the field in the child's template.
            let at = crate::ruletest::run::template_line(rule, c, &p.field)
                .map(|(f, l)| format!("{}:{l}: ", f.display()))
                .unwrap_or_default();
            eprintln!(
                "error: {at}rule `{}`, {what}: {field}: {}\n  fix: {}",
                rule.name, p.problem, p.fix
            );
            ok = false;
        }
    }
    ok
}

/// Prints each finding about `what`; whether there were none.
pub(super) fn report_findings(what: &str, findings: Vec<crate::schema::typed::Finding>) -> bool {
    for f in &findings {
        let field = if f.field.is_empty() {
            "object"
        } else {
            &f.field
        };
        eprintln!("error: {what}: {field}: {}\n  fix: {}", f.problem, f.fix);
    }
    findings.is_empty()
}
