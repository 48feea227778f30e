//! What stops `ruleop run`.

use super::webhook;
use std::net::SocketAddr;
use std::path::PathBuf;

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
    #[error("--admin-tls-cert/--admin-tls-key: {0}")]
    AdminTls(String),
    #[error("cannot watch the rules files: {0}")]
    Watch(#[source] notify::Error),
    #[error("leader election: {0}")]
    Lease(#[source] crate::client::lease::LeaseError),
    #[error("cannot listen for SIGTERM or SIGINT: {0}")]
    Signal(#[source] std::io::Error),
    #[error("the Rule webhook: {0}")]
    Webhook(#[from] webhook::WebhookError),
}
