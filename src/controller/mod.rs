//! Runs the pipeline for every custom resource of every rule (placeholder until wired).

use clap::Args;
use std::path::PathBuf;

/// Arguments of `ruleop run`.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// A rules file or directory (repeat for more).
    #[arg(long, required = true)]
    pub rules: Vec<PathBuf>,
}

pub async fn run(_args: RunArgs) -> anyhow::Result<()> {
    anyhow::bail!("not yet")
}
