//! `ruleop release --rule NAME`: with ruleop stopped (an uninstall, or a hand-over), lets a
//! rule's resources and children go: every child loses its owner reference to the resource
//! and ruleop's labels and annotations (its workloads keep running, owned by nothing), and
//! every resource loses ruleop's finalizers, so that deleting it, its namespace or its CRD
//! later does not hang and takes no child with it.

use super::args::ReleaseArgs;
use crate::client::Fence;
use crate::lifecycle::Made;
use crate::operator::inventory::{Inventory, key};
use crate::operator::release::{Release, Subject, release_once};
use crate::render::RULE_LABEL;
use crate::rules::spec::WatchSpec;
use kube::api::{Api, DynamicObject};
use std::collections::BTreeSet;
use std::process::ExitCode;

pub(super) fn release_cmd(args: ReleaseArgs) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(release(args))
}

/// The rule named `name`: from `--rules`, else the cluster's Rule object of that name, else
/// (ruleop uninstalled, its rules gone with it) what the rule's children carry.
async fn find(client: &kube::Client, args: &ReleaseArgs) -> anyhow::Result<Subject> {
    if !args.rules.is_empty() {
        let (rules, errors) = super::input::load_rules_or_objects(&args.rules);
        if let Some(r) = rules.into_iter().find(|r| r.name == args.rule) {
            return Ok(Subject::of(&r));
        }
        anyhow::bail!(
            "no rule {:?} in {:?}{}",
            args.rule,
            args.rules,
            if errors.is_empty() {
                String::new()
            } else {
                format!(" ({} load errors: `ruleop check` lists them)", errors.len())
            }
        );
    }
    let api: Api<DynamicObject> =
        Api::all_with(client.clone(), &crate::operator::objects::resource());
    // (A cluster without the Rule kind, or a caller who may not read it: the children say.)
    if let Ok(Some(o)) = api.get_opt(&args.rule).await {
        let loaded = crate::rules::object::load_object(&serde_json::to_value(&o)?);
        return loaded.rule.map(|r| Subject::of(&r)).ok_or_else(|| {
            anyhow::anyhow!(
                "the Rule {:?} does not load (its status says why); give its rules file with --rules",
                args.rule
            )
        });
    }
    from_children(client, args).await
}

/// The rule as its children tell it: the kinds of the objects labelled for it, and the one
/// kind their controllers are (the kind it watched).
async fn from_children(client: &kube::Client, args: &ReleaseArgs) -> anyhow::Result<Subject> {
    let served = super::resolve::discover(client).await?;
    let selector = format!("{RULE_LABEL}={}", args.rule);
    // (An object a labelled one controls, as a Service's EndpointSlices copy its labels, is
    // not the rule's child.)
    let labelled =
        super::resolve::labelled(client, &served, args.namespace.as_deref(), &selector).await;
    let uids: BTreeSet<String> = labelled
        .iter()
        .filter_map(|(_, o)| o.metadata.uid.clone())
        .collect();
    // (Nor one whose controller is of a kind the labelled objects are: an EndpointSlice of
    // a Service let go before.)
    let labelled_kinds: BTreeSet<(String, String)> = labelled
        .iter()
        .map(|(k, _)| (k.ar.group.clone(), k.ar.kind.clone()))
        .collect();
    let mut kinds = BTreeSet::new();
    let mut controllers = BTreeSet::new();
    for (k, o) in &labelled {
        let controller = o.metadata.owner_references.iter().flatten().find(|r| {
            let kind = (
                crate::render::group_of(&r.api_version).to_string(),
                r.kind.clone(),
            );
            r.controller == Some(true) && !uids.contains(&r.uid) && !labelled_kinds.contains(&kind)
        });
        if let Some(c) = controller {
            let group = crate::render::group_of(&c.api_version).to_string();
            controllers.insert((group, c.kind.clone()));
            kinds.insert(Made {
                api_version: k.ar.api_version.clone(),
                kind: k.ar.kind.clone(),
            });
        }
    }
    let watched: Vec<&super::resolve::Served> = served
        .iter()
        .filter(|s| controllers.contains(&(s.ar.group.clone(), s.ar.kind.clone())))
        .collect();
    let [watched] = watched.as_slice() else {
        anyhow::bail!(
            "no Rule {:?} in the cluster, and {}: give the rule's file with --rules FILE",
            args.rule,
            match controllers.len() {
                0 => format!(
                    "nothing is labelled {RULE_LABEL}={} with a controller",
                    args.rule
                ),
                _ => format!(
                    "the objects labelled for it have controllers of several kinds ({controllers:?})"
                ),
            }
        );
    };
    Ok(Subject {
        name: args.rule.clone(),
        watch: WatchSpec {
            group: watched.ar.group.clone(),
            version: watched.ar.version.clone(),
            resource: watched.ar.plural.clone(),
        },
        kinds,
    })
}

async fn release(args: ReleaseArgs) -> anyhow::Result<ExitCode> {
    let client = crate::client::plain().await?;
    let rule = find(&client, &args).await?;
    let fence = Fence::open();
    let inventory = Inventory {
        client: client.clone(),
        namespace: args.operator_namespace.clone(),
        fence: fence.clone(),
    };
    let recorded = match inventory
        .recorded(&key(&rule.name, args.namespace.as_deref()))
        .await
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!(
                "warning: ruleop's inventory cannot be read ({e}): only the kinds the rule makes now are let go"
            );
            Default::default()
        }
    };
    let r = Release {
        client,
        rule,
        recorded,
        namespace: args.namespace.clone(),
        fence,
        reporter: kube::runtime::events::Reporter {
            controller: "ruleop".into(),
            instance: Some("ruleop-release".into()),
        },
        every: true,
    };
    let n = release_once(&r).await?;
    out!(
        "rule {}: {n} resources released (ruleop's finalizers off; their children let go: no owner, no ruleop label, left running)\n",
        r.rule.name
    );
    Ok(ExitCode::SUCCESS)
}
