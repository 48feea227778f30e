//! `ruleop diff`: what a rule change would do to the fleet, before it lands. Against the
//! cluster (`--rules NEW`): every live resource of each rule's kind rendered by the new
//! rule with its objects as they are, and compared with its children now. Offline
//! (`--rules OLD --to NEW CRS.yaml`): each resource rendered by both. Exit 0 when nothing
//! would change, 1 when something would, 2 when it could not tell.

use super::args::DiffArgs;
use super::input::{load_rules_or_objects, pick_rule, read_objects};
use crate::apply::ownership::controller_ref;
use crate::cache::discovery::{self, Resolved};
use crate::render::RULE_LABEL;
use crate::rules::{self, CompiledRule};
use crate::ruletest::diff::{Before, ResourceDiff, Summary, compare};
use crate::ruletest::simulate::simulate;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::process::ExitCode;
use std::sync::Arc;

pub(super) fn diff_cmd(args: DiffArgs) -> anyhow::Result<ExitCode> {
    let result = if args.resources.is_empty() {
        against_cluster(&args)
    } else {
        offline(&args)
    };
    match result {
        Ok(tally) => {
            let summary = &tally.summary;
            match &tally.listed {
                Some(listed) => args.output.print(&serde_json::json!({
                    "summary": {
                        "resources": summary.resources, "touched": summary.touched,
                        "created": summary.created, "changed": summary.changed,
                        "deleted": summary.deleted, "released": summary.released,
                        "waiting": summary.waiting, "errors": summary.errors,
                        "podTemplates": summary.pod_templates,
                    },
                    "resources": listed,
                }))?,
                None => out!("{summary}\n"),
            }
            Ok(ExitCode::from(u8::from(
                summary.touched + summary.errors > 0,
            )))
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            Ok(ExitCode::from(2))
        }
    }
}

/// The rules of `paths`, or an error naming each problem.
fn load(paths: &[std::path::PathBuf]) -> anyhow::Result<Vec<Arc<CompiledRule>>> {
    let (loaded, errors) = load_rules_or_objects(paths);
    if errors.is_empty() {
        return Ok(loaded);
    }
    let all: Vec<String> = errors.iter().map(ToString::to_string).collect();
    anyhow::bail!("the rules do not load:\n{}", all.join("\n"))
}

/// The totals, and with `-o json|yaml` each resource that anything would happen to.
struct Tally {
    summary: Summary,
    listed: Option<Vec<Value>>,
}

impl Tally {
    fn new(args: &DiffArgs) -> Tally {
        Tally {
            summary: Summary::default(),
            listed: args.output.document().then(Vec::new),
        }
    }
}

/// One resource's changes as a document.
fn listed(what: &str, d: &ResourceDiff) -> Value {
    let names = |v: &[crate::ruletest::diff::Named]| -> Vec<String> {
        v.iter().map(ToString::to_string).collect()
    };
    serde_json::json!({
        "resource": what,
        "error": d.error,
        "created": names(&d.created),
        "changed": d.changed.iter().map(|c| serde_json::json!({"object": c.object.to_string(), "podTemplate": c.pod_template, "diff": c.diff})).collect::<Vec<_>>(),
        "deleted": names(&d.deleted),
        "released": names(&d.released),
        "waiting": d.waiting.iter().map(|(id, why)| serde_json::json!({"child": id, "why": why})).collect::<Vec<_>>(),
    })
}

/// Prints what changes for one resource (nothing when nothing does), and counts it.
fn report(what: &str, d: &ResourceDiff, brief: bool, tally: &mut Tally) -> std::io::Result<()> {
    use std::io::Write as _;
    tally.summary.add(d);
    if !d.touches() && d.error.is_none() && d.waiting.is_empty() {
        return Ok(());
    }
    if let Some(l) = &mut tally.listed {
        l.push(listed(what, d));
        return Ok(());
    }
    let mut o = std::io::stdout().lock();
    writeln!(o, "{what}:")?;
    if let Some(e) = &d.error {
        writeln!(o, "  ! does not render: {e}")?;
    }
    for c in &d.created {
        writeln!(o, "  + {c} (created)")?;
    }
    for c in &d.changed {
        let pods = if c.pod_template {
            " (pod template changes: its pods restart)"
        } else {
            ""
        };
        writeln!(o, "  ~ {}{pods}", c.object)?;
        if !brief {
            for l in c.diff.lines() {
                writeln!(o, "      {l}")?;
            }
        }
    }
    for c in &d.deleted {
        writeln!(o, "  - {c} (deleted)")?;
    }
    for c in &d.released {
        writeln!(o, "  - {c} (released: onRemove: Orphan)")?;
    }
    for (id, why) in &d.waiting {
        writeln!(o, "  … {id} waits: {why}")?;
    }
    Ok(())
}

