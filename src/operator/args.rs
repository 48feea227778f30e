//! The arguments of `ruleop run`.

use crate::events::EventLevel;
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Arguments of `ruleop run`, grouped by the part of the process they set.
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// A rules file or directory (repeat for more). Watched: edits apply without a restart.
    /// Optional: the Rule objects of the cluster are served too (see --rule-objects).
    #[arg(long)]
    pub rules: Vec<PathBuf>,
    /// Serve the cluster's Rule objects (`rules.ruleop.dev`) beside the rules files, and
    /// write their status. `false`: files only (no watch of Rules, no RBAC for them).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub rule_objects: bool,
    /// Serve only the Rule objects with these labels (a label selector, `team=web`): for
    /// several ruleop installations in one cluster, each with its Rules.
    #[arg(long)]
    pub rule_selector: Option<String>,
    /// Run no rule with ruleop's own rights: a rule (file or Rule) with no `serviceAccount`
    /// is refused, its status saying so, and the webhook refuses such a Rule at `kubectl
    /// apply`. The per-rule install (`ruleop rbac --per-rule`) sets it.
    #[arg(long)]
    pub require_identity: bool,
    /// Run rules that copy data read from a Secret (an `existing` Secret, or the watched
    /// one) anywhere but into a Secret child: into a child of another kind or the status,
    /// which people who may not read the Secret can read. Off: such a rule is refused,
    /// with each place it copies to.
    #[arg(long)]
    pub allow_secret_reads: bool,
    /// Reconciles running at once, per rule (at least 1). Most send nothing and end at
    /// once; one that writes holds its place until the API server answers.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrency: u16,
    /// Seconds between checks of a healthy custom resource with no event.
    #[arg(long, default_value_t = 600)]
    pub resync_seconds: u64,
    /// Watch and act in this namespace only (default: all namespaces).
    #[arg(long)]
    pub namespace: Option<String>,
    /// Create or update each rule's CRD from its `schema` when the rule starts (a change
    /// that would break stored resources is refused and logged; the served CRD stays).
    /// Needs `ruleop rbac --install-crds`.
    #[arg(long)]
    pub install_crds: bool,
    /// Who rewrites a kind's stored objects when its storage version changes (with
    /// --install-crds): `auto`, the API server's StorageVersionMigration where the cluster
    /// serves it (else ruleop); `ruleop`, ruleop itself (a few objects a second).
    #[arg(long, value_enum, default_value_t = crate::operator::migrate::By::Auto)]
    pub storage_migration: crate::operator::migrate::By,
    /// Seconds a newer version of a rule, recorded in the cluster by another replica, is
    /// waited for before this replica's files are taken for a rollback (files reach each
    /// replica on their own time: a mounted ConfigMap up to a minute or two apart). A
    /// version the cluster had not run retires the kinds an earlier one recorded only after
    /// it has been the newest for this long.
    #[arg(long, default_value_t = 300)]
    pub rules_settle_seconds: u64,
    /// Seconds between rechecks of the rules files, besides file-change notifications.
    #[arg(long, default_value_t = 10)]
    pub rules_poll_seconds: u64,
    /// Which Events to publish on custom resources: `all` (children created, updated,
    /// pruned, and problems), `warnings` (problems only: each Normal Event is one more
    /// write per change, which at scale the API server feels), or `none`.
    #[arg(long, value_enum, default_value = "all")]
    pub events: EventLevel,
    #[command(flatten)]
    pub webhook: WebhookArgs,
    #[command(flatten)]
    pub client: ClientArgs,
    #[command(flatten)]
    pub admin: AdminArgs,
    #[command(flatten)]
    pub telemetry: TelemetryArgs,
    #[command(flatten)]
    pub lease: LeaseArgs,
}

/// `ruleop run`'s arguments: the rule webhook.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "The Rule webhook")]
pub struct WebhookArgs {
    /// Serve the validating webhook of Rules here (`0.0.0.0:9443`): an invalid Rule is
    /// refused at `kubectl apply`. ruleop makes its certificates (a Secret
    /// `<webhook-name>-webhook-tls`) and its ValidatingWebhookConfiguration. Off when not given.
    #[arg(long)]
    pub webhook_addr: Option<SocketAddr>,
    /// How the API server reaches the webhook: a Service `namespace/name` (port 443)...
    #[arg(long, default_value = "ruleop-system/ruleop-webhook")]
    pub webhook_service: String,
    /// ...or a URL (`https://127.0.0.1:9443/validate-rules`), which wins.
    #[arg(long)]
    pub webhook_url: Option<String>,
    /// The ValidatingWebhookConfiguration's name (its Secret is `<name>-webhook-tls`).
    /// Default: `ruleop`, and with `--rule-selector`, `ruleop-` and the selector
    /// (`team=web` → `ruleop-team-web`): installations serving different Rules do not
    /// write over each other's configuration.
    #[arg(long)]
    pub webhook_name: Option<String>,
    /// Who makes the webhook's certificates: `ruleop` (its own CA, renewed 30 days before
    /// the end, in the Secret `<name>-webhook-tls`), or `external`: the Secret is another's
    /// to write (cert-manager's Certificate, with `tls.crt`, `tls.key` and `ca.crt`), and
    /// ruleop only reads it, serving its certificate and trusting its `ca.crt`.
    #[arg(long, value_enum, default_value = "ruleop")]
    pub webhook_certificates: Certificates,
}

