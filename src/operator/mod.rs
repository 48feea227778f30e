//! `ruleop run`: the operator. Loads the rules, serves the admin endpoints, optionally
//! campaigns for the leader Lease, runs one controller per rule while leading, reloads
//! the rules when their files change, and shuts down gracefully on SIGTERM/SIGINT.
//!
//! Owns: the process's life ([`run`]), its arguments ([`args`]), the rules in force kept
//! running ([`supervisor`], one [`runner`] per rule), the rules files watched
//! ([`reload`]), each rule's CRD installed ([`crds`]), the kinds each rule has made
//! ([`inventory`]), the admin endpoints ([`admin`]) and who may read their metrics
//! ([`metrics_auth`]), and the traces of its reconciles ([`telemetry`]).
//!
//! Uses: everything below it. Used by: the CLI, and `rbac` (the inventory's name).

pub mod admin;
pub mod args;
pub mod ca_inject;
pub mod crds;
pub mod inventory;
pub mod metrics_auth;
pub mod migrate;
pub mod objects;
pub mod release;
pub mod reload;
pub mod revisions;
pub mod rule_status;
pub mod runner;
pub mod supervisor;
pub mod telemetry;
pub mod versions;
pub mod webhook;

pub use args::RunArgs;

use crate::client::gate::Gate;
use crate::client::lease::{Election, LeaseConfig};
use crate::client::{self, Fence, Guard};
use crate::metrics::Metrics;
use crate::reconcile::Process;
use crate::rules::book::{Problem, RuleBook};
use admin::Health;
use runner::Options;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;
use supervisor::Supervisor;

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
    Lease(#[source] crate::client::lease::LeaseError),
    #[error("cannot listen for SIGTERM or SIGINT: {0}")]
    Signal(#[source] std::io::Error),
    #[error("the Rule webhook: {0}")]
    Webhook(#[from] webhook::WebhookError),
}

/// Aborts its tasks when dropped.
struct Tasks(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        self.0.iter().for_each(tokio::task::JoinHandle::abort);
    }
}

/// `--install-crds` with Rule objects served: the Rule kind's own CRD applied by the leader
/// (a breaking change refused), as each rule's is, since Helm never upgrades a chart's CRDs.
fn rule_crd(process: &Process, fence: Arc<Fence>) -> Tasks {
    let metrics = process.metrics.clone();
    let failed = move |e: &crds::CrdError| {
        metrics.error(crate::rules::object::CRD_NAME, "crd_error");
        tracing::error!(error = %e, "the Rule kind's CRD was not installed");
    };
    Tasks(vec![tokio::spawn(crds::keep_installing(
        process.client.clone(),
        process.client.clone(),
        crate::rules::object::crd(),
        None,
        fence,
        failed,
    ))])
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
    let mut book = RuleBook::new(args.rules.clone()).with_policy(args.policy());
    let mut last_problems = Vec::new();
    book.reload();
    // Files given that give no rule at all are a mistake to stop on, Rules or not.
    if !args.rules.is_empty() && book.rules().is_empty() && !book.problems.is_empty() {
        let problems = book
            .problems
            .iter()
            .map(|p| p.message.clone())
            .collect::<Vec<_>>()
            .join("; ");
        return Err(RunError::NoRules {
            paths: args.rules.clone(),
            problems,
        });
    }
    if args.rules.is_empty() && !args.rule_objects {
        return Err(RunError::NoRules {
            paths: Vec::new(),
            problems: "no --rules given, and --rule-objects=false".into(),
        });
    }
    let (_watcher, mut changes) = reload::watch(book.paths()).map_err(RunError::Watch)?;

    let me = identity(&args);
    // The Lease is renewed outside the limiter: a busy leader must not lose its Lease
    // waiting behind its own writes.
    let election_client = client::build(args.watch_timeout_seconds, &me, Guard::default())
        .await
        .map_err(RunError::Client)?;
    let serves = match args.status_addr {
        Some(_) => admin::Serves::Probes,
        None => admin::Serves::All,
    };
    // Scrapes are reviewed on a client of their own: never queued with the Lease's renewals.
    let gate = match args.metrics_auth {
        metrics_auth::MetricsAuth::Kubernetes => Some(Arc::new(metrics_auth::Gatekeeper::new(
            client::build(args.watch_timeout_seconds, &me, Guard::default())
                .await
                .map_err(RunError::Client)?,
        ))),
        metrics_auth::MetricsAuth::None => None,
    };
    let addr = admin::serve(
        args.admin_addr,
        serves,
        metrics.clone(),
        health.clone(),
        gate,
    )
    .await
    .map_err(|source| RunError::Admin {
        addr: args.admin_addr,
        source,
    })?;
    tracing::info!(%addr, "admin server listening");
    if let Some(at) = args.status_addr {
        let addr = admin::serve(
            at,
            admin::Serves::Status,
            metrics.clone(),
            health.clone(),
            None,
        )
        .await
        .map_err(|source| RunError::Admin { addr: at, source })?;
        tracing::info!(%addr, "status server listening");
    }

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
    let gate = Gate::new(args.max_in_flight, fence.clone(), metrics.clone());
    let busy = gate.busy();
    let guard = Guard {
        limiter: client::limiter::Limiter::new(args.qps, args.burst, metrics.clone()),
        gate: Some(gate),
    };
    let clients = Arc::new(client::Clients::new(
        args.watch_timeout_seconds,
        &me,
        guard.clone(),
        metrics.clone(),
    ));
    let client = client::build(args.watch_timeout_seconds, &me, guard)
        .await
        .map_err(RunError::Client)?;
    let process = Arc::new(Process {
        client,
        fence: fence.clone(),
        metrics: metrics.clone(),
        events: args.events,
        resync: Duration::from_secs(args.resync_seconds),
    });
    let served = webhook::review::Served::new();
    let mut hook = None;
    let _webhook = match args.webhook_addr {
        Some(addr) => {
            let (ns, name) = args
                .webhook_service
                .split_once('/')
                .unwrap_or((args.lease_namespace.as_str(), args.webhook_service.as_str()));
            let cfg = webhook::Config {
                addr,
                url: args.webhook_url.clone(),
                service: (ns.to_string(), name.to_string()),
                name: args.webhook_name(),
                namespace: args.lease_namespace.clone(),
                selector: args.rule_selector.clone(),
                identity: me.clone(),
            };
            let h = cfg.hook();
            hook = Some(h.clone());
            Tasks(
                webhook::start(
                    cfg,
                    process.client.clone(),
                    fence.clone(),
                    served.clone(),
                    args.policy(),
                    h,
                )
                .await?,
            )
        }
        None => Tasks(Vec::new()),
    };
    let _rule_crd =
        (args.install_crds && args.rule_objects).then(|| rule_crd(&process, fence.clone()));
    // The Rule objects, read before the first rules are put in force (a cluster without
    // the Rule kind never lists: files alone, after a short wait).
    let mut objects = args.rule_objects.then(|| {
        objects::RuleObjects::start(process.client.clone(), args.rule_selector.as_deref())
    });
    if let Some(o) = &objects
        && !o.ready(Duration::from_secs(5)).await
    {
        tracing::warn!(
            "Rule objects not listed yet: starting with the rules files; Rules join when they list"
        );
    }
    let opts = Options {
        process: process.clone(),
        concurrency: args.concurrency,
        discovery_retry: Duration::from_secs(3),
        scope: crate::cache::watches::WatchScope {
            namespace: args.namespace.clone(),
            timeout: args.watch_timeout_seconds,
        },
        reporter: kube::runtime::events::Reporter {
            controller: "ruleop".into(),
            instance: Some(me.clone()),
        },
        state_namespace: args.lease_namespace.clone(),
        settle: Duration::from_secs(args.rules_settle_seconds),
        install_crds: args.install_crds,
        event_pace: client::limiter::Pace::new(args.event_qps, 100),
        event_quiet: Some(busy),
        rules: objects.as_ref().map(|o| o.store.clone()),
        clients,
        policy: args.policy(),
        conversion: hook,
        storage_migration: args.storage_migration,
        served: served.clone(),
    };
    let rule_api: kube::Api<kube::api::DynamicObject> =
        kube::Api::all_with(process.client.clone(), &objects::resource());
    refresh(
        &mut book,
        objects.as_ref(),
        &process.client,
        &args.lease_namespace,
    )
    .await;
    let initial = book.rules();
    report(
        &book.problems.clone(),
        &mut last_problems,
        &metrics,
        &health,
    );
    let mut sup = Supervisor::new(opts, metrics.clone(), health.clone());
    sup.served = served;
    sup.present = book.names();
    sup.set_desired(initial);

    let mut election = election;
    let mut leading = election.as_ref().is_none_or(Election::is_leader);
    set_leader(leading, &metrics, &health);
    if leading {
        sup.converge().await;
    }
    let mut rule_status = tokio::time::interval(Duration::from_secs(2));
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
                        // Only on Rules seen since the Lease was taken.
                        if let Some(o) = &objects {
                            o.caught_up(Duration::from_secs(30)).await;
                            refresh(&mut book, Some(o), &process.client, &args.lease_namespace).await;
                            put_in_force(&mut book, &mut sup, &mut last_problems, &metrics, &health, false).await;
                        }
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
                refresh(&mut book, objects.as_ref(), &process.client, &args.lease_namespace).await;
                put_in_force(&mut book, &mut sup, &mut last_problems, &metrics, &health, leading).await;
            }
            Some(()) = async {
                match objects.as_mut() {
                    Some(o) => o.changes.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                refresh(&mut book, objects.as_ref(), &process.client, &args.lease_namespace).await;
                put_in_force(&mut book, &mut sup, &mut last_problems, &metrics, &health, leading).await;
                if let (true, Some(o)) = (leading, &objects) {
                    rule_status::write_all(&book, &sup, o, &rule_api).await;
                }
            }
            _ = rule_status.tick(), if leading && objects.is_some() => {
                if let Some(o) = &objects {
                    rule_status::write_all(&book, &sup, o, &rule_api).await;
                }
            }
            _ = poll.tick() => {
                refresh(&mut book, objects.as_ref(), &process.client, &args.lease_namespace).await;
                put_in_force(&mut book, &mut sup, &mut last_problems, &metrics, &health, leading).await;
            }
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

/// Reads the rules files again and takes the Rule objects as the cluster holds them now.
/// A Rule whose generation does not compile, with no good one seen by this process (it
/// started since), serves the revision its status says was in force.
async fn refresh(
    book: &mut RuleBook,
    objects: Option<&objects::RuleObjects>,
    client: &kube::Client,
    state_namespace: &str,
) {
    if let Some(o) = objects {
        book.set_objects(&o.list());
        for (name, uid, revision) in book.without_good() {
            match revisions::spec_of(client, state_namespace, &name, &uid, revision).await {
                Ok(Some(spec)) => book.set_fallback(&name, &uid, &spec),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(rule = %name, error = %e, "the Rule's last revision cannot be read")
                }
            }
        }
    }
    book.reload();
}

/// Puts the rules of the book in force.
async fn put_in_force(
    book: &mut RuleBook,
    sup: &mut Supervisor,
    last: &mut Vec<Problem>,
    metrics: &Metrics,
    health: &Health,
    leading: bool,
) {
    let rules = book.rules();
    sup.present = book.names();
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
