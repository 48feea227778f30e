//! `ruleop run`: the operator. Loads the rules, serves the admin endpoints, optionally
//! campaigns for the leader Lease, runs one controller per rule while leading, reloads
//! the rules when their files change, and shuts down gracefully on SIGTERM/SIGINT.
//!
//! Owns: the process's life ([`run`]: its parts started from `parts.rs`, then the loop of
//! `steering.rs`), its arguments ([`args`]), the rules in force kept
//! running ([`supervisor`], one [`runner`] per rule), the rules files watched
//! ([`reload`]), each rule's CRD installed ([`crds`]), the kinds each rule has made
//! ([`inventory`]), the admin endpoints ([`admin`]) and who may read their metrics
//! ([`metrics_auth`]), and the traces of its reconciles ([`telemetry`]).
//!
//! Uses: everything below it. Used by: the CLI, and `rbac` (the inventory's name).

pub mod admin;
mod admin_tls;
pub mod args;
pub mod ca_inject;
pub mod crds;
mod error;
pub mod inventory;
pub mod metrics_auth;
pub mod migrate;
pub mod objects;
mod parts;
pub mod release;
pub mod reload;
pub mod revisions;
pub mod rule_status;
pub mod runner;
mod steering;
pub mod supervisor;
pub mod telemetry;
pub mod versions;
pub mod webhook;

pub use args::RunArgs;
pub use error::RunError;

use crate::client::lease::Election;
use crate::client::{self, Guard};
use crate::metrics::Metrics;
use crate::rules::book::RuleBook;
use admin::Health;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use steering::Steering;
use supervisor::Supervisor;

/// The rule book first read; a mistake to stop on when the files given give no rule at
/// all, or nothing is to be served.
fn first_book(args: &RunArgs) -> Result<RuleBook, RunError> {
    let mut book = RuleBook::new(args.rules.clone()).with_policy(args.policy());
    book.reload();
    if !args.rules.is_empty() && book.rules().is_empty() && !book.problems.is_empty() {
        let problems: Vec<String> = book.problems.iter().map(|p| p.message.clone()).collect();
        return Err(RunError::NoRules {
            paths: args.rules.clone(),
            problems: problems.join("; "),
        });
    }
    if args.rules.is_empty() && !args.rule_objects {
        return Err(RunError::NoRules {
            paths: Vec::new(),
            problems: "no --rules given, and --rule-objects=false".into(),
        });
    }
    Ok(book)
}

/// The operator: its parts started, then the loop that keeps the rules in force.
pub async fn run(args: RunArgs) -> Result<(), RunError> {
    let shutdown = shutdown_signal().map_err(RunError::Signal)?;
    let metrics = Arc::new(Metrics::default());
    let health = Arc::new(Health::default());
    let book = first_book(&args)?;
    let (_watcher, mut changes) = reload::watch(book.paths()).map_err(RunError::Watch)?;
    let me = parts::identity(&args);
    let timeout = args.client.watch_timeout_seconds;
    let renews = client::build(timeout, &me, Guard::default()).await;
    let renews = renews.map_err(RunError::Client)?;
    parts::admin(&args, &me, &metrics, &health).await?;
    let mut lead = parts::leadership(&args, &me, renews)?;
    let clients = parts::clients(&args, &me, &lead.fence, &metrics).await?;
    let process = clients.process.clone();
    let served = webhook::review::Served::new();
    let (_webhook, hook) = parts::webhook(&args, &me, &process, &served).await?;
    let _rule_crd = parts::rule_crd(&args, &process);
    let objects = parts::rule_objects(&args, &process).await;
    let for_rules = parts::ForRules {
        me: &me,
        clients: &clients,
        objects: objects.as_ref(),
        hook,
        served: &served,
    };
    let opts = parts::options(&args, for_rules);
    let mut sup = Supervisor::new(opts, metrics.clone(), health.clone());
    sup.served = served;
    let ns = args.lease.lease_namespace.clone();
    let start = Steering::start(
        book,
        sup,
        objects,
        process.client.clone(),
        ns,
        metrics,
        health,
        me,
    );
    let mut s = start.await;
    s.set_leading(lead.election.as_ref().is_none_or(Election::is_leader));
    if s.leading {
        s.sup.converge().await;
    }
    s.health.loaded.store(true, Ordering::SeqCst);
    tracing::info!(
        rules = s.book.rules().len(),
        leading = s.leading,
        "ruleop running"
    );
    let mut rule_status = tokio::time::interval(Duration::from_secs(2));
    let mut poll = tokio::time::interval(Duration::from_secs(args.rules_poll_seconds.max(1)));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            // A signal that came while ruleop started goes before the first poll tick.
            biased;
            _ = &mut shutdown => break,
            now = changed(lead.election.as_mut()) => s.leadership(now).await,
            Some(()) = changes.recv() => s.files_changed(&mut changes).await,
            Some(()) = s.next_object_change() => s.objects_changed().await,
            _ = rule_status.tick(), if s.leading && s.objects.is_some() => s.write_status().await,
            _ = poll.tick() => s.reload().await,
        }
    }
    tracing::info!("shutting down: finishing in-flight reconciles");
    s.sup.stop_all().await;
    if s.leading {
        parts::remove_local_webhook(&args, &process).await;
    }
    if let (Some(e), Some(cfg)) = (lead.election.take(), &lead.lease) {
        e.release(lead.client.clone(), cfg).await;
    }
    tracing::info!("stopped");
    Ok(())
}

/// The next change of leadership (never, without an election).
async fn changed(election: Option<&mut Election>) -> bool {
    match election {
        Some(e) => e.changed().await,
        None => std::future::pending().await,
    }
}

/// The shutdown signal (SIGTERM or SIGINT). On unix the handlers are registered when this
/// is called, not when the future is first polled: a signal that arrives while ruleop
/// starts (before its main loop) is then kept until the loop sees it, instead of the
/// default action ending the process without its shutdown. (Elsewhere, Ctrl-C is listened
/// for from the first poll.)
fn shutdown_signal() -> std::io::Result<impl std::future::Future<Output = ()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        Ok(async move {
            let name = tokio::select! {
                _ = term.recv() => "SIGTERM",
                _ = int.recv() => "SIGINT",
            };
            tracing::info!(signal = name, "shutdown signal received");
        })
    }
    #[cfg(not(unix))]
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
        tracing::info!(signal = "Ctrl-C", "shutdown signal received");
    })
}
