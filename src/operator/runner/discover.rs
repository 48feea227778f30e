//! Waiting for a rule's kinds to be served: discovery, retried while a kind is not
//! (a CRD not installed yet), until the rule is stopped.

use super::parts::Options;
use crate::cache::discovery::{self, Resolved};
use kube::Client;
use std::time::Duration;
use tokio::sync::watch;

pub(super) async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|s| *s).await;
}

/// Retries `f` until it finds the kind, or the rule is stopped (None).
pub(super) async fn wait_for<F, Fut>(
    what: &str,
    retry: Duration,
    stop: &watch::Receiver<bool>,
    mut f: F,
) -> Option<Resolved>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<Resolved>, discovery::DiscoveryError>>,
{
    let mut told = false;
    loop {
        match f().await {
            Ok(Some(r)) => return Some(r),
            Ok(None) if !told => {
                tracing::warn!(kind = %what, "kind not served by the API server (CRD not installed?); waiting for it");
                told = true;
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(kind = %what, error = %e, "discovery failed; retrying"),
        }
        if *stop.borrow() {
            return None;
        }
        tokio::select! {
            _ = tokio::time::sleep(retry) => {}
            _ = stopped(stop.clone()) => return None,
        }
    }
}

/// Resolves the distinct kinds among `wanted` (apiVersion, kind); gives them and, for
/// each of `wanted`, its index among them (a [`KindTable`]'s parts). None when the rule is
/// stopped meanwhile.
pub(super) async fn distinct_kinds<'a>(
    client: &Client,
    opts: &Options,
    stop: &watch::Receiver<bool>,
    wanted: impl Iterator<Item = (&'a str, &'a str)>,
) -> Option<(Vec<Resolved>, Vec<usize>)> {
    let mut kinds: Vec<Resolved> = Vec::new();
    let mut index = Vec::new();
    for (api_version, kind) in wanted {
        let known = kinds
            .iter()
            .position(|k| k.resource.api_version == api_version && k.resource.kind == kind);
        let idx = match known {
            Some(i) => i,
            None => {
                let what = format!("{api_version} {kind}");
                let (group, version) = crate::schema::kinds::group_version(api_version);
                let r = wait_for(&what, opts.discovery_retry, stop, || {
                    discovery::child(client, group, version, kind)
                })
                .await?;
                kinds.push(r);
                kinds.len() - 1
            }
        };
        index.push(idx);
    }
    Some((kinds, index))
}
