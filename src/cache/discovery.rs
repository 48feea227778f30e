//! Finds the watched and child kinds by API discovery: nothing about a kind is compiled
//! in. A kind that is not served yet (CRD not installed) is waited for.

use super::cached::Kind;
use crate::rules::WatchSpec;
use kube::Client;
use kube::core::{GroupVersion, GroupVersionKind};
use kube::discovery::{ApiCapabilities, ApiResource, Scope};

/// A kind as the API server serves it.
#[derive(Debug, Clone)]
pub struct Resolved {
    /// Shared: the caches of the kind key their objects by it.
    pub resource: Kind,
    pub namespaced: bool,
    /// Whether the kind serves a `status` subresource (else status is written through
    /// the object itself).
    pub status_subresource: bool,
}

impl Resolved {
    fn from((resource, caps): (ApiResource, ApiCapabilities)) -> Resolved {
        Resolved {
            resource: Kind::from(resource),
            namespaced: matches!(caps.scope, Scope::Namespaced),
            status_subresource: caps.subresources.iter().any(|(s, _)| s.plural == "status"),
        }
    }
}

/// Why discovery failed for a reason other than "not served yet".
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    #[error("discovery of {what} failed: {source}")]
    Failed {
        what: String,
        #[source]
        source: kube::Error,
    },
}

fn not_served(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404) || matches!(e, kube::Error::Discovery(_))
}

/// The watched resource, or None if its group/version does not serve it (yet).
pub async fn watched(client: &Client, w: &WatchSpec) -> Result<Option<Resolved>, DiscoveryError> {
    let gv = GroupVersion::gv(&w.group, &w.version);
    match kube::discovery::pinned_group(client, &gv).await {
        Ok(g) => Ok(g
            .versioned_resources(&w.version)
            .into_iter()
            .find(|(ar, _)| ar.plural == w.resource)
            .map(Resolved::from)),
        Err(e) if not_served(&e) => Ok(None),
        Err(source) => Err(DiscoveryError::Failed {
            what: format!("{}/{} {}", w.group, w.version, w.resource),
            source,
        }),
    }
}

/// A child kind, or None if it is not served (yet).
pub async fn child(
    client: &Client,
    group: &str,
    version: &str,
    kind: &str,
) -> Result<Option<Resolved>, DiscoveryError> {
    let gvk = GroupVersionKind::gvk(group, version, kind);
    match kube::discovery::pinned_kind(client, &gvk).await {
        Ok(found) => Ok(Some(Resolved::from(found))),
        Err(e) if not_served(&e) => Ok(None),
        Err(source) => Err(DiscoveryError::Failed {
            what: format!("{group}/{version} {kind}"),
            source,
        }),
    }
}
