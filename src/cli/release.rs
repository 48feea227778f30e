//! `ruleop release --rule NAME`: with ruleop stopped (an uninstall, or a hand-over), lets a
//! rule's resources and children go: every child loses its owner reference to the resource
//! and ruleop's labels and annotations (its workloads keep running, owned by nothing), and
//! every resource loses ruleop's finalizers, so that deleting it, its namespace or its CRD
//! later does not hang and takes no child with it.

use super::args::ReleaseArgs;
use crate::client::Fence;
use crate::operator::inventory::{Inventory, key};
use crate::operator::release::{Release, release_once};
use crate::rules::CompiledRule;
use kube::api::{Api, DynamicObject};
use std::process::ExitCode;
use std::sync::Arc;

pub(super) fn release_cmd(args: ReleaseArgs) -> anyhow::Result<ExitCode> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    rt.block_on(release(args))
}

/// The rule named `name`: from `--rules`, else the cluster's Rule object of that name.
async fn find(client: &kube::Client, args: &ReleaseArgs) -> anyhow::Result<Arc<CompiledRule>> {
    if !args.rules.is_empty() {
        let (rules, errors) = crate::rules::load_paths(&args.rules);
        if let Some(r) = rules.into_iter().find(|r| r.name == args.rule) {
            return Ok(r);
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
    let Some(o) = api.get_opt(&args.rule).await? else {
        anyhow::bail!(
            "no Rule {:?} in the cluster (for a rule of a file, give --rules FILE)",
            args.rule
        );
    };
    let loaded = crate::rules::object::load_object(&serde_json::to_value(&o)?);
    loaded.rule.ok_or_else(|| {
        anyhow::anyhow!(
            "the Rule {:?} does not load (its status says why); give its rules file with --rules",
            args.rule
        )
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
