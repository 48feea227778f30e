//! `ruleop run`: the operator. Loads the rules, serves the admin endpoints, optionally
//! campaigns for the leader Lease, runs one controller per rule while leading, reloads
//! the rules when their files change, and shuts down gracefully on SIGTERM/SIGINT.

pub mod busy;
pub mod cached;
pub mod children;
pub mod crds;
pub mod deletion;
pub mod discovery;
pub mod events;
pub mod existing;
pub mod in_flight;
pub mod inventory;
pub mod leader;
pub mod limiter;
pub mod openapi;
pub mod owners;
pub mod reconcile;
pub mod recorder;
pub mod relist;
pub mod reload;
pub mod runner;
pub mod slow;
pub mod status_write;
pub mod supervisor;
pub mod watches;

use crate::admin::{self, Health};
use crate::metrics::Metrics;
use crate::rules::book::{Problem, RuleBook};
use clap::Args;
use leader::{Election, Fence, LeaseConfig};
use runner::Options;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use supervisor::Supervisor;
use tower::util::option_layer;

/// Arguments of `ruleop run`.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// A rules file or directory (repeat for more). Watched: edits apply without a restart.
    #[arg(long, required = true)]
    pub rules: Vec<PathBuf>,
    /// Reconciles running at once, per rule (at least 1). Most send nothing and end at
    /// once; one that writes holds its place until the API server answers.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,
    /// Requests at the API server at once, all rules together, watches aside, and at most
    /// half of them (rounded up) of one kind (API group, resource and subresource, whatever
    /// the verb); the others wait their turn, in the order asked within a kind. 0 for no
    /// bound. Each request at once is a connection of its own (HTTP/1.1), with its memory.
    #[arg(long, default_value_t = 128)]
    pub max_in_flight: u32,
    /// Requests per second to the API server, on average (client-side token bucket,
    /// as client-go's); 0 turns the limit off.
    #[arg(long, default_value_t = 1000.0)]
    pub qps: f64,
    /// Requests that may go at once above `--qps` (the bucket's size).
    #[arg(long, default_value_t = 2000)]
    pub burst: u32,
    /// Events published per second, all rules together, after a burst of 100: when
    /// thousands of resources change at once, their Events trail behind the writes that
    /// make them converge. 0: as fast as the client allows.
    #[arg(long, default_value_t = 20.0)]
    pub event_qps: f64,
    /// Seconds between checks of a healthy custom resource with no event.
    #[arg(long, default_value_t = 600)]
    pub resync_seconds: u64,
    /// Watch and act in this namespace only (default: all namespaces).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Address of the admin server (/metrics, /livez, /readyz, /status); port 0 picks one.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub admin_addr: SocketAddr,
    /// Reconcile only while holding the leader Lease.
    #[arg(long)]
    pub leader_elect: bool,
    /// Namespace of the leader Lease (default: $POD_NAMESPACE, else `default`).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub lease_namespace: String,
    /// Name of the leader Lease.
    #[arg(long, default_value = "ruleop-leader")]
    pub lease_name: String,
    /// Seconds a standby waits after the Lease last changed before taking it over.
    #[arg(long, default_value_t = 15)]
    pub lease_duration: u64,
    /// Seconds after the start of its last successful renewal at which the leader stops
    /// writing (default: 2/3 of the lease duration). Must be shorter than the lease duration.
    #[arg(long)]
    pub renew_deadline: Option<f64>,
    /// Seconds between attempts to renew or acquire the Lease (default: 1/5 of the renew deadline).
    #[arg(long)]
    pub retry_period: Option<f64>,
    /// This process's identity in the Lease (default: $POD_NAME, else host name and pid).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Create or update each rule's CRD from its `schema` when the rule starts (a change
    /// that would break stored resources is refused and logged; the served CRD stays).
    /// Needs `ruleop rbac --install-crds`.
    #[arg(long)]
    pub install_crds: bool,
    /// Seconds between rechecks of the rules files, besides file-change notifications.
    #[arg(long, default_value_t = 10)]
    pub rules_poll_seconds: u64,
    /// Which Events to publish on custom resources: `all` (children created, updated,
    /// pruned, and problems), `warnings` (problems only: each Normal Event is one more
    /// write per change, which at scale the API server feels), or `none`.
    #[arg(long, value_enum, default_value = "all")]
    pub events: EventLevel,
    /// Seconds after which the API server ends each watch (it is then resumed). A watch
    /// connection silent for this long plus 10 s is dropped and re-established.
    #[arg(long, default_value_t = 290)]
    pub watch_timeout_seconds: u32,
}

/// Which Events ruleop publishes.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventLevel {
    All,
    Warnings,
    None,
}