/// Who makes the webhook's certificates.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Certificates {
    Ruleop,
    External,
}

/// `ruleop run`'s arguments: the requests to the api server.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "The requests to the API server")]
pub struct ClientArgs {
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
    /// Seconds after which the API server ends each watch (it is then resumed). A watch
    /// connection silent for this long plus 10 s is dropped and re-established.
    #[arg(long, default_value_t = 290)]
    pub watch_timeout_seconds: u32,
}

/// `ruleop run`'s arguments: the admin endpoints.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "The admin endpoints")]
pub struct AdminArgs {
    /// Address of the admin server (/metrics, /livez, /readyz, and /status unless
    /// `--status-addr` moves it); port 0 picks one.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub admin_addr: SocketAddr,
    /// Serve /status (the rules in force, their sources and identities) here instead of on
    /// the admin server: `127.0.0.1:8081` keeps it inside the pod (`kubectl port-forward`
    /// reaches it) while probes and metrics stay on the admin port. Port 0 picks one.
    #[arg(long)]
    pub status_addr: Option<SocketAddr>,
    /// Who may read /metrics: `none` (anyone who reaches the port), or `kubernetes`: a
    /// bearer token the API server authenticates (TokenReview) whose user may `get` the
    /// non-resource URL `/metrics` (SubjectAccessReview), as kube-rbac-proxy does. The
    /// probes stay open (the kubelet calls them with no token).
    #[arg(long, value_enum, default_value_t = super::metrics_auth::MetricsAuth::None)]
    pub metrics_auth: super::metrics_auth::MetricsAuth,
    /// Serve the admin server (metrics and probes) over HTTPS with this certificate (PEM;
    /// a mounted Secret's `tls.crt`), read again when the file changes.
    #[arg(long, requires = "admin_tls_key")]
    pub admin_tls_cert: Option<std::path::PathBuf>,
    /// The key of `--admin-tls-cert` (PEM; the Secret's `tls.key`).
    #[arg(long, requires = "admin_tls_cert")]
    pub admin_tls_key: Option<std::path::PathBuf>,
}

/// `ruleop run`'s arguments: traces.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Traces")]
pub struct TelemetryArgs {
    /// Send a trace per reconcile to this OTLP/HTTP collector (e.g.
    /// `http://otel-collector.monitoring:4318`; `/v1/traces` is added). Off by default.
    #[arg(long, env = "RULEOP_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// The OTLP encoding: `http/protobuf` or `http/json`.
    #[arg(long, value_enum, default_value_t = super::telemetry::OtlpProtocol::HttpProtobuf)]
    pub otlp_protocol: super::telemetry::OtlpProtocol,
}

/// `ruleop run`'s arguments: leader election.
#[derive(Args, Debug, Clone)]
#[command(next_help_heading = "Leader election")]
pub struct LeaseArgs {
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
}

impl RunArgs {
    /// The webhook configuration's name: as given, else one per `--rule-selector`.
    pub fn webhook_name(&self) -> String {
        if let Some(n) = &self.webhook.webhook_name {
            return n.clone();
        }
        let Some(selector) = &self.rule_selector else {
            return "ruleop".into();
        };
        let mut name: String = selector
            .to_lowercase()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        name = name.trim_matches('-').to_string();
        // (A Secret name `<name>-webhook-tls` stays within 253 characters.)
        name.truncate(200);
        format!("ruleop-{}", name.trim_end_matches(['-', '.']))
    }

    /// The installation's policy for rules.
    pub fn policy(&self) -> crate::rules::policy::Policy {
        crate::rules::policy::Policy {
            require_identity: self.require_identity,
            allow_secret_reads: self.allow_secret_reads,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        run: RunArgs,
    }

    fn webhook_name(args: &[&str]) -> String {
        let mut all = vec!["ruleop"];
        all.extend_from_slice(args);
        Cli::parse_from(all).run.webhook_name()
    }

    #[test]
    fn each_installation_with_a_selector_has_a_webhook_of_its_own() {
        assert_eq!(webhook_name(&[]), "ruleop");
        assert_eq!(
            webhook_name(&["--rule-selector", "team=web"]),
            "ruleop-team-web"
        );
        assert_eq!(
            webhook_name(&["--rule-selector", "Team=Web,tier=1"]),
            "ruleop-team-web-tier-1"
        );
        assert_eq!(
            webhook_name(&["--rule-selector", "team=web", "--webhook-name", "mine"]),
            "mine"
        );
    }
}
