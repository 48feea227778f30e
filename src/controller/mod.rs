//! Runs the pipeline for every custom resource of every rule: `ruleop run`.

pub mod discovery;
pub mod reconcile;
pub mod runner;

use crate::rules;
use clap::Args;
use runner::{Options, RuleTask};
use std::path::PathBuf;
use std::time::Duration;

/// Arguments of `ruleop run`.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// A rules file or directory (repeat for more).
    #[arg(long, required = true)]
    pub rules: Vec<PathBuf>,
    /// Reconciles running at once, per rule.
    #[arg(long, default_value_t = 32)]
    pub concurrency: u16,
    /// Seconds between checks of a healthy custom resource with no event.
    #[arg(long, default_value_t = 600)]
    pub resync_seconds: u64,
    /// Watch and act in this namespace only (default: all namespaces).
    #[arg(long)]
    pub namespace: Option<String>,
}

/// Errors that stop `ruleop run` from starting.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("no rule could be loaded from {0:?}")]
    NoRules(Vec<PathBuf>),
    #[error("cannot reach the cluster: {0}")]
    Client(#[source] kube::Error),
}

/// The operator: loads the rules, starts a controller per rule, stops on SIGTERM/SIGINT.
pub async fn run(args: RunArgs) -> Result<(), RunError> {
    let (loaded, errors) = rules::load_paths(&args.rules);
    for e in &errors {
        tracing::error!(file = %e.file().display(), error = %e, "rule not loaded");
    }
    if loaded.is_empty() {
        return Err(RunError::NoRules(args.rules.clone()));
    }
    let client = kube::Client::try_default()
        .await
        .map_err(RunError::Client)?;
    let opts = Options {
        concurrency: args.concurrency,
        resync: Duration::from_secs(args.resync_seconds),
        discovery_retry: Duration::from_secs(3),
        namespace: args.namespace.clone(),
    };
    let tasks: Vec<RuleTask> = loaded
        .into_iter()
        .map(|r| RuleTask::spawn(client.clone(), r, opts.clone()))
        .collect();
    tracing::info!(rules = tasks.len(), "ruleop running");
    shutdown_signal().await;
    tracing::info!("shutting down: finishing in-flight reconciles");
    futures::future::join_all(tasks.into_iter().map(RuleTask::stop)).await;
    tracing::info!("stopped");
    Ok(())
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