/// Errors that stop `ruleop run`.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("no rule could be loaded from {paths:?}: {problems}")]
    NoRules {
        paths: Vec<PathBuf>,
        problems: String,
    },
    #[error("cannot reach the cluster: {0}")]
    Client(#[source] kube::Error),
    #[error("cannot serve the admin endpoints on {addr}: {source}")]
    Admin {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot watch the rules files: {0}")]
    Watch(#[source] notify::Error),
    #[error("leader election: {0}")]
    Lease(#[source] leader::LeaseError),
    #[error("cannot listen for SIGTERM or SIGINT: {0}")]
    Signal(#[source] std::io::Error),
}

/// A client whose reads time out a little after the server should have ended a watch:
/// a request on a silently stalled connection (an apply, a list) fails and is retried
/// instead of hanging forever. (Watches have kube's own idle timeout, just under this.)
/// Every request goes through the rate limiter, when there is one.
async fn client(
    watch_timeout: u32,
    identity: &str,
    guard: Guard,
) -> Result<kube::Client, RunError> {
    let mut config = kube::Config::infer()
        .await
        .map_err(|e| RunError::Client(kube::Error::InferConfig(e)))?;
    config.read_timeout = Some(Duration::from_secs(u64::from(watch_timeout) + 10));
    config.reset_reader_on_write = true;
    // Each replica says who it is, so the API server's audit log tells them apart.
    if let Ok(agent) = http::HeaderValue::from_str(&format!(
        "ruleop/{} ({identity})",
        env!("CARGO_PKG_VERSION")
    )) {
        config.headers.push((http::header::USER_AGENT, agent));
    }
    let builder = kube::client::ClientBuilder::try_from(config).map_err(RunError::Client)?;
    // The bucket is the outer layer: a request takes its token in turn, then goes through
    // the gate (its slot, the fence, the count).
    let gated = option_layer(guard.gate.map(in_flight::GateLayer));
    let limited = option_layer(guard.limiter.map(limiter::LimitLayer));
    Ok(builder.with_layer(&gated).with_layer(&limited).build())
}

/// What stands between ruleop's requests and the API server: the token bucket (`--qps`,
/// `--burst`) and the gate (`--max-in-flight`, the leader fence, the request count). The
/// leader election's own client has neither.
#[derive(Default)]
struct Guard {
    limiter: Option<Arc<limiter::Limiter>>,
    gate: Option<Arc<in_flight::Gate>>,
}

fn identity(args: &RunArgs) -> String {
    args.identity.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "ruleop".into());
        format!("{host}-{}", std::process::id())
    })
}

/// Logs and publishes the problems of a load; returns whether they changed.
fn report(
    problems: &[Problem],
    last: &mut Vec<Problem>,
    metrics: &Metrics,
    health: &Health,
) -> bool {
    if problems == last.as_slice() {
        return false;
    }
    for p in problems {
        tracing::error!(file = %p.file, error = %p.message, "rules file has errors; the last good version of its rules stays in force");
    }
    metrics.rule_load_failures.inc_by(problems.len() as u64);
    metrics.rule_load_errors.set(problems.len() as i64);
    if let Ok(mut h) = health.problems.lock() {
        *h = problems.to_vec();
    }
    *last = problems.to_vec();
    true
}

/// The operator.
pub async fn run(args: RunArgs) -> Result<(), RunError> {
    let shutdown = shutdown_signal().map_err(RunError::Signal)?;
    let metrics = Arc::new(Metrics::default());
    let health = Arc::new(Health::default());
    let mut book = RuleBook::new(args.rules.clone());
    let mut last_problems = Vec::new();
    book.reload();
    let initial = book.rules();
    let problems = book.problems.clone();
    report(&problems, &mut last_problems, &metrics, &health);
    if initial.is_empty() {
        let problems = problems
            .iter()
            .map(|p| p.message.clone())
            .collect::<Vec<_>>()
            .join("; ");
        return Err(RunError::NoRules {
            paths: args.rules.clone(),
            problems,
        });
    }
    let (_watcher, mut changes) = reload::watch(book.paths()).map_err(RunError::Watch)?;

    let me = identity(&args);
    // The Lease is renewed outside the limiter: a busy leader must not lose its Lease
    // waiting behind its own writes.
    let election_client = client(args.watch_timeout_seconds, &me, Guard::default()).await?;
    let addr = admin::serve(args.admin_addr, metrics.clone(), health.clone())
        .await
        .map_err(|source| RunError::Admin {
            addr: args.admin_addr,
            source,
        })?;
    tracing::info!(%addr, "admin server listening");

    let lease = args.leader_elect.then(|| {
        // Out-of-range values (negative, infinite) become 0 and are refused by `check`.
        let secs = |s: f64| Duration::try_from_secs_f64(s).unwrap_or(Duration::ZERO);
        let (duration, renew_deadline, retry) = LeaseConfig::timing(
            Duration::from_secs(args.lease_duration),
            args.renew_deadline.map(secs),
            args.retry_period.map(secs),
        );
        LeaseConfig {
            namespace: args.lease_namespace.clone(),
            name: args.lease_name.clone(),
            identity: me.clone(),
            duration,
            renew_deadline,
            retry,
        }
    });
    if let Some(cfg) = &lease {
        cfg.check().map_err(RunError::Lease)?;
    }
    let election = lease.as_ref().map(|cfg| {
        tracing::info!(lease = %cfg.name, namespace = %cfg.namespace, identity = %me, renew_deadline_ms = cfg.renew_deadline.as_millis() as u64, "campaigning for leadership");
        Election::start(election_client.clone(), cfg.clone())
    });
    let fence = election.as_ref().map_or_else(Fence::open, Election::fence);
    let gate = in_flight::Gate::new(args.max_in_flight, fence.clone(), metrics.clone());
    let busy = gate.busy();
    let guard = Guard {
        limiter: limiter::Limiter::new(args.qps, args.burst, metrics.clone()),
        gate: Some(gate),
    };
    let client = client(args.watch_timeout_seconds, &me, guard).await?;
    let opts = Options {
        concurrency: args.concurrency,
        resync: Duration::from_secs(args.resync_seconds),
        discovery_retry: Duration::from_secs(3),
        namespace: args.namespace.clone(),
        watch_timeout: args.watch_timeout_seconds,
        events: args.events,
        metrics: metrics.clone(),
        reporter: kube::runtime::events::Reporter {
            controller: "ruleop".into(),
            instance: Some(me.clone()),
        },
        fence,
        state_namespace: args.lease_namespace.clone(),
        install_crds: args.install_crds,
        event_pace: limiter::Pace::new(args.event_qps, 100),
        event_quiet: Some(busy),
    };
    let mut sup = Supervisor::new(client.clone(), opts, metrics.clone(), health.clone());
    sup.set_desired(initial);

    let mut election = election;
    let mut leading = election.as_ref().is_none_or(Election::is_leader);
    set_leader(leading, &metrics, &health);
    if leading {
        sup.converge().await;
    }
    health.loaded.store(true, Ordering::SeqCst);
    tracing::info!(rules = book.rules().len(), leading, "ruleop running");

    let mut poll = tokio::time::interval(Duration::from_secs(args.rules_poll_seconds.max(1)));
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            // A signal that came while ruleop started goes before the first poll tick.
            biased;
            _ = &mut shutdown => break,
            now = async {
                match election.as_mut() {
                    Some(e) => e.changed().await,
                    None => std::future::pending().await,
                }
            } => {
                if now != leading {
                    leading = now;
                    set_leader(leading, &metrics, &health);
                    if leading {
                        tracing::info!(identity = %me, "became leader: starting controllers");
                        sup.converge().await;
                    } else {
                        // The fence already stops every write; in-flight reconciles are
                        // cancelled rather than waited for.
                        tracing::warn!(identity = %me, "lost leadership: cancelling controllers");
                        sup.abort_all().await;
                    }
                }
            }
            Some(()) = changes.recv() => {
                // Let a burst of file events settle, then read everything once.
                tokio::time::sleep(Duration::from_millis(300)).await;
                while changes.try_recv().is_ok() {}
                reload(&mut book, &mut sup, &mut last_problems, &metrics, &health, leading).await;
            }
            _ = poll.tick() => reload(&mut book, &mut sup, &mut last_problems, &metrics, &health, leading).await,
        }
    }
    tracing::info!("shutting down: finishing in-flight reconciles");
    sup.stop_all().await;
    if let (Some(e), Some(cfg)) = (election, &lease) {
        e.release(election_client.clone(), cfg).await;
    }
    tracing::info!("stopped");
    Ok(())
}

async fn reload(
    book: &mut RuleBook,
    sup: &mut Supervisor,
    last: &mut Vec<Problem>,
    metrics: &Metrics,
    health: &Health,
    leading: bool,
) {
    book.reload();
    let rules = book.rules();
    let problems = book.problems.clone();
    if report(&problems, last, metrics, health) && problems.is_empty() {
        tracing::info!("rules files load cleanly again");
    }
    sup.set_desired(rules);
    if leading {
        sup.converge().await;
    }
}

fn set_leader(leading: bool, metrics: &Metrics, health: &Health) {
    metrics.leader.set(i64::from(leading));
    health.leader.store(leading, Ordering::SeqCst);
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