/// `--rules OLD --to NEW CRS.yaml [--observed FILE]`: each resource rendered by both.
fn offline(args: &DiffArgs) -> anyhow::Result<Tally> {
    if args.to.is_empty() {
        anyhow::bail!(
            "resources given: give the new rules with --to (`--rules OLD --to NEW CRS.yaml`), or no resources to diff against the cluster"
        );
    }
    let (old, new) = (load(&args.rules)?, load(&args.to)?);
    let observed = match &args.observed {
        Some(p) => read_objects(p)?,
        None => Vec::new(),
    };
    let crds = super::input::read_crds(&args.crd)?;
    let mut summary = Tally::new(args);
    for path in &args.resources {
        for mut cr in read_objects(path)? {
            // (One that names no namespace is in `--namespace`'s, else `default`'s.)
            super::input::in_namespace(&mut cr, args.namespace.as_deref().unwrap_or("default"));
            let (r_old, r_new) = (pick_rule(&old, None, &cr)?, pick_rule(&new, None, &cr)?);
            let defaulted = |r: &CompiledRule, cr: &Value, crds: &[Value]| {
                let mut c = cr.clone();
                if let Some(s) = rules::crd::schema_of(r, crds) {
                    rules::crd::apply_defaults(&mut c, s);
                }
                c
            };
            // The resource as the cluster stores it: the API server applied the kind's
            // defaults when it was written, so a default the new rule changes does not
            // reach it; a field it still lacks takes the new one.
            // Each rule reads the resource in the version it watches (converted by its
            // rule's conversion when written in another).
            let watched = |r: &CompiledRule, cr: &Value| {
                crate::ruletest::versions::to_watched(r, cr)
                    .map_err(|e| anyhow::anyhow!("rule `{}`: {e}", r.name))
            };
            let stored = defaulted(r_old, &watched(r_old, &cr)?, &crds);
            let before = simulate(r_old, &stored, &observed);
            // What the old rule made: its render over the objects given.
            let mut live: Vec<Value> = observed.clone();
            if let Ok(p) = &before.plan {
                for c in &p.children {
                    live.retain(|o| {
                        !(o["kind"] == c.kind.as_str() && o["metadata"]["name"] == c.name.as_str())
                    });
                    live.push(c.object.clone());
                }
            }
            let children: Vec<Value> = live
                .iter()
                .filter(|o| o["metadata"]["labels"][RULE_LABEL] == r_old.name.as_str())
                .cloned()
                .collect();
            // The new rule's own schema is the CRD it installs; without one, the cluster's.
            let new_crds: &[Value] = if r_new.crd.is_some() { &[] } else { &crds };
            let after = simulate(
                r_new,
                &defaulted(r_new, &watched(r_new, &stored)?, new_crds),
                &observed,
            );
            let d = match &after.plan {
                Ok(plan) => compare(plan, &children, Before::Render),
                Err(e) => ResourceDiff {
                    error: Some(e.to_string()),
                    ..Default::default()
                },
            };
            report(&describe(&cr), &d, args.brief, &mut summary)?;
        }
    }
    Ok(summary)
}

fn describe(cr: &Value) -> String {
    format!(
        "{} {}/{}",
        cr["kind"].as_str().unwrap_or("?"),
        cr["metadata"]["namespace"].as_str().unwrap_or("default"),
        cr["metadata"]["name"].as_str().unwrap_or("?")
    )
}

/// `--rules NEW`: every live resource of each rule's kind, with its children and existing
/// objects as the cluster holds them.
fn against_cluster(args: &DiffArgs) -> anyhow::Result<Tally> {
    let new = load(&args.rules)?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let client = crate::client::plain().await?;
        let mut summary = Tally::new(args);
        for rule in &new {
            fleet(&client, rule, args, &mut summary).await?;
        }
        Ok(summary)
    })
}

