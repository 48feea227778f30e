//! Every request's path to the API server, and who may write.
//!
//! Owns: the client ruleop makes its requests with ([`build`]): the token bucket
//! (`--qps`, `--burst`: [`limiter`]), under it the gate ([`gate`]: `--max-in-flight`, the
//! request count, the leader fence asked once more at this last layer) and the count of
//! converging requests at the API server ([`busy`], which Events wait on); the leader
//! fence itself ([`fence`]) and the Lease election that holds it ([`lease`], with its own
//! client outside the limiter).
//!
//! Uses: [`crate::metrics`] only. Used by: `apply` (every write asks the fence),
//! `events`, `reconcile` and `operator`.

pub mod busy;
pub mod fence;
pub mod gate;
pub mod lease;
pub mod limiter;

pub use fence::Fence;

use std::sync::Arc;
use std::time::Duration;
use tower::util::option_layer;

/// Which cluster ruleop talks to: `--kubeconfig` and `--context`, else `$KUBECONFIG` (or
/// `~/.kube/config`) at its current context, or the in-cluster config.
#[derive(Debug, Clone, Default)]
pub struct Target {
    pub kubeconfig: Option<std::path::PathBuf>,
    pub context: Option<String>,
}

static TARGET: std::sync::OnceLock<Target> = std::sync::OnceLock::new();

/// Sets the cluster every client of this process is made for (once, at start).
pub fn set_target(t: Target) {
    let _ = TARGET.set(t);
}

/// The config of the [`Target`].
pub async fn config() -> Result<kube::Config, kube::Error> {
    let t = TARGET.get().cloned().unwrap_or_default();
    if t.kubeconfig.is_none() && t.context.is_none() {
        return kube::Config::infer()
            .await
            .map_err(kube::Error::InferConfig);
    }
    let opts = kube::config::KubeConfigOptions {
        context: t.context,
        ..Default::default()
    };
    let config = match &t.kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path)?;
            kube::Config::from_custom_kubeconfig(kc, &opts).await?
        }
        None => kube::Config::from_kubeconfig(&opts).await?,
    };
    Ok(config)
}

/// A plain client of the [`Target`] (the command line's; `ruleop run` builds its own).
pub async fn plain() -> Result<kube::Client, kube::Error> {
    kube::Client::try_from(config().await?)
}

/// A client with ruleop's user agent and nothing between it and the API server: no leader
/// fence, no token bucket. For the webhook's reviews, which every replica answers (a
/// standby too) and which ask, never write (SubjectAccessReviews).
pub async fn unguarded(identity: &str) -> Result<kube::Client, kube::Error> {
    let mut config = config().await?;
    say_who(&mut config, &format!("{identity}; webhook"));
    kube::Client::try_from(config)
}

/// Each replica says who it is in its user agent (`ruleop/0.1.0 (<who>)`), so the API
/// server's audit log tells them apart.
fn say_who(config: &mut kube::Config, who: &str) {
    let agent = format!("ruleop/{} ({who})", env!("CARGO_PKG_VERSION"));
    if let Ok(agent) = http::HeaderValue::from_str(&agent) {
        config.headers.push((http::header::USER_AGENT, agent));
    }
}

/// What stands between ruleop's requests and the API server: the token bucket (`--qps`,
/// `--burst`) and the gate (`--max-in-flight`, the leader fence, the request count). The
/// leader election's own client has neither.
#[derive(Default, Clone)]
pub struct Guard {
    pub limiter: Option<Arc<limiter::Limiter>>,
    pub gate: Option<Arc<gate::Gate>>,
}

/// A client whose reads time out a little after the server should have ended a watch:
/// a request on a silently stalled connection (an apply, a list) fails and is retried
/// instead of hanging forever. (Watches have kube's own idle timeout, just under this.)
/// Every request goes through the rate limiter, when there is one.
pub async fn build(
    watch_timeout: u32,
    identity: &str,
    guard: Guard,
) -> Result<kube::Client, kube::Error> {
    build_as(watch_timeout, identity, guard, None).await
}

/// As [`build`], every request made as `act_as` (a user name, by impersonation: the
/// `Impersonate-User` header) when given, and counted under it when `counted` is given.
pub async fn build_as(
    watch_timeout: u32,
    identity: &str,
    guard: Guard,
    act_as: Option<(&str, prometheus_client::metrics::counter::Counter)>,
) -> Result<kube::Client, kube::Error> {
    let mut config = config().await?;
    config.read_timeout = Some(Duration::from_secs(u64::from(watch_timeout) + 10));
    config.reset_reader_on_write = true;
    say_who(&mut config, identity);
    let mut counted = None;
    if let Some((user, counter)) = act_as {
        // (A rule's account is checked at load: its name is always a header value.)
        let user = http::HeaderValue::from_str(user)
            .map_err(|e| kube::Error::HttpError(http::Error::from(e)))?;
        config
            .headers
            .push((http::HeaderName::from_static("impersonate-user"), user));
        counted = Some(counter);
    }
    let builder = kube::client::ClientBuilder::try_from(config)?;
    // The bucket is the outer layer: a request takes its token in turn, then goes through
    // the gate (its slot, the fence, the count).
    let gated = option_layer(guard.gate.map(gate::GateLayer));
    let limited = option_layer(guard.limiter.map(limiter::LimitLayer));
    let count = option_layer(counted.map(|c| {
        tower::util::MapRequestLayer::new(move |req: http::Request<kube::client::Body>| {
            c.inc();
            req
        })
    }));
    Ok(builder
        .with_layer(&gated)
        .with_layer(&limited)
        .with_layer(&count)
        .build())
}

/// The clients of the rules that name a ServiceAccount: one per account (its rules share
/// its connections), each behind the same limiter and gate as ruleop's own.
pub struct Clients {
    watch_timeout: u32,
    identity: String,
    guard: Guard,
    metrics: Arc<crate::metrics::Metrics>,
    made: tokio::sync::Mutex<std::collections::HashMap<String, kube::Client>>,
}

impl Clients {
    pub fn new(
        watch_timeout: u32,
        identity: &str,
        guard: Guard,
        metrics: Arc<crate::metrics::Metrics>,
    ) -> Clients {
        Clients {
            watch_timeout,
            identity: identity.to_string(),
            guard,
            metrics,
            made: Default::default(),
        }
    }

    /// The client whose every request is made as `user`.
    pub async fn acting_as(&self, user: &str) -> Result<kube::Client, kube::Error> {
        let mut made = self.made.lock().await;
        if let Some(c) = made.get(user) {
            return Ok(c.clone());
        }
        let counter = self
            .metrics
            .identity_requests
            .get_or_create(&crate::metrics::IdentityLabels {
                identity: user.to_string(),
            })
            .clone();
        let c = build_as(
            self.watch_timeout,
            &self.identity,
            self.guard.clone(),
            Some((user, counter)),
        )
        .await?;
        made.insert(user.to_string(), c.clone());
        Ok(c)
    }
}
