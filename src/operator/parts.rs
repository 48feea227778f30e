//! The process's parts, each started from one place with its own arguments: the admin
//! server (and the status server), the Lease and its fence, the clients (the limiter and
//! the in-flight gate before them), the Rule webhook, the Rule kind's CRD, the Rule
//! objects, and the options every rule runs with.

use super::admin::{self, Health};
use super::args::RunArgs;
use super::error::RunError;
use super::runner::Options;
use super::{crds, metrics_auth, objects, webhook};
use crate::client::gate::Gate;
use crate::client::lease::{Election, LeaseConfig};
use crate::client::{self, Fence, Guard};
use crate::metrics::Metrics;
use crate::reconcile::Process;
use std::sync::Arc;
use std::time::Duration;

/// Aborts its tasks when dropped.
pub(super) struct Tasks(pub Vec<tokio::task::JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        self.0.iter().for_each(tokio::task::JoinHandle::abort);
    }
}

/// This process's name in the Lease and in its requests' user agent.
pub(super) fn identity(args: &RunArgs) -> String {
    args.lease.identity.clone().unwrap_or_else(|| {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .unwrap_or_else(|_| "ruleop".into());
        format!("{host}-{}", std::process::id())
    })
}

/// The admin server (and the status server, `--status-addr`); scrapes reviewed on a
/// client of their own, never queued with the Lease's renewals.
pub(super) async fn admin(
    args: &RunArgs,
    me: &str,
    metrics: &Arc<Metrics>,
    health: &Arc<Health>,
) -> Result<(), RunError> {
    let serves = match args.admin.status_addr {
        Some(_) => admin::Serves::Probes,
        None => admin::Serves::All,
    };
    let gate = match args.admin.metrics_auth {
        metrics_auth::MetricsAuth::Kubernetes => Some(Arc::new(metrics_auth::Gatekeeper::new(
            client::build(args.client.watch_timeout_seconds, me, Guard::default())
                .await
                .map_err(RunError::Client)?,
        ))),
        metrics_auth::MetricsAuth::None => None,
    };
    let at = args.admin.admin_addr;
    let tls = match (&args.admin.admin_tls_cert, &args.admin.admin_tls_key) {
        (Some(cert), Some(key)) => {
            let files = super::admin_tls::Files {
                cert: cert.clone(),
                key: key.clone(),
            };
            Some(super::admin_tls::watch(files).map_err(RunError::AdminTls)?)
        }
        _ => None,
    };
    let https = tls.is_some();
    let addr = admin::serve(at, serves, metrics.clone(), health.clone(), gate, tls)
        .await
        .map_err(|source| RunError::Admin { addr: at, source })?;
    tracing::info!(%addr, https, "admin server listening");
    if let Some(at) = args.admin.status_addr {
        let status = admin::Serves::Status;
        let addr = admin::serve(at, status, metrics.clone(), health.clone(), None, None)
            .await
            .map_err(|source| RunError::Admin { addr: at, source })?;
        tracing::info!(%addr, "status server listening");
    }
    Ok(())
}

/// The Lease (`--leader-elect`), its election and the fence every write passes.
pub(super) struct Leadership {
    pub lease: Option<LeaseConfig>,
    pub election: Option<Election>,
    pub fence: Arc<Fence>,
    /// The client that renews the Lease alone (outside the limiter: a busy leader must not
    /// lose its Lease waiting behind its own writes).
    pub client: kube::Client,
}