/// Lists the objects of `k` (in `ns`, or everywhere), with `labels` if given.
async fn list(
    client: &kube::Client,
    k: &Resolved,
    ns: Option<&str>,
    labels: Option<&str>,
) -> anyhow::Result<Vec<Value>> {
    let api: Api<DynamicObject> = match ns {
        Some(ns) if k.namespaced => Api::namespaced_with(client.clone(), ns, &*k.resource),
        _ => Api::all_with(client.clone(), &*k.resource),
    };
    let mut lp = ListParams::default();
    if let Some(l) = labels {
        lp = lp.labels(l);
    }
    let items = api.list(&lp).await?.items;
    Ok(items
        .into_iter()
        .filter_map(|o| serde_json::to_value(o).ok())
        .map(|mut v| {
            // A list's items lack their kind: the diff names objects by it.
            v["apiVersion"] = Value::from(k.resource.api_version.clone());
            v["kind"] = Value::from(k.resource.kind.clone());
            v
        })
        .collect())
}

/// The kinds a rule's children may be of now: the new rule's, and those of the Rule of
/// that name in the cluster (kinds the new rule no longer makes are to be deleted).
async fn child_kinds(client: &kube::Client, rule: &CompiledRule) -> Vec<(String, String)> {
    let mut kinds: Vec<(String, String)> = rule
        .children
        .iter()
        .map(|c| (c.api_version.clone(), c.kind.clone()))
        .collect();
    let api: Api<DynamicObject> =
        Api::all_with(client.clone(), &crate::operator::objects::resource());
    if let Ok(Some(o)) = api.get_opt(&rule.name).await
        && let Ok(v) = serde_json::to_value(&o)
        && let Some(r) = crate::rules::object::load_object(&v).rule
    {
        kinds.extend(
            r.children
                .iter()
                .map(|c| (c.api_version.clone(), c.kind.clone())),
        );
    }
    kinds.sort();
    kinds.dedup();
    kinds
}

async fn fleet(
    client: &kube::Client,
    rule: &CompiledRule,
    args: &DiffArgs,
    summary: &mut Tally,
) -> anyhow::Result<()> {
    let ns = args.namespace.as_deref();
    let Some(parent) = discovery::watched(client, &rule.watch).await? else {
        anyhow::bail!(
            "rule `{}`: the cluster does not serve {} {}",
            rule.name,
            rule.watch.api_version(),
            rule.watch.resource
        );
    };
    let mut resources = list(client, &parent, ns, None).await?;
    resources.sort_by_key(describe);
    // Every child of the rule, by the uid of the resource that controls it.
    let mut children: HashMap<String, Vec<Value>> = HashMap::new();
    let selector = format!("{RULE_LABEL}={}", rule.name);
    for (api_version, kind) in child_kinds(client, rule).await {
        let (group, version) = crate::schema::kinds::group_version(&api_version);
        let Some(k) = discovery::child(client, group, version, &kind).await? else {
            continue;
        };
        for o in list(client, &k, ns, Some(&selector)).await? {
            if let Some(uid) = controller_ref(&o).and_then(|r| r["uid"].as_str()) {
                children.entry(uid.to_string()).or_default().push(o);
            }
        }
    }
    // Existing objects, per kind and namespace, read once.
    let mut existing: BTreeMap<(usize, String), Vec<Value>> = BTreeMap::new();
    for cr in &resources {
        let cr_ns = cr["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let mut observed = children
            .get(cr["metadata"]["uid"].as_str().unwrap_or_default())
            .cloned()
            .unwrap_or_default();
        let own = observed.clone();
        for (i, e) in rule.existing.iter().enumerate() {
            if let std::collections::btree_map::Entry::Vacant(slot) =
                existing.entry((i, cr_ns.clone()))
            {
                let (group, version) = crate::schema::kinds::group_version(&e.api_version);
                let found = match discovery::child(client, group, version, &e.kind).await? {
                    Some(k) => list(client, &k, Some(&cr_ns), None).await?,
                    None => Vec::new(),
                };
                slot.insert(found);
            }
            observed.extend(existing[&(i, cr_ns.clone())].iter().cloned());
        }
        let out = simulate(rule, cr, &observed);
        let d = match &out.plan {
            Ok(plan) => compare(plan, &own, Before::Live),
            Err(e) => ResourceDiff {
                error: Some(e.to_string()),
                ..Default::default()
            },
        };
        report(&describe(cr), &d, args.brief, summary)?;
    }
    Ok(())
}
