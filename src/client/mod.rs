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

/// What stands between ruleop's requests and the API server: the token bucket (`--qps`,
/// `--burst`) and the gate (`--max-in-flight`, the leader fence, the request count). The
/// leader election's own client has neither.
#[derive(Default)]
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
    let mut config = kube::Config::infer()
        .await
        .map_err(kube::Error::InferConfig)?;
    config.read_timeout = Some(Duration::from_secs(u64::from(watch_timeout) + 10));
    config.reset_reader_on_write = true;
    // Each replica says who it is, so the API server's audit log tells them apart.
    if let Ok(agent) = http::HeaderValue::from_str(&format!(
        "ruleop/{} ({identity})",
        env!("CARGO_PKG_VERSION")
    )) {
        config.headers.push((http::header::USER_AGENT, agent));
    }
    let builder = kube::client::ClientBuilder::try_from(config)?;
    // The bucket is the outer layer: a request takes its token in turn, then goes through
    // the gate (its slot, the fence, the count).
    let gated = option_layer(guard.gate.map(gate::GateLayer));
    let limited = option_layer(guard.limiter.map(limiter::LimitLayer));
    Ok(builder.with_layer(&gated).with_layer(&limited).build())
}