pub(super) fn leadership(
    args: &RunArgs,
    me: &str,
    client: kube::Client,
) -> Result<Leadership, RunError> {
    let lease = args.lease.leader_elect.then(|| {
        // Out-of-range values (negative, infinite) become 0 and are refused by `check`.
        let secs = |s: f64| Duration::try_from_secs_f64(s).unwrap_or(Duration::ZERO);
        let (duration, renew_deadline, retry) = LeaseConfig::timing(
            Duration::from_secs(args.lease.lease_duration),
            args.lease.renew_deadline.map(secs),
            args.lease.retry_period.map(secs),
        );
        LeaseConfig {
            namespace: args.lease.lease_namespace.clone(),
            name: args.lease.lease_name.clone(),
            identity: me.to_string(),
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
        Election::start(client.clone(), cfg.clone())
    });
    let fence = election.as_ref().map_or_else(Fence::open, Election::fence);
    Ok(Leadership {
        lease,
        election,
        fence,
        client,
    })
}

/// The clients of ruleop's work: its own (behind the limiter and the in-flight gate) and
/// those acting as rules' ServiceAccounts; with what they share as the process.
pub(super) struct Clients {
    pub process: Arc<Process>,
    pub clients: Arc<client::Clients>,
    /// ruleop's converging requests in flight (an Event waits for a quiet moment).
    pub busy: Arc<client::busy::Busy>,
}

pub(super) async fn clients(
    args: &RunArgs,
    me: &str,
    fence: &Arc<Fence>,
    metrics: &Arc<Metrics>,
) -> Result<Clients, RunError> {
    let gate = Gate::new(args.client.max_in_flight, fence.clone(), metrics.clone());
    let busy = gate.busy();
    let guard = Guard {
        limiter: client::limiter::Limiter::new(args.client.qps, args.client.burst, metrics.clone()),
        gate: Some(gate),
    };
    let timeout = args.client.watch_timeout_seconds;
    let clients = client::Clients::new(timeout, me, guard.clone(), metrics.clone());
    let client = client::build(timeout, me, guard)
        .await
        .map_err(RunError::Client)?;
    let process = Arc::new(Process {
        client,
        fence: fence.clone(),
        metrics: metrics.clone(),
        events: args.events,
        resync: Duration::from_secs(args.resync_seconds),
    });
    Ok(Clients {
        process,
        clients: Arc::new(clients),
        busy,
    })
}

/// The Rule webhook (`--webhook-addr`): its tasks, and the conversions it serves.
pub(super) async fn webhook(
    args: &RunArgs,
    me: &str,
    process: &Process,
    served: &Arc<webhook::review::Served>,
) -> Result<(Tasks, Option<webhook::Hook>), RunError> {
    let Some(addr) = args.webhook.webhook_addr else {
        return Ok((Tasks(Vec::new()), None));
    };
    let (ns, name) = args.webhook.webhook_service.split_once('/').unwrap_or((
        args.lease.lease_namespace.as_str(),
        args.webhook.webhook_service.as_str(),
    ));
    let cfg = webhook::Config {
        addr,
        url: args.webhook.webhook_url.clone(),
        service: (ns.to_string(), name.to_string()),
        name: args.webhook_name(),
        namespace: args.lease.lease_namespace.clone(),
        selector: args.rule_selector.clone(),
        identity: me.to_string(),
        expiry: process.metrics.webhook_certificate_expiry.clone(),
        external: args.webhook.webhook_certificates == super::args::Certificates::External,
    };
    let hook = cfg.hook();
    let client = process.client.clone();
    let fence = process.fence.clone();
    let policy = args.policy();
    let tasks = webhook::start(cfg, client, fence, served.clone(), policy, hook.clone()).await?;
    Ok((Tasks(tasks), Some(hook)))
}

/// On a clean exit of the leader of a webhook reached by `--webhook-url` (a run outside the
/// cluster), its ValidatingWebhookConfiguration is deleted: the API server would go on
/// calling a URL no one answers (each Rule write waiting out its timeout). One reached
/// through a Service stays: the next pod serves it.
pub(super) async fn remove_local_webhook(args: &RunArgs, process: &Process) {
    let (Some(_), Some(url)) = (args.webhook.webhook_addr, &args.webhook.webhook_url) else {
        return;
    };
    let name = args.webhook_name();
    match webhook::remove_configuration(&process.client, &name, url).await {
        Ok(true) => {
            tracing::info!(configuration = %name, %url, "the webhook's configuration removed (no one serves its URL now)")
        }
        Ok(false) => {}
        Err(e) => {
            tracing::warn!(configuration = %name, error = %e, "the webhook's configuration could not be removed: delete it by hand (kubectl delete validatingwebhookconfiguration {name})")
        }
    }
}

/// `--install-crds` with Rule objects served: the Rule kind's own CRD applied by the leader
/// (a breaking change refused), as each rule's is, since Helm never upgrades a chart's CRDs.
pub(super) fn rule_crd(args: &RunArgs, process: &Process) -> Option<Tasks> {
    if !(args.install_crds && args.rule_objects) {
        return None;
    }
    let metrics = process.metrics.clone();
    let failed = move |e: &crds::CrdError| {
        metrics.error(crate::rules::object::CRD_NAME, "crd_error");
        tracing::error!(error = %e, "the Rule kind's CRD was not installed");
    };
    Some(Tasks(vec![tokio::spawn(crds::keep_installing(
        process.client.clone(),
        process.client.clone(),
        crate::rules::object::crd(),
        None,
        process.fence.clone(),
        failed,
    ))]))
}

/// The Rule objects (`--rule-objects`), read before the first rules are put in force (a
/// cluster without the Rule kind never lists: files alone, after a short wait).
pub(super) async fn rule_objects(
    args: &RunArgs,
    process: &Process,
) -> Option<objects::RuleObjects> {
    let selector = args.rule_selector.as_deref();
    let o = args
        .rule_objects
        .then(|| objects::RuleObjects::start(process.client.clone(), selector))?;
    if !o.ready(Duration::from_secs(5)).await {
        tracing::warn!(
            "Rule objects not listed yet: starting with the rules files; Rules join when they list"
        );
    }
    Some(o)
}

/// What every rule runs with.
pub(super) struct ForRules<'a> {
    pub me: &'a str,
    pub clients: &'a Clients,
    pub objects: Option<&'a objects::RuleObjects>,
    pub hook: Option<webhook::Hook>,
    pub served: &'a Arc<webhook::review::Served>,
}

pub(super) fn options(args: &RunArgs, r: ForRules<'_>) -> Options {
    Options {
        process: r.clients.process.clone(),
        concurrency: args.concurrency,
        discovery_retry: Duration::from_secs(3),
        scope: crate::cache::watches::WatchScope {
            namespace: args.namespace.clone(),
            timeout: args.client.watch_timeout_seconds,
        },
        reporter: kube::runtime::events::Reporter {
            controller: "ruleop".into(),
            instance: Some(r.me.to_string()),
        },
        state_namespace: args.lease.lease_namespace.clone(),
        settle: Duration::from_secs(args.rules_settle_seconds),
        install_crds: args.install_crds,
        event_pace: client::limiter::Pace::new(args.client.event_qps, 100),
        event_quiet: Some(r.clients.busy.clone()),
        rules: r.objects.map(|o| o.store.clone()),
        clients: r.clients.clients.clone(),
        policy: args.policy(),
        conversion: r.hook,
        storage_migration: args.storage_migration,
        served: r.served.clone(),
    }
}
